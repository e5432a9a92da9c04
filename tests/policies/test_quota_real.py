"""Spot quota on real demand: OrgLinear's bound vs GFS-e's last-week peak (alibaba-dlrm)."""

from __future__ import annotations

import numpy as np
import pytest

from clusters.data.catalog import DataCatalog
from policies.forecast import DLRM_START_HOUR, LastWeekPeak, OrgLinear
from policies.quota import QuotaParams, SpotQuotaAllocator


@pytest.mark.slow
def test_quota_on_real_forecasts_is_monotone_and_less_conservative_than_gfs_e(
    catalog: DataCatalog,
) -> None:
    gpus = catalog.dlrm_demand().gpus[:60]
    hist = gpus[:, :600]
    org = OrgLinear(maxiter=60).fit(hist[:, :504], DLRM_START_HOUR)
    fc = org.predict(hist, 4, DLRM_START_HOUR)
    peak = LastWeekPeak().predict(hist, 4, DLRM_START_HOUR)
    demand_now = float(hist[:, -1].sum())
    cap = 1.2 * demand_now
    inv = {(p, h): SpotQuotaAllocator(QuotaParams(p=p, horizon_hours=h)).inventory(cap, fc)
           for p in (0.9, 0.95) for h in (1, 2, 4)}
    # longer guarantees and higher guarantee rates can only shrink the inventory (Eq. 9)
    for p in (0.9, 0.95):
        assert inv[(p, 1)] >= inv[(p, 2)] >= inv[(p, 4)]
    for h in (1, 2, 4):
        assert inv[(0.9, h)] >= inv[(0.95, h)]
    # the forecast bound sits near the demand, the last-week peak well above it
    actual_next = float(gpus[:, 600:604].max(axis=1).sum())
    assert abs(inv[(0.9, 4)] - (cap - actual_next)) < 0.05 * cap
    gfs_e = SpotQuotaAllocator(QuotaParams(p=0.9, horizon_hours=4)).inventory(cap, peak)
    assert gfs_e < inv[(0.9, 4)]
    # Eq. 10 with eta = 1: the quota never exceeds what is idle plus guaranteed spot
    q = SpotQuotaAllocator(QuotaParams(horizon_hours=4)).quota(cap, fc, s0=cap - demand_now, sa=0.0)
    assert 0.0 < q <= cap - demand_now
    assert np.isfinite(q)
