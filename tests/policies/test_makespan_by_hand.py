"""Monte Carlo makespans and Young-Daly checkpoints, computed by hand on lifetimes we choose.

A uniform lifetime on [0, 10 h] has ppf(u) = 10 u, and the random numbers come from a script, so
every preemption of ``simulate_makespan`` is known and its makespans are exact sums."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from controlplane.core.errors import InvalidInput
from policies.checkpoint import (
    YoungDalyPlanner,
    expected_makespan,
    simulate_makespan,
    young_daly_interval,
)
from policies.preemption import ExponentialModel, PreemptionModel, WeibullModel


@dataclass(frozen=True, eq=False)
class Uniform10(PreemptionModel):
    """F(t) = t / 10 on [0, 10 h]: the lifetime of u is 10 u."""

    limit: float = 10.0

    def _raw_cdf(self, t: np.ndarray) -> np.ndarray:
        return np.asarray(t / 10.0, dtype=np.float64)

    def _raw_pdf(self, t: np.ndarray) -> np.ndarray:
        return np.full(np.shape(t), 0.1)


class Script:
    """A Generator's ``random(n)`` that answers prescribed numbers, call after call."""

    def __init__(self, *draws: Sequence[float]) -> None:
        self.draws = [np.asarray(d, dtype=float) for d in draws]

    def random(self, n: int) -> np.ndarray:
        out = self.draws.pop(0)
        assert out.size == n, (out.size, n)
        return out


def pool(*u: float, runs: int = 1) -> list[float]:
    """The restart lifetimes' draws: ``runs * 8`` numbers, the given ones first."""
    return [*u, *([0.5] * (runs * 8 - len(u)))]


def test_one_preemption_then_the_schedule_goes_on() -> None:
    # run 1 starts at age 2 h and dies at age 3.05 h (0.2 + 0.8 u = 0.305); run 2 never dies
    rng = Script(pool(0.5, 0.5, runs=2), [0.13125, 1 - 1e-12])
    out = simulate_makespan(Uniform10(), [1.0, 2.0], 3.0, 0.1, runs=2, rng=rng,  # type: ignore[arg-type]
                            start_age_hours=2.0, restart_hours=0.5)
    # run 1: 1.05 h alive + 0.5 restart, then 1.1 + 1.1 + 1.0 (no checkpoint after the last hour)
    # run 2: 1.1 + 1.1 + 1.0
    np.testing.assert_allclose(out, [1.05 + 0.5 + 3.2, 3.2], rtol=1e-12)


def test_after_a_preemption_replan_counts_checkpoints_from_the_restart() -> None:
    rng = Script(pool(0.5), [0.13125])
    out = simulate_makespan(Uniform10(), [1.0, 2.0], 3.0, 0.1, runs=1, rng=rng,  # type: ignore[arg-type]
                            start_age_hours=2.0, restart_hours=0.5, replan=lambda left: [left / 2])
    # preempted at work 0 after 1.05 h; then checkpoint at 1.5 (1.6 h) and finish (1.5 h)
    assert out[0] == pytest.approx(1.05 + 0.5 + 1.6 + 1.5, rel=1e-12)


def test_restarts_use_the_pool_in_order_and_draw_a_new_one_when_it_runs_out() -> None:
    # nine lifetimes shorter than the one-hour job: the first, then the eight of the pool
    # (0.5, 0.6, 0.7, 0.8 h twice); the ninth restart draws a new pool and lives 5 h
    rng = Script([0.05, 0.06, 0.07, 0.08, 0.05, 0.06, 0.07, 0.08], [0.05], [0.5] * 8)
    out = simulate_makespan(Uniform10(), [], 1.0, 0.0, runs=1, rng=rng,  # type: ignore[arg-type]
                            restart_hours=0.5)
    assert out[0] == pytest.approx((0.5 + 0.5) + 2 * (0.5 + 0.6 + 0.7 + 0.8) + 8 * 0.5 + 1.0, rel=1e-12)


def test_a_checkpoint_at_the_end_of_work_costs_nothing() -> None:
    rng = Script(pool(), [0.999])
    out = simulate_makespan(Uniform10(), [1.0], 2.0, 0.25, runs=1, rng=rng)  # type: ignore[arg-type]
    assert out[0] == pytest.approx(1.25 + 1.0, rel=1e-12)


