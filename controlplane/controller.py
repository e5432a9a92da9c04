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

This module holds the public types, start/recover, the tick, the recording helpers and the
submissions; ``Controller`` gets every later section from one mixin module each:
``reconcile_fleet`` (fleet state), ``reconcile_jobs`` (jobs), ``reconcile_policies`` (deadline
policies), ``reconcile_placement`` (placement) and ``reconcile_persist`` (persist and act);
``reconcile_base`` declares the state they share.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from clusters.fleet import FleetProvider, LaunchRequest, Offer
from clusters.fleet import Market as FleetMarket
from controlplane import metrics
from controlplane.clock import Clock, ManualClock
from controlplane.models import (
    HOUR,
    Decision,
    Event,
    Job,
    JobKind,
    JobState,
    Node,
    NodeState,
    Tenant,
    check_transition,
    new_id,
)
from controlplane.policyhost import DeadlinePolicyHost, LocalDeadlineHost
from controlplane.reconcile_base import TickWork
from controlplane.reconcile_fleet import FleetMixin
from controlplane.reconcile_jobs import JobsMixin
from controlplane.reconcile_persist import PersistMixin
from controlplane.reconcile_placement import PlacementMixin
from controlplane.reconcile_policies import PoliciesMixin
from controlplane.store import INTENT_FAILED, BadRow, Intent, Store

log = logging.getLogger(__name__)


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
    checkpoint_bytes: int = 0  # the job's checkpoints so far, in bytes (cumulative)
    restore_fallbacks: int = 0  # the job's restores that skipped a bad checkpoint (cumulative)


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


