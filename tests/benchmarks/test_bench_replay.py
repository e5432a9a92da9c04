"""The demo replayed on a stepped clock: exact figures, the check a behaviour-preserving change
must pass (``python -m benchmarks.replay``)."""

from __future__ import annotations

import json

import pytest

from benchmarks import replay

LEGACY = ["--deadline-policy", "uniform_progress", "--reuse", "always", "--hot-spare-seconds", "0"]


def test_the_demo_replay_gives_the_same_bill_to_the_cent(capsys: pytest.CaptureFixture[str]) -> None:
    """Uniform Progress for every deadline job, any idle node reused, no hot spares; the
    demo's three tenants share the pools fairly (borrowing, reclaim by least lost work)."""
    assert replay.main(["--json", *LEGACY]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["ticks"], out["total_cost"], out["on_demand_cost"]) == (3101, 2468.3688, 11273.3647)
    assert (out["all_deadlines_met"], out["all_finished"], out["savings_pct"]) == (True, True, 78.1)
    by_name = {j["name"]: j for j in out["jobs"]}
    assert len(by_name) == 29 and sum(j["deadline_met"] is True for j in out["jobs"]) == 4
    assert (by_name["hotfix-train"]["cost"], by_name["hotfix-train"]["preemptions"]) == (25.5, 0)
    assert by_name["batch-embed"]["cost"] == 45.747


def test_the_default_demo_bill_with_spotplane_reuse_by_age_and_hot_spares(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The defaults: the multi-zone deadline policy (spotplane) on this 22-zone fleet saves
    $32.30 on the deadline jobs against Uniform Progress alone; reuse by age and hot spares leave
    this bill as it was."""
    assert replay.main(["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["ticks"], out["total_cost"], out["on_demand_cost"]) == (3219, 2436.066, 11273.3647)
    assert (out["all_deadlines_met"], out["all_finished"], out["savings_pct"]) == (True, True, 78.39)
    assert sum(j["deadline_met"] is True for j in out["jobs"]) == 4


def test_a_scenario_that_cannot_finish_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(replay, "MAX_HOURS", 0.5)
    assert replay.main(["--json"]) == 2
    err = capsys.readouterr().err
    assert "jobs still running after 0 h" in err and "MAX_HOURS" in err
