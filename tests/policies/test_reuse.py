"""Expected waste / running time (seed 001, Eq. 5, 7, 8 conditioned) and the VM-reuse policy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from controlplane.core.errors import InvalidInput
from policies.preemption import ExponentialModel, PreemptionModel, default_gce_model
from policies.reuse import (
    ReuseDecision,
    VmReusePolicy,
    expected_makespan_with_restarts,
    expected_running_time,
    expected_waste,
)


def _conditional_lifetimes(m: PreemptionModel, age: float, n: int, rng: np.random.Generator) -> np.ndarray:
    lo = float(m.cdf(age))
    return m.ppf(lo + (1 - lo) * rng.random(n))


def test_exponential_waste_closed_form() -> None:
    lam, T = 0.25, 5.0
    m = ExponentialModel(rate=lam, limit=1e4)
    closed = (1 - math.exp(-lam * T) * (1 + lam * T)) / lam / (1 - math.exp(-lam * T))
    assert float(expected_waste(m, T)) == pytest.approx(closed, rel=1e-10)
    # Eq. 7: E[T] = T + int_0^T t f(t) dt
    assert float(expected_running_time(m, T)) == pytest.approx(T + closed * (1 - math.exp(-lam * T)))


@pytest.mark.parametrize(("T", "age"), [(6.0, 0.0), (6.0, 10.0), (4.0, 19.0)])
def test_running_time_matches_monte_carlo(T: float, age: float) -> None:
    m = default_gce_model()
    x = _conditional_lifetimes(m, age, 60_000, np.random.default_rng(5))
    lost = np.where(x < age + T, x - age, 0.0)  # one preemption, the retry succeeds (Eq. 6)
    assert float(expected_running_time(m, T, age)) == pytest.approx(T + lost.mean(), rel=0.005)


def test_makespan_with_restarts_matches_monte_carlo() -> None:
    m, T, age = default_gce_model(), 6.0, 17.0
    rng = np.random.default_rng(9)
    total = np.zeros(20_000)
    first = _conditional_lifetimes(m, age, total.size, rng)
    ok = first >= age + T
    total += np.where(ok, T, first - age)
    todo = ~ok
    while todo.any():  # retries on new VMs until the job completes
        x = m.sample(int(todo.sum()), rng)
        done = x >= T
        total[todo] += np.where(done, T, x)
        idx = np.flatnonzero(todo)
        todo[idx[done]] = False
    assert float(expected_makespan_with_restarts(m, T, age)) == pytest.approx(total.mean(), rel=0.01)


def test_policy_on_the_bathtub_model() -> None:
    m = default_gce_model()
    p = VmReusePolicy(m)
    assert p.decide(6, 8.0) is ReuseDecision.REUSE  # a stable middle-aged VM
    assert p.decide(6, 20.0) is ReuseDecision.NEW_VM  # would run into the 24 h deadline
    assert p.decide(6, 24.2) is ReuseDecision.NEW_VM
    for s in (6.0, 12.0, 18.0):
        t_star = p.crossover_job_hours(s)
        assert p.decide(t_star - 0.05, s) is ReuseDecision.REUSE
        assert p.decide(t_star + 0.05, s) is ReuseDecision.NEW_VM
    assert math.isinf(p.crossover_job_hours(0.0))
    # the paper's literal rule (Eq. 8) reuses a VM about to die: little work is lost
    assert VmReusePolicy(m, restarts=False).decide(6, 24.5) is ReuseDecision.REUSE


def test_memoryless_model_never_needs_a_new_vm() -> None:
    p = VmReusePolicy(ExponentialModel(rate=0.3, limit=1e4))
    assert all(p.decide(6, s) is ReuseDecision.REUSE for s in (0.0, 5.0, 18.0, 23.0))


def test_bad_input() -> None:
    m = default_gce_model()
    with pytest.raises(InvalidInput, match="job_hours"):
        expected_waste(m, -1.0)
    with pytest.raises(InvalidInput, match="vm_age_hours"):
        VmReusePolicy(m).decide(2.0, -3.0)
