"""``python -m benchmarks.cell_trace``: the traced replay gives the simulator's own figures, tells the
guard's raises, pace holds and the evictions of the runs it admitted on hand-made runs, and writes
its per-task and per-hour rows on a tiny pod list."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import cell_trace
from policies.gfs_options import GFS_VARIANTS, LIVE_DEFAULT_NAME
from policies.placement import TaskRequest
from policies.schedulers import make_scheduler
from policies.sim.gpu_sim import SimConfig, simulate
from policies.sim.workloads import NodeSpec, SimTask, Workload

H = 3600.0


def _task(tid: str, prio: str, g: float, submit_h: float, dur_h: float) -> SimTask:
    return SimTask(TaskRequest(tid, prio, g, 1, None, "t"), submit_h * H, dur_h * H)  # type: ignore[arg-type]


def _one_node(tasks: list[SimTask]) -> Workload:
    nodes = NodeSpec(np.array(["n0"]), np.array(["A100"]), np.full(1, 8, dtype=np.int64))
    return Workload("hand", nodes, sorted(tasks, key=lambda t: t.submit_s), ("t",))


def _traced(tasks: list[SimTask], variant: str) -> cell_trace.TracingSimulator:
    sim = cell_trace.TracingSimulator(_one_node(tasks), make_scheduler("gfs_e"),
                                      SimConfig.for_options(GFS_VARIANTS[variant]))
    sim.run()
    return sim


def test_the_trace_tells_a_guard_raise_and_the_eviction_of_the_run_it_admitted() -> None:
    # HP "a" holds 6 of 8 GPUs for 24.5 h, so the quota is 2 for a week; the 2 h guard admits the
    # 4-GPU spot "s1" at 27 h; HP "c" keeps the 8-GPU HP "big" queued until 40 h, when it evicts "s1"
    tasks = [_task("a", "hp", 6, 0, 24.5), _task("c", "hp", 1, 24.6, 15.4), _task("s1", "spot", 4, 25, 20),
             _task("big", "hp", 8, 25, 0.5)]
    variant = "fcfs_eta_max_1_calm_guard_2h_2ph"
    sim = _traced(tasks, variant)
    plain = simulate(_one_node(tasks), make_scheduler("gfs_e"), SimConfig.for_options(GFS_VARIANTS[variant]))
    assert sim._result().summary() == plain.summary()  # watching changes nothing
    counts = sim.guard_counts["s1"]
    assert (counts.guard_runs, counts.target_runs, counts.guard_evictions, counts.target_evictions) == (2, 2, 1, 1)
    assert [(e.t, e.guard_admitted, e.target) for e in sim.spot_evictions] == [(40 * H, True, True)]
    raised = [g.t for g in sim.guard_ticks if g.status == "raised"]
    assert raised[0] == pytest.approx(27 * H) and raised[1] == pytest.approx(42 * H)  # back in the queue at 40 h
    before = {g.status for g in sim.guard_ticks if 25 * H < g.t < 27 * H}
    assert before == {"waiting"}  # s1 had not waited 2 h yet


def test_the_trace_tells_a_raise_the_pace_held_back() -> None:
    # two spot tasks wider than the quota: the 4 h once-per-H guard admits s1 at 29 h and holds s2
    # back by its pace until 30 h (every step between: "pace")
    tasks = [_task("a", "hp", 6, 0, 24.5), _task("s1", "spot", 4, 25, 10), _task("s2", "spot", 3, 25.05, 10)]
    sim = _traced(tasks, "fcfs_eta_max_1_calm_guard_4h_1ph")
    by_t = {round(g.t / 300): g.status for g in sim.guard_ticks}
    assert by_t[round(29 * H / 300)] == "raised" and by_t[round(30 * H / 300)] == "raised"
    assert {by_t[k] for k in range(round(29 * H / 300) + 1, round(30 * H / 300))} == {"pace"}
    rows = cell_trace.hours_rows("x", sim)
    at29 = next(r for r in rows if r["hour"] == 29)
    assert at29["raised"] == 1 and at29["pace"] == 11 and at29["eviction_rate"] == 0.0
    (day1,) = cell_trace.daily_rows("x", sim, (1.0, 2.0))
    assert (day1["day"], day1["raised"], day1["pace"], day1["evictions"]) == (1, 2, 11, 0)


def test_shape_shares_add_up_to_the_class_mean() -> None:
    tasks = [_task("a", "hp", 6, 0, 24.5), _task("s1", "spot", 4, 25, 10), _task("s2", "spot", 3, 25.05, 10),
             _task("s3", "spot", 4, 26, 1)]
    sim = _traced(tasks, LIVE_DEFAULT_NAME)
    r = sim._result()
    recs = cell_trace.measured(r, sim, hp=False)
    shares = cell_trace.shape_shares(recs)
    assert sum(v[1] for v in shares.values()) == pytest.approx(r.spot.jqt_mean_s)
    assert shares[("spot", 4.0, 1, "any")][0] == 2
    days = cell_trace.day_shares(recs, ("spot", 4.0, 1, "any"), len(recs), 1.0)
    assert [d[0] for d in days] == ["1-2"] and days[0][2] == pytest.approx(shares[("spot", 4.0, 1, "any")][1])


def _tiny_pods(d: Path) -> Path:
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
            "scheduled_time"]
    for i in range(36):
        qos = "BE" if i % 3 else "LS"
        t = 60 * i
        rows.append(f"p{i},1000,1024,{1 + i % 2},1000,,{qos},Running,{t},{t + 1800 + 90 * (i % 7)},{t}")
    p = d / "openb_pod_list_tiny.csv"
    p.write_text("\n".join(rows) + "\n")
    return p


def test_the_cli_writes_per_task_and_per_hour_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _tiny_pods(tmp_path)
    rows, hours = tmp_path / "rows.csv", tmp_path / "hours.csv"
    argv = ["--trace", "openb/tiny", "--compare", "fgd+quota", "--pods-dir", str(tmp_path), "--cache", "",
            "--rows-out", str(rows), "--hours-out", str(hours), "--json"]
    assert cell_trace.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["labels"]) == [f"gfs:{LIVE_DEFAULT_NAME}", "fgd+quota"]
    assert out["labels"]["fgd+quota"]["matches_cache"] is None
    assert set(out["shapes"]) == {"hp", "spot"}
    got = list(csv.DictReader(rows.open()))
    assert len(got) == 2 * 36 and {r["label"] for r in got} == set(out["labels"])
    assert {"jqt_s", "evictions", "guard_runs", "guard_evictions", "submit_day"} <= set(got[0])
    assert hours.exists()
    assert cell_trace.main(["--trace", "openb/tiny", "--label", "gfs:nope", "--pods-dir", str(tmp_path)]) == 2
    assert "unknown GFS variant" in capsys.readouterr().err
