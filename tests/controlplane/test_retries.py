"""Retries on exit codes and the wall-time bound, on the stepped clock (simulated fleet and
executor), and the same fields through Ray's submit metadata."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.simexecutor import SimulatedExecutor
from controlplane.core.clock import SimClock
from controlplane.core.errors import InvalidInput
from controlplane.core.models import JobSpec, JobState
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from policies.preemption import default_gce_model
from policies.retries import on_exit, over_duration
from serve.rayjobs import RaySubmitRequest, spec_from_ray
from tests.loops import sim_loop


def _world(tmp: Path, data_root: Path) -> tuple[Store, SimulatedExecutor, Controller, SimClock]:
    clock = SimClock(start=0.0)
    ex = SimulatedExecutor(clock)
    loop = sim_loop(tmp, data_root, {"V100": 4}, clock=clock, controller={"executor": ex},
                    lifetime_model=default_gce_model())
    return loop.store, ex, loop.ctl, clock


def _run_until(ctl: Controller, clock: SimClock, store: Store, job_id: str,
               states: set[JobState], hours: float = 12.0) -> None:
    for _ in range(int(hours * 60)):
        clock.advance(60.0)
        ctl.tick()
        if store.get_job(job_id).state in states:
            return


def _hp(**extra: object) -> JobSpec:
    return JobSpec.model_validate({"name": "train", "kind": "hp", "accelerator": "V100",
                                   "compute_hours": 2.0, "entrypoint": "python train.py",
                                   **extra})


def test_the_exit_rule_restarts_listed_codes_until_the_bound() -> None:
    assert on_exit(3, [3], 2, 0).restart and on_exit(3, [3], 2, 1).restart
    last = on_exit(3, [3], 2, 2)
    assert not last.restart and "after 2 of max_restarts_on_error=2" in last.reason
    other = on_exit(1, [3, 4], 5, 0)
    assert not other.restart and "exit code 1" in other.reason
    assert not on_exit(None, [3], 5, 0).restart
    assert over_duration(0.0, 3600.0, 1.0) and not over_duration(0.0, 3599.0, 1.0)
    assert not over_duration(None, 1e9, 1.0) and not over_duration(0.0, 1e9, None)


def test_a_listed_exit_restarts_from_the_checkpoint_n_times_then_fails(
        tmp_path: Path, data_root: Path) -> None:
    store, ex, ctl, clock = _world(tmp_path, data_root)
    t, _ = store.create_tenant("t", max_gpus=10)
    job = store.submit_job(t.id, _hp(max_restarts_on_error=2, restart_on_exit_codes=[3]), now=0.0)
    for at in (0.5, 1.0, 1.5):
        ex.exit_at(job.id, at, 3)
    _run_until(ctl, clock, store, job.id, {JobState.FAILED, JobState.SUCCEEDED})
    j = store.get_job(job.id)
    assert j.state is JobState.FAILED and j.error_restarts == 2
    assert "exit code 3 after 2 of max_restarts_on_error=2 restarts" in j.message
    assert (j.preemptions, j.exit_code) == (0, 3)  # counted apart from preemptions
    requeued = [e.cause for e in store.job_events(job.id) if e.dst == JobState.QUEUED.value
                and e.src == JobState.RUNNING.value]
    assert [c.split(";")[0] for c in requeued] == [
        f"executor: exit code 3: restart {n} of 2 from the last checkpoint" for n in (1, 2)]
    # each attempt started from the checkpoint the one before it left
    runs = [e for e in store.job_events(job.id) if e.dst == JobState.RUNNING.value
            and e.src == JobState.STARTING.value]
    assert len(runs) == 3


def test_an_exit_once_then_success_finishes_and_an_unlisted_code_fails_at_once(
        tmp_path: Path, data_root: Path) -> None:
    store, ex, ctl, clock = _world(tmp_path, data_root)
    t, _ = store.create_tenant("t", max_gpus=10)
    once = store.submit_job(t.id, _hp(max_restarts_on_error=1, restart_on_exit_codes=[3]),
                            now=0.0)
    other = store.submit_job(t.id, _hp(max_restarts_on_error=5, restart_on_exit_codes=[3]),
                             now=0.0)
    ex.exit_at(once.id, 0.5, 3)
    ex.exit_at(other.id, 0.5, 1)
    _run_until(ctl, clock, store, once.id, {JobState.SUCCEEDED, JobState.FAILED})
    j, o = store.get_job(once.id), store.get_job(other.id)
    assert j.state is JobState.SUCCEEDED and j.error_restarts == 1
    assert j.progress_hours == pytest.approx(2.0)
    assert o.state is JobState.FAILED and o.error_restarts == 0 and o.exit_code == 1
    assert "exit code 1 (restarting codes: 3)" in o.message


def test_max_duration_stops_a_job_with_its_reason(tmp_path: Path, data_root: Path) -> None:
    store, _, ctl, clock = _world(tmp_path, data_root)
    t, _ = store.create_tenant("t", max_gpus=10)
    job = store.submit_job(t.id, JobSpec(name="long", kind="hp", accelerator="V100",
                                         compute_hours=3.0, max_duration_hours=1.0), now=0.0)
    _run_until(ctl, clock, store, job.id, {JobState.FAILED, JobState.SUCCEEDED}, hours=4)
    j = store.get_job(job.id)
    assert j.state is JobState.FAILED and j.started_at is not None
    assert "max_duration_hours=1 reached" in j.message
    assert j.finished_at is not None
    assert j.finished_at - j.started_at == pytest.approx(3600.0, abs=60.0)  # within one tick
    assert j.node_ids == []


def test_ray_submit_metadata_carries_retries_and_bounds() -> None:
    spec = spec_from_ray(RaySubmitRequest(entrypoint="python train.py", metadata={
        "spotplane.max_restarts_on_error": "2", "spotplane.restart_on_exit_codes": "1, 3",
        "spotplane.max_duration_hours": "6.5"}))
    assert (spec.max_restarts_on_error, spec.restart_on_exit_codes,
            spec.max_duration_hours) == (2, [1, 3], 6.5)
    with pytest.raises(InvalidInput, match="restart_on_exit_codes"):
        spec_from_ray(RaySubmitRequest(entrypoint="x", metadata={
            "spotplane.restart_on_exit_codes": "one"}))


def test_ray_job_details_carry_the_exit_code_and_error_restarts() -> None:
    from ray.dashboard.modules.job.pydantic_models import JobDetails

    from controlplane.core.models import Job, JobKind
    from serve.rayjobs import job_details

    spec = spec_from_ray(RaySubmitRequest(entrypoint="python train.py"))
    job = Job(id="job-1", tenant_id="t", name="n", kind=JobKind.SPOT, spec=spec, submitted_at=0.0,
              state=JobState.FAILED, exit_code=3, error_restarts=1)
    d = job_details(job)
    assert d["driver_exit_code"] == 3 and d["metadata"]["spotplane.error_restarts"] == "1"
    JobDetails(**d)  # Ray's own client parses it
