"""The preemption models at their edges: the limit L, empty and bad input, the quadrature that
models without a closed form use, and the Kaplan-Meier error bars (seed 001, Sec. 3)."""

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
    WeibullModel,
    sse_against_km,
)
from policies.survival import KaplanMeier

GM = GompertzMakehamModel(lam=0.05, alpha=0.01, beta=0.2, limit=24.0)


def test_past_the_limit_the_hazard_is_infinite_and_a_preemption_certain() -> None:
    m = ExponentialModel(rate=0.1, limit=24.0)
    h = m.hazard(np.array([1.0, 24.0, 30.0]))
    assert h[0] == pytest.approx(0.1)
    assert h[1] == math.inf and h[2] == math.inf
    p = m.conditional_failure(np.array([24.0, 30.0, 1.0]), np.array([1.0, 0.0, 2.0]))
    assert p[0] == 1.0 and p[1] == 1.0
    assert p[2] == pytest.approx(1 - math.exp(-0.2), rel=1e-12)  # memoryless: (F(3) - F(1)) / S(1)


def test_conditional_failure_refuses_negative_or_non_finite_hours() -> None:
    with pytest.raises(InvalidInput) as bad_age:
        GM.conditional_failure(-1.0, 1.0)
    assert bad_age.value.field == "age"
    assert str(bad_age.value.message) == "age: must be finite and >= 0 hours, got -1.0"
    assert bad_age.value.fix == "durations and ages are non-negative hours"
    with pytest.raises(InvalidInput) as bad_duration:
        GM.conditional_failure(1.0, float("nan"))
    assert bad_duration.value.field == "duration"


def test_sampling_nothing_is_an_empty_array_and_a_negative_count_is_refused() -> None:
    rng = np.random.default_rng(0)
    assert GM.sample(0, rng).shape == (0,)
    with pytest.raises(InvalidInput) as bad:
        GM.sample(-1, rng)
    assert (bad.value.field, bad.value.message, bad.value.fix) == (
        "n", "n: must be >= 0, got -1", "ask for a non-negative count")


@pytest.mark.parametrize(("lam", "alpha", "beta", "ok"), [
    (0.0, 0.01, 0.2, True), (0.5, 0.01, 0.2, True), (2.0, 0.5, 0.5, True), (0.1, 2.0, 3.0, True),
    (-0.1, 0.01, 0.2, False), (0.1, 0.0, 0.2, False), (0.1, 0.01, 0.0, False),
])
def test_gompertz_makeham_parameter_bounds(lam: float, alpha: float, beta: float, ok: bool) -> None:
    if ok:
        assert GompertzMakehamModel(lam, alpha, beta).params == {"lam": lam, "alpha": alpha, "beta": beta}
        return
    with pytest.raises(InvalidInput) as bad:
        GompertzMakehamModel(lam, alpha, beta)
    assert (bad.value.field, bad.value.message, bad.value.fix) == (
        "lam/alpha/beta", "lam/alpha/beta: need lam >= 0, alpha > 0, beta > 0", "fit the model")


@pytest.mark.parametrize("x", [0.05, 0.37, 3.0, 11.9, 23.5])
def test_the_quadrature_partial_expectation_matches_scipy(x: float) -> None:
    """G(x) = int_0^x t f(t) dt (Eq. 3) by the models' Gauss-Legendre pieces, against quad."""
    want, _ = integrate.quad(lambda t: t * float(GM.pdf(t)), 0.0, x, epsabs=1e-13, epsrel=1e-12)
    assert float(GM.partial_expectation(np.array([x]))[0]) == pytest.approx(want, rel=1e-9, abs=1e-13)
    cdf_area, _ = integrate.quad(lambda t: float(GM.cdf(t)), 0.0, x, epsabs=1e-13, epsrel=1e-12)
    assert float(GM._raw_int_cdf(np.array([x]))[0]) == pytest.approx(cdf_area, rel=1e-9, abs=1e-13)


def test_the_quadrature_takes_many_points_in_any_order() -> None:
    xs = np.array([5.0, 0.5, 12.0, 0.5])
    one_by_one = [float(GM._raw_int_cdf(np.array([x]))[0]) for x in xs]
    np.testing.assert_allclose(GM._raw_int_cdf(xs), one_by_one, rtol=1e-12)
    assert GM._raw_int_cdf(np.array([0.0]))[0] == 0.0


