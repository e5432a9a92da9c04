"""End to end: the real Controller on AwsFleet over moto's server: preemptions and stockouts reach it."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusters.aws.fleet import AwsFleet
from clusters.providers import make_provider
from controlplane.core.clock import SimClock
from controlplane.core.models import JobKind, JobSpec, JobState, NodeState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("spotplane_tests_aws_fleet", Path(__file__).with_name("test_aws_fleet.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


aws = _load()
moto_port = aws.moto_port
proxy = aws.proxy
aws_env = aws.aws_env
GPU = "g5.xlarge"


@pytest.fixture
def world(proxy: tuple[Any, str], aws_env: None, tmp_path: Path) -> Iterator[tuple[Any, SimClock, Store, AwsFleet, Controller]]:
    p, url = proxy
    clock = SimClock(start=1_700_000_000.0)
    fleet = make_provider("aws", endpoint_url=url, zones=aws.ZONES, instance_types=[GPU], clock=clock,
                          seed=11, image_id="ami-12c6146b")
    assert isinstance(fleet, AwsFleet)
    store = Store(tmp_path / "spotplane.db")
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"A10G": 4}),
                     epoch=store.take_controller_lease())
    yield p, clock, store, fleet, ctl


def boot_pending() -> None:
    """EC2 finishes booting whatever is pending."""
    backend = aws.moto_backend()
    for reservation in backend.reservations.values():
        for inst in reservation.instances:
            if inst.state == "pending":
                inst.start()


def run(ctl: Controller, clock: SimClock, ticks: int, dt: float = 60.0) -> None:
    for _ in range(ticks):
        clock.advance(dt)
        ctl.tick()
        boot_pending()


@pytest.mark.slow
def test_spot_job_runs_is_preempted_and_requeued(world: Any) -> None:
    _, clock, store, fleet, ctl = world
    tenant, _ = store.create_tenant("acme")
    job = store.submit_job(tenant.id, JobSpec(name="train", kind=JobKind.SPOT, compute_hours=4, workers=1,
                                              accelerator="A10G"), now=clock.now())
    run(ctl, clock, 5)
    j = store.get_job(job.id)
    assert j.state is JobState.RUNNING, [e.cause for e in store.job_events(job.id)]
    [node] = [n for n in store.list_nodes() if n.job_id == job.id]
    assert node.market.value == "spot" and node.cloud == "aws" and node.state is NodeState.READY
    [inst] = fleet.describe([node.instance_id])
    assert inst.tags["job_id"] == job.id and inst.tags["tenant_id"] == tenant.id

    # EC2 interrupts the spot instance
    raw = aws.moto_backend().get_instance(node.instance_id)
    raw.terminate()
    raw.state_reason.code = "Server.SpotInstanceTermination"
    run(ctl, clock, 1)
    j = store.get_job(job.id)
    assert j.preemptions >= 1
    gone = next(n for n in store.list_nodes() if n.id == node.id)
    assert gone.state is NodeState.PREEMPTED
    assert any("preempted" in e.cause for e in store.job_events(job.id)), [e.cause for e in store.job_events(job.id)]
    run(ctl, clock, 5)  # relaunched on a new instance
    assert store.get_job(job.id).state is JobState.RUNNING
    live = [n for n in store.list_nodes() if n.job_id == job.id and n.state is NodeState.READY]
    assert len(live) == 1 and live[0].instance_id != node.instance_id


@pytest.mark.slow
def test_stockout_moves_the_job_to_another_zone(world: Any) -> None:
    p, clock, store, fleet, ctl = world
    tenant, _ = store.create_tenant("acme")
    p.fail("RunInstances", "InsufficientInstanceCapacity", status=500)  # the first zone tried is out
    job = store.submit_job(tenant.id, JobSpec(name="train", kind=JobKind.SPOT, compute_hours=2, workers=1,
                                              accelerator="A10G"), now=clock.now())
    run(ctl, clock, 8)
    zones = [params["Placement.AvailabilityZone"] for a, params in p.calls if a == "RunInstances"]
    assert len(zones) >= 2 and zones[0] != zones[-1], zones
    assert store.get_job(job.id).state is JobState.RUNNING
    [node] = [n for n in store.list_nodes() if n.job_id == job.id and n.state is NodeState.READY]
    assert node.zone == zones[-1]
