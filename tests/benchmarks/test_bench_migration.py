"""The migration benchmark: the replay engine on hand-made zones, and the real-trace run's JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks import migration as mig
from clusters.data.catalog import DataCatalog
from policies.preemption import WeibullModel


def zones(up: list[list[int]], gap_hours: float = 0.05) -> mig.Zones:
    a = np.array(up, dtype=bool)
    model = WeibullModel(0.6, 1.4, limit=72.0)
    return mig.Zones(
        names=tuple(f"z{i}" for i in range(a.shape[0])),
        up=a,
        gap_hours=gap_hours,
        mean_up_hours=np.ones(a.shape[0]),
        model=model,
        mean_wait_hours=0.5,
        up_age_ticks=mig._up_age(a),
        other_up_at_preemption=0.8,
    )


JOB = mig.JobParams(work_hours=4.0, checkpoint_hours=0.05, restart_hours=0.3, period_hours=1.0)


def test_up_runs_finds_lengths_and_censoring() -> None:
    lengths, preempted = mig.up_runs(np.array([0, 1, 1, 0, 1, 1, 1]), 0.5)
    assert lengths.tolist() == [1.0, 1.5] and preempted.tolist() == [True, False]


def test_periodic_without_preemptions_pays_only_its_checkpoints() -> None:
    z = zones([[1] * 200])
    run = mig.replay(
        z, JOB, mig.Strategy("periodic", mig.Periodic(1.0), survivor_checkpoint=False), 0
    )
    assert run.preemptions == 0 and run.checkpoints == 3  # at 1, 2, 3 h of work
    assert run.hours == pytest.approx(4.0 + 3 * 0.05)
    assert run.cost == pytest.approx(run.hours * mig.SPOT_PRICE)


def test_a_preemption_loses_the_unsaved_work_and_pays_the_restart() -> None:
    # zone 0 dies after 1.6 h (32 ticks); zone 1 is up all along
    z = zones([[1] * 32 + [0] * 400, [1] * 432])
    z = mig.Zones(**{**z.__dict__, "mean_up_hours": np.array([2.0, 1.0])})  # start in zone 0
    run = mig.replay(
        z, JOB, mig.Strategy("periodic", mig.Periodic(1.0), survivor_checkpoint=False), 0
    )
    # 1 h of work + 0.05 checkpoint, then 0.55 h lost at 1.6 h; restart 0.3 h; 3 h of work and 2 checkpoints left
    assert run.preemptions == 1
    assert run.hours == pytest.approx(1.6 + 0.3 + 3.0 + 2 * 0.05, abs=0.051)


def test_two_replicas_survive_a_preemption_with_the_survivor_checkpoint() -> None:
    z = zones([[1] * 32 + [0] * 400, [1] * 432, [1] * 432])
    single = mig.replay(
        z, JOB, mig.Strategy("periodic", mig.Periodic(1.0), survivor_checkpoint=False), 0
    )
    two = mig.replay(z, JOB, mig.Strategy("replicas2", mig.Periodic(1.0), replicas=2), 0)
    assert two.preemptions == 1
    assert two.hours < single.hours - 0.5  # no lost work, no restart on the critical path
    assert two.hours == pytest.approx(
        4.0 + 3 * 0.05 + 0.05, abs=0.051
    )  # + the survivor's checkpoint
    assert two.cost > single.cost


@pytest.mark.slow
def test_real_trace_benchmark_json(
    catalog: DataCatalog, capsys: pytest.CaptureFixture[str]
) -> None:
    assert mig.main(["--json", "--every", "30"], catalog_factory=lambda: catalog) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["strategies"]
    assert set(mig.STRATEGIES) <= set(s)
    assert s["on_demand"] == pytest.approx({**s["on_demand"], "hours": 24.0, "cost": 24 * 3.06})
    assert out["params"]["zones"] == ["us-east-1c", "us-east-1f", "us-west-2b", "us-west-2c"]
    # spot on these traces is slow: every single-spot strategy takes longer than on-demand
    assert s["periodic"]["hours"] > 26.0 and s["dp"]["hours"] > 24.5
    assert s["periodic"]["cost"] < 0.5 * s["on_demand"]["cost"]
    assert s["replicas2"]["cost"] > 1.5 * s["periodic"]["cost"]
    assert (
        s["dp"]["checkpoints"] > s["periodic"]["checkpoints"]
    )  # young VMs die most: DP saves often
    # the adaptive rule with the deadline policy finishes near the +10% deadline
    assert s["adaptive"]["hours"] <= s["periodic"]["hours"]
    assert s["adaptive"]["hours"] <= 1.10 * 24 + 0.5
    assert math.isfinite(out["targets"]["adaptive_cost_vs_replicas2"])
