"""The reconcile loop as a plain class (no Ray): one :meth:`Controller.tick` per control-plane tick.

Each tick works on ONE snapshot: one ``describe()`` and one ``poll_events()`` of the fleet, the
controller's in-memory view of active jobs and live nodes (a
:class:`~controlplane.reconcile.state.LoopState`, loaded from the store at start), and the
store's new submissions and cancel flags. It runs the phases of ``controlplane.reconcile`` in
order, each on that state:

1. ingest new submissions and cancel flags (``reconcile.ingest``),
2. fold fleet state into nodes: ready, notice, preempted, terminated (``reconcile.fleet``),
3. advance jobs: gang up -> RUNNING, progress, checkpoints, preemption -> QUEUED, done
   (``reconcile.jobs``),
4. ask every deadline job's policy (one batch) for spot / on-demand / idle and in which zone
   (``reconcile.policies``),
5. place queued jobs on per-accelerator pool snapshots (spot quota, tenant limits, HP
   preemption of spot jobs), reap idle nodes, account demand (``reconcile.placement``),
6. write every intent (launch, terminate) to the store, then act on the fleet, then persist
   (``reconcile.persist``).

Level-triggered and idempotent: state comes from the store plus the fleet's ``describe()``; a
launch intent still pending after a crash is re-applied with the same intent id (the fleet
returns the instances it already made), so no node is launched twice and no job is lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from clusters.fleet import FleetProvider, Offer
from controlplane.core import counters
from controlplane.core.clock import Clock, ManualClock
from controlplane.core.models import Job, Node, Tenant
from controlplane.reconcile.budgets import SpendGuard
from controlplane.reconcile.contracts import (
    ControllerSettings,
    JobExecutor,
    QuotaSource,
)
from controlplane.reconcile.fairshare import FairShare, StoreShares
from controlplane.reconcile.fleet import SyncFleet
from controlplane.reconcile.ingest import Ingest
from controlplane.reconcile.jobs import AdvanceJobs, ForgetFinished
from controlplane.reconcile.lifetimes import lifetime_models
from controlplane.reconcile.nodeops import NodeOps
from controlplane.reconcile.persist import Act, Persist, resume_intent
from controlplane.reconcile.placement import Place, ReapIdle, StoreQuota, account_demand
from controlplane.reconcile.policies import AskPolicies
from controlplane.reconcile.policyhost import DeadlinePolicyHost, LocalDeadlineHost
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.spares import HotSpares, reuse_plugin
from controlplane.reconcile.state import Caches, LoopState, TickReport, TickWork
from controlplane.store import Store
from policies.placement import FrameworkScheduler
from policies.schedulers import make_scheduler, with_plugin

__all__ = ["Controller"]

log = logging.getLogger(__name__)


class Controller:
    """The reconcile logic; :class:`actors.controller.ControllerActor` calls :meth:`tick`."""

    def __init__(self, store: Store, fleet: FleetProvider, clock: Clock,
                 settings: ControllerSettings | None = None, *,
                 policy_host: DeadlinePolicyHost | None = None,
                 executor: JobExecutor | None = None, quota: QuotaSource | None = None,
                 scheduler: FrameworkScheduler | None = None, epoch: int | None = None) -> None:
        self.store, self.fleet, self.clock = store, fleet, clock
        self.epoch = epoch  # fencing token from Store.take_controller_lease (None: unfenced)
        self.settings = settings = settings or ControllerSettings()
        self.policy_host: DeadlinePolicyHost = (policy_host if policy_host is not None
                                                else LocalDeadlineHost(store))
        self.executor = executor
        self.state = state = LoopState(offers=fleet.offers(), caches=Caches(lifetime_models=lifetime_models(fleet)))
        self.quota: QuotaSource = quota or StoreQuota(store, state)
        reuse = reuse_plugin(settings, state.caches.lifetime_models, settings.provision_hours)
        if scheduler is None:
            scheduler = make_scheduler(settings.scheduler, seed=settings.seed)
        self.scheduler = scheduler = with_plugin(scheduler, filter=reuse, score=reuse)
        self.after_barrier: Callable[[int], None] | None = None  # fault injection (tests)
        self._recovered = False
        self._metrics_carry: dict[str, float] = {}  # phase timings, committed next tick
        self._tx_seen: counters.Buckets | None = None  # store latency already recorded
        rec = Recorder(state, fleet, executor)
        ops = NodeOps(state, rec, fleet, settings, executor)
        self.ingest = Ingest(store, state, rec, ops, settings)
        self.sync_fleet = SyncFleet(fleet, store, settings, state, rec, ops)
        self.advance_jobs = AdvanceJobs(state, rec, ops, executor, clock)
        self.policies = AskPolicies(self.policy_host, settings, state, rec, ops)
        self.spend_guard = SpendGuard(store, state, rec, ops)
        fair = (FairShare(StoreShares(store, state), state, store, settings.zones_every_ticks)
                if settings.fair_share else None)
        self.place = Place(scheduler, self.quota, settings, state, rec, ops, fair, executor,
                           self.spend_guard)
        self.reap_idle = ReapIdle(settings, state, ops, HotSpares(settings, state, reuse))
        self.persist = Persist(store, settings, state, epoch)
        self.act = Act(fleet, store, state, rec, ops)
        self.forget_finished = ForgetFinished(store, self.policy_host, state)
        self._ops = ops

    # -- the loop's state, by its old names ------------------------------------------------------
    @property
    def jobs(self) -> dict[str, Job]:
        return self.state.jobs

    @property
    def nodes(self) -> dict[str, Node]:
        return self.state.nodes

    @property
    def by_instance(self) -> dict[str, str]:
        return self.state.by_instance

    @property
    def tenants(self) -> dict[str, Tenant]:
        return self.state.tenants

    @property
    def offers(self) -> list[Offer]:
        return self.state.offers

    @property
    def availability(self) -> dict[str, bool]:
        return self.state.fleet.availability

    @property
    def zone_preemptions(self) -> dict[str, list[float]]:
        return self.state.fleet.zone_preemptions

    @property
    def refused(self) -> dict[str, float]:
        return self.state.fleet.refused

    @property
    def ticks(self) -> int:
        return self.state.ticks

    # -- start / restart -----------------------------------------------------------------------
    def recover(self) -> None:
        """Load the active state from the store and re-apply intents a crash left pending.

        Jobs past the queue are loaded here, and one batch of the queued ones; the rest are
        re-read by ``Ingest`` in bounded batches, so the first tick does not wait for the backlog.
        A row that does not load is quarantined (``NodeOps.quarantine_rows``), never fatal.
        """
        set_time = self.clock.set if isinstance(self.clock, ManualClock) else None
        if set_time is not None:
            set_time(self.store.control_time())
        now = self.clock.now()
        s = self.state
        w = s.work = TickWork()
        nodes, bad_nodes = self.store.load_nodes(live_only=True)
        jobs, bad_jobs = self.store.load_placed_jobs()  # queued ones: re-read by Ingest
        s.nodes = {n.id: n for n in nodes}
        s.by_instance = {n.instance_id: n.id for n in s.nodes.values() if n.instance_id}
        s.jobs = {j.id: j for j in jobs}
        s.admission.parked = dict.fromkeys(self.store.tenant_ids(), 0)
        self.ingest.load_tenants(now)
        self.ingest.readmit(now)  # one batch; the rest in later ticks
        self._ops.quarantine_rows([*bad_nodes, *bad_jobs], now)
        for intent in self.store.pending_intents():
            resume_intent(w, intent, now)
        if w.launches or w.terminations:
            log.warning("recovering %d launch and %d terminate intents", len(w.launches),
                        len(w.terminations))
        self.act.run(now)
        self.persist.results(now)
        self._recovered = True

    def external_notice(self, instance_id: str, seconds_left: float) -> None:
        """A node agent saw a preemption notice; it is folded in at the next tick."""
        self.sync_fleet.external_notice(instance_id, seconds_left)

    def flush(self) -> None:
        """Write every active job's progress and cost now (before a clean stop)."""
        self.persist.results(self.clock.now(), flush=True)

    # -- the tick ------------------------------------------------------------------------------
    def tick(self) -> TickReport:
        if not self._recovered:
            self.recover()
        t0 = time.perf_counter()
        now = self.clock.now()
        w = self.state.work = TickWork()
        self._carry_metrics(w)
        w.report = TickReport(at=now, ms=0.0, jobs=0, nodes=0)
        with self._phase("ingest"):  # 1. submissions and cancel flags
            self.ingest.run(now)
        with self._phase("sync_fleet"):  # 2. the fleet's state into nodes
            self.sync_fleet.run(now)
        with self._phase("advance_jobs"):  # 3. jobs on their nodes
            self.advance_jobs.run(now)
        with self._phase("budgets"):  # 3b. budgets: lines crossed, stops at checkpoints
            self.spend_guard.run(now)
        with self._phase("policies"):  # 4. deadline policies, one batch
            self.policies.run(now)
        with self._phase("place"):  # 5. queued jobs onto pools, idle nodes, demand
            self.place.run(now)
        with self._phase("reap_idle"):
            self.reap_idle.run(now)
        demand = account_demand(self.state, self.settings)
        with self._phase("persist_intents"):  # 6. persist intents -> act -> persist
            self.persist.intents(now, demand)  # every intent is durable before we act
        if self.after_barrier is not None:
            self.after_barrier(len(w.launches))
        with self._phase("act"):
            self.act.run(now)
        with self._phase("persist"):
            self.persist.results(now)
        self.forget_finished.run()
        self.state.ticks += 1
        counters.observe(self._metrics_carry, "reconcile_tick_duration_seconds",
                        time.perf_counter() - t0, phase="total")
        w.report.ms = (time.perf_counter() - t0) * 1000
        w.report.jobs, w.report.nodes = len(self.state.jobs), len(self.state.nodes)
        return w.report

    # -- metrics (committed with the next tick's work) ------------------------------------------
    @contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            counters.observe(self._metrics_carry, "reconcile_tick_duration_seconds",
                            time.perf_counter() - t0, phase=name)

    def _carry_metrics(self, w: TickWork) -> None:
        """Last tick's phase timings and the store's transactions since, into this tick."""
        for key, value in self._metrics_carry.items():
            w.counters[key] = w.counters.get(key, 0.0) + value
        self._metrics_carry = {}
        tx = self.store.tx_histogram()
        tx.since(self._tx_seen).record(w.counters, "store_transaction_seconds")
        self._tx_seen = tx
