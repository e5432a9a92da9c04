"""Tenants' budgets in the reconcile loop: the rule is :mod:`policies.budgets`; this applies it.

:class:`SpendGuard` runs after jobs advance: it reads the limits from the store (every tenth
tick), keeps each tenant's spend rate (the $/h of the nodes its jobs hold) and month spend
(``LoopState.spend``), tells crossed soft and hard lines as events and counters, stops jobs at
their next checkpoint once a tenant's monthly hard line is reached, and stops a job whose bill
reached its ``max_cost``. ``Place`` asks :meth:`SpendGuard.why_wait` before it places a job.
"""

from __future__ import annotations

from clusters.fleet import Offer
from controlplane.core import counters
from controlplane.core.bills import node_price, raw_lines
from controlplane.core.models import Event, Job, JobState, Market, TenantBudget
from controlplane.reconcile import workload
from controlplane.reconcile.nodeops import NodeOps
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.state import WITH_NODES, LoopState
from controlplane.store import Store
from policies.budgets import (
    BudgetLimits,
    Level,
    RunningJob,
    admission,
    level,
    month_of,
    to_stop,
)

RUNNING = (JobState.RUNNING, JobState.CHECKPOINTING)


def limits_of(budget: TenantBudget) -> BudgetLimits:
    """The pure rule's limits from a stored budget."""
    return BudgetLimits(budget.hourly_cap, budget.monthly_budget, budget.soft_fraction,
                        budget.protected)


def job_estimate(job: Job, job_rate: float) -> float:
    """Dollars the job is expected to cost from its last checkpoint: ``job_rate x (C - c + d)``,
    at most what is left of its ``max_cost``."""
    hours = max(0.0, job.spec.compute_hours - job.checkpointed_hours) + job.spec.overhead_hours
    estimate = job_rate * hours
    if job.spec.max_cost is not None:
        estimate = min(estimate, max(0.0, job.spec.max_cost - bill_total(job)))
    return estimate


def bill_total(job: Job) -> float:
    """The job's bill so far (node time, probes, spares, egress)."""
    return sum(raw_lines(job).values())


