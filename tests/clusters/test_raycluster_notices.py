"""Preemption notices on the nodes of N workload Ray clusters (``--fleet ray-clusters``): the
watch plan and the routing without Ray, then two private fake-autoscaling clusters (as in
:mod:`tests.clusters.test_rayclusters`), each with its own fake metadata server, whose driver
children keep a watcher pinned on each node and hand the notices back through their pipe."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from clusters.fleet import EventKind, FleetEvent, InstanceState, LaunchRequest, Market
from clusters.ray.catalog import node_types_from_config
from clusters.ray.driver import ClusterDriver
from clusters.ray.fleet import RayAutoscalerFleet
from clusters.ray.multi import Member, RayClusterRef, RayClustersFleet, in_cluster, notice_cloud
from clusters.ray.nodewatch import plan_watchers
from controlplane.core.clock import SimClock, WallClock
from controlplane.core.errors import CapacityUnavailable
from tests.clusters.test_notices import serve_metadata
from tests.clusters.test_rayclusters import PRICES, SPOT, fake_heads, wait_for
from tests.clusters.test_rayfleet import FakeState, fake_cluster_config

NODE = "ff" * 28  # the fake provider numbers each cluster's nodes alike


def reporting_clusters(states: dict[str, FakeState], reported: dict[str, list[tuple[str, float]]],
                       clock: SimClock) -> RayClustersFleet:
    """A fleet over fake clusters (``states``) whose nodes' notices are what the test puts in
    ``reported`` (each cluster's list, taken once)."""

    def make(ref: RayClusterRef) -> Member:
        types = in_cluster(node_types_from_config(fake_cluster_config("unused"), PRICES), ref.name)
        state = states[ref.name]
        fleet = RayAutoscalerFleet(types, clock=clock, list_nodes=lambda: state.nodes,
                                   request=state.requests.append)

        def take() -> list[tuple[str, float]]:
            out, reported[ref.name][:] = list(reported[ref.name]), []
            return out

        return Member(ref, fleet, notices=take)

    return RayClustersFleet([RayClusterRef(n, f"{n}.yaml", "http://h:1", "h:2") for n in states], make=make)


def test_plan_watches_alive_workers_and_forgets_the_gone() -> None:
    nodes = [{"node_id": "head", "state": "ALIVE", "is_head_node": True},
             {"node_id": "w1", "state": "ALIVE"}, {"node_id": "w2", "state": "ALIVE"},
             {"node_id": "dead", "state": "DEAD"}]
    plan = plan_watchers(nodes, ["w2", "dead", "gone"], blocked=[])
    assert plan.start == {"w1"} and plan.forget == {"dead", "gone"}
    assert plan_watchers(nodes, ["w2"], blocked=["w1"]).start == frozenset()


def test_the_driver_child_is_told_the_clusters_cloud_and_metadata_server() -> None:
    driver = ClusterDriver("10.0.0.1:6379", notice_cloud="gcp", metadata_url="http://127.0.0.1:9")
    assert driver.command()[-4:] == ["--notice-cloud", "gcp", "--metadata-url", "http://127.0.0.1:9"]
    assert ClusterDriver("10.0.0.1:6379").notices() == []  # watches nothing: no child started
    assert notice_cloud(RayClusterRef("a", "a.yaml", "http://h:1", "h:2", cloud="aws")) == "aws"
    assert notice_cloud(RayClusterRef("a", "a.yaml", "http://h:1", "h:2", cloud="onprem")) is None


def test_a_notice_of_a_node_of_b_notices_bs_slot_only() -> None:
    """Both clusters' first nodes have the same Ray node id: a notice is its cluster's."""
    states = {"a": FakeState(), "b": FakeState()}
    reported: dict[str, list[tuple[str, float]]] = {"a": [], "b": []}

    fleet = reporting_clusters(states, reported, SimClock())
    for name in states:
        fleet.launch(LaunchRequest(f"job-{name}", f"{name}.fake-zone-a", SPOT, Market.SPOT))
        states[name].add(NODE, {"spot": 1, "accelerator_type:FAKE": 1})
    assert [e.kind for e in fleet.poll_events()] == [EventKind.READY, EventKind.READY]
    reported["b"].append((NODE, 110.0))
    events = fleet.poll_events()
    assert [(e.kind, e.instance_id, e.zone, e.seconds_left) for e in events] == [
        (EventKind.PREEMPTION_NOTICE, "job-b/0", "b.fake-zone-a", 110.0)]
    assert {i.instance_id: i.state for i in fleet.describe()} == {
        "job-a/0": InstanceState.RUNNING, "job-b/0": InstanceState.NOTICED}
    reported["b"].append((NODE, 100.0))  # the same notice again, and one of no slot
    reported["a"].append(("unknown", 100.0))
    assert fleet.poll_events() == []


def test_a_full_node_type_is_not_a_cluster_that_does_not_answer() -> None:
    types = in_cluster(node_types_from_config(fake_cluster_config("unused"), PRICES), "a")
    state = FakeState()
    member = Member(RayClusterRef("a", "a.yaml", "http://h:1", "h:2"),
                    RayAutoscalerFleet(types, list_nodes=lambda: state.nodes, request=state.requests.append))
    fleet = RayClustersFleet([member.ref], make=lambda ref: member)
    fleet.launch(LaunchRequest("full", "a.fake-zone-a", SPOT, Market.SPOT, 2))  # max_workers 2
    with pytest.raises(CapacityUnavailable, match="max_workers=2 reached"):
        fleet.launch(LaunchRequest("more", "a.fake-zone-a", SPOT, Market.SPOT))
    assert member.down == ""
    fleet.launch(LaunchRequest("od", "a.fake-zone-a", "gpu_on_demand_fake", Market.ON_DEMAND))


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_metadata_notice_on_a_node_of_b_is_a_notice_of_bs_slot_only() -> None:
    fleet: RayClustersFleet | None = None
    events: list[FleetEvent] = []
    with serve_metadata() as (meta_a, url_a), serve_metadata() as (meta_b, url_b), \
            fake_heads({"a": "fake-zone-a", "b": "fake-zone-b"}, "spn") as heads:
        try:
            urls = {"a": url_a, "b": url_b}
            refs = [RayClusterRef(name, h.info["config"], h.info["dashboard"], h.info["gcs"], prices=PRICES,
                                  cloud="aws", metadata_url=urls[name]) for name, h in heads.items()]
            fleet = RayClustersFleet(refs, clock=WallClock(), launch_timeout_s=240)

            def polled(pred: Callable[[], bool]) -> Callable[[], bool]:
                def check() -> bool:
                    assert fleet is not None
                    events.extend(fleet.poll_events())
                    return pred()
                return check

            def seen(kind: EventKind, slot: str) -> bool:
                return any(e.kind == kind and e.instance_id == slot for e in events)

            def watched(state: Any) -> bool:
                return any(p.endswith("/spot/instance-action") for _, p, _ in list(state.requests))

            for name in heads:
                fleet.launch(LaunchRequest(f"job-{name}", f"{name}.fake-zone-{name}", SPOT, Market.SPOT))
            wait_for(polled(lambda: seen(EventKind.READY, "job-a/0") and seen(EventKind.READY, "job-b/0")),
                     180, "both clusters' nodes ready")
            wait_for(lambda: watched(meta_a) and watched(meta_b), 120,
                     "a watcher polls each cluster's metadata server")

            meta_b.notice_at = datetime.now(UTC) + timedelta(minutes=2)  # B's node gets the notice
            wait_for(polled(lambda: seen(EventKind.PREEMPTION_NOTICE, "job-b/0")), 60, "B's slot noticed")
            [notice] = [e for e in events if e.kind == EventKind.PREEMPTION_NOTICE]
            assert (notice.instance_id, notice.zone) == ("job-b/0", "b.fake-zone-b")
            assert notice.seconds_left is not None and 60 < notice.seconds_left <= 120
            assert {i.instance_id: i.state for i in fleet.describe()} == {
                "job-a/0": InstanceState.RUNNING, "job-b/0": InstanceState.NOTICED}
            events.extend(fleet.poll_events())
            assert not seen(EventKind.PREEMPTION_NOTICE, "job-a/0")
        finally:
            if fleet is not None:
                fleet.close()


def test_the_loop_notices_the_node_of_bs_slot(tmp_path: Path) -> None:
    """What the controller makes of it: B's node is NOTICED with the seconds left; A's node of
    the same Ray node id runs on."""
    from controlplane.core.models import JobSpec, JobState, NodeState
    from controlplane.reconcile.contracts import ControllerSettings
    from controlplane.reconcile.controller import Controller
    from controlplane.store import Store

    clock = SimClock(start=0.0)
    states = {"a": FakeState(), "b": FakeState()}
    reported: dict[str, list[tuple[str, float]]] = {"a": [], "b": []}

    fleet = reporting_clusters(states, reported, clock)
    store = Store(tmp_path / "spotplane.db")
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"FAKE": 4}),
                     epoch=store.take_controller_lease())
    tenant, _ = store.create_tenant("t", max_gpus=100)
    jobs = [store.submit_job(tenant.id, JobSpec(name=n, kind="spot", compute_hours=5, accelerator="FAKE"),
                             now=0.0) for n in ("x", "y", "z")]  # 3 > max_workers 2: both clusters

    def run(minutes: int) -> None:
        for _ in range(minutes):
            clock.advance(60.0)
            ctl.tick()
            for name, member in fleet.members.items():  # each autoscaler numbers its nodes 0, 1..
                assert isinstance(member.fleet, RayAutoscalerFleet)
                live = [s for s in member.fleet.slots.values() if not s.released]
                for i in range(len(states[name].nodes), len(live)):
                    states[name].add(f"node-{i}", dict(live[i].spec.resources))

    run(10)
    assert all(store.get_job(j.id).state is JobState.RUNNING for j in jobs)
    slots = {name: {s.slot_id: s.node_id for s in m.fleet.slots.values()}  # type: ignore[attr-defined]
             for name, m in fleet.members.items()}
    assert "node-0" in slots["a"].values() and "node-0" in slots["b"].values()
    reported["b"].append(("node-0", 115.0))
    run(2)  # the fleet's event at one tick, its state at the next
    noticed = {n.instance_id: n.state for n in store.list_nodes()}
    b_slot = next(sid for sid, nid in slots["b"].items() if nid == "node-0")
    assert {sid for sid, st in noticed.items() if st is NodeState.NOTICED} == {b_slot}
    store.close()
