"""The real policies are wired in; the stand-ins only take over when a policy is missing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from controlplane.standins import (
    EmpiricalLifetimes,
    ScheduleIntervals,
    YoungCheckpointPlanner,
    load_checkpoint_planner,
    load_lifetime_model,
)
from policies.checkpoint import OptimalCheckpointPlanner
from policies.preemption import BathtubModel


def test_real_preemption_model_and_optimal_checkpoint_schedule() -> None:
    model = load_lifetime_model()
    assert isinstance(model, BathtubModel)
    planner = load_checkpoint_planner(model, 1 / 60)
    assert isinstance(planner, ScheduleIntervals)
    first = OptimalCheckpointPlanner(model, step_hours=1 / 60, delta_hours=1 / 60).plan(4.0).checkpoints[0]
    assert planner.interval_hours(0.0) == pytest.approx(first)


def test_young_interval_stands_in_for_a_model_the_planner_cannot_use() -> None:
    model = EmpiricalLifetimes(np.array([1.0, 2.0, 3.0, 30.0]))
    assert model.hours.max() == 24.0  # GCP's cap
    planner = load_checkpoint_planner(model, 0.01)
    assert isinstance(planner, YoungCheckpointPlanner)
    assert planner.interval_hours(0.0) == pytest.approx(math.sqrt(2 * 0.01 * planner.mttf))
