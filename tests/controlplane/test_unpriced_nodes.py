"""Node types without a price: ``--fleet ray`` refuses them at construction, and a node whose
price is not a number never makes a job's cost, a bill line or a tenant's spend NaN."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from clusters.ray.catalog import node_types_from_config
from clusters.ray.fleet import RayAutoscalerFleet
from controlplane.core.clock import SimClock
from controlplane.core.errors import ConfigError
from controlplane.core.models import JobSpec, JobState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from tests.clusters.test_rayfleet import FakeState, fake_cluster_config


def test_the_ray_fleet_refuses_a_node_type_without_a_price(tmp_path: Path) -> None:
    from clusters.providers import make_provider

    config = tmp_path / "cluster.yaml"
    config.write_text(json.dumps(fake_cluster_config("unused")))  # its machine types are in no catalog
    with pytest.raises(ConfigError, match="node type gpu_on_demand_fake has no price") as raised:
        make_provider("ray", config=str(config))
    assert "prices" in str(raised.value.fix) and "InstanceType" in str(raised.value.fix)


def test_a_node_without_a_price_never_makes_the_spend_nan(tmp_path: Path) -> None:
    """The loop over a Ray fleet whose spot type has no spot price (built past the check)."""
    clock = SimClock(start=0.0)
    state = FakeState()
    types = node_types_from_config(fake_cluster_config("unused"), {"gpu_spot_fake": (math.nan, 1.0),
                                                                    "gpu_on_demand_fake": (0.35, 1.0)})
    fleet = RayAutoscalerFleet(types, clock=clock, list_nodes=lambda: state.nodes,
                               request=state.requests.append, launch_timeout_s=600)
    store = Store(tmp_path / "spotplane.db")
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"FAKE": 4}),
                     epoch=store.take_controller_lease())
    tenant, _ = store.create_tenant("t", max_gpus=100)
    job = store.submit_job(tenant.id, JobSpec(name="a", kind="spot", compute_hours=1, accelerator="FAKE"), now=0.0)
    for _ in range(90):
        clock.advance(60.0)
        ctl.tick()
        for slot in fleet.slots.values():
            node_id = f"n-{slot.slot_id}"
            if not slot.released and node_id not in {n["node_id"] for n in state.nodes}:
                state.add(node_id, dict(slot.spec.resources))
    done = store.get_job(job.id)
    assert done.state is JobState.SUCCEEDED, done.state
    assert math.isfinite(done.cost) and all(math.isfinite(v) for v in done.bill.values()), done.bill
    assert done.bill["spot_compute"] > 0 and done.cost >= 1.0, done.bill  # 1 h at its on-demand $1/h
    assert all(math.isfinite(v) for v in store.month_spend("1970-01").values())
    store.close()
