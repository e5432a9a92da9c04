"""Spot quota allocator: Eq. 9-11 on hand-computed cases (paper 002 Sec. 3.3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from controlplane.core.errors import InvalidInput
from policies.forecast import Forecast
from policies.quota import QuotaParams, SpotQuotaAllocator, aggregate_upper_demand

Z90 = float(norm.ppf(0.9))  # 1.2816


def _forecast(mean: list[list[float]], sigma: list[list[float]]) -> Forecast:
    return Forecast(np.array(mean, dtype=float), np.array(sigma, dtype=float))


# two tenants, three hours
FC = _forecast([[10, 12, 11], [20, 18, 25]], [[1, 2, 1], [0, 0, 4]])


def test_eq9_sums_each_tenants_peak_of_the_p_bound_over_h() -> None:
    # H = 1: only hour 1: (10 + 1.2816) + 20
    assert aggregate_upper_demand(FC, 0.9, 1) == pytest.approx(30 + Z90)
    # H = 2: tenant 0 peak = max(10 + z, 12 + 2z) = 12 + 2z; tenant 1 peak = max(20, 18) = 20
    assert aggregate_upper_demand(FC, 0.9, 2) == pytest.approx(32 + 2 * Z90)
    # H = 3: tenant 1 hour 3 = 25 + 4z beats 20
    assert aggregate_upper_demand(FC, 0.9, 3) == pytest.approx(12 + 2 * Z90 + 25 + 4 * Z90)


def test_eq9_summed_gaussian_is_the_quantile_of_the_tenants_sum() -> None:
    # hour 1: N(30, sqrt(1 + 0)); hour 2: N(30, sqrt(4 + 0)) -> 30 + 2z; hour 3: N(36, sqrt(1 + 16))
    agg = "summed_gaussian"
    assert aggregate_upper_demand(FC, 0.9, 1, agg) == pytest.approx(30 + Z90)
    assert aggregate_upper_demand(FC, 0.9, 2, agg) == pytest.approx(30 + 2 * Z90)
    assert aggregate_upper_demand(FC, 0.9, 3, agg) == pytest.approx(36 + math.sqrt(17) * Z90)
    # below the sum of the tenants' quantiles whenever two tenants are uncertain at once
    two = _forecast([[10], [10]], [[3], [4]])
    assert aggregate_upper_demand(two, 0.9, 1, agg) == pytest.approx(20 + 5 * Z90)
    assert aggregate_upper_demand(two, 0.9, 1) == pytest.approx(20 + 7 * Z90)
    assert SpotQuotaAllocator(QuotaParams()).inventory(100.0, two) == pytest.approx(80 - 5 * Z90)
    with pytest.raises(InvalidInput, match="aggregation"):
        QuotaParams(aggregation="median")


def test_eq9_inventory_is_capacity_minus_demand_and_zero_when_saturated() -> None:
    sqa = SpotQuotaAllocator(QuotaParams(horizon_hours=2, aggregation="sum_of_quantiles"))
    assert sqa.inventory(100.0, FC) == pytest.approx(100 - 32 - 2 * Z90)  # 65.437
    # the printed C - max(C, D) would be <= 0 always; the corrected form clips at 0
    assert sqa.inventory(30.0, FC) == 0.0
    assert sqa.inventory(32 + 2 * Z90, FC) == pytest.approx(0.0, abs=1e-9)


def test_eq9_rejects_a_forecast_shorter_than_h() -> None:
    sqa = SpotQuotaAllocator(QuotaParams(horizon_hours=4))
    with pytest.raises(InvalidInput, match="H = 4"):
        sqa.inventory(100.0, FC)


def test_eq10_quota_is_min_of_scaled_inventory_and_idle_plus_guaranteed_spot() -> None:
    sqa = SpotQuotaAllocator(QuotaParams(horizon_hours=1))
    f = 100 - 30 - Z90  # 68.718
    assert sqa.eta == 1.0
    assert sqa.quota(100.0, FC, s0=50.0, sa=10.0) == pytest.approx(60.0)  # S0 + Sa binds
    assert sqa.quota(100.0, FC, s0=60.0, sa=20.0) == pytest.approx(f)  # f * eta binds
    sqa.update_eta(0.30, 0.0)  # eta = 0.1 / 0.3
    assert sqa.quota(100.0, FC, s0=60.0, sa=20.0) == pytest.approx(f / 3)
    with pytest.raises(InvalidInput, match="s0"):
        sqa.quota(100.0, FC, s0=-1.0, sa=0.0)


def test_eq11_high_eviction_shrinks_eta_by_eps_over_e() -> None:
    sqa = SpotQuotaAllocator()  # p = 0.9 -> eps = 0.1, case 1 when e > 0.15
    assert sqa.update_eta(0.2, 10.0) == pytest.approx(0.5)
    assert sqa.update_eta(0.4, 99999.0) == pytest.approx(0.125)  # high queue does not matter


def test_eq11_low_eviction_and_long_queue_grows_eta() -> None:
    sqa = SpotQuotaAllocator()  # case 2 when e < 0.05 and l > 3600 s
    assert sqa.update_eta(0.02, 3601.0) == pytest.approx(1.3)  # 1.5 - 0.02 / 0.1
    assert sqa.update_eta(0.0, 7200.0) == pytest.approx(1.3 * 1.5)


def test_eq11_otherwise_eta_is_unchanged() -> None:
    sqa = SpotQuotaAllocator()
    assert sqa.update_eta(0.02, 3600.0) == 1.0  # queue not above theta
    assert sqa.update_eta(0.10, 99999.0) == 1.0  # eviction between 0.5 eps and 1.5 eps
    assert sqa.update_eta(0.15, 0.0) == 1.0  # boundary 1.5 eps is not "above"
    assert sqa.update_eta(0.05, 99999.0) == 1.0  # boundary 0.5 eps is not "below"
    assert sqa.updates == 4


def test_eta_is_clamped_and_survives_a_state_round_trip() -> None:
    sqa = SpotQuotaAllocator(QuotaParams(eta_max=2.0, eta_min=0.1))
    for _ in range(5):
        sqa.update_eta(0.0, 1e6)
    assert sqa.eta == 2.0
    for _ in range(5):
        sqa.update_eta(1.0, 0.0)
    assert sqa.eta == pytest.approx(0.1)
    other = SpotQuotaAllocator()
    other.load_state_dict(sqa.state_dict())
    assert (other.eta, other.updates, other.params) == (sqa.eta, 10, sqa.params)
    with pytest.raises(InvalidInput, match="state"):
        other.load_state_dict({"eta": 1.0})


def test_bad_inputs_name_the_field() -> None:
    with pytest.raises(InvalidInput, match="eviction_rate"):
        SpotQuotaAllocator().update_eta(1.5, 0.0)
    with pytest.raises(InvalidInput, match="^p:"):
        QuotaParams(p=1.0)
    with pytest.raises(InvalidInput, match="horizon_hours"):
        QuotaParams(horizon_hours=0)


def test_eq11_boundaries_are_the_floating_point_products() -> None:
    eps = QuotaParams().tolerated_eviction_rate
    assert eps == 0.1
    high, low = 1.5 * eps, 0.5 * eps  # 0.15000000000000002 and 0.05
    # exactly at 1.5 eps: not above, eta stays; one ulp above: eta * eps / e
    assert SpotQuotaAllocator().update_eta(high, 0.0) == 1.0
    above = math.nextafter(high, 1.0)
    assert SpotQuotaAllocator().update_eta(above, 0.0) == eps / above
    # exactly at 0.5 eps: not below, eta stays; one ulp below (and l > theta): 1.5 - e / eps
    assert SpotQuotaAllocator().update_eta(low, 3601.0) == 1.0
    below = math.nextafter(low, 0.0)
    assert SpotQuotaAllocator().update_eta(below, 3601.0) == 1.5 - below / eps
    # the queue threshold theta: exactly 3600 s is not above it, one ulp more is
    assert SpotQuotaAllocator().update_eta(0.0, 3600.0) == 1.0
    assert SpotQuotaAllocator().update_eta(0.0, math.nextafter(3600.0, 1e9)) == 1.5


def test_default_eta_clamp_is_0_05_to_4() -> None:
    p = QuotaParams()
    assert (p.eta0, p.eta_min, p.eta_max) == (1.0, 0.05, 4.0)
    grow = SpotQuotaAllocator()
    etas = [grow.update_eta(0.0, 1e6) for _ in range(5)]  # x1.5 each: 1.5, 2.25, 3.375, 4, 4
    assert etas == [1.5, 2.25, 3.375, 4.0, 4.0]
    shrink = SpotQuotaAllocator()
    etas = [shrink.update_eta(1.0, 0.0) for _ in range(3)]  # x0.1 each: 0.1, 0.05 (clamped)
    assert etas == pytest.approx([0.1, 0.05, 0.05], rel=1e-12)
    assert shrink.eta == 0.05


def test_eq9_one_tenant_no_tenant_and_a_demand_below_one_gpu() -> None:
    # one tenant whose p-bound is 0.3 GPUs (mean 0.3, no spread): demand 0.3, not rounded up
    one = _forecast([[0.3, 0.1]], [[0.0, 0.0]])
    assert aggregate_upper_demand(one, 0.9, 2) == pytest.approx(0.3)
    assert SpotQuotaAllocator().inventory(10.0, one) == pytest.approx(9.7)
    # a negative bound (mean -2) counts as no demand
    assert aggregate_upper_demand(_forecast([[-2.0]], [[0.0]]), 0.9, 1) == 0.0
    # no HP tenant at all: no demand, the whole pool is inventory
    none = Forecast(np.zeros((0, 3)), np.zeros((0, 3)))
    assert aggregate_upper_demand(none, 0.9, 1) == 0.0
    assert SpotQuotaAllocator().inventory(10.0, none) == 10.0


@pytest.mark.parametrize(("kwargs", "ok"), [
    ({"p": 0.5}, True), ({"p": math.nextafter(0.5, 0.0)}, False),
    ({"theta_seconds": 0.0}, True), ({"theta_seconds": -1e-9}, False),
    ({"update_seconds": 1e-9}, True), ({"update_seconds": 0.0}, False),
    ({"update_seconds": 0.5}, True),
    ({"eta_min": 1.0}, True), ({"eta_max": 1.0}, True), ({"eta_min": 0.0}, False),
    ({"eta_min": 1.5, "eta_max": 2.0}, False), ({"eta_max": 0.5}, False),
])
def test_params_accept_their_boundaries_and_refuse_beyond(kwargs: dict, ok: bool) -> None:
    if ok:
        QuotaParams(**kwargs)
    else:
        with pytest.raises(InvalidInput):
            QuotaParams(**kwargs)


def test_a_state_without_an_update_count_starts_counting_at_zero() -> None:
    sqa = SpotQuotaAllocator()
    sqa.load_state_dict({"params": QuotaParams().__dict__, "eta": 9.0})
    assert (sqa.eta, sqa.updates) == (4.0, 0)  # eta clamped to eta_max on load


def test_starvation_guard_admits_the_oldest_spot_task_after_theta_within_idle_gpus() -> None:
    from policies.quota import starvation_guard

    # before theta, or with nothing waiting, Eq. 10's quota stands
    assert starvation_guard(2.0, 4.0, 3599.0, 1.0, 8.0, 3600.0) == 2.0
    assert starvation_guard(2.0, 0.0, 9999.0, 1.0, 8.0, 3600.0) == 2.0
    # after theta: room for its 4 GPUs beside the 1 spot GPU held, but never above S0 + Sa
    assert starvation_guard(2.0, 4.0, 3600.0, 1.0, 8.0, 3600.0) == 5.0
    assert starvation_guard(2.0, 4.0, 7200.0, 1.0, 2.0, 3600.0) == 3.0
    assert starvation_guard(6.0, 4.0, 7200.0, 1.0, 8.0, 3600.0) == 6.0  # never lowers the quota


def test_spot_guard_modes_act_by_eviction_rate_and_wait_theta_or_four() -> None:
    from policies.quota import spot_guard_acts, spot_guard_wait_s

    eps = 0.1
    assert not spot_guard_acts("off", 0.0, eps) and spot_guard_acts("oldest", 1.0, eps)
    for calm in ("oldest_calm", "oldest_calm_4h"):
        assert spot_guard_acts(calm, None, eps) and spot_guard_acts(calm, 0.049, eps)
        assert not spot_guard_acts(calm, 0.05, eps)  # Eq. 11's growth threshold 0.5 eps
    assert spot_guard_wait_s("oldest_calm", 3600.0) == 3600.0
    assert spot_guard_wait_s("oldest_calm_4h", 3600.0) == 4 * 3600.0
    with pytest.raises(InvalidInput, match="spot_guard"):
        spot_guard_acts("sometimes", 0.0, eps)
