"""GPU pools as the placement policy sees them: one :class:`ClusterSnapshot` per accelerator.

The control plane holds at most ``capacity`` nodes of each accelerator (its budget). Every
worker gets a whole node, so each pool slot is one "card": a live node (busy with a job, or idle
and reusable) or an empty slot the controller may fill by launching a node. The GFS scheduler
(``policies.schedulers.make_scheduler``) then decides, on this one snapshot, whether a job fits,
under the spot quota, and which spot jobs an HP job evicts (Alg. 2, Eq. 17-19).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

import numpy as np

from controlplane.core.models import Job, JobKind, Market, Node, NodeState
from controlplane.core.units import HOUR
from policies.placement import (
    ClusterSnapshot,
    FrameworkScheduler,
    NodeAges,
    RunningTask,
    TaskRequest,
)

BUSY_STATES = frozenset({NodeState.REQUESTED, NodeState.PROVISIONING, NodeState.READY,
                         NodeState.NOTICED, NodeState.TERMINATING})


@dataclass
class Pool:
    """The live nodes of one accelerator and the jobs on them.

    The snapshot is built once per tick (one pass over the nodes) and then patched after each
    placement (:meth:`commit`), so placing many jobs in one tick stays cheap.
    """

    accelerator: str
    capacity: int  # nodes
    nodes: list[Node] = field(default_factory=list)
    spot_quota_nodes: float | None = None
    _snap: ClusterSnapshot | None = field(default=None, repr=False)
    _slots: list[str | None] = field(default_factory=list, repr=False)
    closed: frozenset[str] = frozenset()  # zones that take no new work: their idle nodes are no candidates

    def reusable(self, node: Node) -> bool:
        """An idle node a job may be placed on: not terminating, not in a closed zone."""
        return node.job_id is None and node.state is not NodeState.TERMINATING and node.zone not in self.closed

    def snapshot(self, jobs: dict[str, Job], now: float) -> tuple[ClusterSnapshot, list[str | None]]:
        """A ClusterSnapshot (one card per slot) and, per slot, the node id (None = empty)."""
        if self._snap is None:
            self._snap, self._slots = self._build(jobs, now)
        return self._snap, self._slots

    def free_cards(self) -> int:
        """Slots a job could take without evicting anyone: empty ones and idle live nodes."""
        if self._snap is not None:
            return int(self._snap.card_free[:, 0].sum())
        idle = sum(1 for n in self.nodes if self.reusable(n))
        return idle + max(0, self.capacity - len(self.nodes))

    def add(self, nodes: Sequence[Node]) -> None:
        """Nodes launched into the pool outside a plan; the snapshot is rebuilt when next asked."""
        self.nodes.extend(nodes)
        self._snap = None

    def no_room_for(self, count: int, *, spot: bool, jobs: dict[str, Job], now: float) -> str:
        """Why ``count`` more nodes of a running job do not fit now ('' when they do): the empty
        slots under the pool's capacity and, for a spot job, the spot quota."""
        empty = max(0, self.capacity - len(self.nodes))
        if empty < count:
            return f"{empty} free of {self.capacity} {self.accelerator} node slots"
        if spot and self.spot_quota_nodes is not None:
            snap, _ = self.snapshot(jobs, now)
            if snap.spot_allocated + count > self.spot_quota_nodes + 1e-9:
                return f"spot quota {self.spot_quota_nodes:.1f} nodes"
        return ""

    def _build(self, jobs: dict[str, Job], now: float) -> tuple[ClusterSnapshot, list[str | None]]:
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
                free[i, 0] = 1.0 if self.reusable(node) else 0.0
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
            running[job_id] = _task(job, prio, tuple(cs), now)
        z = np.zeros(n)
        snap = ClusterSnapshot(
            now, np.array([s or f"empty-{i}" for i, s in enumerate(slots)]),
            np.array([self.accelerator] * n), np.ones(n, dtype=np.int64), free, hp, spot, z, z,
            running=MappingProxyType(running), node_tasks=MappingProxyType(node_tasks),
            spot_quota=self.spot_quota_nodes, spot_allocated=spot_alloc,
            ages=self._ages(n, now))
        return snap, slots

    def _ages(self, n: int, now: float) -> NodeAges:
        """The VM age (hours) of every idle ready node, NaN elsewhere; models keyed by cloud."""
        hours = np.full(n, np.nan)
        keys = np.full(n, "", dtype=object)
        for i, node in enumerate(self.nodes):
            keys[i] = lifetime_key(node)
            if self.reusable(node) and node.state is NodeState.READY:
                hours[i] = node_age_hours(node, now)
        spot = [k for k in keys[: len(self.nodes)] if k]
        fresh = max(set(spot), key=spot.count) if spot else ""
        return NodeAges(hours, keys.astype(str), fresh)

    def commit(self, p: PlacementPlan, job: Job, node_of_slot: dict[int, str], now: float) -> None:
        """Patch the snapshot after ``p`` was applied: victims gone, the job on its slots."""

        snap = self._snap
        if snap is None:
            return
        free = snap.card_free.copy()
        hp = snap.hp_gpus.copy()
        spot = snap.spot_gpus.copy()
        running = dict(snap.running)
        node_tasks = dict(snap.node_tasks)  # its lists are replaced below, never mutated
        spot_alloc = snap.spot_allocated
        for v in p.victims:
            task = running.pop(v, None)
            if task is None:
                continue
            for n, _c, _s in task.cards:
                free[n, 0] = 0.0  # its node is terminating: the slot frees when it is gone
                spot[n] = hp[n] = 0.0
                node_tasks.pop(n, None)
                self._slots[n] = None
            spot_alloc -= task.pods if task.priority == "spot" else 0
        prio: Literal["hp", "spot"] = "spot" if job.kind is JobKind.SPOT else "hp"
        for i in p.slots:
            free[i, 0] = 0.0
            (spot if prio == "spot" else hp)[i] = 1.0
            node_tasks[i] = [job.id]
            self._slots[i] = node_of_slot.get(i, self._slots[i])
        running[job.id] = _task(job, prio, tuple((i, 0, 1.0) for i in p.slots), now)
        if prio == "spot":
            spot_alloc += len(p.slots)
        self._snap = ClusterSnapshot(
            now, snap.node_names, snap.gpu_model, snap.gpus, free, hp, spot,
            snap.evictions_short, snap.evictions_long, running=MappingProxyType(running),
            node_tasks=MappingProxyType(node_tasks), spot_quota=snap.spot_quota,
            spot_allocated=spot_alloc, ages=_taken(snap.ages, p.slots))