def test_mean_with_the_atom_at_the_limit() -> None:
    """E[L] = int_0^L t f(t) dt + L * P(alive at L) (Eq. 3)."""
    body, _ = integrate.quad(lambda t: t * float(GM.pdf(t)), 0.0, 24.0, epsabs=1e-12, limit=200)
    assert GM.mean() == pytest.approx(body + 24.0 * GM.atom, rel=1e-9)
    w = WeibullModel(shape=1.5, scale=10.0, limit=24.0)
    body_w, _ = integrate.quad(lambda t: t * float(w.pdf(t)), 0.0, 24.0, epsabs=1e-12, limit=200)
    assert w.mean() == pytest.approx(body_w + 24.0 * w.atom, rel=1e-9)


def test_sse_against_km_sums_the_squared_cdf_gaps_at_the_jumps() -> None:
    life = np.array([1.0, 2.0, 2.0, 5.0, 24.0, 10.0])
    preempted = np.array([True, True, True, True, False, False])
    km = KaplanMeier.fit(life, preempted, max_lifetime=24.0)
    m = ExponentialModel(rate=0.2, limit=24.0)
    # KM: S(1) = 5/6, S(2) = 5/6 * 3/5 = 1/2, S(5) = 1/2 * 2/3 = 1/3
    want = sum((1 - math.exp(-0.2 * t) - f) ** 2 for t, f in ((1.0, 1 / 6), (2.0, 1 / 2), (5.0, 2 / 3)))
    assert sse_against_km(m, km) == pytest.approx(want, rel=1e-12)


def test_greenwood_standard_errors_by_hand() -> None:
    """Var S(t) = S(t)^2 sum d_i / (n_i (n_i - d_i)) over jumps up to t (Greenwood)."""
    life = np.array([1.0, 2.0, 2.0, 5.0, 24.0, 10.0])
    km = KaplanMeier.fit(life, np.array([True, True, True, True, False, False]), max_lifetime=24.0)
    s = [5 / 6, 1 / 2, 1 / 3]
    terms = np.cumsum([1 / (6 * 5), 2 / (5 * 3), 1 / (3 * 2)])
    np.testing.assert_allclose(km.greenwood_se(), [si * math.sqrt(v) for si, v in zip(s, terms, strict=True)],
                               rtol=1e-12)
    everyone = KaplanMeier.fit(np.array([1.0, 2.0]), np.array([True, True]), max_lifetime=24.0)
    assert everyone.greenwood_se()[-1] == 0.0  # S = 0 after the last death: no spread left


def test_the_density_is_zero_outside_its_support() -> None:
    """f(t) = 0.5 e^{-0.5 t} on [0, 24) and 0 before 0 and from the limit on (the atom at L is
    no density); a bathtub whose F_c reaches 1 at b = 20 h (tau2 = 0.5 h) has no density past it."""
    m = ExponentialModel(rate=0.5, limit=24.0)
    got = m.pdf(np.array([-1.0, 0.0, 1.0, 23.5, 24.0, 30.0]))
    assert got.tolist() == pytest.approx([0.0, 0.5, 0.5 * math.exp(-0.5), 0.5 * math.exp(-11.75),
                                          0.0, 0.0], abs=0.0, rel=1e-12)
    b = BathtubModel(A=0.5, tau1=1.0, tau2=0.5, b=20.0, limit=24.0)
    assert b.support_end == pytest.approx(20.0, abs=1e-6)
    past = b.pdf(np.array([19.99, 20.5, 23.0]))
    assert past[0] == pytest.approx(0.5 * math.exp(-19.99) + math.exp(-0.02), rel=1e-9)
    assert past[1:].tolist() == [0.0, 0.0]


def test_the_partial_expectation_of_no_points_is_empty() -> None:
    """An empty array in, an empty array out (Gompertz-Makeham's quadrature included)."""
    for model in (GM, BathtubModel(A=0.4, tau1=1.0, tau2=0.8, b=23.0)):
        out = model.partial_expectation(np.array([]))
        assert out.shape == (0,) and out.dtype == np.float64


def test_a_least_squares_fit_whose_covariance_is_unknown_still_fits() -> None:
    """Two preemptions among five VMs: the Kaplan-Meier CDF is 0.2 at 1 h and 0.4 at 3 h. A
    two- or four-parameter curve through two points leaves curve_fit no covariance (its
    OptimizeWarning is ignored, not raised); Weibull and the bathtub pass through both points."""
    life = np.array([1.0, 3.0, 24.0, 24.0, 24.0])
    pre = np.array([True, True, False, False, False])
    for cls in (WeibullModel, BathtubModel):
        m = cls.fit(life, pre, 24.0, method="km_lsq")
        assert m.cdf(np.array([1.0, 3.0])) == pytest.approx([0.2, 0.4], abs=1e-9)
    assert GompertzMakehamModel.fit(life, pre, 24.0, method="km_lsq").beta > 0
