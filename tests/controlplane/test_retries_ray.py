"""A real Ray job whose script exits 3 once restarts from its checkpoint and ends bit-identical."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.execution import ExecutorConfig, RayJobExecutor
from clusters.artifacts import LocalArtifactStore
from clusters.sim import SimulatedFleet
from controlplane import sdk
from controlplane.core.clock import SimClock, WallClock
from controlplane.core.models import JobSpec, JobState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from policies.preemption import ExponentialModel
from tests.support import require_job_agent, train_reference

SPEED = 900.0  # simulated seconds per wall second
EXITS_ONCE = Path(__file__).with_name("exits_once.py")


@pytest.fixture
def world(ray_cluster: Any, tmp_path: Path,
          data_root: Path) -> Iterator[tuple[Store, Controller, RayJobExecutor, SimClock]]:
    require_job_agent(ray_cluster)
    clock = SimClock(start=0.0)
    store = Store(tmp_path / "spotplane.db")
    fleet = SimulatedFleet.from_options(
        clock=clock, data_dir=data_root, seed=3, state_path=tmp_path / "simfleet.db", gcp=False,
        lifetime_model=ExponentialModel(rate=0.4, limit=24.0))
    ex = RayJobExecutor(ExecutorConfig(workload_address=ray_cluster.dashboard_url,
                                       artifact_uri=str(tmp_path / "artifacts"),
                                       namespace="spotplane-tests", hours_per_second=1.0,
                                       stop_timeout_s=20), clock=clock)
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"V100": 2, "H100": 1}),
                     executor=ex, epoch=store.take_controller_lease())
    yield store, ctl, ex, clock
    ex.close()
    store.close()


@pytest.mark.ray
@pytest.mark.slow
def test_a_real_job_exiting_3_once_restarts_from_its_checkpoint_bit_identical(
        world: tuple[Store, Controller, RayJobExecutor, SimClock], tmp_path: Path) -> None:
    store, ctl, ex, clock = world
    steps, seed, exit_at = 150, 11, 60
    tenant, _ = store.create_tenant("t")
    marker = tmp_path / "exited-once"
    job = store.submit_job(tenant.id, JobSpec(
        name="exits-once", kind="hp", accelerator="V100",  # on demand: no preemption
        compute_hours=steps * 0.02 * SPEED / 3600, checkpoint_hours=0.01,
        max_restarts_on_error=1, restart_on_exit_codes=[3],
        entrypoint=f"python {EXITS_ONCE} --steps {steps} --seed {seed} --exit-at {exit_at} "
                   f"--marker {marker}"), now=0.0)
    wall = WallClock()
    last, deadline = wall.now(), wall.now() + 240
    while wall.now() < deadline:
        now = wall.now()
        clock.advance((now - last) * SPEED)
        last = now
        ctl.tick()
        if store.get_job(job.id).terminal:
            break
        time.sleep(0.2)
    j = store.get_job(job.id)
    assert j.state is JobState.SUCCEEDED, (j.state, j.message, ex.logs(job.id)[-3000:])
    assert (j.error_restarts, j.exit_code, j.preemptions) == (1, 3, 0)
    assert marker.exists()
    logs = ex.logs(job.id)
    starts = [int(ln.split()[3]) for ln in logs.splitlines() if ln.startswith("starting at step")]
    assert starts == [0, exit_at], logs[-4000:]  # the restart resumed at the checkpoint
    requeued = [e.cause for e in store.job_events(job.id) if e.dst == JobState.QUEUED.value
                and e.src in (JobState.RUNNING.value, JobState.CHECKPOINTING.value)]
    assert len(requeued) == 1 and "exit code 3: restart 1 of 1" in requeued[0]
    artifacts = LocalArtifactStore(ex.store_for(j.tenant_id).uri[len("file://"):])  # type: ignore[attr-defined]
    final = artifacts.restore_latest(job.id)
    assert final is not None and final.ref.progress == 1.0
    state, ref = sdk.loads(final.data), train_reference(steps, seed)
    for k in ("w1", "w2", "v1", "v2"):
        assert state[k].tobytes() == ref[k].tobytes()
