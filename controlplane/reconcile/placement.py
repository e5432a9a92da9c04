"""Step 5 of the reconcile loop: place queued jobs, reap idle nodes, account demand.

Queued jobs (HP, then deadline, then spot; within each, in the scheduler's queue order, for GFS
Sec. 3.4.2's fewest GPUs per worker, then fewest nodes, then oldest) are placed by the scheduler on
per-accelerator pool snapshots with the spot quota and tenant GPU limits; HP (and deadline) jobs
evict spot jobs when the pool is full. A crowded tick (more queued jobs than
``max_placements_per_tick``) visits tenants round-robin, the least served first, and blocks
head-of-line per shape: once a job of a (pool, kind, market, shape) does not fit, later jobs of
that shape are not tried this tick. Idle nodes are then terminated, and per-tenant demand is
accounted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence

from clusters.fleet import Offer
from controlplane.core import counters
from controlplane.core.models import Job, JobKind, JobState, Market, NodeState
from controlplane.core.units import HOUR
from controlplane.reconcile.budgets import SpendGuard
from controlplane.reconcile.contracts import ControllerSettings, JobExecutor, QuotaSource
from controlplane.reconcile.fairshare import FairShare, Reclaimer
from controlplane.reconcile.nodeops import NodeOps, PreemptionReason
from controlplane.reconcile.pool import BUSY_STATES, PlacementPlan, Pool, plan, pools_of
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.spares import HotSpares
from controlplane.reconcile.state import WITH_NODES, LoopState
from controlplane.store import Store
from policies.placement import FrameworkScheduler, queue_key
from policies.zones import open_offers, rank_offers

_KIND_ORDER = {JobKind.HP: 0, JobKind.DEADLINE: 1, JobKind.SPOT: 2}

Demand = dict[str, tuple[float, float]]  # tenant id -> (HP, spot) GPU-hours this tick


class StoreQuota:
    """The spot quota per accelerator from the store, re-read every tenth tick."""

    def __init__(self, store: Store, state: LoopState) -> None:
        self.store, self.state = store, state

    def __call__(self, accelerator: str) -> float | None:
        s = self.state
        if s.ticks % 10 == 0 or accelerator not in s.caches.quotas:
            s.caches.quotas = {q.accelerator: float(q.spot_quota_gpus) for q in self.store.quotas()}
        return s.caches.quotas.get(accelerator)


class Place:
    """Queued jobs onto pools: a plan per job, then its launches, reuses and evictions."""

    def __init__(self, scheduler: FrameworkScheduler, quota: QuotaSource, settings: ControllerSettings,
                 state: LoopState, rec: Recorder, ops: NodeOps,
                 fair: FairShare | None = None, executor: JobExecutor | None = None,
                 budgets: SpendGuard | None = None) -> None:
        self.scheduler, self.quota, self.settings = scheduler, quota, settings
        self.state, self.rec, self.ops = state, rec, ops
        self.fair = fair  # fair share with borrowing and reclaim (None: GFS's rules alone)
        self.reclaimer = None if fair is None else Reclaimer(fair, state, rec, ops, executor,
                                                            settings.tick_seconds)
        self.budgets = budgets
        self._crowded = False
        self._waiting: dict[str, str] = {}  # job id -> why its replacement replicas wait

    def run(self, now: float) -> None:
        s = self.state
        queued = [j for j in s.jobs.values() if j.state is JobState.QUEUED]
        owed = [j for j in s.jobs.values() if replicas_owed(j) > 0]
        self._waiting = {k: v for k, v in self._waiting.items() if k in s.jobs}
        pools: dict[str, Pool] = {}
        draining = self.reclaimer is not None and bool(self.reclaimer.draining)
        if self.fair is not None and (queued or draining or self.fair.due()):
            pools = self._pools()
            self.fair.refresh(pools, now)
            if self.reclaimer is not None:
                self.reclaimer.finish(pools, now)
            if self.fair.due():
                self.fair.publish(now)
        if not queued and not owed:
            return
        pools = pools or self._pools()
        for job in owed:
            try:
                self.replace(job, pools, now)
            except Exception as exc:  # noqa: BLE001 - one job must not stop the tick
                self.ops.quarantine_job(job, now, f"replacing its replicas raised {exc!r}")
        if queued:
            self._place_queued(queued, pools, now)

    def offers(self, job: Job, market: Market, now: float) -> list[Offer]:
        """The job's offers in ``market`` in the zones that take new work, in launch order
        (:func:`policies.zones.rank_offers`; a deadline job's policy may have chosen the zone)."""
        chosen = job.policy_zone if job.kind is JobKind.DEADLINE else None
        return rank_offers(self.state.open_offers_for(job), market, self.state.fleet.zone_evidence(),
                           self.settings.zone_rule(), now, chosen_zone=chosen)

    def replace(self, job: Job, pools: dict[str, Pool], now: float) -> None:
        """Launch the nodes a replicated job lost while a replica survived, in its market's best
        zone (on-demand where no spot zone is open), under the pool's capacity and the spot
        quota; it waits otherwise. Its GPUs never left its tenant's count."""
        owed = replicas_owed(job)
        market = job.market or Market.SPOT
        offers = self.offers(job, market, now)
        if not offers:
            market, offers = Market.ON_DEMAND, self.offers(job, Market.ON_DEMAND, now)
        if not offers:
            self._replacement_waits(job, f"no zone for {owed} replacement replica node(s)", now)
            return
        best = offers[0]
        pool = pools.setdefault(best.accelerator, Pool(best.accelerator,
                                                       self._capacity_of(best.accelerator)))
        why = pool.no_room_for(owed, spot=job.kind is JobKind.SPOT, jobs=self.state.jobs, now=now)
        if why:
            self._replacement_waits(job, why, now)
            return
        self._waiting.pop(job.id, None)
        new = self.ops.launch(job, best, market, owed, now)
        for n in new:
            n.replacement = True
        pool.add(new)
        job.node_ids += [n.id for n in new]
        self.rec.decide(job, "replication", "replace", f"{len(new)} replacement {market.value} "
                        f"node(s) in {best.zone}", now, best.zone)

    def _replacement_waits(self, job: Job, why: str, now: float) -> None:
        """A running job's replacements wait: one decision each time the reason changes."""
        if self._waiting.get(job.id) != why:
            self._waiting[job.id] = why
            self.rec.decide(job, "replication", "wait", f"replacement replicas: {why}", now)

    def _pools(self) -> dict[str, Pool]:
        """This tick's pools, each with its spot quota in nodes."""
        s = self.state
        pools = pools_of(list(s.nodes.values()), self._capacity(), s.fleet.closed)
        for acc, pool in pools.items():
            q = self.quota(acc)
            per_node = max((o.accelerator_count for o in open_offers(s.offers, s.fleet.closed)
                            if o.accelerator == acc), default=1)
            pool.spot_quota_nodes = None if q is None else q / per_node
        return pools

    def _place_queued(self, queued: list[Job], pools: dict[str, Pool], now: float) -> None:
        """The queued jobs in order (round-robin over tenants when crowded), one plan each."""
        cap = self.settings.max_placements_per_tick
        crowded = self._crowded = len(queued) > cap
        if crowded:
            queued = _placeable(queued, pools)
        order = self.scheduler.queue.order
        queue = sorted(queued, key=lambda j: (_KIND_ORDER[j.kind], *queue_key(
            order, j.kind is JobKind.HP, j.spec.gpus_per_worker, j.nodes_needed, j.submitted_at)))
        tenant_gpus = self._tenant_gpus()
        blocked: set[tuple[object, ...]] = set()  # shapes (and tenants' shapes) that did not fit
        tried = 0
        for job in (round_robin(queue, tenant_gpus) if crowded else queue):
            if tried >= cap:
                break
            if job.state is not JobState.QUEUED:
                continue  # a victim of an earlier placement this tick
            shape = _shape(job) if crowded else ()
            if crowded and (shape in blocked or (job.tenant_id, *shape) in blocked):
                continue  # head-of-line blocking: one of its shape did not fit this tick
            tried += 1
            try:
                outcome = self._place_one(job, pools, tenant_gpus, now)
            except Exception as exc:  # noqa: BLE001 - one job must not stop the tick
                self.ops.quarantine_job(job, now, f"placing it raised {exc!r}")
                continue
            if crowded and outcome == "room":
                blocked.add(shape)
            elif crowded and outcome == "tenant":
                blocked.add((job.tenant_id, *shape))

    def _place_one(self, job: Job, pools: dict[str, Pool], tenant_gpus: dict[str, int],
                   now: float) -> str:
        """Place one queued job (or say why it waits): "placed", or why not: "room" (no zone or
        no room for its shape), "tenant" (its tenant's GPU limit), "other"."""
        s = self.state
        if job.tenant_id in s.admission.bad_tenants:
            self._wait(job, "its tenant's stored row does not load (quarantined)", now)
            return "tenant"
        if not s.offers_for(job):
            self.rec.move(job, JobState.FAILED, self._unplaceable(job), now)
            return "other"
        market = _market(job)
        if market is None:
            return "other"
        offers = self.offers(job, market, now)
        if not offers:
            self._wait(job, f"no {market.value} zone for {job.spec.accelerator or 'any GPU'}",
                       now)
            return "room"
        tenant = s.tenants.get(job.tenant_id)
        if tenant is not None and tenant_gpus.get(tenant.id, 0) + job.gpus > tenant.max_gpus:
            self._wait(job, f"tenant limit: {tenant.max_gpus} GPUs", now)
            return "tenant"
        best = offers[0]
        why_not = self.budgets.why_wait(job, best, market, now) if self.budgets else None
        if why_not is not None:
            self._wait(job, why_not, now)
            return "tenant"
        pool = pools.setdefault(best.accelerator, Pool(best.accelerator,
                                                       self._capacity_of(best.accelerator)))
        full = (self._crowded and job.kind is JobKind.SPOT
                and pool.free_cards() < job.nodes_needed)  # a spot job evicts no one
        why = self.fair.gate(job, best.accelerator) if self.fair is not None else ""
        if why:
            self._wait(job, why, now)
            return "tenant"
        p = None if full else plan(self.scheduler, pool, s.jobs, job, market,
                                   [o.zone for o in offers], s.nodes, now)
        if p is None and self.reclaimer is not None and self.reclaimer.start(job, pool, now):
            p = plan(self.scheduler, pool, s.jobs, job, market, [o.zone for o in offers],
                     s.nodes, now)
        if p is None:
            self._wait(job, f"no room in the {best.accelerator} pool "
                       f"({len(pool.nodes)}/{pool.capacity} nodes"
                       + (f", spot quota {pool.spot_quota_nodes:.1f} nodes)"
                          if pool.spot_quota_nodes is not None else ")"), now)
            return "room"
        self._apply_plan(job, p, best, market, pool, now)
        if self.budgets is not None:
            self.budgets.placed(job, best, market)
        tenant_gpus[job.tenant_id] = tenant_gpus.get(job.tenant_id, 0) + job.gpus
        if self.fair is not None:
            self.fair.took(job, best.accelerator)
        return "placed"

    def _unplaceable(self, job: Job) -> str:
        shapes = sorted({f"{o.accelerator}x{o.accelerator_count}" for o in self.state.offers})
        return (f"no zone offers {job.spec.accelerator or 'a GPU'} with "
                f"{job.spec.gpus_per_worker} GPUs per worker; the fleet has {', '.join(shapes)}")

    def _capacity_of(self, acc: str) -> int:
        return self.settings.pool_nodes.get(acc, self.settings.default_pool_nodes)

    def _capacity(self) -> dict[str, int]:
        return {o.accelerator: self._capacity_of(o.accelerator) for o in self.state.offers}

    def _tenant_gpus(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for j in self.state.jobs.values():
            if j.state in WITH_NODES:
                out[j.tenant_id] = out.get(j.tenant_id, 0) + j.gpus
        return out

    def _wait(self, job: Job, why: str, now: float) -> None:
        if job.message != f"waiting: {why}":
            job.message = f"waiting: {why}"
            self.rec.decide(job, "placement", "wait", why, now)

    def _apply_plan(self, job: Job, p: PlacementPlan, offer: Offer, market: Market, pool: Pool,
                    now: float) -> None:
        s, w, rec, ops = self.state, self.state.work, self.rec, self.ops
        for victim_id in p.victims:
            victim = s.jobs.get(victim_id)
            if victim is None or victim.state not in WITH_NODES:
                continue
            if victim.state in (JobState.RUNNING, JobState.CHECKPOINTING):
                rec.progress(victim, now)
            rec.bill(victim, now)
            if victim.terminal:
                ops.release(victim, now, "job finished", keep=True)
                continue
            cause = f"preempted by {job.kind.value} job {job.id} (placement {p.policy})"
            w.count("hp_evictions_total")
            counters.count(w.counters, "evictions_total", cause=f"{job.kind.value}_placement",
                          **counters.job_where(victim, s.nodes))
            rec.decide(victim, p.policy, "preempt", cause, now)
            ops.preempt(victim, now, [], cause, PreemptionReason.EVICTION)
        for node_id in p.replace:
            ops.terminate(s.nodes[node_id], now, f"replaced for job {job.id}")
        reused = [s.nodes[i] for i in p.reuse]
        for n in reused:
            rec.billing.charge(job, "spares", ops.end_idle(n, now), now)
            n.job_id, n.tenant_id, n.idle_since = job.id, job.tenant_id, None
        new = ops.launch(job, offer, market, p.launch, now) if p.launch else []
        pool.nodes.extend(new)
        pool.commit(p, job, {i: n.id for i, n in zip(p.launch_slots, new, strict=True)}, now)
        job.node_ids = [n.id for n in reused] + [n.id for n in new]
        job.market, job.zone = market, (new[0].zone if new else reused[0].zone)
        job.attempts += 1
        counters.count(w.counters, "placements_total", kind=job.kind.value,
                      **counters.job_where(job, s.nodes))
        job.billed_at = job.accounted_at = now
        if job.kind is JobKind.SPOT:
            w.count("spot_placements_total")
        rec.decide(job, p.policy, "place", f"{len(new)} new + {len(reused)} reused "
                   f"{offer.accelerator} nodes, {market.value} in {job.zone}"
                   + (f", evicting {', '.join(p.victims)}" if p.victims else ""), now, job.zone)
        rec.move(job, JobState.STARTING, f"placed on {len(job.node_ids)} {market.value} "
                 f"node(s) in {job.zone}", now)


def replicas_owed(job: Job) -> int:
    """Nodes a running replicated job lost and still waits to have replaced."""
    if job.spec.replicas <= 1 or job.state not in (JobState.RUNNING, JobState.CHECKPOINTING):
        return 0
    return max(0, job.nodes_needed - len(job.node_ids))


def _placeable(queued: list[Job], pools: dict[str, Pool]) -> list[Job]:
    """The queued jobs that may fit now: spot jobs of a pool without a free card cannot (they
    evict no one), so a full pool's spot backlog costs one check per job, not a plan."""
    full = {acc.lower() for acc, pool in pools.items() if pool.free_cards() == 0}
    if not full:
        return queued
    spot = JobKind.SPOT
    return [j for j in queued if j.kind is not spot or (acc := j.spec.accelerator) is None
            or acc.lower() not in full]


def _shape(job: Job) -> tuple[object, ...]:
    """What decides whether a job fits: its pool, kind, market, GPUs per node and gang size."""
    return (job.spec.accelerator, job.kind, _market(job), job.spec.gpus_per_worker,
            job.nodes_needed)


def round_robin(queue: Sequence[Job], tenant_gpus: dict[str, int]) -> Iterator[Job]:
    """The queue (sorted by kind, then age) one job per tenant per round within each kind,
    tenants with the fewest GPUs in use first (then the oldest waiting)."""
    by_kind: dict[JobKind, dict[str, deque[Job]]] = {}
    for job in queue:
        by_kind.setdefault(job.kind, {}).setdefault(job.tenant_id, deque()).append(job)
    for kind in sorted(by_kind, key=_KIND_ORDER.__getitem__):
        heads = by_kind[kind]
        turn = sorted(heads, key=lambda t: (tenant_gpus.get(t, 0), heads[t][0].submitted_at, t))
        while turn:
            for t in turn:
                yield heads[t].popleft()
            turn = [t for t in turn if heads[t]]


def _market(job: Job) -> Market | None:
    """HP jobs run on-demand, spot jobs on spot, deadline jobs where their policy says."""
    if job.kind is JobKind.HP:
        return Market.ON_DEMAND
    if job.kind is JobKind.SPOT:
        return Market.SPOT
    if job.policy_action in (None, "idle"):
        return None
    return Market(job.policy_action)


class ReapIdle:
    """Terminates nodes no job holds: at once unless ready, after ``idle_node_seconds`` if so,
    or after ``hot_spare_seconds`` for a hot spare (``controlplane.reconcile.spares``)."""

    def __init__(self, settings: ControllerSettings, state: LoopState, ops: NodeOps,
                 spares: HotSpares | None = None) -> None:
        self.settings, self.state, self.ops = settings, state, ops
        self.spares = spares

    def run(self, now: float) -> None:
        idle_nodes = [n for n in self.state.nodes.values() if n.job_id is None
                      and n.state in BUSY_STATES and n.state is not NodeState.TERMINATING]
        ready = [n for n in idle_nodes if n.state is NodeState.READY]
        spares = self.spares.select(ready, now) if self.spares is not None else set()
        hot = max(self.settings.idle_node_seconds, self.settings.hot_spare_seconds)
        for n in idle_nodes:
            idle = n.idle_since if n.idle_since is not None else now
            keep = hot if n.id in spares else self.settings.idle_node_seconds
            if n.state is not NodeState.READY or now - idle >= keep:
                self.ops.terminate(n, now, "idle" if n.id not in self.state.spares
                                   else f"hot spare idle {(now - idle) / HOUR:.2f} h")


def account_demand(state: LoopState, settings: ControllerSettings) -> Demand:
    """GPU-hours per tenant this tick (hp vs spot), the forecaster's input: gpus x tick_seconds
    / HOUR for every HP job that holds nodes (GFS learns the GPUs running HP holds; a queued HP
    gang is not demand the pool serves yet) and for every active spot job."""
    dt = settings.tick_seconds / HOUR
    demand: Demand = {}
    for j in state.jobs.values():
        if j.terminal or (j.kind is JobKind.HP and j.state not in WITH_NODES):
            continue
        hp, sp = demand.get(j.tenant_id, (0.0, 0.0))
        if j.kind is JobKind.HP:
            hp += j.gpus * dt
        else:
            sp += j.gpus * dt
        demand[j.tenant_id] = (hp, sp)
    return demand
