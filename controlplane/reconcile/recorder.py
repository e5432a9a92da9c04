"""The recording helpers every phase shares: transitions, node events, decisions, progress, bills.

A :class:`Recorder` writes into the tick's work (``LoopState.work``); phases receive it
explicitly. Progress follows ``controlplane.reconcile.workload`` with periodic checkpoints from the
checkpoint planner; a bill charges each node's price for the time it served the job.
"""

from __future__ import annotations

from typing import Any

from clusters.fleet import FleetProvider
from controlplane.core import counters
from controlplane.core.models import (
    Decision,
    Event,
    Job,
    JobKind,
    JobState,
    Market,
    Node,
    check_transition,
)
from controlplane.core.units import HOUR
from controlplane.reconcile import workload
from controlplane.reconcile.contracts import JobExecutor
from controlplane.reconcile.lifetimes import lifetime_models, planning_model
from controlplane.reconcile.state import LoopState
from policies.checkpoint import CheckpointIntervals

AGE_BUCKET_HOURS = 0.25  # node ages the checkpoint planner tells apart


class Recorder:
    """Records what phases do to jobs and nodes into the tick's work."""

    def __init__(self, state: LoopState, fleet: FleetProvider,
                 executor: JobExecutor | None) -> None:
        self.state, self.fleet, self.executor = state, fleet, executor

    # -- events, transitions, decisions ---------------------------------------------------------
    def move(self, job: Job, dst: JobState, cause: str, at: float) -> None:
        """Move a job to ``dst`` (a legal transition), with its event and counters."""
        w = self.state.work
        check_transition(job.id, job.state, dst)
        self._count_transition(job, dst, at)
        w.events.append(Event(at=at, tenant_id=job.tenant_id, job_id=job.id,
                              kind="transition", src=job.state.value, dst=dst.value,
                              cause=cause))
        job.state = dst
        job.message = cause
        if dst is JobState.RUNNING and job.started_at is None:
            job.started_at = at
        if dst in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
            job.finished_at = job.finished_at if dst is JobState.SUCCEEDED else at
            w.count(f"jobs_{dst.value.lower()}_total")
            if w.report is not None:
                w.report.finished += 1

    def _count_transition(self, job: Job, dst: JobState, at: float) -> None:
        c = self.state.work.counters
        if job.state is JobState.CHECKPOINTING and dst is JobState.RUNNING:
            counters.count(c, "checkpoint_writes_total", source="simulated")
            counters.observe(c, "checkpoint_duration_seconds", job.spec.checkpoint_hours * HOUR)
        if dst is JobState.SUCCEEDED and job.kind is JobKind.DEADLINE and job.deadline_at:
            slack = job.deadline_at - (job.finished_at if job.finished_at is not None else at)
            if slack >= 0:
                counters.observe(c, "deadline_slack_at_finish_seconds", slack)
            else:
                counters.count(c, "deadline_misses_total")
                counters.observe(c, "deadline_lateness_seconds", -slack)

    def node_event(self, node: Node, cause: str, at: float) -> None:
        """Record a node's new state (and persist the node this tick)."""
        w = self.state.work
        w.events.append(Event(at=at, tenant_id=node.tenant_id, job_id=node.job_id,
                              node_id=node.id, kind="node", dst=node.state.value, cause=cause))

    def decide(self, job: Job, policy: str, action: str, reason: str, at: float,
               zone: str | None = None, obs: dict[str, Any] | None = None) -> None:
        """Record a policy's decision for a job."""
        self.state.work.decisions.append(Decision(
            at=at, job_id=job.id, tenant_id=job.tenant_id, policy=policy, action=action,
            zone=zone, reason=reason, observation=obs or {}))

    # -- progress and billing --------------------------------------------------------------------
    def progress(self, job: Job, until: float) -> None:
        """Advance a simulated job's progress (and its periodic checkpoints) to ``until``."""
        if job.accounted_at is None:
            job.accounted_at = until
        if job.spec.entrypoint is not None and self.executor is not None:
            job.accounted_at = until
            return
        if until > job.accounted_at:
            workload.advance(job, job.accounted_at, until, self.move, self._interval)
            job.accounted_at = until

    def bill(self, job: Job, until: float) -> None:
        """Charge the job for its nodes' time since it was last billed (provisioning included):
        cost = sum over nodes of price x (min(until, end) - max(billed_at, launched)) / HOUR."""
        start = job.billed_at if job.billed_at is not None else until
        if until <= start:
            job.billed_at = max(start, until)
            return
        cost = gpu_h = 0.0
        for node_id in job.node_ids:
            n = self.state.nodes.get(node_id)
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

    def _od_price(self, job: Job) -> float:
        prices = [o.on_demand_price for o in self.state.offers_for(job)]
        return min(prices, default=0.0)

    def _interval(self, job: Job) -> float:
        if job.market is Market.ON_DEMAND:  # nothing preempts it: no periodic checkpoints
            return max(job.spec.compute_hours - job.progress_hours, 1e-3) + 1.0
        return self._planner(job).interval_hours(job.progress_hours - job.segment_start_hours)

    def _planner(self, job: Job) -> CheckpointIntervals:
        """The one DP planner (Eq. 9-13) from the VM age the job's segment started at (in
        ``AGE_BUCKET_HOURS`` steps, one solve per bucket and checkpoint cost)."""
        model = planning_model(self.state.caches.lifetime_models or lifetime_models(self.fleet))
        age = job.segment_node_age_hours
        bucket = min(AGE_BUCKET_HOURS * int(age // AGE_BUCKET_HOURS),
                     max(0.0, model.max_lifetime - AGE_BUCKET_HOURS))
        key = (round(job.spec.checkpoint_hours, 6), bucket)
        cache = self.state.caches.planners
        if key not in cache:
            cache[key] = CheckpointIntervals(model, job.spec.checkpoint_hours,
                                             start_age_hours=bucket)
        return cache[key]