class SpendGuard:
    """Budgets and ``max_cost`` in the loop (see the module's doc)."""

    def __init__(self, store: Store, state: LoopState, rec: Recorder, ops: NodeOps) -> None:
        self.store, self.state, self.rec, self.ops = store, state, rec, ops
        self.limits: dict[str, BudgetLimits] = {}
        self.rates: dict[str, float] = {}  # tenant -> $/h of the nodes its jobs hold
        self._read = False
        self._levels: dict[tuple[str, str], Level] = {}  # (tenant, hourly|monthly) -> level
        self._stopping: dict[str, int] = {}  # job id -> its checkpoints when it was marked

    # -- what the loop knows of spend ---------------------------------------------------------
    def refresh(self, now: float) -> None:
        """Limits from the store every tenth tick, spend rates from the live nodes."""
        s = self.state
        if not self._read or s.ticks % 10 == 0:
            self.limits = {t: limits_of(b) for t, b in self.store.budgets().items()}
            self._read = True
        self.rates = {}
        for n in s.nodes.values():
            if n.tenant_id is not None and n.job_id is not None and not n.gone:
                self.rates[n.tenant_id] = self.rates.get(n.tenant_id, 0.0) + node_price(n)

    def month_spend(self, tenant_id: str, now: float) -> float:
        """Dollars the tenant spent this UTC month: the store's, plus what this tick counted."""
        s, month = self.state, month_of(now)
        if s.spend is None or s.spend_month != month:
            spend = self.store.month_spend(month)
            for key, value in s.work.counters.items():
                name, labels = counters.parse_key(key)
                if name == "tenant_month_spend_dollars_total" and labels.get("month") == month:
                    spend[labels["tenant"]] = spend.get(labels["tenant"], 0.0) + value
            s.spend, s.spend_month = spend, month
        return s.spend.get(tenant_id, 0.0)

    # -- admission ----------------------------------------------------------------------------
    def why_wait(self, job: Job, offer: Offer, market: Market, now: float) -> str | None:
        """Why the job may not start now under its tenant's budget (None: it may)."""
        lim = self.limits.get(job.tenant_id)
        if lim is None:
            return None
        price = offer.spot_price if market is Market.SPOT else offer.on_demand_price
        job_rate = price * job.nodes_needed
        return admission(lim, self.rates.get(job.tenant_id, 0.0),
                         self.month_spend(job.tenant_id, now), job_rate,
                         job_estimate(job, job_rate))

    def placed(self, job: Job, offer: Offer, market: Market) -> None:
        """A job was placed this tick: its nodes count in its tenant's rate at once."""
        price = offer.spot_price if market is Market.SPOT else offer.on_demand_price
        self.rates[job.tenant_id] = self.rates.get(job.tenant_id, 0.0) + price * job.nodes_needed

    # -- the phase ----------------------------------------------------------------------------
    def run(self, now: float) -> None:
        """Lines crossed, jobs stopped at the monthly hard line, jobs over their max_cost."""
        self.refresh(now)
        s = self.state
        for job in list(s.jobs.values()):
            if job.spec.max_cost is not None and job.state in WITH_NODES \
                    and bill_total(job) >= job.spec.max_cost - 1e-9:
                self._stop_over_cost(job, now)
        self._stopping = {k: v for k, v in self._stopping.items()
                          if k in s.jobs and s.jobs[k].state in WITH_NODES}
        running: dict[str, list[RunningJob]] = {}
        if self.limits:
            for j in s.jobs.values():
                if j.state in WITH_NODES and j.tenant_id in self.limits:
                    running.setdefault(j.tenant_id, []).append(
                        RunningJob(j.id, j.kind.value, j.submitted_at))
        for tenant, lim in self.limits.items():
            spent = self.month_spend(tenant, now)
            self._tell(tenant, "hourly", level(self.rates.get(tenant, 0.0), lim.hourly_cap,
                                               lim.soft_fraction), now)
            self._tell(tenant, "monthly", level(spent, lim.monthly_budget, lim.soft_fraction),
                       now)
            for job_id in to_stop(lim, spent, running.get(tenant, [])):
                if job_id not in self._stopping:
                    self._stopping[job_id] = s.jobs[job_id].checkpoints
                    self._checkpoint_soon(s.jobs[job_id], now)
        for job_id, marked in list(self._stopping.items()):
            job = s.jobs[job_id]
            if job.state is JobState.STARTING or (
                    job.state is JobState.RUNNING and (job.checkpoints > marked or
                                                       job.progress_hours <= job.checkpointed_hours)):
                self._stop_at_checkpoint(job, now)

    def _checkpoint_soon(self, job: Job, now: float) -> None:
        """A simulated job on on-demand plans no periodic checkpoint: it writes one now."""
        if job.market is Market.ON_DEMAND and job.spec.entrypoint is None \
                and job.state is JobState.RUNNING:
            workload.begin_checkpoint(job, self.rec.move, "monthly budget reached: a checkpoint "
                                      "before it stops", now)

    def _tell(self, tenant: str, limit: str, now_level: Level, now: float) -> None:
        """An event and a counter when a tenant's spend crosses a line upward."""
        key = (tenant, limit)
        was = self._levels.get(key, Level.OK)
        self._levels[key] = now_level
        order = (Level.OK, Level.SOFT, Level.HARD)
        if order.index(now_level) <= order.index(was):
            return
        lim = self.limits[tenant]
        spend, cap = ((self.rates.get(tenant, 0.0), lim.hourly_cap) if limit == "hourly"
                      else (self.month_spend(tenant, now), lim.monthly_budget))
        unit = "/h" if limit == "hourly" else ""
        self.state.work.events.append(Event(
            at=now, tenant_id=tenant, kind="budget", dst=now_level.value,
            cause=f"{limit} {'budget' if limit == 'monthly' else 'spend cap'}: "
                  f"${spend:.2f}{unit} of ${cap or 0.0:.2f}{unit}, past its {now_level.value} "
                  "line"))
        counters.count(self.state.work.counters, "budget_events_total", tenant=tenant,
                       limit=limit, level=now_level.value)

    def _stop_at_checkpoint(self, job: Job, now: float) -> None:
        """The tenant's monthly hard line: the job leaves its nodes at its checkpoint and waits
        QUEUED until the budget allows it again."""
        self._stopping.pop(job.id, None)
        cause = (f"monthly budget reached: stopped at checkpoint {job.checkpoints} "
                 f"({job.checkpointed_hours:.3f} h)")
        self._leave_nodes(job, now, cause)
        self.rec.move(job, JobState.QUEUED, cause, now)
        job.message = f"waiting: {cause}"
        self.state.work.count("budget_stops_total")

    def _stop_over_cost(self, job: Job, now: float) -> None:
        """The job's bill reached its max_cost: it fails with the reason."""
        cause = (f"max_cost: the job's bill ${bill_total(job):.2f} reached its max_cost "
                 f"${job.spec.max_cost:.2f}")
        self._leave_nodes(job, now, cause)
        self.rec.move(job, JobState.FAILED, cause, now)
        job.message = cause

    def _leave_nodes(self, job: Job, now: float, cause: str) -> None:
        if job.state in RUNNING:
            self.rec.progress(job, now)
        self.rec.bill(job, now)
        self.rec.billing.lose(job, workload.roll_back(job))
        if self.ops.executor is not None and job.spec.entrypoint is not None:
            self.ops.executor.stop(job, cause)
        self.ops.release(job, now, cause, keep=True)
