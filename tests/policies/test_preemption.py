"""Preemption models (seed 001, Eq. 1-3) against closed forms, censoring, Kaplan-Meier, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from controlplane.core.errors import InvalidInput
from policies.preemption import (
    BathtubModel,
    ExponentialModel,
    GompertzMakehamModel,
    PreemptionModel,
    WeibullModel,
    default_gce_model,
)
from policies.survival import KaplanMeier

MODELS = [
    BathtubModel(A=0.45, tau1=1.0, tau2=0.8, b=24.0),
    ExponentialModel(rate=0.2),
    WeibullModel(shape=0.6, scale=10.0),
    GompertzMakehamModel(lam=0.05, alpha=0.01, beta=0.2),
    default_gce_model(),
]


@pytest.mark.parametrize("m", MODELS, ids=lambda m: m.name)
def test_distribution_identities(m: PreemptionModel) -> None:
    L = m.max_lifetime
    t = np.linspace(0, L - 1e-6, 400)
    F = m.cdf(t)
    assert F[0] == pytest.approx(0.0, abs=1e-12)
    assert np.all(np.diff(F) >= -1e-15)
    assert float(m.cdf(L)) == 1.0 and float(m.sf(L + 1)) == 0.0
    # the atom at L is what the smooth part leaves
    assert 1 - m.atom == pytest.approx(float(m.cdf(L - 1e-9)), abs=1e-7)
    # pdf integrates to F_c; hazard = f / S
    for x in (0.5, 6.0, 20.0):
        q, _ = integrate.quad(lambda u: float(m.pdf(u)), 0, x, limit=200)
        assert q == pytest.approx(float(m.cdf(x)), abs=1e-7)
        assert float(m.hazard(x)) == pytest.approx(float(m.pdf(x) / m.sf(x)))
    # Eq. 3: E[L] = int t f dt + L * atom = int_0^L S dt
    s_int, _ = integrate.quad(lambda u: float(m.sf(u)), 0, L, limit=400, points=[L - 1, L - 0.2])
    assert m.mean() == pytest.approx(s_int, rel=1e-6)


@pytest.mark.parametrize("m", MODELS[:3], ids=lambda m: m.name)
def test_closed_form_partial_expectation_matches_quadrature(m: PreemptionModel) -> None:
    x = np.array([0.3, 2.0, 11.0, 23.5])
    generic = PreemptionModel._raw_partial_expectation(m, x)  # x F - int F, by Gauss-Legendre
    # Weibull with shape < 1 has an integrable singularity at 0: quadrature is ~1e-7 off there
    assert m.partial_expectation(x) == pytest.approx(generic, rel=1e-9, abs=2e-7)


def test_exponential_closed_forms_and_memorylessness() -> None:
    lam, L = 0.3, 24.0
    m = ExponentialModel(rate=lam)
    assert m.mean() == pytest.approx((1 - math.exp(-lam * L)) / lam, rel=1e-12)
    assert m.hazard(np.array([0.1, 5.0, 20.0])) == pytest.approx([lam] * 3)
    # memoryless before the limit, certain failure across it
    assert float(m.conditional_failure(7.0, 2.0)) == pytest.approx(1 - math.exp(-2 * lam))
    assert float(m.conditional_failure(23.0, 2.0)) == 1.0


def test_bathtub_matches_eq_1_to_3() -> None:
    A, t1, t2, b = 0.45, 1.0, 0.8, 24.0
    m = BathtubModel(A=A, tau1=t1, tau2=t2, b=b, limit=25.0)
    t = 10.0
    eq1 = A * (1 - math.exp(-t / t1) + math.exp((t - b) / t2) - math.exp(-b / t2))
    eq2 = A * (math.exp(-t / t1) / t1 + math.exp((t - b) / t2) / t2)
    assert float(m.cdf(t)) == pytest.approx(eq1, rel=1e-12)
    assert float(m.pdf(t)) == pytest.approx(eq2, rel=1e-12)
    # the bathtub: high early hazard, low middle, steep rise near the limit
    h = m.hazard(np.array([0.0, 12.0, 23.5]))
    assert h[1] < h[0] / 10 and h[2] > h[0]


def test_sampling_reproduces_cdf_and_atom() -> None:
    m = default_gce_model()
    x = m.sample(40_000, np.random.default_rng(3))
    assert x.max() <= m.max_lifetime
    for q in (1.0, 6.0, 20.0, 24.5):
        assert np.mean(x <= q) == pytest.approx(float(m.cdf(q)), abs=0.01)
    assert x.mean() == pytest.approx(m.mean(), rel=0.02)


def test_kaplan_meier_by_hand() -> None:
    km = KaplanMeier.fit([1, 2, 2, 3, 4], [True, False, True, True, False], max_lifetime=24)
    assert km.times.tolist() == [1, 2, 3]
    assert km.survival == pytest.approx([0.8, 0.6, 0.3])
    assert float(km.sf(2.5)) == pytest.approx(0.6) and float(km.cdf(0.5)) == 0.0


def test_censored_mle_recovers_rate_where_dropping_stops_does_not() -> None:
    rng = np.random.default_rng(11)
    true = rng.exponential(1 / 0.2, 4000)
    cens = rng.uniform(0, 12, 4000)
    t = np.minimum(true, cens)
    pre = true <= cens
    t, pre = np.minimum(t, 24.0), pre | (t >= 24.0)
    fit = ExponentialModel.fit(t, pre, method="mle")
    assert fit.rate == pytest.approx(0.2, rel=0.06)
    lsq = ExponentialModel.fit(t, pre, method="km_lsq")
    assert lsq.rate == pytest.approx(0.2, rel=0.08)
    dropped = ExponentialModel.fit(t[pre], pre[pre], method="mle")
    assert dropped.rate > 0.3  # the bias the censoring-aware fits avoid


@pytest.mark.parametrize(("t", "p", "field", "msg"), [
    ([], [], "lifetimes", "empty group"),
    ([1.0, -2.0], [True, False], "lifetimes", "negative"),
    ([1.0, 30.0], [True, True], "lifetimes", "over the limit"),
    ([1.0, 2.0], [True], "preempted_mask", "entries"),
    ([1.0, 2.0], [False, False], "preempted_mask", "no preemption"),
])
def test_fit_rejects_bad_input(t: list[float], p: list[bool], field: str, msg: str) -> None:
    with pytest.raises(InvalidInput, match=field) as e:
        BathtubModel.fit(t, p)
    assert msg in str(e.value)


def test_model_rejects_bad_queries() -> None:
    m = default_gce_model()
    with pytest.raises(InvalidInput, match="duration"):
        m.conditional_failure(1.0, -1.0)
    with pytest.raises(InvalidInput, match="method"):
        ExponentialModel.fit([1.0], [True], method="bayes")
    with pytest.raises(InvalidInput, match="tau1"):
        BathtubModel(A=0.4, tau1=-1.0, tau2=0.8, b=24.0)
