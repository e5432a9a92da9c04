"""Smoke: each seed-001 benchmark runs with --json and prints exactly one object with the keys."""

from __future__ import annotations

import json

import pytest

from benchmarks import checkpoint, preemption, reuse

pytestmark = pytest.mark.slow


def _json(main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[no-untyped-def,type-arg]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    return json.loads(out)  # type: ignore[no-any-return]


def test_preemption_json(capsys: pytest.CaptureFixture[str]) -> None:
    res = _json(preemption.main, ["--json", "--max-groups", "1"], capsys)
    g = res["groups"][0]
    assert {"machine_type", "zone", "n", "n_preempted", "models", "best"} <= set(g)
    assert set(g["models"]) == {"bathtub", "exponential", "weibull", "gompertz_makeham"}
    assert {"params", "sse", "loglik", "aic"} <= set(g["models"]["bathtub"])
    assert 22 <= res["summary"]["n1_highcpu_16_b"] <= 25


def test_reuse_json(capsys: pytest.CaptureFixture[str]) -> None:
    res = _json(reuse.main, ["--json", "--age-step", "2"], capsys)
    assert res["job_hours"] == 6
    assert {"switch_age_hours", "by_start_age", "mean_p_fail_policy", "mean_p_fail_memoryless"} <= set(res)
    assert {"start_hours", "p_fail_policy", "p_fail_memoryless"} <= set(res["by_start_age"][0])
    assert res["mean_p_fail_policy"] < res["mean_p_fail_memoryless"]


def test_checkpoint_json(capsys: pytest.CaptureFixture[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    png = tmp_path / "ck.png"
    res = _json(checkpoint.main, ["--json", "--quick", "--runs", "200", "--plot", str(png)], capsys)
    assert res["delta_minutes"] == 1 and png.stat().st_size > 0
    row = res["fresh_vm"][0]
    assert {"job_hours", "dp_increase_pct", "young_daly_increase_pct", "mc_increase_pct"} <= set(row)
    assert {"start_hours", "job_hours", "dp_increase_pct"} <= set(res["by_start_age"][0])
    assert res["schedule_5h_minutes"] and {"5h", "24h"} <= set(res["seconds"])
    assert all(r["dp_increase_pct"] <= r["young_daly_increase_pct"] + 1e-9 for r in res["fresh_vm"])


def test_preemption_with_no_group_to_fit_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert preemption.main(["--max-groups", "0", "--json"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == ("python -m benchmarks.preemption: error: --max-groups: no (machine type, zone) "
                                         "group of >= 40 VMs to fit — leave --max-groups out, or give 1 or more\n")
