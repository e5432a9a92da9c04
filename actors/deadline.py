"""DeadlinePolicyActor: runs deadline policies (Uniform Progress...) for one job or several.

Thin: the decisions are ``policies.deadline``'s; the actor holds the policy objects and saves
each policy's small ``state_dict`` in the store whenever it changes, so a restarted actor (or
another actor taking the job over) resumes where it stopped.

Memory: one actor is one Ray worker process; ``python -m benchmarks.controller`` measures its
RSS. On a 2-core / 24 GB machine 100 one-job actors would cost ~100 processes, so actors can
host several jobs: ``RayDeadlineHost(shards=K)`` spreads the jobs over K shared actors by a
stable hash of the job id (``RuntimeSettings.policy_actor_shards``; 0 = one actor per deadline
job, as in the design).
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Sequence
from typing import Any

import ray

from controlplane.policyhost import PolicyBook, PolicyRequest
from controlplane.store import Store
from policies.deadline import Action

log = logging.getLogger(__name__)


class DeadlinePolicyActor:
    """Hosts the deadline policies of one or more jobs (see the module docstring)."""

    def __init__(self, db_path: str) -> None:
        self.book = PolicyBook(Store(db_path))

    def decide(self, requests: Sequence[PolicyRequest]) -> dict[str, Action]:
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
    per tick, all in flight together (never one blocking RPC per job)."""

    def __init__(self, db_path: str, *, namespace: str, prefix: str = "spotplane-deadline",
                 shards: int = 0, detached: bool = True) -> None:
        self.db_path, self.namespace, self.prefix = db_path, namespace, prefix
        self.shards = max(0, shards)
        self.detached = detached
        self.handles: dict[str, Any] = {}

    def _slot(self, job_id: str) -> str:
        if self.shards == 0:
            return job_id
        return f"shard-{zlib.crc32(job_id.encode()) % self.shards}"

    def _actor(self, slot: str) -> Any:
        h = self.handles.get(slot)
        if h is None:
            opts: dict[str, Any] = {"name": f"{self.prefix}-{slot}", "namespace": self.namespace,
                                    "get_if_exists": True}
            if self.detached:
                opts["lifetime"] = "detached"
            h = RemoteDeadlinePolicyActor.options(**opts).remote(self.db_path)
            self.handles[slot] = h
        return h

    def decide(self, requests: Sequence[PolicyRequest]) -> dict[str, Action]:
        groups: dict[str, list[PolicyRequest]] = {}
        for r in requests:
            groups.setdefault(self._slot(r.job_id), []).append(r)
        refs = [self._actor(slot).decide.remote(reqs) for slot, reqs in groups.items()]
        out: dict[str, Action] = {}
        for part in ray.get(refs):
            out.update(part)
        return out

    def forget(self, job_ids: Sequence[str]) -> None:
        for j in job_ids:
            slot = self._slot(j)
            h = self.handles.get(slot)
            if h is None:
                continue
            if self.shards == 0:
                ray.kill(h, no_restart=True)
                del self.handles[slot]
            else:
                h.forget.remote([j])

    def shutdown(self) -> None:
        for h in self.handles.values():
            ray.kill(h, no_restart=True)
        self.handles = {}
