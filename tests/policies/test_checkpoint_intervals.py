"""CheckpointIntervals: the next checkpoint after w hours of work on a VM, from the DP schedule
(seed 001, Eq. 9-13), for the simulated jobs, the checkpoint actors and the migration benchmark."""

from __future__ import annotations

import pytest

from controlplane.core.errors import InvalidInput
from policies.checkpoint import CheckpointIntervals, OptimalCheckpointPlanner
from policies.preemption import BathtubModel, ExponentialModel, default_gce_model


def test_real_preemption_model_and_optimal_checkpoint_schedule() -> None:
    model = default_gce_model()
    assert isinstance(model, BathtubModel)
    planner = CheckpointIntervals(model, 1 / 60)
    schedule = OptimalCheckpointPlanner(model, step_hours=1 / 60, delta_hours=1 / 60).plan(4.0)
    first = schedule.checkpoints[0]
    assert planner.interval_hours(0.0) == pytest.approx(first)
    assert planner.checkpoints() == schedule.checkpoints


def test_intervals_walk_the_schedule_then_repeat_its_last_interval() -> None:
    planner = CheckpointIntervals(ExponentialModel(rate=0.5, limit=24.0), 1 / 60)
    cps = planner.checkpoints()
    assert len(cps) >= 3
    for a, b in zip(cps, cps[1:], strict=False):
        assert planner.interval_hours(a) == pytest.approx(b - a)
        assert planner.interval_hours((a + b) / 2) == pytest.approx((b - a) / 2)
    assert planner.interval_hours(-1.0) == pytest.approx(cps[0])
    last = cps[-1] - cps[-2]
    assert planner.interval_hours(cps[-1]) == pytest.approx(last)
    assert planner.interval_hours(100.0) == pytest.approx(last)


def test_checkpoint_cost_is_rounded_to_whole_steps() -> None:
    model = default_gce_model()
    exact = CheckpointIntervals(model, 1 / 60).checkpoints()
    assert CheckpointIntervals(model, 0.01).checkpoints() == exact  # 0.6 min: one step
    assert CheckpointIntervals(model, 0.0).checkpoints() == exact  # at least one step


def test_less_work_left_is_the_restart_plan_of_the_same_solve() -> None:
    model = ExponentialModel(rate=0.3, limit=24.0)
    planner = CheckpointIntervals(model, 1 / 60, horizon_hours=6.0, restart_hours=0.3)
    policy = OptimalCheckpointPlanner(model, delta_hours=1 / 60, restart_hours=0.3).solve(6.0)
    for left in (6.0, 4.5, 2.0, 1 / 60):
        assert planner.checkpoints(left) == policy.restart_checkpoints(left)
    with pytest.raises(InvalidInput, match="remaining_hours"):
        planner.checkpoints(7.0)
