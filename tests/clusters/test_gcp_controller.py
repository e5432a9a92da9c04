"""End to end: the real Controller on GcpFleet over the local Compute API: preemptions and stockouts reach it."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusters.gcp.fleet import GcpFleet
from clusters.providers import make_provider
from controlplane.core.clock import SimClock
from controlplane.core.models import JobKind, JobSpec, JobState, NodeState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"spotplane_tests_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gce_fake = _load("gce_fake")
ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Any, SimClock, Store, GcpFleet, Controller]]:
    fake = gce_fake.GceFake(project="spotplane-test", zones=tuple(ZONES))
    with gce_fake.GceServer(fake) as server:
        clock = SimClock(start=1_700_000_000.0)
        fleet = make_provider("gcp", project="spotplane-test", zones=ZONES, credentials="anonymous",
                              api_endpoint=server.endpoint, clock=clock, seed=2,
                              machine_types=["g2-standard-4"])
        assert isinstance(fleet, GcpFleet)
        store = Store(tmp_path / "spotplane.db")
        ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"L4": 4}),
                         epoch=store.take_controller_lease())
        yield fake, clock, store, fleet, ctl


def run(ctl: Controller, fake: Any, clock: SimClock, ticks: int, dt: float = 60.0) -> None:
    for _ in range(ticks):
        clock.advance(dt)
        ctl.tick()
        for (_, name), inst in list(fake.instances.items()):  # GCE finishes booting
            if inst["status"] in ("PROVISIONING", "STAGING"):
                fake.set_status(name, "RUNNING")


@pytest.mark.slow
def test_spot_vm_preempted_job_requeued_and_relaunched(world: Any) -> None:
    fake, clock, store, fleet, ctl = world
    tenant, _ = store.create_tenant("acme")
    job = store.submit_job(tenant.id, JobSpec(name="train", kind=JobKind.SPOT, compute_hours=4, workers=1,
                                              accelerator="L4"), now=clock.now())
    run(ctl, fake, clock, 5)
    assert store.get_job(job.id).state is JobState.RUNNING, [e.cause for e in store.job_events(job.id)]
    [node] = [n for n in store.list_nodes() if n.job_id == job.id]
    assert node.cloud == "gcp" and node.market.value == "spot" and node.state is NodeState.READY

    fake.preempt(node.instance_id)  # the compute.instances.preempted operation appears
    fake.set_status(node.instance_id, "RUNNING")
    clock.advance(1)
    ctl.tick()  # the controller hears the notice before the VM goes
    noticed = next(n for n in store.list_nodes() if n.id == node.id)
    assert noticed.state is NodeState.NOTICED and noticed.notice_at is not None
    fake.finish_preemption(node.instance_id)
    run(ctl, fake, clock, 1)
    gone = next(n for n in store.list_nodes() if n.id == node.id)
    assert gone.state is NodeState.PREEMPTED and store.get_job(job.id).preemptions >= 1
    run(ctl, fake, clock, 5)
    assert store.get_job(job.id).state is JobState.RUNNING
    live = [n for n in store.list_nodes() if n.job_id == job.id and n.state is NodeState.READY]
    assert len(live) == 1 and live[0].instance_id != node.instance_id


@pytest.mark.slow
def test_zone_exhausted_moves_to_the_next_zone(world: Any) -> None:
    fake, clock, store, fleet, ctl = world
    tenant, _ = store.create_tenant("acme")
    fake.stockout.update({z: "ZONE_RESOURCE_POOL_EXHAUSTED" for z in ZONES[:2]})
    job = store.submit_job(tenant.id, JobSpec(name="train", kind=JobKind.SPOT, compute_hours=2, workers=1,
                                              accelerator="L4"), now=clock.now())
    run(ctl, fake, clock, 10)
    assert store.get_job(job.id).state is JobState.RUNNING, [e.cause for e in store.job_events(job.id)]
    [node] = [n for n in store.list_nodes() if n.job_id == job.id and n.state is NodeState.READY]
    assert node.zone == "us-central1-c"
    tried = [path.split("/")[6] for method, path, _ in fake.calls
             if method == "POST" and path.endswith("/instances")]
    assert tried[-1] == "us-central1-c" and set(tried[:-1]) & set(ZONES[:2]), tried
    causes = " ".join(e.cause for e in store.job_events(job.id))
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in causes, causes
