"""The demo's real job: ``examples/train_numpy.py`` submitted through the API runs as a
Ray job on the simulated fleet, an HP job that needs the whole V100 pool evicts it (its process
dies), and it restores from its checkpoint artifact and finishes."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.cli.demo import Scenario, real_job
from tests.support import free_port

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ADMIN = "spa_demo-realjob-admin"
POOL = 4  # V100 nodes: the HP gang below needs all of them


def realjob_scenario() -> Scenario:
    """One real job (18 s of steps) and an HP gang of the whole pool at +0.5 h (once the real
    job runs), so the real job must be evicted whichever way GFS ranks the spot jobs; a one-job
    bag beside it. The job's steps run in wall time, the simulated clock one paced tick at a
    time: a loaded machine slows the clock, not the job, so the job lasts many times the 30
    ticks to +0.5 h even at 0.2 s a tick."""
    return Scenario(
        deadline_jobs=[],
        bag={"name": "tiny", "template": {"name": "t", "kind": "spot", "accelerator": "V100",
                                           "compute_hours": 0.5},
             "params": [{"seed": 0}], "compute_hours": [0.5]},
        spot_jobs=[],
        hp_jobs=[{"name": "hp-all", "kind": "hp", "accelerator": "V100", "workers": POOL,
                  "compute_hours": 1.0}],
        hp_at_hours=0.5,
        real_jobs=[real_job("real-numpy", steps=600, step_seconds=0.03, seed=5)],
    )


@pytest.fixture
def control_plane(ray_cluster: Any, workload_ray: Any, tmp_path: Path) -> Iterator[str]:
    from actors.execution import ExecutorConfig
    from actors.runtime import RuntimeSettings, start_control_plane, stop_control_plane
    from controlplane.reconcile.contracts import ControllerSettings
    from serve.app import start_api, stop_api

    settings = RuntimeSettings(
        state_dir=tmp_path / "state", speed=3600.0, namespace="spotplane-demo-realjob",
        detached=False,
        # no forecaster, so no spot quota: after an HP gang took the whole pool, GFS's forecast
        # (last week's peak) rightly reserves it for HP for a week, which would starve the real
        # job this test is about (test_demo.py runs the demo with the quota)
        forecaster=False,
        controller=ControllerSettings(pool_nodes={"V100": POOL, "H100": 1}),
        executor_factory="actors.execution:make_executor",
        executor_options=ExecutorConfig(artifact_uri=str(tmp_path / "artifacts"),
                                        workload_address=workload_ray.dashboard,
                                        workload_gcs=workload_ray.gcs,
                                        workload_token_path=workload_ray.token_path))
    handles = start_control_plane(settings)
    try:
        yield start_api(settings.db_path, ADMIN, free_port())
    finally:
        stop_api()
        stop_control_plane(handles)


def test_real_job_is_evicted_restores_and_finishes(control_plane: str, tmp_path: Path) -> None:
    from controlplane.cli.demo import run_demo
    from controlplane.client import SpotplaneClient

    out = io.StringIO()
    with SpotplaneClient(control_plane, ADMIN) as admin:
        report = run_demo(admin, out=out, scenario=realjob_scenario(), timeout_s=240, poll_s=0.3,
                          tty=False)
    by_name = {j.name: j for j in report.jobs}
    real = by_name["real-numpy"]
    assert real.real and not by_name["hp-all"].real
    assert real.state == "SUCCEEDED", (report.render(), out.getvalue()[-3000:])
    assert real.preemptions >= 1, report.render()
    assert real.checkpoints >= 1, report.render()
    assert "real job real-numpy: SUCCEEDED" in report.render()
    assert real.cost > 0 and real.on_demand_cost > 0
    tenants = list((tmp_path / "artifacts" / "tenants").iterdir())
    assert len(tenants) == 1  # the real job's tenant's prefix, and only its
    artifacts = tenants[0] / "jobs" / real.id
    assert any(artifacts.rglob("*.json")), "no checkpoint artifact was written"
