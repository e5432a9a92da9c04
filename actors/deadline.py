"""DeadlinePolicyActor: runs deadline policies (Uniform Progress...) for one job or several.

Thin: the decisions are ``policies.deadline``'s; the actor holds the policy objects and saves
each policy's small ``state_dict`` in the store whenever it changes, so a restarted actor (or
another actor taking the job over) resumes where it stopped.

Memory: one actor is one Ray worker process; ``python -m benchmarks.controller`` measures its
RSS (~110 MiB, the same with 1 or 100 jobs hosted). On a 2-core / 24 GB machine 100 one-job
actors would cost ~11 GiB and 100 processes, so actors host several jobs: by default one actor
per job up to ``max_actors`` (16), the rest spread over ``overflow_shards`` (8) shared actors;
``RayDeadlineHost(shards=K)`` (``RuntimeSettings.policy_actor_shards``) always uses K shared
actors.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Sequence
from typing import Any

import ray

from controlplane.reconcile.policyhost import PolicyBook, PolicyFailed, PolicyRequest
from controlplane.store import Store
from policies.deadline import Action

log = logging.getLogger(__name__)


class DeadlinePolicyActor:
    """Hosts the deadline policies of one or more jobs (see the module docstring)."""

    def __init__(self, db_path: str) -> None:
        self.book = PolicyBook(Store(db_path))

    def decide(self, requests: Sequence[PolicyRequest]) -> dict[str, Action | PolicyFailed]:
        return self.book.decide(requests)

    def forget(self, job_ids: Sequence[str]) -> None:
        self.book.forget(job_ids)

    def jobs(self) -> list[str]:
        return sorted(self.book.policies)

    def rss_mb(self) -> float:
        """Resident memory of this actor's process (MiB), from /proc."""
        with open(f"/proc/{os.getpid()}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def pid(self) -> int:
        return os.getpid()


RemoteDeadlinePolicyActor = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(
    DeadlinePolicyActor)


class RayDeadlineHost:
    """The controller's DeadlinePolicyHost over DeadlinePolicyActors: one batched call per actor
    per tick, all in flight together (never one blocking RPC per job).

    ``shards=0`` (default): one actor per deadline job while fewer than ``max_actors`` exist;
    jobs beyond that share ``overflow_shards`` actors (by a stable hash of the job id), so 100
    concurrent deadline jobs cost ~16 + 8 processes, not 100. ``shards=K``: always K shared
    actors. A job's policy state is in the store, so any actor can take a job over.
    """

    def __init__(self, db_path: str, *, namespace: str, prefix: str = "spotplane-deadline",
                 shards: int = 0, detached: bool = True, max_actors: int = 16,
                 overflow_shards: int = 8) -> None:
        self.db_path, self.namespace, self.prefix = db_path, namespace, prefix
        self.shards = max(0, shards)
        self.max_actors, self.overflow = max_actors, max(1, overflow_shards)
        self.detached = detached
        self.handles: dict[str, Any] = {}
        self.assigned: dict[str, str] = {}  # job id -> slot

    def _slot(self, job_id: str) -> str:
        slot = self.assigned.get(job_id)
        if slot is not None:
            return slot
        if self.shards:
            slot = f"shard-{zlib.crc32(job_id.encode()) % self.shards}"
        elif sum(1 for s in self.assigned.values() if s.startswith("job-")) < self.max_actors:
            slot = f"job-{job_id}"
        else:
            slot = f"shard-{zlib.crc32(job_id.encode()) % self.overflow}"
        self.assigned[job_id] = slot
        return slot

    def _actor(self, slot: str) -> Any:
        h = self.handles.get(slot)
        if h is None:
            name = slot[4:] if slot.startswith("job-") else slot
            opts: dict[str, Any] = {"name": f"{self.prefix}-{name}", "namespace": self.namespace,
                                    "get_if_exists": True}
            if self.detached:
                opts["lifetime"] = "detached"
            h = RemoteDeadlinePolicyActor.options(**opts).remote(self.db_path)
            self.handles[slot] = h
        return h

    def decide(self, requests: Sequence[PolicyRequest]) -> dict[str, Action | PolicyFailed]:
        groups: dict[str, list[PolicyRequest]] = {}
        for r in requests:
            groups.setdefault(self._slot(r.job_id), []).append(r)
        refs = [self._actor(slot).decide.remote(reqs) for slot, reqs in groups.items()]
        out: dict[str, Action | PolicyFailed] = {}
        for part in ray.get(refs):
            out.update(part)
        return out

    def forget(self, job_ids: Sequence[str]) -> None:
        for j in job_ids:
            slot = self.assigned.pop(j, None)
            h = self.handles.get(slot) if slot is not None else None
            if h is None or slot is None:
                continue
            if slot.startswith("job-"):
                ray.kill(h, no_restart=True)
                del self.handles[slot]
            else:
                h.forget.remote([j])

    def shutdown(self) -> None:
        for h in self.handles.values():
            ray.kill(h, no_restart=True)
        self.handles = {}
        self.assigned = {}
