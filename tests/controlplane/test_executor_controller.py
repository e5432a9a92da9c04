"""The controller drives real Ray jobs on the simulated fleet: preempted, restored, finished."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

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
from serve.metrics import build_registry, exposition
from tests.support import require_job_agent, train_reference

SPEED = 900.0  # simulated seconds per wall second


@pytest.fixture
def world(
    ray_cluster: Any, tmp_path: Path, data_root: Path
) -> Iterator[tuple[Store, Controller, RayJobExecutor, SimClock, SimulatedFleet]]:
    require_job_agent(ray_cluster)
    clock = SimClock(start=0.0)
    store = Store(tmp_path / "spotplane.db")
    # the simulated clock runs 900x wall time (a wall second is 0.25 h); spot VMs outlive the
    # test, so the one preemption is the test's own (at the job's first checkpoint), whatever
    # the machine's speed
    fleet = SimulatedFleet.from_options(
        clock=clock,
        data_dir=data_root,
        seed=3,
        state_path=tmp_path / "simfleet.db",
        gcp=False,
        lifetime_model=ExponentialModel(rate=1e-4, limit=1000.0),
    )
    ex = RayJobExecutor(
        ExecutorConfig(
            workload_address=ray_cluster.dashboard_url,
            artifact_uri=str(tmp_path / "artifacts"),
            namespace="spotplane-tests",
            hours_per_second=1.0,  # one wall second = one simulated hour
            stop_timeout_s=20,
        ),
        clock=clock,
    )
    ctl = Controller(
        store,
        fleet,
        clock,
        ControllerSettings(pool_nodes={"V100": 4, "H100": 1}),
        executor=ex,
        epoch=store.take_controller_lease(),
    )
    yield store, ctl, ex, clock, fleet
    ex.close()
    store.close()


@pytest.mark.ray
@pytest.mark.slow
def test_real_job_is_preempted_by_the_fleet_restores_elsewhere_and_finishes(
    world: tuple[Store, Controller, RayJobExecutor, SimClock, SimulatedFleet],
) -> None:
    store, ctl, ex, clock, fleet = world
    steps, seed = 350, 13
    tenant, _ = store.create_tenant("t")
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
        now=0.0,
    )
    wall = WallClock()
    last, deadline = wall.now(), wall.now() + 400
    preempted: str | None = None
    while wall.now() < deadline:
        now = wall.now()
        clock.advance((now - last) * SPEED)
        last = now
        ctl.tick()
        current = store.get_job(job.id)
        if current.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
            break
        if preempted is None and current.state is JobState.RUNNING and current.checkpoints >= 1:
            node = next(n for n in store.list_nodes() if n.job_id == job.id and n.instance_id)
            preempted = node.instance_id or ""
            fleet.preempt_now(preempted, "spot reclaimed")
        time.sleep(0.2)
    j = store.get_job(job.id)
    assert j.state is JobState.SUCCEEDED, (j.state, j.message, ex.logs(job.id)[-3000:])
    assert preempted is not None and j.preemptions >= 1, (preempted, j.preemptions)
    attempts = ex.replicas[job.id]
    assert len({r.node_id for r in attempts}) == len(attempts) >= 2  # restored on other nodes
    # the job's checkpoints live under its tenant's prefix
    artifacts = LocalArtifactStore(ex.store_for(job.tenant_id).uri[len("file://") :])  # type: ignore[attr-defined]
    final = artifacts.restore_latest(job.id)
    assert final is not None and final.ref.progress == 1.0
    state, ref = sdk.loads(final.data), train_reference(steps, seed)
    for k in ("w1", "w2", "v1", "v2"):
        assert state[k].tobytes() == ref[k].tobytes()
    # the checkpoint bytes the executor read back from the artifact store reach /metrics
    written = sum(r.size for r in artifacts.list(job.id))
    assert j.checkpoint_bytes == written > 0
    text = exposition(build_registry(store)).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["spotplane_checkpoint_bytes"].samples[0].value == written
    logs = ex.logs(job.id)
    # the step each attempt started at (None: its node went before its entrypoint ran)
    sections = logs.split("=== ")[1:]
    starts = [next((int(ln.split()[3]) for ln in part.splitlines() if ln.startswith("starting at step")),
                   None) for part in sections]
    assert len(starts) == len(attempts) and starts[-1] is not None, logs[-4000:]
    assert [s for s in starts if s is not None][0] == 0, starts
    # an attempt resumes from at least what was checkpointed when an earlier attempt's node went
    # (0 where its checkpoint actor went with the node before it could say)
    saved = [0 if r.outcome is None else round(float(r.outcome["checkpointed_progress"]) * steps)
             for r in attempts[:-1]]
    for k, start in enumerate(starts[1:], 1):
        assert start is None or start >= max(saved[:k]), (starts, saved)
    assert max(saved) == 0 or (starts[-1] or 0) > 0, (starts, saved)
    assert j.checkpoints >= 1 and j.progress_hours == pytest.approx(steps * 0.04 * SPEED / 3600)
