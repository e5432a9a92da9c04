"""``python -m benchmarks.live_zones`` runs the real controller in both zone-observation modes: a
tiny run's shape and invariants (the cost target is the benchmark's, never checked here)."""

from __future__ import annotations

import json

import pytest

from benchmarks import live_zones


@pytest.mark.slow
def test_two_draws_evidence_reads_no_every_zone_view_and_counts_each_probe_it_bought(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert live_zones.main(["--json", "--draws", "2", "--ratio", "2.0,1.1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["per_ratio"]) == ["2", "1.1"]
    probes = 0
    for r in out["per_ratio"].values():
        free, ev = r["modes"]["free"], r["modes"]["evidence"]
        assert set(ev) == set(free) | {"vs_free_pct", "worst_draw_vs_free_pct"}
        assert set(r["met"]) == {"cost", "misses"} and len(r["worst_draws"]) == 2
        assert (free["runs"], ev["runs"]) == (2, 2)
        assert free["missed"] == ev["missed"] == 0
        assert free["every_zone_reads"] > 0 and ev["every_zone_reads"] == 0
        assert free["probes"] == 0 and free["probe_cost"] == 0
        assert ev["vs_free_pct"] == pytest.approx(
            100 * (ev["total_cost"] / free["total_cost"] - 1), abs=0.02)
        for f, e in zip(r["runs"]["free"], r["runs"]["evidence"], strict=True):
            assert (f["draw"], f["offset_hours"], f["seed"]) == (e["draw"], e["offset_hours"],
                                                                 e["seed"])  # the same draw
            assert e["probes"] == e["probe_calls"]  # each probe counted is one the fleet answered
            assert e["probe_cost"] < e["probes"] * 3.06 / 60 + 1e-9  # a minute of spot each
            assert e["total_cost"] == pytest.approx(e["job_cost"] + e["probe_cost"], abs=1e-3)
            assert e["decisions"]["policies"] == ["spotplane_probing"]
            assert f["decisions"]["policies"] == ["spotplane_egress"]  # zones of several regions
            assert e["state"] == f["state"] == "SUCCEEDED" and e["slack_hours"] >= 0
            probes += e["probes"]
    assert probes > 0
    offsets = [d["offset_hours"] for d in out["per_ratio"]["2"]["runs"]["free"]]
    assert offsets == [0.0, pytest.approx(1049.89, abs=0.01)]  # spread over the 45 days of traces


@pytest.mark.parametrize(("args", "err"), [
    (["--ratio", "two"], "ratio: not numbers: 'two'"),
    (["--ratio", "1.0"], "ratio: need deadline ratios R/C > 1"),
    (["--draws", "0"], "draws: must be >= 1, got 0"),
    (["--ratio", "60"], "does not fit in the"),
])
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], err: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert live_zones.main(args) == 2
    assert err in capsys.readouterr().err
