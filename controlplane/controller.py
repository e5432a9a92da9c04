"""The reconcile loop as a plain class (no Ray): one :meth:`Controller.tick` per control-plane tick.

Each tick works on ONE snapshot: one ``describe()`` and one ``poll_events()`` of the fleet, the
controller's in-memory view of active jobs and live nodes (loaded from the store at start), and
the store's new submissions and cancel flags. It then

1. folds fleet state into nodes (ready, notice, preempted, terminated),
2. advances jobs (gang up -> RUNNING, progress, checkpoints, preemption -> QUEUED, done),
3. asks every deadline job's policy (one batch) for spot / on-demand / idle and in which zone,
4. places queued jobs with the placement policy on per-accelerator pool snapshots (spot quota,
   tenant limits, HP preemption of spot jobs),
5. writes every intent (launch, terminate) to the store, then acts on the fleet, then persists.

Level-triggered and idempotent: state comes from the store plus the fleet's ``describe()``; a
launch intent still pending after a crash is re-applied with the same intent id (the fleet
returns the instances it already made), so no node is launched twice and no job is lost.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from clusters.fleet import FleetProvider, Instance, InstanceState, LaunchRequest, Offer
from clusters.fleet import Market as FleetMarket
from controlplane import workload
from controlplane.clock import Clock
from controlplane.errors import CapacityUnavailable, CloudError
from controlplane.models import (
    HOUR,
    Decision,
    Event,
    Job,
    JobKind,
    JobState,
    Market,
    Node,
    NodeState,
    Tenant,
    ZoneInfo,
    check_transition,
    new_id,
)
from controlplane.policyhost import DeadlinePolicyHost, LocalDeadlineHost, PolicyRequest
from controlplane.pool import BUSY_STATES, PlacementPlan, Pool, plan, pools_of
from controlplane.store import INTENT_DONE, INTENT_FAILED, Intent, Store

log = logging.getLogger(__name__)

_NODE_OF_INSTANCE = {
    InstanceState.PENDING: NodeState.PROVISIONING,
    InstanceState.RUNNING: NodeState.READY,
    InstanceState.NOTICED: NodeState.NOTICED,
    InstanceState.PREEMPTED: NodeState.PREEMPTED,
    InstanceState.TERMINATED: NodeState.TERMINATED,
}
_UP = frozenset({NodeState.READY, NodeState.NOTICED})
_WITH_NODES = frozenset({JobState.STARTING, JobState.RUNNING, JobState.CHECKPOINTING})
_KIND_ORDER = {JobKind.HP: 0, JobKind.DEADLINE: 1, JobKind.SPOT: 2}


@dataclass
class ControllerSettings:
    """Knobs of the reconcile loop (times in control-plane seconds)."""

    tick_seconds: float = 60.0
    pool_nodes: dict[str, int] = field(default_factory=lambda: {"V100": 48, "H100": 12})
    default_pool_nodes: int = 16
    scheduler: str = "gfs"
    deadline_policy: str = "uniform_progress"
    idle_node_seconds: float = 120.0
    max_placements_per_tick: int = 64
    provision_hours: float = 200.0 / HOUR  # worst provisioning delay, added to the policy's d
    zone_penalty: float = 0.25  # spot price multiplier per recent preemption in a zone
    zone_memory_seconds: float = 3 * HOUR
    refused_seconds: float = 600.0  # skip a zone this long after it refused a spot launch
    zones_every_ticks: int = 10  # how often the zone snapshot is written for the API
    # A job whose only change is progress/cost is written every n-th tick (a tenth of them per
    # tick): accounting restarts from the stored accounted_at/billed_at, so nothing is lost.
    persist_progress_every: int = 10
    seed: int = 0


@dataclass
class ExecutorReport:
    """What a real executor (issue 7) reports for one job each tick."""

    progress_hours: float
    checkpointed_hours: float
    checkpoints: int = 0
    finished: bool = False
    failed: str | None = None


class JobExecutor(Protocol):
    """Runs jobs with an ``entrypoint`` on their nodes (issue 7); simulated jobs need none."""

    def start(self, job: Job, nodes: Sequence[Node]) -> None: ...

    def stop(self, job: Job, reason: str) -> None: ...

    def notice(self, job: Job, seconds_left: float) -> None: ...

    def poll(self, jobs: Sequence[Job]) -> dict[str, ExecutorReport]: ...


QuotaSource = Callable[[str], float | None]  # accelerator -> spot quota in GPUs (None = none)


@dataclass
class TickReport:
    at: float
    ms: float
    jobs: int
    nodes: int
    launched: int = 0
    terminated: int = 0
    preempted: int = 0
    finished: int = 0


@dataclass
class _Work:
    """What one tick accumulates before it persists."""

    events: list[Event] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    jobs: dict[str, Job] = field(default_factory=dict)  # changed state: persisted this tick
    progress: dict[str, Job] = field(default_factory=dict)  # only progress/cost moved
    nodes: dict[str, Node] = field(default_factory=dict)
    intents: list[Intent] = field(default_factory=list)
    launches: list[tuple[Intent, LaunchRequest, list[str]]] = field(default_factory=list)
    terminations: list[tuple[Intent, list[str]]] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    notices: dict[str, float] = field(default_factory=dict)  # node id -> seconds left
    report: TickReport | None = None

    def count(self, name: str, by: float = 1.0) -> None:
        self.counters[name] = self.counters.get(name, 0.0) + by


class Controller:
    """The reconcile logic; :class:`actors.controller.ControllerActor` calls :meth:`tick`."""

    def __init__(self, store: Store, fleet: FleetProvider, clock: Clock,
                 settings: ControllerSettings | None = None, *,
                 policy_host: DeadlinePolicyHost | None = None,
                 executor: JobExecutor | None = None, quota: QuotaSource | None = None,
                 scheduler: Any = None, epoch: int | None = None) -> None:
        self.store, self.fleet, self.clock = store, fleet, clock
        self.epoch = epoch  # fencing token from Store.take_controller_lease (None: unfenced)
        self.settings = settings or ControllerSettings()
        self.policy_host: DeadlinePolicyHost = policy_host or LocalDeadlineHost(store)
        self.executor = executor
        self.quota = quota or self._store_quota
        if scheduler is None:
            from policies.schedulers import make_scheduler

            scheduler = make_scheduler(self.settings.scheduler, seed=self.settings.seed)
        self.scheduler = scheduler
        self.jobs: dict[str, Job] = {}
        self.nodes: dict[str, Node] = {}
        self.by_instance: dict[str, str] = {}
        self.tenants: dict[str, Tenant] = {}
        self.offers: list[Offer] = fleet.offers()
        self._offer_cache: dict[tuple[str | None, int], list[Offer]] = {}
        self.availability: dict[str, bool] = {}
        self.zone_preemptions: dict[str, list[float]] = {}
        self.refused: dict[str, float] = {}
        self.ticks = 0
        self._quota_cache: dict[str, float | None] = {}
        self._recovered = False
        self._w = _Work()
        self.after_barrier: Callable[[int], None] | None = None  # fault injection (tests)
        self._external: dict[str, float] = {}  # instance id -> seconds left (node agents)

    # -- start / restart -----------------------------------------------------------------------
    def recover(self) -> None:
        """Load the active state from the store and re-apply intents a crash left pending."""
        self.jobs = {j.id: j for j in self.store.active_jobs() if j.state is not JobState.PENDING}
        self.nodes = {n.id: n for n in self.store.live_nodes()}
        self.by_instance = {n.instance_id: n.id for n in self.nodes.values() if n.instance_id}
        self.tenants = {t.id: t for t in self.store.list_tenants()}
        set_time = getattr(self.clock, "set", None)
        if set_time is not None:
            set_time(self.store.control_time())
        w = self._w = _Work()
        for intent in self.store.pending_intents():
            if intent.kind == "launch":
                p = intent.payload
                req = LaunchRequest(intent.id, p["zone"], p["instance_type"],
                                    FleetMarket(p["market"]), int(p["count"]),
                                    {"job_id": p["job_id"]})
                w.launches.append((intent, req, list(p["node_ids"])))
            elif intent.kind == "terminate":
                w.terminations.append((intent, list(intent.payload["instance_ids"])))
        if w.launches or w.terminations:
            log.warning("recovering %d launch and %d terminate intents", len(w.launches),
                        len(w.terminations))
        now = self.clock.now()
        self._act(now)
        self._persist(now)
        self._recovered = True

    # -- the tick ------------------------------------------------------------------------------
    def tick(self) -> TickReport:
        if not self._recovered:
            self.recover()
        t0 = time.perf_counter()
        now = self.clock.now()
        self._w = w = _Work()
        w.report = TickReport(at=now, ms=0.0, jobs=0, nodes=0)
        self._ingest(now)
        self._sync_fleet(now)
        self._advance_jobs(now)
        self._ask_policies(now)
        self._place(now)
        self._reap_idle(now)
        self._account_demand(now)
        self._persist(now, barrier=True)  # every intent is durable before we act
        if self.after_barrier is not None:
            self.after_barrier(len(w.launches))
        self._act(now)
        self._persist(now)
        self._forget_finished()
        self.ticks += 1
        w.report.ms = (time.perf_counter() - t0) * 1000
        w.report.jobs, w.report.nodes = len(self.jobs), len(self.nodes)
        return w.report

    # -- helpers that record -------------------------------------------------------------------
    def _move(self, job: Job, dst: JobState, cause: str, at: float) -> None:
        check_transition(job.id, job.state, dst)
        self._w.events.append(Event(at=at, tenant_id=job.tenant_id, job_id=job.id,
                                    kind="transition", src=job.state.value, dst=dst.value,
                                    cause=cause))
        job.state = dst
        job.message = cause
        self._w.jobs[job.id] = job
        if dst is JobState.RUNNING and job.started_at is None:
            job.started_at = at
        if dst in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
            job.finished_at = job.finished_at if dst is JobState.SUCCEEDED else at
            self._w.count(f"jobs_{dst.value.lower()}_total")
            if self._w.report is not None:
                self._w.report.finished += 1

    def _node_event(self, node: Node, cause: str, at: float) -> None:
        self._w.events.append(Event(at=at, tenant_id=node.tenant_id, job_id=node.job_id,
                                    node_id=node.id, kind="node", dst=node.state.value,
                                    cause=cause))
        self._w.nodes[node.id] = node

    def _decide(self, job: Job, policy: str, action: str, reason: str, at: float,
                zone: str | None = None, obs: dict[str, Any] | None = None) -> None:
        self._w.decisions.append(Decision(at=at, job_id=job.id, tenant_id=job.tenant_id,
                                          policy=policy, action=action, zone=zone, reason=reason,
                                          observation=obs or {}))

    # -- 1. submissions and cancellations ------------------------------------------------------
    def _ingest(self, now: float) -> None:
        for job in self.store.new_jobs(set(self.jobs)):
            self.jobs[job.id] = job
            if job.tenant_id not in self.tenants:
                self.tenants = {t.id: t for t in self.store.list_tenants()}
            self._move(job, JobState.QUEUED, "accepted by the controller", now)
        for job_id in self.store.cancel_requests():
            found = self.jobs.get(job_id)
            if found is None or found.terminal:
                continue
            job = found
            job.cancel_requested = True
            self._bill(job, now)
            if job.state in (JobState.RUNNING, JobState.CHECKPOINTING):
                self._progress(job, now)
            self._release(job, now, "job cancelled", keep=False)
            job.finished_at = now
            self._move(job, JobState.CANCELLED, "cancelled by the tenant", now)

    # -- 2. fleet state ------------------------------------------------------------------------
    def external_notice(self, instance_id: str, seconds_left: float) -> None:
        """A node agent (NodeActor watching the metadata server) saw a preemption notice; it
        is folded in at the next tick, before the fleet's own event may arrive."""
        self._external[instance_id] = float(seconds_left)

    def _fold_external(self, now: float) -> None:
        external, self._external = self._external, {}
        for iid, left in external.items():
            node = self.nodes.get(self.by_instance.get(iid, ""))
            if node is None or node.state not in _UP:
                continue
            self._w.notices[node.id] = left
            if node.state is NodeState.READY:
                node.state, node.notice_at = NodeState.NOTICED, now
                self._node_event(node, f"node agent: preemption notice, {left:.0f} s left", now)

    def _sync_fleet(self, now: float) -> None:
        self._fold_external(now)
        insts = self.fleet.describe()
        events = self.fleet.poll_events()
        when: dict[tuple[str, str], float] = {}
        for e in events:
            when[(e.instance_id, e.kind.value)] = e.at
            if e.seconds_left is not None:
                node_id = self.by_instance.get(e.instance_id)
                if node_id is not None:
                    self._w.notices[node_id] = e.seconds_left
        avail = getattr(self.fleet, "spot_availability", None)
        if avail is not None:
            self.availability = avail()
        elif not self.availability or self.ticks % self.settings.zones_every_ticks == 0:
            # a real cloud's probe is an API call per zone: every few ticks, not every tick
            self.availability = {o.zone: self.fleet.spot_available(o.zone, o.instance_type)
                                 for o in self.offers}
        for inst in insts:
            node_id = self.by_instance.get(inst.instance_id)
            node = self.nodes.get(node_id) if node_id is not None else None
            if node is not None:
                self._fold(node, inst, when, now)
        if self.ticks % self.settings.zones_every_ticks == 0:
            self.store.put_zones([
                ZoneInfo(cloud=o.cloud, zone=o.zone, region=o.region,
                         instance_type=o.instance_type, accelerator=o.accelerator,
                         accelerator_count=o.accelerator_count, spot_price=o.spot_price,
                         on_demand_price=o.on_demand_price,
                         spot_available=self.availability.get(o.zone, False), updated_at=now)
                for o in self.offers])

    def _fold(self, node: Node, inst: Instance, when: dict[tuple[str, str], float],
              now: float) -> None:
        new = _NODE_OF_INSTANCE[inst.state]
        old = node.state
        if new is old or (old is NodeState.TERMINATING and new not in (
                NodeState.TERMINATED, NodeState.PREEMPTED)):
            return
        if old is NodeState.NOTICED and new is NodeState.READY:
            return
        iid = inst.instance_id
        node.state = new
        at = when.get((iid, {NodeState.READY: "ready", NodeState.NOTICED: "preemption_notice",
                             NodeState.PREEMPTED: "preempted",
                             NodeState.TERMINATED: "terminated"}.get(new, "")), now)
        if new is NodeState.READY:
            node.ready_at = when.get((iid, "ready"), now)
            if node.job_id is None:
                node.idle_since = node.ready_at
        elif new is NodeState.NOTICED:
            node.ready_at = node.ready_at or when.get((iid, "ready"), now)
            node.notice_at = when.get((iid, "preemption_notice"), now)
            self._w.notices.setdefault(node.id, 30.0)
        elif new is NodeState.PREEMPTED:
            node.ended_at = at
            node.notice_at = node.notice_at or when.get((iid, "preemption_notice"))
            self.zone_preemptions.setdefault(node.zone, []).append(node.ended_at)
            self._w.count("nodes_preempted_total")
        elif new is NodeState.TERMINATED:
            node.ended_at = node.ended_at or when.get((iid, "terminated"), now)
        self._node_event(node, f"fleet: instance {iid} is {inst.state.value}", at)

    # -- 3. jobs -------------------------------------------------------------------------------
    def _interval(self, job: Job) -> float:
        if job.market is Market.ON_DEMAND:  # nothing preempts it: no periodic checkpoints
            return max(job.spec.compute_hours - job.progress_hours, 1e-3) + 1.0
        return self._planner(job).interval_hours(job.progress_hours - job.segment_start_hours)

    def _planner(self, job: Job) -> Any:
        key = round(job.spec.checkpoint_hours, 6)
        cache = self.__dict__.setdefault("_planners", {})
        if key not in cache:
            from controlplane.standins import load_checkpoint_planner, load_lifetime_model

            model = getattr(self.fleet, "lifetimes", None)
            if model is None or not hasattr(model, "sf"):
                model = load_lifetime_model()
            cache[key] = load_checkpoint_planner(model, job.spec.checkpoint_hours)
        return cache[key]

    def _progress(self, job: Job, until: float) -> None:
        if job.accounted_at is None:
            job.accounted_at = until
        if job.spec.entrypoint is not None and self.executor is not None:
            job.accounted_at = until
            return
        if until > job.accounted_at:
            workload.advance(job, job.accounted_at, until, self._move, self._interval)
            job.accounted_at = until
            self._w.progress[job.id] = job

    def _bill(self, job: Job, until: float) -> None:
        """Charge the job for its nodes' time since it was last billed (provisioning included)."""
        start = job.billed_at if job.billed_at is not None else until
        if until <= start:
            job.billed_at = max(start, until)
            return
        cost = gpu_h = 0.0
        for node_id in job.node_ids:
            n = self.nodes.get(node_id)
            if n is None or n.launched_at is None:
                continue
            a = max(start, n.launched_at)
            b = min(until, n.ended_at if n.ended_at is not None else until)
            if b > a:
                cost += n.price_per_hour * (b - a) / HOUR
                gpu_h += n.accelerator_count * (b - a) / HOUR
        job.cost += cost
        job.gpu_hours += gpu_h
        job.billed_at = until
        od = self._od_price(job)
        job.on_demand_cost = max(job.on_demand_cost, job.progress_hours * job.spec.workers * od)
        self._w.progress[job.id] = job

    def _od_price(self, job: Job) -> float:
        prices = [o.on_demand_price for o in self._offers_for(job)]
        return min(prices, default=0.0)

    def _offers_for(self, job: Job) -> list[Offer]:
        key = (job.spec.accelerator, job.spec.gpus_per_worker)
        hit = self._offer_cache.get(key)
        if hit is None:
            acc = job.spec.accelerator
            hit = [o for o in self.offers if (acc is None or o.accelerator.lower() == acc.lower())
                   and o.accelerator_count >= job.spec.gpus_per_worker]
            self._offer_cache[key] = hit
        return hit

    def _advance_jobs(self, now: float) -> None:
        reports: dict[str, ExecutorReport] = {}
        if self.executor is not None:
            real = [j for j in self.jobs.values()
                    if j.spec.entrypoint is not None and j.state in _WITH_NODES]
            if real:
                reports = self.executor.poll(real)
        for job in list(self.jobs.values()):
            if job.state in _WITH_NODES:
                self._advance_job(job, now, reports.get(job.id))

    def _advance_job(self, job: Job, now: float, report: ExecutorReport | None) -> None:
        nodes = [self.nodes[i] for i in job.node_ids if i in self.nodes]
        lost = [n for n in nodes if n.state in (NodeState.PREEMPTED, NodeState.FAILED,
                                                NodeState.TERMINATED)]
        missing = len(nodes) < len(job.node_ids)
        if job.state is JobState.STARTING and not lost and not missing and nodes and all(
                n.state in _UP for n in nodes):
            up = max([n.ready_at or now for n in nodes] + [job.accounted_at or now])
            self._move(job, JobState.RUNNING,
                       f"all {len(nodes)} workers ready in {job.zone} ({job.market})", up)
            workload.start(job)
            job.accounted_at = up
            if self.executor is not None and job.spec.entrypoint is not None:
                self.executor.start(job, nodes)
        if lost and not missing and self._replace_replicas(job, nodes, lost, now):
            lost = []
        if lost or missing:
            end = min((n.ended_at or now for n in lost), default=now)
            if job.state in (JobState.RUNNING, JobState.CHECKPOINTING):
                self._checkpoint_on_late_notice(job, lost, end)
                self._progress(job, max(end, job.accounted_at or end))
            self._bill(job, now)
            if job.terminal:
                self._release(job, now, "job finished", keep=True)
                return
            self._preempt(job, now, lost)
            return
        if job.state in (JobState.RUNNING, JobState.CHECKPOINTING):
            self._start_replacements(job, nodes)
            self._handle_notices(job, nodes, now)
            if report is not None:
                self._apply_report(job, report, now)
            else:
                self._progress(job, now)
        self._bill(job, now)
        if job.state is JobState.SUCCEEDED:
            self._release(job, now, "job finished", keep=True)
            if job.bag_id:
                self._w.count("bag_jobs_succeeded_total")

    def _handle_notices(self, job: Job, nodes: Sequence[Node], now: float) -> None:
        for n in nodes:
            left = self._w.notices.get(n.id)
            if left is None:
                continue
            at = n.notice_at or now
            self._progress(job, min(max(at, job.accounted_at or at), now))
            cause = f"preemption notice: {left:.0f} s left on {n.id} ({n.zone})"
            if self.executor is not None and job.spec.entrypoint is not None:
                self.executor.notice(job, left)
            elif job.spec.checkpoint_hours * HOUR <= left:
                workload.begin_checkpoint(job, self._move, cause, at)
            self._w.events.append(Event(at=at, tenant_id=job.tenant_id, job_id=job.id,
                                        node_id=n.id, kind="notice", cause=cause))

    def _replicated(self, job: Job) -> bool:
        return (job.spec.replicas > 1 and job.spec.entrypoint is not None
                and self.executor is not None and hasattr(self.executor, "node_preempted"))

    def _replace_replicas(self, job: Job, nodes: Sequence[Node], lost: Sequence[Node],
                          now: float) -> bool:
        """Seed 004 replication: a replica survives the loss of a node, so the job keeps
        running (no rollback) and each lost node gets a replacement that restores from the
        survivor's checkpoint. False when no replica survives (the usual preemption)."""
        if not self._replicated(job) or job.state not in (JobState.RUNNING,
                                                          JobState.CHECKPOINTING):
            return False
        executor: Any = self.executor
        survive = False
        for n in lost:
            survive = bool(executor.node_preempted(job, n.id, f"node {n.id} {n.state.value.lower()}"))
        if not survive:
            return False
        self._bill(job, now)
        market = job.market or Market.SPOT
        offers = self._zones(job, market, now) or self._zones(job, Market.ON_DEMAND, now)
        lost_ids = {n.id for n in lost}
        job.node_ids = [i for i in job.node_ids if i not in lost_ids]
        for n in lost:
            n.job_id = n.tenant_id = None
            self._w.nodes[n.id] = n
        new = []
        if offers:
            m = market if self._zones(job, market, now) else Market.ON_DEMAND
            new = self._launch(job, offers[0], m, len(lost), now)
            for n in new:
                n.replacement = True
            job.node_ids += [n.id for n in new]
        self._w.count("replica_replacements_total", len(lost))
        self._w.events.append(Event(
            at=now, tenant_id=job.tenant_id, job_id=job.id, kind="replica",
            cause=f"{len(lost)} replica node(s) lost ({', '.join(sorted(lost_ids))}); a replica "
                  f"survives, {len(new)} replacement(s) launched"))
        self._w.jobs[job.id] = job
        return True

    def _start_replacements(self, job: Job, nodes: Sequence[Node]) -> None:
        if not self._replicated(job):
            return
        executor: Any = self.executor
        for n in nodes:
            if n.replacement and n.state is NodeState.READY:
                executor.start_replacement(job, n)
                n.replacement = False
                self._node_event(n, f"replacement replica started for {job.id}", self.clock.now())

    def _checkpoint_on_late_notice(self, job: Job, lost: Sequence[Node], end: float) -> None:
        """Notice and preemption fell in one tick: the node's agent checkpointed at the notice
        (the checkpoint survives when it fits in the notice's seconds)."""
        notices = [n for n in lost if n.notice_at is not None and n.notice_at <= end]
        if not notices or job.state is not JobState.RUNNING or (
                self.executor is not None and job.spec.entrypoint is not None):
            return
        n = min(notices, key=lambda x: x.notice_at or end)
        at = max(n.notice_at or end, job.accounted_at or end)
        self._progress(job, at)
        cause = f"preemption notice: {end - at:.0f} s left on {n.id} ({n.zone})"
        self._w.events.append(Event(at=at, tenant_id=job.tenant_id, job_id=job.id,
                                    node_id=n.id, kind="notice", cause=cause))
        if job.spec.checkpoint_hours * HOUR <= end - at:
            workload.begin_checkpoint(job, self._move, cause, at)

    def _apply_report(self, job: Job, r: ExecutorReport, now: float) -> None:
        job.progress_hours = r.progress_hours
        job.checkpointed_hours = r.checkpointed_hours
        job.checkpoints = max(job.checkpoints, r.checkpoints)
        job.accounted_at = now
        self._w.jobs[job.id] = job
        if r.failed is not None:
            self._release(job, now, "job failed", keep=False)
            self._move(job, JobState.FAILED, f"executor: {r.failed}", now)
        elif r.finished:
            job.finished_at = now
            self._move(job, JobState.SUCCEEDED, "executor: finished", now)

    def _preempt(self, job: Job, now: float, lost: Sequence[Node], cause: str = "") -> None:
        """The job lost a worker: back to its checkpoint, release the rest, queue again."""
        if not cause and not lost:
            cause = "a node of the gang is gone"
        if not cause:
            n = lost[0]
            cause = (f"launch failed for {n.id} in {n.zone}" if n.state is NodeState.FAILED
                     else f"node {n.id} {n.state.value.lower()} in {n.zone}")
        was = job.state
        hours = workload.roll_back(job)
        if self.executor is not None and job.spec.entrypoint is not None:
            self.executor.stop(job, cause)
        self._release(job, now, cause, keep=False)
        if was is JobState.STARTING and lost and lost[0].state is NodeState.FAILED:
            self._move(job, JobState.QUEUED, cause, now)
            return
        job.preemptions += 1
        self._w.count("job_preemptions_total")
        if self._w.report is not None:
            self._w.report.preempted += 1
        self._move(job, JobState.PREEMPTED, f"{cause}; lost {hours:.3f} h since the last "
                   f"checkpoint", now)
        self._move(job, JobState.QUEUED, "requeued after preemption", now)

    def _release(self, job: Job, now: float, cause: str, *, keep: bool) -> None:
        """Detach the job's nodes: ready ones stay a while for reuse (``keep``), others end."""
        self._bill(job, now)
        for node_id in job.node_ids:
            n = self.nodes.get(node_id)
            if n is None:
                continue
            n.job_id = n.tenant_id = None
            self._w.nodes[n.id] = n
            if n.gone or n.state is NodeState.TERMINATING:
                continue
            if keep and n.state is NodeState.READY:
                n.idle_since = now
            else:
                self._terminate(n, now, cause)
        job.node_ids = []
        job.billed_at = None
        self._w.jobs[job.id] = job

    def _forget_finished(self) -> None:
        done = [j for j in self.jobs.values() if j.terminal]
        for j in done:
            del self.jobs[j.id]
            if j.bag_id and j.state is JobState.SUCCEEDED:
                self.store.update_bag_estimate(j.bag_id)
        deadline = [j.id for j in done if j.kind is JobKind.DEADLINE]
        if deadline:
            self.policy_host.forget(deadline)
        for n in [n for n in self.nodes.values() if n.gone]:
            del self.nodes[n.id]
            if n.instance_id:
                self.by_instance.pop(n.instance_id, None)

    # -- 4. deadline policies ------------------------------------------------------------------
    def _ask_policies(self, now: float) -> None:
        from policies.deadline import DeadlineTask, Kind, Observation, ZoneView

        reqs = []
        for job in self.jobs.values():
            if job.kind is not JobKind.DEADLINE or job.terminal or job.deadline_at is None:
                continue
            offers = self._offers_for(job)
            if not offers:
                continue
            spot = min(o.spot_price for o in offers)
            od = min(o.on_demand_price for o in offers)
            c = job.spec.compute_hours
            r = (job.deadline_at - job.submitted_at) / HOUR
            d = min(job.spec.overhead_hours + self.settings.provision_hours, max(r - c, 0.0))
            task = DeadlineTask(c, r, d, od * job.spec.workers, spot * job.spec.workers,
                                job.spec.workers)
            running = job.state in _WITH_NODES
            kind = Kind(job.market.value) if running and job.market is not None else Kind.IDLE
            zones = tuple(ZoneView(o.zone, self.availability.get(o.zone, False), o.spot_price,
                                   o.on_demand_price) for o in offers)
            here = self.availability.get(job.zone, False) if running and job.zone else any(
                z.spot_available for z in zones)
            obs = Observation((now - job.submitted_at) / HOUR, job.progress_hours, kind,
                              job.zone if running else None, here, zones)
            reqs.append(PolicyRequest(job.id, self.settings.deadline_policy, task, obs,
                                      self.settings.tick_seconds / HOUR))
        if not reqs:
            return
        actions = self.policy_host.decide(reqs)
        for req in reqs:
            act = actions.get(req.job_id)
            if act is not None:
                self._apply_action(self.jobs[req.job_id], act, req, now)

    def _apply_action(self, job: Job, act: Any, req: PolicyRequest, now: float) -> None:
        kind = act.kind.value
        if (kind, act.zone) != (job.policy_action, job.policy_zone):
            o = req.obs
            self._decide(job, req.policy, kind, f"elapsed {o.elapsed_hours:.2f} h, progress "
                         f"{o.progress_hours:.2f}/{req.task.compute_hours:.2f} h, on {o.state.value}, "
                         f"spot {'up' if o.spot_available else 'down'}", now, act.zone,
                         {"elapsed_hours": o.elapsed_hours, "progress_hours": o.progress_hours,
                          "state": o.state.value, "zone": o.zone,
                          "spot_available": o.spot_available})
            job.policy_action, job.policy_zone = kind, act.zone
            self._w.jobs[job.id] = job
        if job.state not in _WITH_NODES:
            return
        switch = None
        if kind == "idle":
            switch = "policy: go idle"
        elif job.market is not None and kind != job.market.value:
            switch = f"policy: switch {job.market.value} -> {kind}"
        elif kind == "spot" and act.zone is not None and act.zone != job.zone:
            switch = f"policy: move to spot in {act.zone}"
        if switch is None:
            return
        if job.state in (JobState.RUNNING, JobState.CHECKPOINTING):
            self._progress(job, now)
        if job.terminal:
            return
        workload.keep_progress(job)
        self._release(job, now, switch, keep=True)
        self._move(job, JobState.QUEUED, switch, now)

    # -- 5. placement --------------------------------------------------------------------------
    def _store_quota(self, accelerator: str) -> float | None:
        if self.ticks % 10 == 0 or accelerator not in self._quota_cache:
            self._quota_cache = {q.accelerator: float(q.spot_quota_gpus)
                                 for q in self.store.quotas()}
        return self._quota_cache.get(accelerator)

    def _zones(self, job: Job, market: Market, now: float) -> list[Offer]:
        offers = self._offers_for(job)
        if job.kind is JobKind.DEADLINE and job.policy_zone:
            offers = [o for o in offers if o.zone == job.policy_zone] or offers
        if market is Market.ON_DEMAND:
            return sorted(offers, key=lambda o: (o.on_demand_price, o.zone))
        horizon = now - self.settings.zone_memory_seconds
        ok = [o for o in offers if self.availability.get(o.zone, False)
              and self.refused.get(o.zone, -1e18) < now - self.settings.refused_seconds]

        def score(o: Offer) -> tuple[float, str]:
            recent = sum(1 for t in self.zone_preemptions.get(o.zone, ()) if t >= horizon)
            return (o.spot_price * (1 + self.settings.zone_penalty * recent), o.zone)

        return sorted(ok, key=score)

    def _market(self, job: Job) -> Market | None:
        if job.kind is JobKind.HP:
            return Market.ON_DEMAND
        if job.kind is JobKind.SPOT:
            return Market.SPOT
        if job.policy_action in (None, "idle"):
            return None
        return Market(job.policy_action)

    def _place(self, now: float) -> None:
        queue = sorted((j for j in self.jobs.values() if j.state is JobState.QUEUED),
                       key=lambda j: (_KIND_ORDER[j.kind], j.submitted_at))
        if not queue:
            return
        pools = pools_of(list(self.nodes.values()), self._capacity())
        for acc, pool in pools.items():
            q = self.quota(acc)
            per_node = max((o.accelerator_count for o in self.offers if o.accelerator == acc),
                           default=1)
            pool.spot_quota_nodes = None if q is None else q / per_node
        tenant_gpus = self._tenant_gpus()
        for job in queue[: self.settings.max_placements_per_tick]:
            if job.state is not JobState.QUEUED:
                continue  # a victim of an earlier placement this tick
            if not self._offers_for(job):
                self._move(job, JobState.FAILED, self._unplaceable(job), now)
                continue
            market = self._market(job)
            if market is None:
                continue
            offers = self._zones(job, market, now)
            if not offers:
                self._wait(job, f"no {market.value} zone for {job.spec.accelerator or 'any GPU'}",
                           now)
                continue
            tenant = self.tenants.get(job.tenant_id)
            if tenant is not None and tenant_gpus.get(tenant.id, 0) + job.gpus > tenant.max_gpus:
                self._wait(job, f"tenant limit: {tenant.max_gpus} GPUs", now)
                continue
            best = offers[0]
            pool = pools.setdefault(best.accelerator, Pool(best.accelerator,
                                                           self._capacity_of(best.accelerator)))
            p = plan(self.scheduler, pool, self.jobs, job, market, [o.zone for o in offers],
                     self.nodes, now)
            if p is None:
                self._wait(job, f"no room in the {best.accelerator} pool "
                           f"({len(pool.nodes)}/{pool.capacity} nodes"
                           + (f", spot quota {pool.spot_quota_nodes:.1f} nodes)"
                              if pool.spot_quota_nodes is not None else ")"), now)
                continue
            self._apply_plan(job, p, best, market, pool, now)
            tenant_gpus[job.tenant_id] = tenant_gpus.get(job.tenant_id, 0) + job.gpus

    def _unplaceable(self, job: Job) -> str:
        shapes = sorted({f"{o.accelerator}x{o.accelerator_count}" for o in self.offers})
        return (f"no zone offers {job.spec.accelerator or 'a GPU'} with "
                f"{job.spec.gpus_per_worker} GPUs per worker; the fleet has {', '.join(shapes)}")

    def _capacity_of(self, acc: str) -> int:
        return self.settings.pool_nodes.get(acc, self.settings.default_pool_nodes)

    def _capacity(self) -> dict[str, int]:
        return {o.accelerator: self._capacity_of(o.accelerator) for o in self.offers}

    def _tenant_gpus(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for j in self.jobs.values():
            if j.state in _WITH_NODES:
                out[j.tenant_id] = out.get(j.tenant_id, 0) + j.gpus
        return out

    def _wait(self, job: Job, why: str, now: float) -> None:
        if job.message != f"waiting: {why}":
            job.message = f"waiting: {why}"
            self._decide(job, "placement", "wait", why, now)
            self._w.jobs[job.id] = job

    def _apply_plan(self, job: Job, p: PlacementPlan, offer: Offer, market: Market, pool: Pool,
                    now: float) -> None:
        for victim_id in p.victims:
            victim = self.jobs.get(victim_id)
            if victim is None or victim.state not in _WITH_NODES:
                continue
            if victim.state in (JobState.RUNNING, JobState.CHECKPOINTING):
                self._progress(victim, now)
            self._bill(victim, now)
            if victim.terminal:
                self._release(victim, now, "job finished", keep=True)
                continue
            cause = f"preempted by {job.kind.value} job {job.id} (placement {p.policy})"
            self._w.count("hp_evictions_total")
            self._decide(victim, p.policy, "preempt", cause, now)
            self._preempt(victim, now, [], cause)
        for node_id in p.replace:
            self._terminate(self.nodes[node_id], now, f"replaced for job {job.id}")
        reused = [self.nodes[i] for i in p.reuse]
        for n in reused:
            n.job_id, n.tenant_id, n.idle_since = job.id, job.tenant_id, None
            self._w.nodes[n.id] = n
        new = self._launch(job, offer, market, p.launch, now) if p.launch else []
        pool.nodes.extend(new)
        pool.commit(p, job, {i: n.id for i, n in zip(p.launch_slots, new, strict=True)}, now)
        job.node_ids = [n.id for n in reused] + [n.id for n in new]
        job.market, job.zone = market, (new[0].zone if new else reused[0].zone)
        job.attempts += 1
        job.billed_at = job.accounted_at = now
        if job.kind is JobKind.SPOT:
            self._w.count("spot_placements_total")
        self._decide(job, p.policy, "place", f"{len(new)} new + {len(reused)} reused "
                     f"{offer.accelerator} nodes, {market.value} in {job.zone}"
                     + (f", evicting {', '.join(p.victims)}" if p.victims else ""), now, job.zone)
        self._move(job, JobState.STARTING, f"placed on {len(job.node_ids)} {market.value} "
                   f"node(s) in {job.zone}", now)

    def _launch(self, job: Job, offer: Offer, market: Market, count: int,
                now: float) -> list[Node]:
        intent = Intent(id=new_id("launch"), kind="launch", created_at=now, payload={})
        nodes = [Node(id=new_id("node"), provider=self.fleet.name, cloud=offer.cloud,
                      zone=offer.zone, instance_type=offer.instance_type,
                      accelerator=offer.accelerator, accelerator_count=offer.accelerator_count,
                      market=market,
                      price_per_hour=offer.spot_price if market is Market.SPOT
                      else offer.on_demand_price,
                      on_demand_price_per_hour=offer.on_demand_price, intent_id=intent.id,
                      job_id=job.id, tenant_id=job.tenant_id, requested_at=now)
                 for _ in range(count)]
        intent.payload = {"zone": offer.zone, "instance_type": offer.instance_type,
                          "market": market.value, "count": count, "job_id": job.id,
                          "node_ids": [n.id for n in nodes]}
        for n in nodes:
            self.nodes[n.id] = n
            self._w.nodes[n.id] = n
        req = LaunchRequest(intent.id, offer.zone, offer.instance_type, FleetMarket(market.value),
                            count, {"job_id": job.id, "tenant_id": job.tenant_id})
        self._w.intents.append(intent)
        self._w.launches.append((intent, req, [n.id for n in nodes]))
        return nodes

    def _terminate(self, node: Node, now: float, cause: str) -> None:
        if node.gone or node.state is NodeState.TERMINATING:
            return
        if node.idle_since is not None and node.job_id is None:
            self._w.count("idle_cost_dollars",
                          node.price_per_hour * max(0.0, now - node.idle_since) / HOUR)
        node.state = NodeState.TERMINATING
        node.ended_at = now
        self._node_event(node, cause, now)
        if node.instance_id is None:
            return  # its launch intent is still pending; the launch step cancels it
        intent = Intent(id=new_id("term"), kind="terminate", created_at=now,
                        payload={"instance_ids": [node.instance_id], "node_ids": [node.id]})
        self._w.intents.append(intent)
        self._w.terminations.append((intent, [node.instance_id]))

    def _reap_idle(self, now: float) -> None:
        for n in list(self.nodes.values()):
            if n.job_id is not None or n.state not in BUSY_STATES or n.state is NodeState.TERMINATING:
                continue
            idle = n.idle_since if n.idle_since is not None else now
            if n.state is not NodeState.READY or now - idle >= self.settings.idle_node_seconds:
                self._terminate(n, now, "idle")

    def _account_demand(self, now: float) -> None:
        """GPU-hours demanded per tenant this tick (hp vs spot), the forecaster's input."""
        dt = self.settings.tick_seconds / HOUR
        demand: dict[str, tuple[float, float]] = {}
        for j in self.jobs.values():
            if j.terminal:
                continue
            hp, sp = demand.get(j.tenant_id, (0.0, 0.0))
            if j.kind is JobKind.HP:
                hp += j.gpus * dt
            else:
                sp += j.gpus * dt
            demand[j.tenant_id] = (hp, sp)
        self._demand = demand

    # -- 6. persist and act --------------------------------------------------------------------
    def _persist(self, now: float, barrier: bool = False, flush: bool = False) -> None:
        w = self._w
        demand = getattr(self, "_demand", None) if barrier else None
        jobs = dict(w.jobs)
        if not barrier:
            k = max(1, self.settings.persist_progress_every)
            for job_id, job in w.progress.items():
                if flush or (zlib.crc32(job_id.encode()) + self.ticks) % k == 0:
                    jobs.setdefault(job_id, job)
            w.progress = {}
        self.store.commit(jobs=list(jobs.values()), nodes=list(w.nodes.values()),
                          events=w.events, decisions=w.decisions, intents=w.intents,
                          control_time=now, counters=w.counters, demand=demand, demand_at=now,
                          epoch=self.epoch)
        w.jobs, w.nodes, w.events, w.decisions, w.intents, w.counters = {}, {}, [], [], [], {}

    def flush(self) -> None:
        """Write every active job's progress and cost now (before a clean stop)."""
        for job in self.jobs.values():
            self._w.progress[job.id] = job
        self._persist(self.clock.now(), flush=True)

    def _act(self, now: float) -> None:
        w = self._w
        for intent, ids in w.terminations:
            try:
                self.fleet.terminate(ids)
                intent.status, intent.done_at = INTENT_DONE, now
            except CloudError as exc:
                log.warning("terminate %s failed: %s (retried next start)", ids, exc)
                continue
            w.intents.append(intent)
            if w.report is not None:
                w.report.terminated += len(ids)
        for intent, req, node_ids in w.launches:
            self._do_launch(intent, req, node_ids, now)
        w.launches, w.terminations = [], []

    def _do_launch(self, intent: Intent, req: LaunchRequest, node_ids: list[str],
                   now: float) -> None:
        w = self._w
        nodes = [self.nodes[i] for i in node_ids if i in self.nodes]
        job = self.jobs.get(req.tags.get("job_id", ""))
        try:
            insts = self.fleet.launch(req)
        except CapacityUnavailable as exc:
            intent.status, intent.done_at = INTENT_FAILED, now
            w.intents.append(intent)
            self.refused[req.zone] = now
            w.count("launches_refused_total")
            for n in nodes:
                n.state, n.ended_at = NodeState.FAILED, now
                self._node_event(n, str(exc), now)
            if job is not None and job.state is JobState.STARTING and any(
                    i in job.node_ids for i in node_ids):
                self._preempt(job, now, nodes, f"launch refused: {exc.reason} ({req.zone})")
            return
        intent.status, intent.done_at = INTENT_DONE, now
        w.intents.append(intent)
        w.count("nodes_launched_total", len(insts))
        if w.report is not None:
            w.report.launched += len(insts)
        for n, inst in zip(nodes, insts, strict=False):
            n.instance_id = inst.instance_id
            n.launched_at = inst.launched_at
            self.by_instance[inst.instance_id] = n.id
            if n.state is NodeState.REQUESTED:
                n.state = NodeState.PROVISIONING
                self._node_event(n, f"launched {inst.instance_id} ({req.market.value})", now)
            elif n.state is NodeState.TERMINATING:  # released before its launch was confirmed
                self.fleet.terminate([inst.instance_id])
                self._node_event(n, f"terminated {inst.instance_id} (released before launch)", now)
            w.nodes[n.id] = n