def test_a_job_that_ends_exactly_when_its_vm_dies_finishes() -> None:
    rng = Script(pool(), [0.3])  # dies at 3.0 h, the job needs 1 + 0.5 + 1.5 = 3.0 h
    out = simulate_makespan(Uniform10(), [1.0], 2.5, 0.5, runs=1, rng=rng)  # type: ignore[arg-type]
    assert out[0] == pytest.approx(3.0, rel=1e-12)


@pytest.mark.parametrize(("kwargs", "field", "message", "fix"), [
    ({"runs": 0}, "runs", "runs: must be > 0, got 0", "e.g. runs=10_000"),
    ({"work_hours": 0.0}, "work_hours", "work_hours: work must be > 0 and delta, start age >= 0 hours",
     "pass non-negative durations"),
    ({"delta_hours": -0.1}, "work_hours", "work_hours: work must be > 0 and delta, start age >= 0 hours",
     "pass non-negative durations"),
    ({"start_age_hours": -1.0}, "work_hours", "work_hours: work must be > 0 and delta, start age >= 0 hours",
     "pass non-negative durations"),
    ({"start_age_hours": 10.0}, "start_age_hours", "start_age_hours: 10.0 h is past the model's limit",
     "start on a new VM"),
])
def test_bad_simulation_input_names_the_field(kwargs: dict[str, float], field: str, message: str,
                                              fix: str) -> None:
    args: dict[str, object] = {"work_hours": 1.0, "delta_hours": 0.1, "runs": 1, "start_age_hours": 0.0}
    args.update(kwargs)
    with pytest.raises(InvalidInput) as bad:
        simulate_makespan(Uniform10(), [], rng=np.random.default_rng(0), **args)  # type: ignore[arg-type]
    assert (bad.value.field, bad.value.message, bad.value.fix) == (field, message, fix)


def test_zero_delta_and_one_run_are_allowed() -> None:
    out = simulate_makespan(Uniform10(), [0.5], 1.0, 0.0, runs=1, rng=Script(pool(), [0.999]))  # type: ignore[arg-type]
    assert out[0] == pytest.approx(1.0, rel=1e-12)


def test_young_daly_interval_and_planner_by_hand() -> None:
    """sqrt(2 delta MTTF) with MTTF = 1 / hazard(0) (Sec. 4.3)."""
    assert young_daly_interval(0.02, 2.0) == pytest.approx(math.sqrt(0.08), rel=1e-15)
    m = WeibullModel(shape=0.5, scale=4.0, limit=1000.0)
    # Weibull hazard (k/s)(t/s)^(k-1) is infinite at 0: no time between failures, no interval
    assert YoungDalyPlanner(m).interval_hours == 0.0
    e = ExponentialModel(rate=1.0, limit=1000.0)
    yd = YoungDalyPlanner(e, step_hours=1 / 60, delta_hours=1 / 60, restart_hours=0.25)
    assert yd.mttf == pytest.approx(1.0, rel=1e-12)
    assert yd.model is e and yd.restart == 0.25
    assert yd.interval_hours == pytest.approx(math.sqrt(2 / 60), rel=1e-12)  # 0.1826 h = 10.95 steps
    plan = yd.plan(1.0)
    assert plan.checkpoints == pytest.approx(tuple(i * 11 / 60 for i in range(1, 6)), rel=1e-12)
    assert plan.intervals_hours == pytest.approx((11 / 60,) * 5 + (5 / 60,), rel=1e-9)
    assert plan.expected_makespan_hours == pytest.approx(
        expected_makespan(e, plan.checkpoints, 1.0, 1 / 60, restart_hours=0.25), rel=1e-12)
    assert plan.expected_makespan_hours > expected_makespan(e, plan.checkpoints, 1.0, 1 / 60)


def test_young_daly_with_a_hazard_that_starts_at_zero_plans_no_checkpoint() -> None:
    """A Weibull of shape > 1 never fails at age 0: MTTF by hazard(0) is infinite."""
    yd = YoungDalyPlanner(WeibullModel(shape=2.0, scale=10.0, limit=1000.0))
    assert yd.mttf == math.inf and yd.interval_hours == math.inf
    assert yd.plan(2.0).checkpoints == ()


def test_young_daly_refuses_a_delta_off_the_grid() -> None:
    with pytest.raises(InvalidInput) as bad:
        YoungDalyPlanner(ExponentialModel(rate=1.0), step_hours=0.1, delta_hours=0.05)
    assert bad.value.field == "delta_hours"
