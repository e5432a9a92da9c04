"""Fast smoke of ``python -m benchmarks.scheduler``: JSON shape, a short real replay, scale mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import scheduler as bench
from controlplane.core.errors import InvalidInput
from policies.placement import TaskRequest
from policies.schedulers import make_scheduler
from policies.sim.gpu_sim import simulate
from policies.sim.workloads import NodeSpec, SimTask, Workload

KEYS = {"hp_jct", "hp_jct_p99", "hp_jqt", "spot_jct", "spot_jqt", "eviction_rate", "eviction_per_gh",
        "allocation_rate"}


@pytest.mark.slow
def test_compare_json_shape_on_a_short_gfs_a100_replay(capsys: pytest.CaptureFixture[str]) -> None:
    rc = bench.main(["--workload", "gfs-a100-high", "--days", "0.5", "--nodes", "24",
                     "--schedulers", "gfs,yarn_cs", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)  # exactly one JSON object on stdout
    assert out["workload"] == "gfs-a100-high" and set(out["schedulers"]) == {"gfs", "yarn_cs", "yarn_cs+quota"}
    assert out["tables"] == {"quota_free": ["gfs", "yarn_cs"], "release": ["gfs", "yarn_cs+quota"]}
    assert out["seeds"] == [2] and out["options"]["pools"] == "per_model"
    for name, m in out["schedulers"].items():
        assert set(m) == KEYS and set(out["spread"][name]) == KEYS
        assert 0 <= m["eviction_rate"] <= 1 and 0 < m["allocation_rate"] <= 1 and m["hp_jct"] > 0


def test_targets_logic() -> None:
    base = dict.fromkeys(KEYS, 1.0)
    res = {"gfs": {**base, "spot_jqt": 0.5, "eviction_rate": 0.1, "hp_jqt": 0.4, "spot_jct": 1.0},
           "yarn_cs": {**base, "eviction_rate": 0.2}, "gfs_s": {**base, "spot_jct": 2.0}}
    t = bench.targets(res)
    assert t["lowest spot JQT"] and t["HP JQT >= 50% below YARN-CS"] and t["gfs_s loses on spot JCT"]
    res["gfs"]["allocation_rate"] = 0.5
    assert not bench.targets(res)["allocation rate >= YARN-CS"]


@pytest.mark.slow
def test_seeds_give_means_and_spread_and_progress_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    rc = bench.main(["--workload", "gfs-a100-high", "--days", "0.25", "--nodes", "16", "--schedulers", "gfs,lyra",
                     "--seeds", "2,3", "--tables", "release", "--json"])
    assert rc == 0
    out = capsys.readouterr()
    got = json.loads(out.out)
    assert got["seeds"] == [2, 3] and set(got["schedulers"]) == {"gfs", "lyra+quota"}
    runs = {}
    for seed in (2, 3):
        w = bench.build_workload("gfs-a100-high", 0.25, None, seed, 16)
        runs[seed] = simulate(w, make_scheduler("lyra", seed=seed, quota=True), bench.sim_config(got["options"]))
    jqt = [runs[s].summary()["spot_jqt"] for s in (2, 3)]
    assert got["schedulers"]["lyra+quota"]["spot_jqt"] == pytest.approx(sum(jqt) / 2)
    assert got["spread"]["lyra+quota"]["spot_jqt"] == pytest.approx(abs(jqt[0] - jqt[1]) / 2)
    assert [ln.split(":")[0] for ln in out.err.splitlines() if ln.startswith("[")] == [
        "[1/4] gfs-a100-high gfs seed 2", "[2/4] gfs-a100-high lyra+quota seed 2",
        "[3/4] gfs-a100-high gfs seed 3", "[4/4] gfs-a100-high lyra+quota seed 3"]


def test_openb_and_release_targets() -> None:
    base = dict.fromkeys(KEYS, 1.0)
    res = {"gfs": {**base, "spot_jqt": 700.0, "eviction_rate": 0.03, "hp_jqt": 7000.0},
           "chronus": {**base, "spot_jqt": 377.0, "eviction_rate": 0.029, "hp_jqt": 6034.0},
           "lyra": {**base, "spot_jqt": 491.0, "eviction_rate": 0.058, "hp_jqt": 6284.0},
           "chronus_rel": {**base, "spot_jqt": 78593.0, "eviction_rate": 0.148, "hp_jqt": 2876.0},
           "lyra+quota": {**base, "spot_jqt": 900.0, "eviction_rate": 0.02}}
    t = bench.targets(res, "openb")
    assert t["openb: spot JQT within 2x of the best baseline's"]  # 700 <= 2 x 377
    assert t["openb: eviction rate at or below the median baseline's"]  # 3.0% <= median(2.9, 5.8) = 4.35%
    assert t["openb: HP JQT at most 1.2x the best baseline's"]  # Chronus as released is not a target
    assert t["release setup: lower spot JQT than every quota'd baseline"]
    assert not t["release setup: lower eviction rate than every quota'd baseline"]
    res["gfs"]["eviction_rate"] = 0.05
    assert not bench.targets(res, "openb")["openb: eviction rate at or below the median baseline's"]


def test_bad_seeds_and_tables_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--workload", "gfs-a100-low", "--seeds", "2,x", "--json"]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert bench.main(["--workload", "gfs-a100-low", "--tables", "paper", "--json"]) == 2
    assert "--tables" in capsys.readouterr().err


def test_bad_scheduler_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--workload", "gfs-a100-low", "--schedulers", "nope", "--json"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("python -m benchmarks.scheduler: error: scheduler")
    assert len(out.err.splitlines()) == 1


def test_a_static_snapshot_pod_list_exits_2_with_one_line(data_root: Path) -> None:
    pods = data_root / "alibaba-openb" / "openb_pod_list_multigpu20.csv"
    run = subprocess.run([sys.executable, "-m", "benchmarks.scheduler", "--workload", "openb", "--pods", str(pods),
                          "--json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == (f"python -m benchmarks.scheduler: error: --pods {pods}: no creation_time, deletion_time, "
                          "scheduled_time, qos columns — this pod list is a static snapshot and cannot be replayed; "
                          "use openb_pod_list_default.csv or gpushare40.csv\n")


def test_a_pod_list_with_nothing_to_replay_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pods = tmp_path / "pods.csv"  # valid, but no pod asks for a GPU
    pods.write_text("name,num_gpu,gpu_milli,qos,creation_time,deletion_time,scheduled_time\n"
                    "p0,0,0,LS,0,100,0\np1,0,0,BE,5,50,6\n")
    assert bench.main(["--pods", str(pods), "--schedulers", "gfs", "--json"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (f"python -m benchmarks.scheduler: error: --pods {pods}: no pod with GPUs and a known run time, "
                       "so there is nothing to replay — use openb_pod_list_default.csv or gpushare40.csv, "
                       "or more --days\n")


def test_a_run_in_which_no_task_finished_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    # the simulator runs every task that fits to completion: nothing finishes when no task fits a node
    tasks = [SimTask(TaskRequest("big", "hp", 8, 1, None, "t"), 0.0, 60.0)]  # type: ignore[arg-type]
    w = Workload("tiny", NodeSpec.uniform(1, 4), tasks, ("t",))
    with pytest.raises(InvalidInput, match="none of 1 tasks finished under gfs"):
        bench.check_did_work("tiny", "gfs", w, simulate(w, make_scheduler("gfs")))


def test_plot_uses_a_log_scale_when_times_span_orders_of_magnitude(tmp_path) -> None:  # type: ignore[no-untyped-def]
    base = dict.fromkeys(KEYS, 1.0)
    res = {"gfs": {**base, "spot_jqt": 900.0}, "yarn_cs": {**base, "spot_jqt": 400.0},
           "gfs_e": {**base, "spot_jqt": 4.6e6}}
    path = tmp_path / "s.png"
    fig = bench._plot(str(path), "gfs-a100-medium", res)
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 10_000
    scales = {ax.get_title(): ax.get_yscale() for ax in fig.axes}
    assert scales["spot JQT (s), log"] == "log" and scales["eviction rate"] == "linear"
    assert scales["spot JCT (s)"] == "linear"  # all 1.0: nothing to squash


def test_why_mode_runs_the_release_setup_and_the_strict_fcfs_control(capsys: pytest.CaptureFixture[str]) -> None:
    # as_released: with the live preset (eta clamped at 1) this 16-node replay had not ended
    # after 60 s (4 s as released): its spot tasks wait for a quota that stays below their size
    rc = bench.main(["why", "--workload", "gfs-a100-high", "--days", "0.5", "--nodes", "16", "--preset", "as_released",
                     "--schedulers", "gfs,yarn_cs", "--gfs-queue", "size_release", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["schedulers"]) == ["gfs", "yarn_cs+quota", bench.STRICT_CONTROL]
    assert out["options"]["gfs_queue"] == "size_release"
    for m in out["schedulers"].values():
        assert set(m) == set(bench.WHY_FIELDS)
        assert m["spot_runs"] >= m["spot_evictions"] >= 0 and m["spot_runs_per_task"] >= 1
        assert 0 <= m["young_victims"] <= 1
    control = bench.scheduler_for(bench.STRICT_CONTROL, 2)
    assert control.queue.order == "fcfs" and control.queue.strict and control.name == "gfs"


def test_the_spot_guard_ends_the_replay_the_eta_cap_starves(capsys: pytest.CaptureFixture[str]) -> None:
    # the 16-node half-day replay above with the eta cap and a spot guard: it ends (4 s here;
    # without the guard it had not ended after 150 s)
    rc = bench.main(["--workload", "gfs-a100-high", "--days", "0.5", "--nodes", "16", "--preset",
                     "fcfs_eta_max_1_calm_guard_2h_1ph", "--schedulers", "gfs", "--tables", "quota-free", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["options"]["spot_guard"] != "off" and out["options"]["eta_max"] == "1"
