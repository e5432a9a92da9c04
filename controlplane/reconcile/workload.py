"""The simulated workload: how a job's progress, checkpoints and changeovers advance in time.

Pure bookkeeping over a :class:`~controlplane.core.models.Job`'s fields (so it survives restarts with
the job): after a (re)start the job first pays its changeover overhead ``d``; then it computes,
writing a checkpoint (``checkpoint_hours`` of no progress) every planned interval and when a
preemption notice leaves enough time; a preemption rolls progress back to the last checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable

from controlplane.core import bills
from controlplane.core.models import Job, JobState
from controlplane.core.units import HOUR

EPS = 1e-9

Move = Callable[[Job, JobState, str, float], None]
Interval = Callable[[Job], float]


def start(job: Job, node_age_hours: float = 0.0) -> None:
    """The gang just came up (its oldest VM ``node_age_hours`` old): pay the changeover before
    progress counts."""
    job.changeover_left_hours = job.spec.overhead_hours
    job.segment_start_hours = job.progress_hours
    job.segment_node_age_hours = node_age_hours
    job.checkpoint_left_hours = 0.0
    job.next_checkpoint_hours = None


def roll_back(job: Job) -> float:
    """Lose the work since the last checkpoint; returns the hours lost."""
    lost = max(0.0, job.progress_hours - job.checkpointed_hours)
    job.progress_hours = job.checkpointed_hours
    job.checkpoint_left_hours = 0.0
    job.changeover_left_hours = 0.0
    job.next_checkpoint_hours = None
    return lost


def keep_progress(job: Job) -> None:
    """A voluntary stop (policy switch, graceful drain): the job checkpoints what it has."""
    job.checkpointed_hours = job.progress_hours
    job.checkpoint_left_hours = 0.0
    job.changeover_left_hours = 0.0
    job.next_checkpoint_hours = None


def begin_checkpoint(job: Job, move: Move, cause: str, at: float) -> bool:
    """Start writing a checkpoint now (if running and anything is new since the last one)."""
    if job.state is not JobState.RUNNING or job.progress_hours <= job.checkpointed_hours + EPS:
        return False
    if job.changeover_left_hours > EPS:
        return False
    if job.spec.checkpoint_hours <= EPS:
        job.checkpointed_hours = job.progress_hours
        job.checkpoints += 1
        return True
    move(job, JobState.CHECKPOINTING, cause, at)
    job.checkpoint_left_hours = job.spec.checkpoint_hours
    job.next_checkpoint_hours = None
    return True


def advance(job: Job, t0: float, t1: float, move: Move, interval: Interval) -> None:
    """Advance a RUNNING / CHECKPOINTING job from ``t0`` to ``t1`` (control-plane seconds)."""
    t = t0
    c = job.spec.compute_hours
    for _ in range(10_000):
        if t >= t1 - 1e-6 or job.state not in (JobState.RUNNING, JobState.CHECKPOINTING):
            return
        left = (t1 - t) / HOUR
        if job.changeover_left_hours > EPS:
            use = min(left, job.changeover_left_hours)
            job.changeover_left_hours -= use
            bills.add(job, {"changeover_hours": use})
            t += use * HOUR
            continue
        if job.state is JobState.CHECKPOINTING:
            use = min(left, job.checkpoint_left_hours)
            job.checkpoint_left_hours -= use
            bills.add(job, {"checkpoint_hours": use})
            t += use * HOUR
            if job.checkpoint_left_hours <= EPS:
                job.checkpoint_left_hours = 0.0
                job.checkpointed_hours = job.progress_hours
                job.checkpoints += 1
                move(job, JobState.RUNNING,
                     f"checkpoint {job.checkpoints} written at {job.progress_hours:.3f} h", t)
            continue
        if job.next_checkpoint_hours is None:
            job.next_checkpoint_hours = job.progress_hours + max(interval(job), 1e-3)
        to_mark = min(c - job.progress_hours, job.next_checkpoint_hours - job.progress_hours)
        use = min(left, max(to_mark, 0.0))
        job.progress_hours += use
        t += use * HOUR
        if job.progress_hours >= c - EPS:
            job.progress_hours = c
            job.finished_at = t
            move(job, JobState.SUCCEEDED, f"computed {c:.3f} h", t)
            return
        if job.progress_hours >= job.next_checkpoint_hours - EPS:
            job.next_checkpoint_hours = None
            begin_checkpoint(job, move, "periodic checkpoint", t)
