"""Checkpoint DP (seed 001, Eq. 9-13): optimality by brute force, exact evaluator vs Monte Carlo."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest

from controlplane.core.errors import InvalidInput
from policies.checkpoint import (
    OptimalCheckpointPlanner,
    YoungDalyPlanner,
    expected_makespan,
    simulate_makespan,
)
from policies.preemption import BathtubModel, ExponentialModel, default_gce_model

# a steep bathtub on a short horizon so that 12 steps of 0.5 h see every phase
SHORT = BathtubModel(A=0.5, tau1=0.8, tau2=0.7, b=11.0, limit=12.0)


@functools.cache
def _sf(age: float) -> float:
    return float(SHORT.sf(np.array(age)))


@functools.cache
def _g(age: float) -> float:
    return float(SHORT.partial_expectation(np.array(age)))


def _attempt(model: BathtubModel, pos: list[int], a0: int, h: float, d: int,
             restart: dict[int, float]) -> tuple[float, float]:
    """Forward evaluation of one attempt: (cost, p0) with value = cost + p0 * R(j) where p0 is
    the chance to fail in the first segment (which restarts with all j steps left)."""
    j = pos[-1]
    age = a0 * h
    assert model is SHORT
    s_a0 = _sf(age)
    cost, p0 = 0.0, 0.0
    for k in range(len(pos) - 1):
        dur = (pos[k + 1] - pos[k] + (d if k + 1 < len(pos) - 1 else 0)) * h
        start, end = age, age + dur
        s0, s1, g0, g1 = _sf(start), _sf(end), _g(start), _g(end)
        p_fail = (s0 - s1) / s_a0
        lost = (g1 - g0 - start * (s0 - s1)) / s_a0  # int (x - start) dF, given alive at a0
        cost += lost + (s1 / s_a0) * dur
        if k == 0:
            p0 = p_fail
        else:
            cost += p_fail * restart[j - pos[k]]
        age = end
    return cost, p0


@functools.cache
def _brute_force(model: BathtubModel, J: int, a0: int, h: float, d: int) -> float:
    restart: dict[int, float] = {}
    for j in range(1, J + 1):
        best = math.inf
        for r in range(j):
            for cut in itertools.combinations(range(1, j), r):
                c, p0 = _attempt(model, [0, *cut, j], 0, h, d, restart)
                if p0 < 1:
                    best = min(best, c / (1 - p0))
        restart[j] = best
    if a0 == 0:
        return restart[J]
    best = math.inf
    for r in range(J):
        for cut in itertools.combinations(range(1, J), r):
            c, p0 = _attempt(model, [0, *cut, J], a0, h, d, restart)
            best = min(best, c + p0 * restart[J])
    return best


@pytest.mark.parametrize(("J", "a0", "d"), [(12, 0, 1), (10, 0, 2), (12, 16, 1), (9, 20, 1), (6, 22, 1)])
@pytest.mark.parametrize("method", ["hull", "dense"])
def test_planner_equals_brute_force_on_small_instances(J: int, a0: int, d: int, method: str) -> None:
    h = 0.5
    planner = OptimalCheckpointPlanner(SHORT, step_hours=h, delta_hours=d * h, method=method)
    sched = planner.plan(J * h, a0 * h)
    bf = _brute_force(SHORT, J, a0, h, d)
    assert sched.expected_makespan_hours == pytest.approx(bf, rel=1e-8)
    # the planner's own schedule, scored by the brute-force evaluator, attains the optimum
    restart = {j: planner.solve(j * h).schedule.expected_makespan_hours for j in range(1, J + 1)}
    pos = [0, *[round(c / h) for c in sched.checkpoints], J]
    c, p0 = _attempt(SHORT, pos, a0, h, d, restart)
    own = c / (1 - p0) if a0 == 0 else c + p0 * restart[J]
    assert own == pytest.approx(bf, rel=1e-8)


def test_hull_and_dense_agree_on_a_real_model() -> None:
    m = default_gce_model()
    for work, age in [(3.0, 0.0), (2.0, 21.0)]:
        a = OptimalCheckpointPlanner(m, method="hull").plan(work, age)
        b = OptimalCheckpointPlanner(m, method="dense").plan(work, age)
        assert a.expected_makespan_hours == pytest.approx(b.expected_makespan_hours, rel=1e-12)


def test_memoryless_schedule_is_periodic_and_near_young_daly() -> None:
    m = ExponentialModel(rate=1.0, limit=1000.0)
    s = OptimalCheckpointPlanner(m, step_hours=1 / 60, delta_hours=1 / 60).plan(3.0)
    inner = s.intervals_hours[1:-1]
    assert max(inner) - min(inner) <= 2 / 60  # periodic up to a step
    yd = YoungDalyPlanner(m).interval_hours  # sqrt(2 * delta * MTTF) = 0.18 h
    assert np.median(inner) == pytest.approx(yd, rel=0.2)


def test_exact_evaluator_matches_monte_carlo_and_dp_value() -> None:
    m = default_gce_model()
    planner = OptimalCheckpointPlanner(m)
    policy = planner.solve(4.0)
    sched = policy.schedule
    rng = np.random.default_rng(7)
    mc = simulate_makespan(m, sched.checkpoints, 4.0, 1 / 60, runs=10_000, rng=rng,
                           replan=policy.restart_checkpoints)
    assert mc.mean() == pytest.approx(sched.expected_makespan_hours, rel=0.02)
    static = expected_makespan(m, sched.checkpoints, 4.0, 1 / 60)
    mc_static = simulate_makespan(m, sched.checkpoints, 4.0, 1 / 60, runs=10_000, rng=rng)
    assert mc_static.mean() == pytest.approx(static, rel=0.02)
    assert static >= sched.expected_makespan_hours - 1e-12  # re-planning can only help


def test_evaluator_of_no_checkpoint_matches_restart_closed_form() -> None:
    m = default_gce_model()
    from policies.reuse import expected_makespan_with_restarts
    for T in (1.0, 6.0):
        ev = expected_makespan(m, (), T, 1 / 60)
        assert ev == pytest.approx(float(expected_makespan_with_restarts(m, T)), rel=1e-9)


def test_start_age_and_schedule_helpers() -> None:
    m = default_gce_model()
    s = OptimalCheckpointPlanner(m).plan(4.0, start_age_hours=10.0)
    assert s.start_age_hours == 10.0
    assert sum(s.intervals_hours) == pytest.approx(4.0)
    assert len(s.checkpoints) >= 1 and s.checkpoints == tuple(sorted(s.checkpoints))
    first = s.checkpoints[0]
    assert s.checkpoints[-1] < 4.0 and sum(s.intervals_hours[: len(s.checkpoints)]) == pytest.approx(
        s.checkpoints[-1])
    assert s.next_checkpoint_after(0.0) == first
    assert s.next_checkpoint_after(first - 1e-6) == first
    # "strictly after": at the first checkpoint the next one (or none) comes
    assert s.next_checkpoint_after(first) == (s.checkpoints[1] if len(s.checkpoints) > 1 else None)
    assert s.next_checkpoint_after(4.0) is None


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"work_hours": -1.0}, "work_hours"),
    ({"work_hours": 1.0, "start_age_hours": -2.0}, "start_age_hours"),
    ({"work_hours": 1.0, "start_age_hours": 30.0}, "start_age_hours"),
    ({"work_hours": 1.001}, "work_hours"),
])
def test_bad_input_names_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(InvalidInput, match=field):
        OptimalCheckpointPlanner(default_gce_model()).plan(**kwargs)


def test_bad_checkpoints_and_delta() -> None:
    m = default_gce_model()
    with pytest.raises(InvalidInput, match="checkpoints"):
        expected_makespan(m, (2.0, 1.0), 3.0, 1 / 60)
    with pytest.raises(InvalidInput, match="delta_hours"):
        OptimalCheckpointPlanner(m, delta_hours=-0.1)


def test_checkpoints_on_the_first_and_last_inner_step_are_accepted_and_the_ends_are_not() -> None:
    """Positions live strictly inside (0, work) on the step grid: steps 1 and J - 1 are valid."""
    m = default_gce_model()
    step = 1 / 60
    first = expected_makespan(m, (step,), 3 * step, step)
    last = expected_makespan(m, (2 * step,), 3 * step, step)
    assert math.isfinite(first) and first >= 4 * step  # 3 steps of work + 1 of checkpoint
    assert math.isfinite(last) and last >= 4 * step
    for bad in ((0.0,), (3 * step,)):
        with pytest.raises(InvalidInput, match="checkpoints"):
            expected_makespan(m, bad, 3 * step, step)
    with pytest.raises(InvalidInput, match="work_hours"):
        expected_makespan(m, (), -1.0, step)