class Controller(FleetMixin, JobsMixin, PoliciesMixin, PlacementMixin, PersistMixin):
    """The reconcile logic; :class:`actors.controller.ControllerActor` calls :meth:`tick`."""

    def __init__(self, store: Store, fleet: FleetProvider, clock: Clock,
                 settings: ControllerSettings | None = None, *,
                 policy_host: DeadlinePolicyHost | None = None,
                 executor: JobExecutor | None = None, quota: QuotaSource | None = None,
                 scheduler: Any = None, epoch: int | None = None) -> None:
        self.store, self.fleet, self.clock = store, fleet, clock
        self.epoch = epoch  # fencing token from Store.take_controller_lease (None: unfenced)
        self.settings = settings or ControllerSettings()
        self.policy_host: DeadlinePolicyHost = (policy_host if policy_host is not None
                                                else LocalDeadlineHost(store))
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
        self._w = TickWork()
        self.after_barrier: Callable[[int], None] | None = None  # fault injection (tests)
        self._external: dict[str, float] = {}  # instance id -> seconds left (node agents)
        self._metrics_carry: dict[str, float] = {}  # phase timings, committed next tick
        self._tx_seen: metrics.Buckets | None = None  # store latency already recorded
        self._quarantined: set[tuple[str, str]] = set()
        self._bad_tenants: set[str] = set()

    # -- start / restart -----------------------------------------------------------------------
    def recover(self) -> None:
        """Load the active state from the store and re-apply intents a crash left pending.

        A row that does not load is quarantined (:meth:`_quarantine_rows`), never fatal.
        """
        set_time = self.clock.set if isinstance(self.clock, ManualClock) else None
        if set_time is not None:
            set_time(self.store.control_time())
        now = self.clock.now()
        w = self._w = TickWork()
        nodes, bad_nodes = self.store.load_nodes(live_only=True)
        jobs, bad_jobs = self.store.load_active_jobs()
        self.nodes = {n.id: n for n in nodes}
        self.by_instance = {n.instance_id: n.id for n in self.nodes.values() if n.instance_id}
        self.jobs = {j.id: j for j in jobs if j.state is not JobState.PENDING}
        self._load_tenants(now)
        self._quarantine_rows([*bad_nodes, *bad_jobs], now)
        for intent in self.store.pending_intents():
            self._resume_intent(intent, now)
        if w.launches or w.terminations:
            log.warning("recovering %d launch and %d terminate intents", len(w.launches),
                        len(w.terminations))
        self._act(now)
        self._persist(now)
        self._recovered = True

    def _resume_intent(self, intent: Intent, now: float) -> None:
        """Queue a pending intent for re-application (one that cannot be read is failed)."""
        w, p = self._w, intent.payload
        try:
            if intent.kind == "launch":
                req = LaunchRequest(intent.id, p["zone"], p["instance_type"],
                                    FleetMarket(p["market"]), int(p["count"]),
                                    {"job_id": p["job_id"]})
                w.launches.append((intent, req, [str(i) for i in p["node_ids"]]))
            elif intent.kind == "terminate":
                w.terminations.append((intent, [str(i) for i in p["instance_ids"]]))
        except (KeyError, TypeError, ValueError) as exc:
            log.error("pending intent %s does not load (%r): marked failed", intent.id, exc)
            intent.status, intent.done_at = INTENT_FAILED, now
            w.intents.append(intent)

    def _load_tenants(self, now: float) -> None:
        tenants, bad = self.store.load_tenants()
        self.tenants = {t.id: t for t in tenants}
        self._bad_tenants = {b.id for b in bad}
        self._quarantine_rows(bad, now)

    # -- quarantine: a row or job the loop cannot handle is set aside, the tick goes on -----------
    def _quarantine_rows(self, rows: Sequence[BadRow], now: float) -> None:
        """Set aside stored rows that do not load: a job is FAILED (its nodes terminated), a
        node is marked FAILED (its instance terminated), a tenant's jobs are no longer placed;
        each with an event naming the reason, recorded once in the store's quarantine table."""
        for bad in rows:
            if (bad.table, bad.id) in self._quarantined:
                continue
            self._quarantined.add((bad.table, bad.id))
            log.error("quarantined stored %s", bad.describe())
            self._w.quarantine.append(bad)
            self._w.count("rows_quarantined_total")
            cause = f"quarantined: the stored {bad.table[:-1]} {bad.reason}"
            if bad.table == "jobs":
                self._w.events.append(Event(at=now, tenant_id=bad.tenant_id, job_id=bad.id,
                                            kind="transition", src=bad.state,
                                            dst=JobState.FAILED.value, cause=cause))
                self._w.count("jobs_failed_total")
                for n in [n for n in self.nodes.values() if n.job_id == bad.id]:
                    n.job_id = n.tenant_id = None
                    self._terminate(n, now, f"job {bad.id} quarantined")
            elif bad.table == "nodes":
                self._w.events.append(Event(at=now, job_id=bad.job_id, node_id=bad.id, kind="node",
                                            src=bad.state, dst=NodeState.FAILED.value, cause=cause))
                self._terminate_instance_of(bad, now)
            else:
                self._w.events.append(Event(at=now, tenant_id=bad.id, kind="tenant",
                                            cause=cause + "; its jobs are not placed"))

    def _terminate_instance_of(self, bad: BadRow, now: float) -> None:
        """Terminate the instance an unloadable node row names, if its body still names one."""
        try:
            instance_id = json.loads(bad.body or "").get("instance_id")
        except (ValueError, AttributeError):
            instance_id = None
        if not isinstance(instance_id, str) or not instance_id:
            return
        intent = Intent(id=new_id("term"), kind="terminate", created_at=now,
                        payload={"instance_ids": [instance_id], "node_ids": [bad.id]})
        self._w.intents.append(intent)
        self._w.terminations.append((intent, [instance_id]))

    def _quarantine_job(self, job: Job, now: float, reason: str) -> None:
        """Fail one job the loop could not handle (a policy or a step raised on it); its nodes
        are released and the reason is its FAILED event, so the tick goes on for the others."""
        log.error("quarantined job %s: %s", job.id, reason)
        self._quarantined.add(("jobs", job.id))
        self._w.quarantine.append(BadRow("jobs", job.id, reason, state=job.state.value,
                                         tenant_id=job.tenant_id))
        self._w.count("rows_quarantined_total")
        try:
            self._release(job, now, f"job {job.id} quarantined", keep=False)
        except Exception:  # noqa: BLE001 - the job fails either way
            log.exception("releasing quarantined job %s", job.id)
        if not job.terminal:
            self._move(job, JobState.FAILED, f"quarantined: {reason}", now)

    # -- the tick ------------------------------------------------------------------------------
    def tick(self) -> TickReport:
        if not self._recovered:
            self.recover()
        t0 = time.perf_counter()
        now = self.clock.now()
        self._w = w = TickWork()
        self._carry_metrics(w)
        w.report = TickReport(at=now, ms=0.0, jobs=0, nodes=0)
        with self._phase("ingest"):
            self._ingest(now)
        with self._phase("sync_fleet"):
            self._sync_fleet(now)
        with self._phase("advance_jobs"):
            self._advance_jobs(now)
        with self._phase("policies"):
            self._ask_policies(now)
        with self._phase("place"):
            self._place(now)
        with self._phase("reap_idle"):
            self._reap_idle(now)
        self._account_demand(now)
        with self._phase("persist_intents"):
            self._persist(now, barrier=True)  # every intent is durable before we act
        if self.after_barrier is not None:
            self.after_barrier(len(w.launches))
        with self._phase("act"):
            self._act(now)
        with self._phase("persist"):
            self._persist(now)
        self._forget_finished()
        self.ticks += 1
        metrics.observe(self._metrics_carry, "reconcile_tick_duration_seconds",
                        time.perf_counter() - t0, phase="total")
        w.report.ms = (time.perf_counter() - t0) * 1000
        w.report.jobs, w.report.nodes = len(self.jobs), len(self.nodes)
        return w.report

    # -- metrics (committed with the next tick's work) ------------------------------------------
    @contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            metrics.observe(self._metrics_carry, "reconcile_tick_duration_seconds",
                            time.perf_counter() - t0, phase=name)

    def _carry_metrics(self, w: TickWork) -> None:
        """Last tick's phase timings and the store's transactions since, into this tick."""
        for key, value in self._metrics_carry.items():
            w.counters[key] = w.counters.get(key, 0.0) + value
        self._metrics_carry = {}
        tx = self.store.tx_histogram()
        tx.since(self._tx_seen).record(w.counters, "store_transaction_seconds")
        self._tx_seen = tx

    # -- helpers that record -------------------------------------------------------------------
    def _move(self, job: Job, dst: JobState, cause: str, at: float) -> None:
        check_transition(job.id, job.state, dst)
        self._count_transition(job, dst, at)
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

    def _count_transition(self, job: Job, dst: JobState, at: float) -> None:
        c = self._w.counters
        if job.state is JobState.CHECKPOINTING and dst is JobState.RUNNING:
            metrics.count(c, "checkpoint_writes_total", source="simulated")
            metrics.observe(c, "checkpoint_duration_seconds", job.spec.checkpoint_hours * HOUR)
        if dst is JobState.SUCCEEDED and job.kind is JobKind.DEADLINE and job.deadline_at:
            slack = job.deadline_at - (job.finished_at if job.finished_at is not None else at)
            if slack >= 0:
                metrics.observe(c, "deadline_slack_at_finish_seconds", slack)
            else:
                metrics.count(c, "deadline_misses_total")
                metrics.observe(c, "deadline_lateness_seconds", -slack)

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
        jobs, bad = self.store.load_new_jobs(set(self.jobs))
        self._quarantine_rows(bad, now)
        for job in jobs:
            self.jobs[job.id] = job
            if job.tenant_id not in self.tenants:
                self._load_tenants(now)
            self._move(job, JobState.QUEUED, "accepted by the controller", now)
        for job_id in self.store.cancel_requests():
            found = self.jobs.get(job_id)
            if found is None or found.terminal:
                continue
            job = found
            job.cancel_requested = True
            if job.state in (JobState.RUNNING, JobState.CHECKPOINTING):
                self._progress(job, now)
            self._bill(job, now)  # after the progress: the counterfactual counts the last interval
            self._release(job, now, "job cancelled", keep=False)
            job.finished_at = now
            self._move(job, JobState.CANCELLED, "cancelled by the tenant", now)
