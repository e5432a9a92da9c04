"""The ControllerActor hosts the Ray executor (``executor_factory``): a real job runs to the end."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from actors.execution import ExecutorConfig
from actors.jobagent import job_logs
from actors.runtime import RuntimeSettings, start_control_plane, stop_control_plane
from clusters.artifacts import LocalArtifactStore
from controlplane import sdk
from controlplane.core.models import TERMINAL_STATES, JobSpec, JobState
from controlplane.store import Store
from policies.preemption import ExponentialModel
from tests.support import train_reference

SPEED = 900.0


@pytest.mark.ray
@pytest.mark.slow
def test_controller_actor_runs_a_real_job_through_its_executor(
    ray_cluster: Any, workload_ray: Any, tmp_path: Path
) -> None:
    artifacts = tmp_path / "artifacts"
    settings = RuntimeSettings(
        state_dir=tmp_path,
        namespace=f"t-{uuid.uuid4().hex[:8]}",
        detached=False,
        forecaster=False,
        policy_actors=False,
        speed=SPEED,
        autostart=True,
        seed=1,
        fleet_options={"gcp": False, "lifetime_model": ExponentialModel(rate=0.3, limit=24.0)},
        executor_factory="actors.execution:make_executor",
        executor_options=ExecutorConfig(workload_address=workload_ray.dashboard,
                                        workload_gcs=workload_ray.gcs,
                                        workload_token_path=workload_ray.token_path,
                                        artifact_uri=str(artifacts)),
    )
    handles = start_control_plane(settings)
    try:
        store = Store(settings.db_path)
        tenant, _ = store.create_tenant("t")
        steps, seed = 300, 17
        job = store.submit_job(
            tenant.id,
            JobSpec(
                name="numpy",
                kind="spot",
                accelerator="V100",
                compute_hours=steps * 0.04 * SPEED / 3600,
                checkpoint_hours=0.01,
                entrypoint=f"python examples/train_numpy.py --steps {steps} --seed {seed} --step-seconds 0.04",
            ),
        )
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and store.get_job(job.id).state not in TERMINAL_STATES:
            time.sleep(0.5)
        j = store.get_job(job.id)
        logs = job_logs(workload_ray.dashboard, job.id, workload_ray.token_path)
        assert j.state is JobState.SUCCEEDED, (j.state, j.message, logs[-3000:])
        final = LocalArtifactStore(artifacts / "tenants" / tenant.id).restore_latest(job.id)
        assert final is not None and final.ref.progress == 1.0
        state, ref = sdk.loads(final.data), train_reference(steps, seed)
        for k in ("w1", "w2", "v1", "v2"):
            assert state[k].tobytes() == ref[k].tobytes()
        assert "starting at step 0 of 300" in logs
        assert j.progress_hours == pytest.approx(j.spec.compute_hours)
    finally:
        stop_control_plane(handles)
