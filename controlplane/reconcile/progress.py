"""Simulated progress: a job without an executor advances on the clock (``reconcile.workload``),
with periodic checkpoints at the intervals of the DP checkpoint planner (Eq. 9-13)."""

from __future__ import annotations

from clusters.fleet import FleetProvider
from controlplane.core.models import Job, Market
from controlplane.reconcile import workload
from controlplane.reconcile.contracts import JobExecutor
from controlplane.reconcile.lifetimes import lifetime_models, planning_model
from controlplane.reconcile.state import LoopState
from controlplane.reconcile.workload import Move
from policies.checkpoint import CheckpointIntervals

AGE_BUCKET_HOURS = 0.25  # node ages the checkpoint planner tells apart


class SimulatedProgress:
    """Advances simulated jobs; a job an executor runs only has its accounting moved."""

    def __init__(self, state: LoopState, fleet: FleetProvider, executor: JobExecutor | None,
                 move: Move) -> None:
        self.state, self.fleet, self.executor, self.move = state, fleet, executor, move

    def __call__(self, job: Job, until: float) -> None:
        """Advance a simulated job's progress (and its periodic checkpoints) to ``until``."""
        if job.accounted_at is None:
            job.accounted_at = until
        if job.spec.entrypoint is not None and self.executor is not None:
            job.accounted_at = until
            return
        if until > job.accounted_at:
            workload.advance(job, job.accounted_at, until, self.move, self._interval)
            job.accounted_at = until

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
