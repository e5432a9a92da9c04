"""plan_positions: the checkpoint actor's schedule as a pure function (seed 001, Eq. 9-13)."""

from __future__ import annotations

import math

import pytest

from controlplane.core.errors import InvalidInput
from policies.checkpoint import OptimalCheckpointPlanner, plan_positions, young_daly_interval
from policies.preemption import ExponentialModel


def test_without_a_model_young_interval_with_one_hour_mttf() -> None:
    cost = 0.02
    interval = math.sqrt(2 * cost * 1.0)
    assert young_daly_interval(cost, 1.0) == pytest.approx(0.2)
    got = plan_positions(None, 1.0, 0.0, cost)
    assert got == pytest.approx([interval * k for k in range(1, 5)])  # 0.2 .. 0.8, none at 1.0


def test_with_a_model_it_is_the_dp_schedule_on_its_grid() -> None:
    model = ExponentialModel(rate=0.5, limit=24.0)
    got = plan_positions(model, 5.0, 0.0, 1 / 60)
    step = max(min(5.0 / 240, 1 / 60), 5.0 / 1000, 24.0 / 5000)
    planner = OptimalCheckpointPlanner(model, step_hours=step, delta_hours=step * math.ceil((1 / 60) / step))
    want = planner.plan(step * math.ceil(5.0 / step - 1e-9), 0.0).checkpoints
    assert got == pytest.approx(want) and len(got) >= 3
    assert all(0 < a < b < 5.0 for a, b in zip(got, got[1:], strict=False))
    # a costlier checkpoint means fewer of them
    assert len(plan_positions(model, 5.0, 0.0, 0.25)) < len(got)


def test_an_age_past_the_models_limit_is_the_callers_decision() -> None:
    with pytest.raises(InvalidInput, match="start_age_hours"):
        plan_positions(ExponentialModel(rate=0.5, limit=24.0), 2.0, 30.0, 1 / 60)


def test_the_plan_grid_step_is_the_remaining_work_over_240_when_that_beats_the_cost() -> None:
    """24 h of work, a 0.25-h checkpoint: step = max(min(24/240, 0.25), 24/1000, 24/5000) = 0.1 h,
    the cost rounded up to 3 steps (0.3 h). With MTTF 2 h the DP checkpoints every 9 steps
    (0.9 h; Young's sqrt(2 x 0.3 x 2) = 1.10 h), the last at 17.9 h."""
    model = ExponentialModel(rate=0.5, limit=24.0)
    got = plan_positions(model, 24.0, 0.0, 0.25)
    assert got == pytest.approx([0.9 * k for k in range(1, 20)] + [17.9], abs=1e-9)
    assert all(abs(p / 0.1 - round(p / 0.1)) < 1e-9 for p in got)  # on the 0.1-h grid
