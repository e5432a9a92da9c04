"""The simulated workload's bookkeeping: changeover first, periodic checkpoints cost time,
a preemption rolls back to the last checkpoint, completion at the exact time."""

from __future__ import annotations

import pytest

from controlplane.core.models import Job, JobKind, JobSpec, JobState
from controlplane.core.units import HOUR
from controlplane.reconcile import workload


def _job(c: float = 2.0, d: float = 0.1, delta: float = 0.05) -> Job:
    spec = JobSpec(name="w", kind=JobKind.SPOT, compute_hours=c, overhead_hours=d,
                   checkpoint_hours=delta)
    return Job(id="job-1", tenant_id="t", name="w", kind=spec.kind, spec=spec,
               state=JobState.RUNNING, submitted_at=0.0)


def _mover(log: list[tuple[str, float]]) -> workload.Move:
    def move(job: Job, dst: JobState, cause: str, at: float) -> None:
        log.append((dst.value, round(at / HOUR, 6)))
        job.state = dst

    return move


def test_changeover_then_checkpoints_then_done_at_the_exact_time() -> None:
    job, log = _job(), []  # type: ignore[var-annotated]
    workload.start(job)
    workload.advance(job, 0.0, 10 * HOUR, _mover(log), lambda j: 0.5)
    # d = 0.1 h, then 0.5 h of work + 0.05 h checkpoint, three times, then the last 0.5 h
    assert log == [("CHECKPOINTING", 0.6), ("RUNNING", 0.65), ("CHECKPOINTING", 1.15),
                   ("RUNNING", 1.2), ("CHECKPOINTING", 1.7), ("RUNNING", 1.75),
                   ("SUCCEEDED", 2.25)]
    assert job.checkpoints == 3 and job.finished_at == pytest.approx(2.25 * HOUR)


def test_preemption_loses_only_the_work_since_the_checkpoint() -> None:
    job, log = _job(), []  # type: ignore[var-annotated]
    workload.start(job)
    workload.advance(job, 0.0, 0.9 * HOUR, _mover(log), lambda j: 0.5)
    assert job.progress_hours == pytest.approx(0.75) and job.checkpointed_hours == pytest.approx(0.5)
    assert workload.roll_back(job) == pytest.approx(0.25)
    assert job.progress_hours == pytest.approx(0.5)


def test_checkpoint_at_a_notice_saves_the_progress() -> None:
    job, log = _job(), []  # type: ignore[var-annotated]
    workload.start(job)
    workload.advance(job, 0.0, 0.4 * HOUR, _mover(log), lambda j: 0.5)
    assert workload.begin_checkpoint(job, _mover(log), "notice", 0.4 * HOUR)
    workload.advance(job, 0.4 * HOUR, 0.5 * HOUR, _mover(log), lambda j: 0.5)
    assert job.checkpointed_hours == pytest.approx(0.3) and job.state is JobState.RUNNING


def test_half_a_second_of_work_is_counted() -> None:
    job, log = _job(d=0.0), []  # type: ignore[var-annotated]
    workload.start(job)
    workload.advance(job, 0.0, 0.5, _mover(log), lambda j: 0.5)
    assert job.progress_hours == pytest.approx(0.5 / HOUR, rel=1e-9) and log == []
    workload.advance(job, 0.5, 0.5 + 0.5e-6, _mover(log), lambda j: 0.5)  # under the 1e-6 s tolerance
    assert job.progress_hours == pytest.approx(0.5 / HOUR, rel=1e-12)
