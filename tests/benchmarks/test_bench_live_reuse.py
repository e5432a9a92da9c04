"""``python -m benchmarks.live_reuse`` runs the real controller: a tiny run's shape (the
targets are checked by the benchmark itself, never here)."""

from __future__ import annotations

import json

import pytest

from benchmarks import live_reuse


def test_a_tiny_live_reuse_run_has_four_arms_and_the_targets(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert live_reuse.main(["--json", "--jobs", "3", "--days", "0.1", "--seeds", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["arms"]) == ["by_age", "always_reuse", "always_reuse_120s", "always_fresh"]
    for arm in out["arms"].values():
        assert (arm["jobs"], arm["succeeded"]) == (3, 3)
        assert arm["total_cost"] == pytest.approx(arm["job_cost"] + arm["idle_cost"], abs=0.011)
        assert 0 <= arm["spare_idle_cost"] <= arm["idle_cost"]
    assert out["arms"]["always_fresh"]["spare_idle_cost"] == 0.0
    assert set(out["targets"]["met"]) == {"preemptions", "cost", "latency"}


def test_bad_seeds_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert live_reuse.main(["--seeds", "a,b"]) == 2
    assert "seeds: not integers: 'a,b'" in capsys.readouterr().err
