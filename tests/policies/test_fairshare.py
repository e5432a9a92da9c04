"""Fair share with borrowing, by hand: nominal shares, water-filling, reclaim victims (FS-1..4)."""

from __future__ import annotations

import pytest

from policies.fairshare import (
    Candidate,
    TenantDemand,
    entitlements,
    nominal_shares,
    reclaim,
    victim_key,
)


def test_nominal_shares_follow_weights_and_set_nominals() -> None:
    ts = [TenantDemand("a", 1), TenantDemand("b", 1), TenantDemand("c", 2)]
    assert nominal_shares(8, ts) == {"a": 2.0, "b": 2.0, "c": 4.0}
    ts = [TenantDemand("a", 1, nominal=6), TenantDemand("b", 1), TenantDemand("c", 1)]
    assert nominal_shares(8, ts) == {"a": 6.0, "b": 1.0, "c": 1.0}
    over = nominal_shares(8, [TenantDemand("a", nominal=12), TenantDemand("b", nominal=4)])
    assert over == pytest.approx({"a": 6.0, "b": 2.0})


def test_an_idle_tenants_share_is_lent_by_weight_and_reclaimed_when_it_asks() -> None:
    busy = [TenantDemand("a", 1, held=0), TenantDemand("b", 1, held=2, waiting=10),
            TenantDemand("c", 2, held=6, waiting=10)]
    lines = entitlements(8, busy)
    assert lines["a"].entitled == 0.0
    assert lines["b"].entitled == pytest.approx(8 / 3) and lines["c"].entitled == pytest.approx(16 / 3)
    assert lines["c"].borrowed == pytest.approx(2.0) and lines["a"].lent == pytest.approx(2.0)
    back = entitlements(8, [TenantDemand("a", 1, held=0, waiting=4), *busy[1:]])
    assert [back[t].entitled for t in "abc"] == pytest.approx([2.0, 2.0, 4.0])
    # a tenant asking less than its share leaves the rest to the others
    small = entitlements(8, [TenantDemand("a", 1, waiting=1), *busy[1:]])
    assert [small[t].entitled for t in "abc"] == pytest.approx([1.0, 7 / 3, 14 / 3])


def test_the_victim_is_the_one_losing_the_least_work() -> None:
    lines = entitlements(4, [TenantDemand("a", 1, waiting=2), TenantDemand("b", 1, held=4)])
    fresh = Candidate("fresh", "b", 1, since_checkpoint_h=1 / 60)  # checkpointed a minute ago
    stale = Candidate("stale", "b", 1, since_checkpoint_h=3.0)  # would lose three hours
    assert reclaim(lines, "a", 1, [stale, fresh]) == ("fresh",)
    assert reclaim(lines, "a", 2, [stale, fresh]) == ("fresh", "stale")
    # never below the lender's entitlement, never the claimant's own jobs
    assert reclaim(lines, "a", 3, [stale, fresh, Candidate("x", "b", 1, 0.0)]) == ()
    assert reclaim(lines, "b", 1, [fresh]) == ()
    # GFS's rule alone trusts its fixed-interval estimate: it picks the stale one here
    est_fresh = Candidate("fresh", "b", 1, 1 / 60, estimated_since_checkpoint_h=0.9)
    est_stale = Candidate("stale", "b", 1, 3.0, estimated_since_checkpoint_h=0.1)
    assert reclaim(lines, "a", 1, [est_fresh, est_stale], rule="gfs") == ("stale",)
    assert reclaim(lines, "a", 1, [est_fresh, est_stale], rule="work") == ("fresh",)


def test_a_tenant_further_over_its_share_gives_first_at_equal_lost_work() -> None:
    lines = entitlements(6, [TenantDemand("a", 1, waiting=2), TenantDemand("b", 1, held=2),
                             TenantDemand("c", 1, held=4)])
    b, c = Candidate("jb", "b", 1, 1.0), Candidate("jc", "c", 1, 1.0)
    assert victim_key(c, lines["c"]) < victim_key(b, lines["b"])
    assert reclaim(lines, "a", 1, [b, c]) == ("jc",)
