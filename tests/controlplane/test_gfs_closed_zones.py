"""GFS's candidates in a closed zone: an idle node of a zone that takes no new work (its
workload cluster drains or is unhealthy) is no slot the placement policy may pick, so a job is
never planned onto it (which would terminate it and launch elsewhere); without Ray."""

from __future__ import annotations

from pathlib import Path

from controlplane.core.clock import SimClock
from controlplane.core.models import JobSpec, JobState, Market, Node, NodeState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.pool import pools_of
from tests.controlplane.test_cluster_placement import _launch_zones, _run, _world


def _idle(node_id: str, zone: str) -> Node:
    return Node(id=node_id, provider="sim", cloud="gcp", zone=zone, instance_type="a3", accelerator="H100",
                accelerator_count=8, market=Market.ON_DEMAND, price_per_hour=10.0,
                on_demand_price_per_hour=10.0, intent_id=f"i-{node_id}", requested_at=0.0,
                state=NodeState.READY, launched_at=0.0)


def test_an_idle_node_of_a_closed_zone_is_no_free_card() -> None:
    nodes = [_idle("open", "us-west1-a"), _idle("shut", "us-central1-a")]
    pool = pools_of(nodes, {"H100": 3}, closed={"us-central1-a"})["H100"]
    snap, slots = pool.snapshot({}, now=3600.0)
    free = dict(zip(slots, snap.card_free[:, 0], strict=True))
    assert free == {"open": 1.0, "shut": 0.0, None: 1.0}
    assert snap.ages is not None and list(snap.ages.hours[:2] == 1.0) == [True, False]
    assert pool.free_cards() == 2
    assert pools_of(nodes, {"H100": 3})["H100"].free_cards() == 3  # no zone closed: both idle count


def test_gfs_never_plans_a_job_onto_an_idle_node_of_a_drained_cluster(tmp_path: Path,
                                                                       data_root: Path) -> None:
    clock = SimClock(start=0.0)
    settings = ControllerSettings(pool_nodes={"H100": 4}, idle_node_seconds=3600.0)
    store, ctl = _world(tmp_path, data_root, clock, settings)
    t, _ = store.create_tenant("t", max_gpus=100)
    spec = {"kind": "hp", "compute_hours": 0.2, "accelerator": "H100", "gpus_per_worker": 8}
    first = store.submit_job(t.id, JobSpec(name="a", **spec), now=0.0)
    _run(ctl, clock, 0.5)
    assert store.get_job(first.id).state is JobState.SUCCEEDED
    idle = [n for n in ctl.state.nodes.values() if n.job_id is None and n.state is NodeState.READY]
    assert [n.zone for n in idle] == ["us-central1-a"], "the first job's node idles in central"
    store.drain_cluster("gcp-central")
    second = store.submit_job(t.id, JobSpec(name="b", **spec), now=clock.now())
    _run(ctl, clock, 0.1)
    assert _launch_zones(store, second.id) == ["us-west1-a"]
    place = [d.reason for d in store.job_decisions(second.id) if d.action == "place"]
    assert place and place[0].startswith("1 new + 0 reused"), place
    replaced = [e for e in store.events() if e.node_id == idle[0].id and "replaced for job" in e.cause]
    assert replaced == [], "the central idle node was a GFS slot of the second job"
    store.close()
