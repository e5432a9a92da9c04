"""Smoke tests of the deadline benchmarks: one window, tiny sweeps, exact JSON shapes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import deadline as bench
from benchmarks import multiregion
from policies.deadline import DeadlineTask, UniformProgress
from policies.deadline_sim import simulate

TRACE = "availability/1-node/aws-10-26-2022/us-west-2a_v100_1.json"


def _json(capsys: pytest.CaptureFixture[str]) -> dict:
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # exactly one JSON object on stdout
    return json.loads(out)


def test_window_json_matches_simulator(capsys: pytest.CaptureFixture[str], catalog) -> None:
    rc = bench.main(["window", "--trace", TRACE, "--start-tick", "100", "--compute-hours", "48", "--deadline-hours", "60",
                     "--overhead-hours", "0.2", "--policy", "uniform_progress", "--json"])
    assert rc == 0
    out = _json(capsys)
    assert set(out) >= {"cost", "spot_hours", "od_hours", "changeovers", "finish_hours", "met_deadline", "decisions"}
    assert len(out["decisions"]) == 360 and out["decisions"][0][0] == 0
    assert {s for _, s in out["decisions"]} <= {"idle", "spot", "on_demand"}
    tr = next(t for t in catalog.spot_traces("availability/1-node/aws-10-26-2022") if t.path and t.path.name == "us-west-2a_v100_1.json")
    r = simulate(UniformProgress(DeadlineTask(48, 60, 0.2), tick_hours=tr.gap_hours), tr.spot_up()[100:460], tr.gap_hours)
    assert out["cost"] == pytest.approx(r.cost, abs=1e-5) and out["met_deadline"] is True
    assert out["spot_hours"] + out["od_hours"] == pytest.approx(48.0, abs=1e-5)


def test_window_past_the_end_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    rc = bench.main(["window", "--trace", TRACE, "--start-tick", "3800", "--compute-hours", "48", "--deadline-hours", "60",
                     "--overhead-hours", "0.2", "--policy", "greedy", "--json"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "outside the trace" in err and "start_tick <= 3535" in err


def test_window_bad_task_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    rc = bench.main(["window", "--trace", TRACE, "--start-tick", "0", "--compute-hours", "48", "--deadline-hours", "40",
                     "--overhead-hours", "0.2", "--policy", "greedy"])
    assert rc == 2
    assert "deadline_hours" in capsys.readouterr().err


@pytest.mark.slow
def test_table3_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    rc = bench.main(["table3", "--windows", "1", "--workers", "1", "--json"])
    assert rc == 0
    out = _json(capsys)
    assert out["windows"] == 8
    names = {"greedy", "uniform_progress", "omniscient", "time_sliced", "partial_lookahead", "up_oracle", "on_demand", "semi_markov_dp"}
    assert set(out["policies"]) == names
    for name, row in out["policies"].items():
        assert set(row) >= {"od_hours", "spot_hours", "spot_util", "cost", "missed"}
        assert row["od_hours"] + row["spot_hours"] == pytest.approx(48.0, abs=1e-2), name
        assert row["missed"] == 0
    assert out["policies"]["omniscient"]["spot_util"] == 1.0
    assert out["policies"]["omniscient"]["cost"] <= min(r["cost"] for r in out["policies"].values()) + 1e-9
    assert "seconds" in out
    gap = out["gap_closed"]
    assert set(gap["traces"]) == {"aws/" + t for t in ("us-west-2a/p2.xlarge", "us-west-2a/p2.8xlarge", "us-west-2a/p3.2xlarge",
                                                      "us-west-2a/p3.16xlarge", "us-west-2b/p2.xlarge", "us-west-2b/p2.8xlarge",
                                                      "us-west-2b/p3.2xlarge", "us-west-2b/p3.16xlarge")}
    assert gap["overall"]["uniform_progress"] == pytest.approx(out["policies"]["uniform_progress"]["cost"] / 144.6, abs=1e-3)
    assert gap["overall"]["missed"] == 0


@pytest.mark.slow
def test_sweep_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    rc = bench.main(["sweep", "--windows", "1", "--workers", "1", "--collections", "2w", "--fractions", "0.9", "--no-omniscient", "--json"])
    assert rc == 0
    out = _json(capsys)
    rows = out["rows"]
    assert {r["policy"] for r in rows} == {"greedy", "uniform_progress", "uniform_progress_loose", "partial_lookahead", "up_oracle", "time_sliced",
                                           "semi_markov_dp"}
    assert len({r["trace"] for r in rows}) == 8 and all(r["job_fraction"] == 0.9 for r in rows)
    assert all(r["missed"] == 0 for r in rows if r["policy"] != "partial_lookahead")


@pytest.mark.slow
def test_multiregion_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    rc = multiregion.main(["--windows", "1", "--json"])
    assert rc == 0
    out = _json(capsys)
    assert out["windows"] == 1
    assert set(out["policies"]) == {"up_best_zone", "up_zone_mean", "up_eager_failover", "spotplane", "omniscient"}
    omni = out["policies"]["omniscient"]["cost"]
    for row in out["policies"].values():
        assert set(row) >= {"cost", "missed", "changeovers"} and row["missed"] == 0
        assert row["cost"] >= omni - 1e-6


def test_a_truncated_trace_file_exits_2_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "t.json"
    bad.write_text('{"name": "x", "available": [1, 0')
    rc = bench.main(["window", "--trace", str(bad), "--start-tick", "0", "--compute-hours", "1",
                     "--deadline-hours", "2", "--overhead-hours", "0.1", "--policy", "greedy", "--json"])
    assert rc == 2
    assert capsys.readouterr().err == (f"python -m benchmarks.deadline: error: --trace {bad}, line 1: not valid JSON "
                                       "(Expecting ',' delimiter) — re-run `spotplane data fetch`, or see the spot "
                                       "trace format in shared/data/README.md\n")


def test_zero_windows_is_an_error_not_an_empty_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["table3", "--windows", "0", "--workers", "1", "--json"]) == 2
    assert "--windows: must be >= 1, got 0: no window would be replayed" in capsys.readouterr().err


def test_pick_guards_zero_windows_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["pick-guards", "--windows", "0", "--json"]) == 2
    assert "--windows: must be >= 1, got 0: no window would be replayed" in capsys.readouterr().err


def test_multiregion_zero_windows_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert multiregion.main(["--windows", "0", "--json"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == ("python -m benchmarks.multiregion: error: --windows: must be >= 1, got 0: "
                                         "no window would be replayed — e.g. --windows 100\n")


# ---------------------------------------------------------------------------- the split by time
def test_pick_guards_windows_end_before_the_cut_and_overlap_no_held_out_window(catalog) -> None:
    """Every picking window ends by the cut (9 days in); every Table 3 window counted as held out
    starts at the cut or later, so none overlaps a picking window; the 8 traces share one clock."""
    traces = catalog.spot_traces(bench.COLLECTIONS["2w"])
    task = DeadlineTask(48.0, 60.0, 0.2)
    n = 360
    picks = bench.guard_starts(traces, task, bench.PICK_WINDOWS, bench.PICK_SEED)
    table3 = bench.table3_starts(traces, task, 300, bench.SEED)
    assert len({(t.collected, t.n_ticks, t.gap_seconds) for t in traces}) == 1
    for tr, p, t3 in zip(traces, picks, table3, strict=True):
        cut = bench.cut_tick(tr)
        assert cut == 1296 and len(p) == bench.PICK_WINDOWS and len(t3) == 300
        assert (p >= 0).all() and (p + n <= cut).all()
        held = t3[t3 >= cut]
        assert len(held) >= 150
        assert held.min() >= p.max() + n  # a held-out window begins after every picking window ends
    assert bench.PICK_SEED != bench.SEED


def test_table3_windows_are_the_ones_drawn_before_the_split() -> None:
    """table3_starts draws as Table 3 always did: one generator over the traces in order."""
    class Tr:
        n_ticks, gap_hours, name = 3895, 1 / 6, "t"

    rng = np.random.default_rng(bench.SEED)
    old = [rng.integers(0, 3895 - 360 + 1, size=5) for _ in range(3)]
    new = bench.table3_starts([Tr(), Tr(), Tr()], DeadlineTask(48.0, 60.0, 0.2), 5, bench.SEED)  # type: ignore[list-item]
    assert all((a == b).all() for a, b in zip(old, new, strict=True))


def test_held_out_keeps_only_windows_from_the_cut_on(catalog) -> None:
    traces = catalog.spot_traces(bench.COLLECTIONS["2w"])[:1]
    task = DeadlineTask(48.0, 60.0, 0.2)
    job = bench.Job(bench.COLLECTIONS["2w"], 0, task, (0, 1295, 1296, 3000), ("uniform_progress",))
    rows = {p: np.arange(4.0)[:, None] * np.ones((4, len(bench.METRICS))) + c
            for p, c in (("on_demand", 100.0), ("uniform_progress", 10.0), ("semi_markov_dp", 9.0), ("omniscient", 8.0))}
    out = bench.held_out_gap([job], [rows], traces)
    assert out["windows"] == 2 and out["cut_days"] == bench.PICK_CUT_DAYS
    assert out["overall"]["uniform_progress"] == pytest.approx(12.5 / 102.5, abs=1e-4)  # rows 2 and 3 only


def test_the_winner_is_the_cheapest_candidate_that_never_loses_much_to_up() -> None:
    rows = [{"cost": 0.70, "missed": 0, "worst_vs_up_pct": 1.5},
            {"cost": 0.71, "missed": 1, "worst_vs_up_pct": 0.0},
            {"cost": 0.72, "missed": 0, "worst_vs_up_pct": 0.9},
            {"cost": 0.73, "missed": 0, "worst_vs_up_pct": -0.5}]
    assert bench.pick_winner(rows) is rows[2]
    assert bench.pick_winner([rows[0], rows[1]]) is rows[0]  # none qualifies: least worst trace without a miss


@pytest.mark.slow
def test_pick_guards_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    rc = bench.main(["pick-guards", "--windows", "1", "--workers", "1", "--json"])
    assert rc == 0
    out = _json(capsys)
    assert out["windows"] == 8 and out["seed"] == bench.PICK_SEED and out["last_window_end_tick"] <= out["cut_tick"] == 1296
    assert [(r["idle_floor"], r["od_to_idle"]) for r in out["candidates"]] == [(f, o) for o in (False, True) for f in bench.GUARD_FLOORS]
    assert all(r["missed"] == 0 for r in out["candidates"])
    assert out["winner"] in [{"idle_floor": r["idle_floor"], "od_to_idle": r["od_to_idle"]} for r in out["candidates"]]
