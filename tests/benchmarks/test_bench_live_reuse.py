"""``python -m benchmarks.live_reuse`` runs the real controller: a tiny run's shape (the
targets are checked by the benchmark itself, never here)."""

from __future__ import annotations

import json

import pytest

from benchmarks import live_reuse


def test_a_tiny_live_reuse_run_has_five_arms_and_the_targets(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert live_reuse.main(["--json", "--jobs", "3", "--days", "0.1", "--seeds", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["arms"]) == ["by_age", "by_age_priced", "always_reuse", "always_reuse_120s",
                                 "always_fresh"]
    for arm in out["arms"].values():
        assert (arm["jobs"], arm["succeeded"]) == (3, 3)
        assert arm["total_cost"] == pytest.approx(arm["job_cost"] + arm["idle_cost"], abs=0.011)
        assert 0 <= arm["spare_idle_cost"] <= arm["idle_cost"]
        assert 0 <= arm["fast_start_share"] <= 1
        assert set(arm["vms_lost_by_cause"]) <= {"zone outage", "lifetime", "24 h stop"}
    assert out["arms"]["always_fresh"]["spare_idle_cost"] == 0.0
    assert out["arms"]["always_fresh"]["fast_start_share"] == 0.0  # every start waits for a VM
    assert set(out["targets"]["met"]) == {"preemptions", "cost", "latency"}
    assert set(out["targets"]["by_age_priced"]) == {
        "preemptions_fewer_than_always_reuse_pct", "cost_vs_always_fresh_pct",
        "median_latency_below_always_fresh_pct"}


def test_bad_seeds_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert live_reuse.main(["--seeds", "a,b"]) == 2
    assert "seeds: not integers: 'a,b'" in capsys.readouterr().err
