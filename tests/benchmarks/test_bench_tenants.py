"""The multi-tenant benchmark on a short window: its JSON and the two rules' order."""

from __future__ import annotations

import json

import pytest

from benchmarks import tenants


def test_two_days_of_tenants_fair_within_5_percent_and_less_work_lost(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert tenants.main(["--days", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"cap_overshoot_ticks", "fair_share_error", "lost_work_reduction",
            "hp_jqt_s"} <= set(out)
    assert out["fair_share_error"] < 0.05
    assert out["lost_work_reduction"] > 0.0
    assert out["hp_jqt_s"]["work"] == out["hp_jqt_s"]["gfs"]  # equal HP queueing time
    runs = out["runs"]
    assert runs["work"]["lost_gpu_hours"] < runs["gfs"]["lost_gpu_hours"]
    assert runs["gfs_no_fair_share"]["reclaims"] == 0


def test_apps_split_into_tenants_of_about_equal_work() -> None:
    from policies.placement import TaskRequest
    from policies.sim.workloads import SimTask

    tasks = [SimTask(TaskRequest(f"t{i}", "spot", 1.0, 1, None, app), 0.0, hours * 3600.0)
             for i, (app, hours) in enumerate([("x", 4), ("y", 2), ("z", 2), ("w", 1), ("v", 1)])]
    assert tenants.tenant_of_apps(tasks) == {"x": "a", "y": "b", "z": "c", "v": "b", "w": "c"}
