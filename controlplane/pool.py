"""GPU pools as the placement policy sees them: one :class:`ClusterSnapshot` per accelerator.

The control plane holds at most ``capacity`` nodes of each accelerator (its budget). Every
worker gets a whole node, so each pool slot is one "card": a live node (busy with a job, or idle
and reusable) or an empty slot the controller may fill by launching a node. The GFS scheduler
(``policies.schedulers.make_scheduler``) then decides, on this one snapshot, whether a job fits,
under the spot quota, and which spot jobs an HP job evicts (Alg. 2, Eq. 17-19).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from controlplane.models import HOUR, Job, JobKind, Market, Node, NodeState

BUSY_STATES = frozenset({NodeState.REQUESTED, NodeState.PROVISIONING, NodeState.READY,
                         NodeState.NOTICED, NodeState.TERMINATING})


@dataclass
class Pool:
    """The live nodes of one accelerator and the jobs on them."""

    accelerator: str
    capacity: int  # nodes
    nodes: list[Node] = field(default_factory=list)
    spot_quota_nodes: float | None = None

    def snapshot(self, jobs: dict[str, Job], now: float) -> tuple[Any, list[str | None]]:
        """A ClusterSnapshot (one card per slot) and, per slot, the node id (None = empty)."""
        from policies.placement import ClusterSnapshot, RunningTask

        slots: list[str | None] = [n.id for n in self.nodes]
        slots += [None] * max(0, self.capacity - len(self.nodes))
        n = len(slots)
        free = np.zeros((n, 1))
        hp = np.zeros(n)
        spot = np.zeros(n)
        cards: dict[str, list[tuple[int, int, float]]] = {}
        node_tasks: dict[int, list[str]] = {}
        for i, node in enumerate(self.nodes):
            if node.job_id is None:
                free[i, 0] = 0.0 if node.state is NodeState.TERMINATING else 1.0
                continue
            cards.setdefault(node.job_id, []).append((i, 0, 1.0))
            node_tasks.setdefault(i, []).append(node.job_id)
            job = jobs.get(node.job_id)
            if job is not None and job.kind is JobKind.SPOT:
                spot[i] = 1.0
            else:
                hp[i] = 1.0
        free[len(self.nodes):, 0] = 1.0
        running = {}
        spot_alloc = 0.0
        for job_id, cs in cards.items():
            job = jobs.get(job_id)
            if job is None:
                continue
            prio: Literal["hp", "spot"] = "spot" if job.kind is JobKind.SPOT else "hp"
            if prio == "spot":
                spot_alloc += len(cs)
            started = job.started_at if job.started_at is not None else now
            ckpt = now - max(0.0, job.progress_hours - job.checkpointed_hours) * HOUR
            running[job_id] = RunningTask(job_id, prio, 1.0, len(cs), tuple(cs), started, ckpt,
                                          job.tenant_id)
        z = np.zeros(n)
        snap = ClusterSnapshot(
            now, np.array([s or f"empty-{i}" for i, s in enumerate(slots)]),
            np.array([self.accelerator] * n), np.ones(n, dtype=np.int64), free, hp, spot, z, z,
            running=MappingProxyType(running), node_tasks=MappingProxyType(node_tasks),
            spot_quota=self.spot_quota_nodes, spot_allocated=spot_alloc)
        return snap, slots


@dataclass(frozen=True)
class PlacementPlan:
    """How one job gets its gang: reuse idle nodes, launch new ones, evict spot jobs."""

    job_id: str
    accelerator: str
    reuse: tuple[str, ...] = ()  # idle nodes that fit (same market, ready)
    launch: int = 0
    replace: tuple[str, ...] = ()  # idle nodes that do not fit: terminate to free their slot
    victims: tuple[str, ...] = ()
    policy: str = ""


def task_request(job: Job, accelerator: str) -> Any:
    from policies.placement import TaskRequest

    prio: Literal["hp", "spot"] = "spot" if job.kind is JobKind.SPOT else "hp"
    return TaskRequest(job.id, prio, 1.0, job.spec.workers, (accelerator,), job.tenant_id)


def plan(scheduler: Any, pool: Pool, jobs: dict[str, Job], job: Job, market: Market,
         zone_ok: Iterable[str] | None, nodes: dict[str, Node], now: float) -> PlacementPlan | None:
    """Ask the placement policy where ``job`` goes in ``pool``; None when it does not fit now."""
    snap, slots = pool.snapshot(jobs, now)
    placed = scheduler.schedule(snap, task_request(job, pool.accelerator))
    if placed is None:
        return None
    zones = set(zone_ok) if zone_ok is not None else None
    reuse: list[str] = []
    replace: list[str] = []
    launch = 0
    for pod in placed.pods:
        node_id = slots[pod.node]
        node = nodes.get(node_id) if node_id is not None else None
        if node is None or node.job_id is not None:
            launch += 1  # an empty slot, or one a victim frees (its node is terminated)
        elif (node.market is market and node.state is NodeState.READY
              and (zones is None or node.zone in zones)):
            reuse.append(node.id)
        else:
            replace.append(node.id)
            launch += 1
    return PlacementPlan(job.id, pool.accelerator, tuple(reuse), launch, tuple(replace),
                         tuple(placed.victims), getattr(scheduler, "name", ""))


def pools_of(nodes: Sequence[Node], capacity: dict[str, int]) -> dict[str, Pool]:
    pools = {acc: Pool(acc, cap) for acc, cap in capacity.items()}
    for n in nodes:
        if n.state in BUSY_STATES:
            pools.setdefault(n.accelerator, Pool(n.accelerator, 0)).nodes.append(n)
    return pools