def _taken(ages: NodeAges | None, slots: tuple[int, ...]) -> NodeAges | None:
    """The ages with the slots a placement took marked as no longer idle."""
    if ages is None or not slots:
        return ages
    hours = ages.hours.copy()
    hours[list(slots)] = np.nan
    return NodeAges(hours, ages.model, ages.fresh)


def lifetime_key(node: Node) -> str:
    """The key of the node's lifetime model: its cloud for spot VMs, '' (never preempted) else."""
    return node.cloud if node.market is Market.SPOT else ""


def node_age_hours(node: Node, now: float) -> float:
    """The VM's age in hours since its launch (0 before it has one)."""
    start = node.launched_at if node.launched_at is not None else now
    return max(0.0, now - start) / HOUR


def expected_hours(job: Job) -> float:
    """How long the job is expected to run from where it stands: C minus its progress."""
    return max(job.spec.compute_hours - job.progress_hours, 1e-3)


def _task(job: Job, prio: Literal["hp", "spot"], cards: tuple[tuple[int, int, float], ...],
          now: float) -> RunningTask:
    started = job.started_at if job.started_at is not None else now
    ckpt = now - max(0.0, job.progress_hours - job.checkpointed_hours) * HOUR
    return RunningTask(job.id, prio, 1.0, len(cards), cards, started, tenant=job.tenant_id,
                       checkpointed_s=ckpt)


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
    slots: tuple[int, ...] = ()  # the pool slots the pods took
    launch_slots: tuple[int, ...] = ()  # of those, the ones that get a new node


def task_request(job: Job, accelerator: str) -> TaskRequest:
    prio: Literal["hp", "spot"] = "spot" if job.kind is JobKind.SPOT else "hp"
    return TaskRequest(job.id, prio, 1.0, job.nodes_needed, (accelerator,), job.tenant_id,
                       expected_hours=expected_hours(job))


def plan(scheduler: FrameworkScheduler, pool: Pool, jobs: dict[str, Job], job: Job, market: Market,
         zone_ok: Iterable[str] | None, nodes: dict[str, Node], now: float) -> PlacementPlan | None:
    """Ask the placement policy where ``job`` goes in ``pool``; None when it does not fit now."""
    snap, slots = pool.snapshot(jobs, now)
    placed = scheduler.schedule(snap, task_request(job, pool.accelerator))
    if placed is None:
        return None
    zones = set(zone_ok) if zone_ok is not None else None
    reuse: list[str] = []
    replace: list[str] = []
    launch_slots: list[int] = []
    for pod in placed.pods:
        node_id = slots[pod.node]
        node = nodes.get(node_id) if node_id is not None else None
        if node is None or node.job_id is not None:
            launch_slots.append(pod.node)  # an empty slot, or one a victim frees
        elif (node.market is market and node.state is NodeState.READY
              and (zones is None or node.zone in zones)):
            reuse.append(node.id)
        else:
            replace.append(node.id)
            launch_slots.append(pod.node)
    return PlacementPlan(job.id, pool.accelerator, tuple(reuse), len(launch_slots),
                         tuple(replace), tuple(placed.victims), scheduler.name,
                         tuple(p.node for p in placed.pods), tuple(launch_slots))


def pools_of(nodes: Sequence[Node], capacity: dict[str, int],
             closed: Collection[str] = ()) -> dict[str, Pool]:
    """One pool per accelerator of the live nodes; idle nodes of ``closed`` zones are no
    candidates for placement (they hold their slot until reaped)."""
    shut = frozenset(closed)
    pools = {acc: Pool(acc, cap, closed=shut) for acc, cap in capacity.items()}
    for n in nodes:
        if n.state in BUSY_STATES:
            pools.setdefault(n.accelerator, Pool(n.accelerator, 0, closed=shut)).nodes.append(n)
    return pools
