"""The live loop places queued jobs in the scheduler's queue order (GFS Sec. 3.4.2 for the live
preset: fewer GPUs per worker, then fewer nodes, then older), on the stepped clock and the
simulated fleet in one AWS zone (p3.2xlarge: one V100 per node) with a pool of two nodes."""

from __future__ import annotations

from pathlib import Path

from controlplane.core.models import JobKind, JobSpec, JobState
from policies.gfs_options import LIVE_DEFAULT
from policies.placement import queue_key
from tests.loops import sim_loop

ZONE = "us-west-2b"


def test_a_smaller_hp_job_submitted_later_takes_the_pool_before_a_wider_one(tmp_path: Path, data_root: Path) -> None:
    loop = sim_loop(tmp_path, data_root, {"V100": 2}, seed=3, zones=[ZONE])
    clock, store, ctl = loop.clock, loop.store, loop.ctl
    t, _ = store.create_tenant("t")
    wide = store.submit_job(t.id, JobSpec(name="wide", kind=JobKind.HP, compute_hours=1.0, workers=2,
                                          accelerator="V100", checkpoint_hours=0.0), now=0.0)
    small = store.submit_job(t.id, JobSpec(name="small", kind=JobKind.HP, compute_hours=1.0,
                                           accelerator="V100", checkpoint_hours=0.0), now=1.0)
    clock.advance(60.0)
    ctl.tick()
    # size order: the 1-node job first, then the 2-node one no longer fits the 2-node pool
    first, second = (small, wide) if LIVE_DEFAULT.queue == "size" else (wide, small)
    assert ctl.jobs[first.id].state is JobState.STARTING
    assert ctl.jobs[second.id].state is JobState.QUEUED


def test_queue_key_orders_by_size_then_submission_or_by_submission_alone() -> None:
    jobs = [(1.0, 2, 0.0), (1.0, 1, 5.0), (0.5, 4, 9.0)]  # GPUs per pod, pods, submitted
    assert sorted(jobs, key=lambda j: queue_key("size", True, *j)) == [(0.5, 4, 9.0), (1.0, 1, 5.0), (1.0, 2, 0.0)]
    assert sorted(jobs, key=lambda j: queue_key("fcfs", True, *j)) == jobs
    # the release's order: more GPUs per pod first; HP ignores the pod count
    assert sorted(jobs, key=lambda j: queue_key("size_release", True, *j))[:2] == [(1.0, 2, 0.0), (1.0, 1, 5.0)]
    assert sorted(jobs, key=lambda j: queue_key("size_release", False, *j))[:2] == [(1.0, 1, 5.0), (1.0, 2, 0.0)]
