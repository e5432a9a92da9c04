"""One fleet over N autoscaling Ray clusters (``--fleet ray-clusters``): the routing without Ray,
then two private fake-autoscaling Ray clusters, one provider each.

The slow test starts each cluster as :mod:`tests.clusters.test_rayfleet` starts its one (a head
``ray._private.node.Node`` with Ray's fake multi-node autoscaling provider, every port
free-picked, its own temp dir), each in a child process of its own. The test process is a
driver of neither: the fleet lists nodes through each dashboard and asks each autoscaler through
that cluster's driver child.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))

from clusters.fleet import EventKind, FleetEvent, LaunchRequest, Market  # noqa: E402
from clusters.providers import Capability, provider_entry  # noqa: E402
from clusters.ray.catalog import node_types_from_config  # noqa: E402
from clusters.ray.driver import ClusterDriver, driver_env  # noqa: E402
from clusters.ray.fleet import RayAutoscalerFleet  # noqa: E402
from clusters.ray.multi import (  # noqa: E402
    Member,
    RayClusterRef,
    RayClustersFleet,
    cluster_zone,
    in_cluster,
    refs_from,
)
from controlplane.core.clock import SimClock, WallClock  # noqa: E402
from controlplane.core.errors import CapacityUnavailable, CloudError, ConfigError, InvalidInput  # noqa: E402
from controlplane.core.workloadclusters import WorkloadCluster  # noqa: E402
from tests.clusters.test_rayfleet import (  # noqa: E402
    FakeState,
    fake_cluster_config,
    kill_ours,
    our_processes,
    processes,
)

SPOT = "gpu_spot_fake"


# --------------------------------------------------------------------------- routing (no Ray)
class FlakyState(FakeState):
    """A cluster's state API and autoscaler that may stop answering."""

    def __init__(self) -> None:
        super().__init__()
        self.answers = True  # the dashboard and the driver
        self.driver_answers = True

    def list_nodes(self) -> list[dict[str, Any]]:
        if not self.answers:
            raise ConnectionError("dashboard unreachable")
        return self.nodes

    def request(self, bundles: list[dict[str, float]]) -> None:
        if not (self.answers and self.driver_answers):
            raise ConnectionError("GCS unreachable")
        self.requests.append(bundles)


PRICES = {SPOT: (0.35, 1.0), "gpu_on_demand_fake": (0.35, 1.0)}  # (spot, on-demand) USD/hour


def two_clusters(clock: SimClock) -> tuple[RayClustersFleet, dict[str, FlakyState]]:
    states = {"aws-east": FlakyState(), "gcp-central": FlakyState()}

    def make(ref: RayClusterRef) -> Member:
        state = states[ref.name]
        types = in_cluster(node_types_from_config(fake_cluster_config("unused"), PRICES), ref.name)
        return Member(ref, RayAutoscalerFleet(types, clock=clock, list_nodes=state.list_nodes,
                                              request=state.request, launch_timeout_s=600))

    refs = [RayClusterRef(name, f"{name}.yaml", "http://127.0.0.1:1", "127.0.0.1:2") for name in states]
    return RayClustersFleet(refs, clock=clock, make=make), states


A_ZONE, B_ZONE = cluster_zone("aws-east", "fake-zone-a"), cluster_zone("gcp-central", "fake-zone-a")
SPOT_RESOURCES = {"CPU": 1.0, "spot": 1.0, "accelerator_type:FAKE": 1.0}


def test_offers_are_every_clusters_with_its_name_in_the_zone() -> None:
    fleet, _ = two_clusters(SimClock())
    zones = {(o.zone, o.instance_type) for o in fleet.offers()}
    assert zones == {(z, t) for z in (A_ZONE, B_ZONE) for t in (SPOT, "gpu_on_demand_fake")}
    assert provider_entry("ray-clusters").can(Capability.RAY_NODES)
    with pytest.raises(InvalidInput, match="in no Ray cluster"):
        fleet.launch(LaunchRequest("x", "fake-zone-a", SPOT, Market.SPOT))


def test_the_driver_child_gets_no_secret_and_no_ray_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTPLANE_ADMIN_TOKEN", "secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    env = driver_env(None)
    assert not {"SPOTPLANE_ADMIN_TOKEN", "AWS_SECRET_ACCESS_KEY", "RAY_ADDRESS"} & set(env)
    assert env["RAY_AUTH_MODE"] == "disabled" and env["PYTHONPATH"] == str(ROOT)
    token = driver_env("/etc/spotplane/east.token")
    assert (token["RAY_AUTH_MODE"], token["RAY_AUTH_TOKEN_PATH"]) == ("token", "/etc/spotplane/east.token")


def test_a_fresh_process_knows_the_fleet_by_name() -> None:
    """Registered by importing the ``clusters.ray`` package, as the controller's process does."""
    code = "from clusters.providers import provider_names; print(' '.join(provider_names()))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert "ray-clusters" in out and "ray" in out


def test_launch_terminate_and_events_stay_in_their_cluster() -> None:
    clock = SimClock()
    fleet, states = two_clusters(clock)
    [a] = fleet.launch(LaunchRequest("job-a", A_ZONE, SPOT, Market.SPOT))
    [b] = fleet.launch(LaunchRequest("job-b", B_ZONE, SPOT, Market.SPOT))
    assert (a.zone, b.zone) == (A_ZONE, B_ZONE)
    assert states["aws-east"].requests == [[SPOT_RESOURCES]]  # one bundle, in A only
    assert states["gcp-central"].requests == [[SPOT_RESOURCES]]
    states["aws-east"].add("node-a", {"spot": 1, "accelerator_type:FAKE": 1})
    states["gcp-central"].add("node-b", {"spot": 1, "accelerator_type:FAKE": 1})
    ready = fleet.poll_events()
    assert sorted((e.kind, e.instance_id) for e in ready) == [(EventKind.READY, "job-a/0"),
                                                              (EventKind.READY, "job-b/0")]
    assert {i.instance_id: i.tags["ray_node_id"] for i in fleet.describe()} == {"job-a/0": "node-a",
                                                                                "job-b/0": "node-b"}
    fleet.terminate(["job-a/0", "nobody/0"])
    assert states["aws-east"].requests[-1] == [] and len(states["gcp-central"].requests) == 1
    states["gcp-central"].nodes[0]["state"] = "DEAD"
    events = fleet.poll_events()
    assert [(e.kind, e.instance_id, e.zone) for e in events] == [
        (EventKind.TERMINATED, "job-a/0", A_ZONE), (EventKind.PREEMPTED, "job-b/0", B_ZONE)]
    assert fleet.describe(["job-b/0"])[0].state.value == "preempted"


def test_a_cluster_that_does_not_answer_closes_only_its_zones() -> None:
    clock = SimClock()
    fleet, states = two_clusters(clock)
    fleet.launch(LaunchRequest("job-a", A_ZONE, SPOT, Market.SPOT))
    states["aws-east"].answers = False
    assert fleet.poll_events() == []  # B answered, with nothing to say
    assert not fleet.spot_available(A_ZONE, SPOT) and fleet.spot_available(B_ZONE, SPOT)
    with pytest.raises(CapacityUnavailable, match="aws-east: it does not answer"):
        fleet.launch(LaunchRequest("job-c", A_ZONE, SPOT, Market.SPOT))
    fleet.launch(LaunchRequest("job-b", B_ZONE, SPOT, Market.SPOT))
    fleet.terminate(["job-a/0"])  # does not reach A now ...
    states["aws-east"].answers = True
    events = fleet.poll_events()  # ... and does once A answers again
    assert [(e.kind, e.instance_id) for e in events] == [(EventKind.TERMINATED, "job-a/0")]
    assert states["aws-east"].requests[-1] == [] and fleet.spot_available(A_ZONE, SPOT)


def test_a_launch_whose_request_fails_marks_the_cluster_down() -> None:
    fleet, states = two_clusters(SimClock())
    states["gcp-central"].answers = False
    with pytest.raises(CloudError, match="request_resources failed"):
        fleet.launch(LaunchRequest("job-b", B_ZONE, SPOT, Market.SPOT))
    assert not fleet.spot_available(B_ZONE, SPOT) and fleet.spot_available(A_ZONE, SPOT)


def test_a_preemption_is_reported_even_when_its_withdrawal_does_not_reach_the_autoscaler() -> None:
    fleet, states = two_clusters(SimClock())
    east = states["aws-east"]
    fleet.launch(LaunchRequest("job-a", A_ZONE, SPOT, Market.SPOT))
    east.add("node-a", {"spot": 1, "accelerator_type:FAKE": 1})
    assert [e.kind for e in fleet.poll_events()] == [EventKind.READY]
    east.nodes[0]["state"], east.driver_answers = "DEAD", False
    assert [(e.kind, e.instance_id) for e in fleet.poll_events()] == [(EventKind.PREEMPTED, "job-a/0")]
    assert not fleet.spot_available(A_ZONE, SPOT) and east.requests[-1] == [SPOT_RESOURCES]
    east.driver_answers = True
    assert fleet.poll_events() == []  # nothing new to say, and the withdrawal goes now
    assert east.requests[-1] == [] and fleet.spot_available(A_ZONE, SPOT)


def test_a_zone_is_open_while_one_of_its_spot_types_has_room() -> None:
    """The on-demand type of a zone says nothing of its spot: the zone's availability is its
    spot types' (the loop reads it per zone)."""
    fleet, _ = two_clusters(SimClock())
    assert fleet.spot_availability() == {A_ZONE: True, B_ZONE: True}
    fleet.launch(LaunchRequest("full", A_ZONE, SPOT, Market.SPOT, 2))  # max_workers 2
    assert fleet.spot_availability() == {A_ZONE: False, B_ZONE: True}


def test_the_reconcile_loop_places_in_the_clusters_that_answer(tmp_path: Path) -> None:
    from controlplane.core.models import JobSpec, JobState
    from controlplane.reconcile.contracts import ControllerSettings
    from controlplane.reconcile.controller import Controller
    from controlplane.store import Store

    clock = SimClock(start=0.0)
    fleet, states = two_clusters(clock)
    store = Store(tmp_path / "spotplane.db")
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"FAKE": 4}),
                     epoch=store.take_controller_lease())
    tenant, _ = store.create_tenant("t", max_gpus=100)

    def run(minutes: int) -> None:
        for _ in range(minutes):
            clock.advance(60.0)
            ctl.tick()
            for name, state in states.items():  # each autoscaler starts a node per live slot
                member = fleet.members[name].fleet
                assert isinstance(member, RayAutoscalerFleet)
                for slot in member.slots.values():
                    node_id = f"{name}-{slot.slot_id}"
                    if state.answers and not slot.released and node_id not in {n["node_id"] for n in state.nodes}:
                        state.add(node_id, dict(slot.spec.resources))

    def zone_of(job_id: str) -> str:
        zones = {n.zone for n in store.list_nodes() if n.job_id == job_id}
        assert len(zones) == 1, zones
        return zones.pop()

    first = store.submit_job(tenant.id, JobSpec(name="a", kind="spot", compute_hours=5, accelerator="FAKE"), now=0.0)
    run(10)
    assert store.get_job(first.id).state is JobState.RUNNING
    landed = fleet.zones[zone_of(first.id)]
    other = next(name for name in states if name != landed)
    states[landed].answers = False  # that cluster's dashboard and GCS are gone
    asked = len(states[landed].requests)
    second = store.submit_job(tenant.id, JobSpec(name="b", kind="spot", compute_hours=5, accelerator="FAKE"),
                              now=clock.now())
    run(10)
    assert store.get_job(second.id).state is JobState.RUNNING
    assert fleet.zones[zone_of(second.id)] == other and len(states[landed].requests) == asked
    store.close()


def registered(name: str, ray_config: str | None) -> WorkloadCluster:
    return WorkloadCluster(name=name, cloud="aws", region="us-east-1", gcs_address="10.0.0.1:6379",
                           dashboard_url="http://10.0.0.1:8265", ray_config=ray_config)


def test_clusters_come_from_the_registry_as_they_are_registered(tmp_path: Path) -> None:
    config = tmp_path / "east.yaml"
    config.write_text(json.dumps(fake_cluster_config("unused")))
    records = [registered("local", None)]
    assert refs_from(records) == []
    made: list[str] = []

    def make(ref: RayClusterRef) -> Member:
        made.append(ref.name)
        types = in_cluster(node_types_from_config(fake_cluster_config("unused"), PRICES), ref.name)
        return Member(ref, RayAutoscalerFleet(types, list_nodes=list, request=lambda b: None))

    fleet = RayClustersFleet(registry=lambda: records, make=make, refresh_every_s=0)
    assert fleet.offers() == []
    records.append(registered("east", str(config)))
    fleet.poll_events()
    fleet.poll_events()
    assert made == ["east"] and {o.zone for o in fleet.offers()} == {"east.fake-zone-a"}
    assert fleet.spot_available("east.fake-zone-a", SPOT)
    records.pop()  # spotplane clusters remove east: nothing new goes there
    fleet.poll_events()
    assert not fleet.spot_available("east.fake-zone-a", SPOT)
    with pytest.raises(CapacityUnavailable, match="east: it is no longer registered"):
        fleet.launch(LaunchRequest("job-e", "east.fake-zone-a", SPOT, Market.SPOT))
    records.append(registered("east", str(config)))
    fleet.poll_events()
    assert fleet.spot_available("east.fake-zone-a", SPOT) and made == ["east"]


def test_options_build_each_cluster_from_its_own_yaml(tmp_path: Path) -> None:
    from clusters.providers import make_provider

    paths = []
    for name, zone in (("east", "us-east-1a"), ("central", "us-central1-a")):
        config = fake_cluster_config("unused")
        config["provider"]["availability_zone"] = zone
        paths.append(tmp_path / f"{name}.yaml")
        paths[-1].write_text(json.dumps(config))
    east = {"name": "east", "config": str(paths[0]), "dashboard_url": "http://h:1", "gcs_address": "h:2"}
    central = {"name": "central", "config": str(paths[1]), "dashboard_url": "http://g:1", "gcs_address": "g:2"}
    fleet = make_provider("ray-clusters", clusters=[{**east, "prices": PRICES}, {**central, "prices": PRICES}])
    assert {o.zone for o in fleet.offers()} == {"east.us-east-1a", "central.us-central1-a"}
    with pytest.raises(ConfigError, match="cluster east: node type gpu_on_demand_fake has no price"):
        make_provider("ray-clusters", clusters=[east])  # its machine types are in no catalog
    with pytest.raises(InvalidInput, match="fleet_options.nope"):
        make_provider("ray-clusters", nope=1)


def test_a_cluster_added_with_its_ray_config_is_zoned_as_the_fleet_zones_it() -> None:
    import argparse

    from controlplane.cli.clusters import spec_of
    from controlplane.core.workloadclusters import WorkloadClusterSpec

    args = argparse.Namespace(name="gcp-central", cloud="gcp", region="us-central1",
                              gcs_address="10.1.0.2:6379", dashboard_url="http://10.1.0.2:8265",
                              token_ref=None, zones=[], node_types=[],
                              ray_config=str(ROOT / "clusters" / "ray-cluster-gcp.yaml"))
    spec = WorkloadClusterSpec(**spec_of(args))
    assert spec.zones == ["gcp-central.us-central1-a"] and "gpu_spot_l4" in spec.node_types
    with pytest.raises(ConfigError, match="--zone us-central1-a: the fleet names the zones of .* gcp-central.us-central1-a"):
        spec_of(argparse.Namespace(**{**vars(args), "zones": ["us-central1-a"]}))
    record = WorkloadCluster(**spec.model_dump())
    fleet = RayClustersFleet(registry=lambda: [record])  # drivers start at the first request
    assert {o.zone for o in fleet.offers()} == set(spec.zones)
    assert {o.region for o in fleet.offers()} == {"us-central1"}
    assert {o.instance_type for o in fleet.offers()} == set(spec.node_types)


def test_registered_clusters_are_the_fleets_zones_the_executors_clusters_and_the_gates(tmp_path: Path) -> None:
    """What the controller wires: the fleet from the store's registry, gated by its drained
    clusters, and the executor finding the cluster of a node the fleet launched."""
    import argparse

    from actors.execution import ExecutorConfig
    from actors.execution.multicluster import MultiClusterExecutor, closed_zones
    from clusters.clusterfleet import ClusterGatedFleet
    from clusters.providers import make_provider
    from clusters.workloadhealth import ClusterHealth
    from controlplane.cli.clusters import spec_of
    from controlplane.core.models import Node
    from controlplane.core.workloadclusters import WorkloadClusterSpec
    from controlplane.store import Store

    store = Store(tmp_path / "spotplane.db")
    for name, region, zone in (("east", "us-east-1", "us-east-1a"), ("central", "us-central1", "us-central1-a")):
        config = fake_cluster_config("unused")
        config["provider"]["availability_zone"] = zone
        for node_type in (SPOT, "gpu_on_demand_fake"):  # priced from the AWS catalog
            config["available_node_types"][node_type]["node_config"] = {"InstanceType": "g5.xlarge"}
        (tmp_path / f"{name}.yaml").write_text(json.dumps(config))
        args = argparse.Namespace(name=name, cloud="aws", region=region, gcs_address="127.0.0.1:6379",
                                  dashboard_url=f"http://{name}:8265", token_ref=None, zones=[],
                                  node_types=[], ray_config=str(tmp_path / f"{name}.yaml"))
        store.add_cluster(WorkloadClusterSpec(**spec_of(args)))
    clock = SimClock()
    inner = make_provider("ray-clusters", clock=clock, registry=store.list_clusters)
    fleet = ClusterGatedFleet(inner, closed_zones(store, ttl_s=0.0))
    assert {o.zone for o in fleet.offers()} == {"east.us-east-1a", "central.us-central1-a"}
    store.drain_cluster("east")
    assert not fleet.spot_available("east.us-east-1a", SPOT)
    assert fleet.spot_available("central.us-central1-a", SPOT)
    executor = MultiClusterExecutor(ExecutorConfig(artifact_uri=str(tmp_path / "a")), store,
                                    make=lambda c: None,  # type: ignore[arg-type,return-value]
                                    checker=lambda c: ClusterHealth(True, 1))
    node = Node(id="n1", provider="ray-clusters", cloud="ray", zone="central.us-central1-a",
                instance_type=SPOT, accelerator="FAKE", accelerator_count=1, market=Market.SPOT,
                price_per_hour=0.3, on_demand_price_per_hour=1.0, intent_id="i-1", requested_at=0.0)
    assert executor.cluster_of(node) == "central"
    store.close()


# --------------------------------------------------------------------------- two real clusters
def distinct_ports(n: int) -> list[int]:
    """``n`` different free TCP ports (held open together while picked)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def run_head(tmp: str, zone: str) -> None:  # runs in a child: one cluster's head until stdin closes
    import ray
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    ip = ray._private.services.get_node_ip_address()
    gcs_port, dash, agent, metrics, env_agent, export = distinct_ports(6)
    config = fake_cluster_config(f"{ip}:{gcs_port}")
    config["provider"]["availability_zone"] = zone
    config_path = Path(tmp) / "autoscaler.json"
    config_path.write_text(json.dumps(config))
    params = RayParams(
        node_ip_address=ip, gcs_server_port=gcs_port, num_cpus=1, include_dashboard=True,
        dashboard_host="127.0.0.1", dashboard_port=dash, dashboard_agent_listen_port=agent,
        metrics_agent_port=metrics, runtime_env_agent_port=env_agent, metrics_export_port=export,
        min_worker_port=0, max_worker_port=0, temp_dir=tmp, autoscaling_config=str(config_path),
        _system_config={"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                        "health_check_initial_delay_ms": 0})
    head = Node(params, head=True, shutdown_at_exit=True, spawn_reaper=True)
    (Path(tmp) / "head.json").write_text(json.dumps(
        {"gcs": head.address, "dashboard": f"http://127.0.0.1:{dash}", "config": str(config_path)}))
    sys.stdin.read()
    head.kill_all_processes(check_alive=False, allow_graceful=False)


def kill_raylet_in(node_id: str, tmp: str) -> bool:
    """SIGKILL the raylet of ``node_id`` of the cluster whose temp dir is ``tmp`` (the fake
    provider numbers each cluster's nodes alike)."""
    for pid, cmd in processes():
        if "raylet/raylet" in cmd and node_id in cmd and tmp in cmd:
            os.kill(pid, signal.SIGKILL)
            return True
    return False


def wait_for(pred: Callable[[], bool], limit: float, what: str, every: float = 1.0) -> None:
    """Poll ``pred`` until it holds, or fail after ``limit`` seconds naming ``what``."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(every)
    raise AssertionError(f"not within {limit:g} s: {what}")


def start_head(tmp: str, zone: str, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    proc = subprocess.Popen([sys.executable, __file__, "head", tmp, zone], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=open(Path(tmp) / "head.err", "wb"))  # noqa: SIM115
    found = Path(tmp) / "head.json"
    wait_for(lambda: found.exists() or proc.poll() is not None, 120, f"head of {tmp} started", 0.5)
    assert found.exists(), (Path(tmp) / "head.err").read_text()[-3000:]
    return proc, json.loads(found.read_text())


@dataclass
class FakeHead:
    """One fake-autoscaling cluster's head: its child process, what it wrote (``config``,
    ``dashboard``, ``gcs``) and its temp dir."""

    proc: subprocess.Popen[bytes]
    info: dict[str, str]
    tmp: str

    def stop(self) -> None:
        """Close the head's stdin (it shuts down) and wait for it."""
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=20)


@contextlib.contextmanager
def fake_heads(zones: dict[str, str], prefix: str) -> Iterator[dict[str, FakeHead]]:
    """A fake-autoscaling Ray cluster per name (in its zone), each head a child process with a
    temp dir of its own and no token; on exit every head is stopped, every process of theirs
    killed, and (when the body passed) none may be left."""
    tmps = {name: tempfile.mkdtemp(prefix=f"{prefix}{name}-", dir="/tmp") for name in zones}
    # clusters registered without a token: their heads take none, whatever Ray this process
    # joined before (a session's token in RAY_AUTH_* is not theirs)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")},
           "PYTHONPATH": str(ROOT), "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1",
           "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    heads: dict[str, FakeHead] = {}
    try:
        for name, zone in zones.items():
            heads[name] = FakeHead(*start_head(tmps[name], zone, env), tmps[name])
        yield heads
    finally:
        for head in heads.values():
            head.stop()
        for tmp in tmps.values():
            kill_ours(tmp)  # worker raylets the fake provider started outlive the head
    for tmp in tmps.values():
        assert our_processes(tmp) == [], f"left running in {tmp}"
        shutil.rmtree(tmp, ignore_errors=True)


def workers(dashboard: str) -> list[dict[str, Any]]:
    from clusters.ray.multi import dashboard_nodes

    return [n for n in dashboard_nodes(dashboard) if not n.get("is_head_node")]


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_fake_autoscaling_clusters_one_provider_each() -> None:
    import ray

    fleet: RayClustersFleet | None = None
    events: list[FleetEvent] = []
    with fake_heads({"a": "fake-zone-a", "b": "fake-zone-b"}, "spc") as heads:
        try:
            refs = [RayClusterRef(name, h.info["config"], h.info["dashboard"], h.info["gcs"], prices=PRICES)
                    for name, h in heads.items()]
            fleet = RayClustersFleet(refs, clock=WallClock(), launch_timeout_s=240)
            assert {o.zone for o in fleet.offers()} == {"a.fake-zone-a", "b.fake-zone-b"}

            def kinds(slot: str) -> list[EventKind]:
                return [e.kind for e in events if e.instance_id == slot]

            def polled(pred: Callable[[], bool]) -> Callable[[], bool]:
                def check() -> bool:
                    assert fleet is not None
                    events.extend(fleet.poll_events())
                    return pred()
                return check

            dash = {name: head.info["dashboard"] for name, head in heads.items()}
            members = {name: fleet.members[name].fleet for name in heads}
            fleet.launch(LaunchRequest("job-a", "a.fake-zone-a", SPOT, Market.SPOT))
            wait_for(polled(lambda: EventKind.READY in kinds("job-a/0")), 180, "A's node ready")
            a_node = fleet.describe(["job-a/0"])[0].tags["ray_node_id"]
            assert [n["node_id"] for n in workers(dash["a"])] == [a_node]  # A's autoscaler started it
            assert workers(dash["b"]) == []  # and B's none
            assert isinstance(members["b"], RayAutoscalerFleet) and members["b"].requested == []

            fleet.launch(LaunchRequest("job-b", "b.fake-zone-b", SPOT, Market.SPOT))
            wait_for(polled(lambda: EventKind.READY in kinds("job-b/0")), 180, "B's node ready")
            b_node = fleet.describe(["job-b/0"])[0].tags["ray_node_id"]
            assert b_node in [n["node_id"] for n in workers(dash["b"])]  # the fake provider numbers
            assert [n["node_id"] for n in workers(dash["a"])] == [a_node]  # each cluster's nodes alike

            fleet.terminate(["job-a/0"])  # withdraws A's bundle only
            assert isinstance(members["a"], RayAutoscalerFleet) and members["a"].requested == []
            assert isinstance(members["b"], RayAutoscalerFleet) and len(members["b"].requested) == 1

            assert kill_raylet_in(b_node, heads["b"].tmp)  # B's worker dies
            wait_for(polled(lambda: EventKind.PREEMPTED in kinds("job-b/0")), 90, "B's slot preempted")
            assert kinds("job-a/0") == [EventKind.READY, EventKind.TERMINATED]
            assert kinds("job-b/0") == [EventKind.READY, EventKind.PREEMPTED]
            preempted = [e for e in events if e.kind == EventKind.PREEMPTED]
            assert [(e.instance_id, e.zone) for e in preempted] == [("job-b/0", "b.fake-zone-b")]
            assert members["b"].requested == []

            head_a = heads["a"].proc  # cluster A goes away whole: only its zones close
            assert head_a.stdin is not None
            head_a.stdin.close()
            head_a.wait(timeout=60)
            kill_ours(heads["a"].tmp)
            wait_for(polled(lambda: bool(fleet and fleet.members["a"].down)), 60, "A seen down")
            assert fleet.spot_availability() == {"a.fake-zone-a": False, "b.fake-zone-b": True}
            with pytest.raises(CapacityUnavailable, match="cluster a: it does not answer"):
                fleet.launch(LaunchRequest("job-c", "a.fake-zone-a", SPOT, Market.SPOT))
            # this process is a driver of neither cluster (of the suite's own Ray at most)
            theirs = {head.info["gcs"] for head in heads.values()}
            assert not ray.is_initialized() or ray.get_runtime_context().gcs_address not in theirs
            drivers = [m.closes for m in fleet.members.values()]
            assert all(isinstance(d, ClusterDriver) and d._proc is not None for d in drivers)
            pids = [d._proc.pid for d in drivers if isinstance(d, ClusterDriver) and d._proc]
            fleet.close()
            assert not any(Path(f"/proc/{pid}").exists() for pid in pids)  # each cluster's own driver, gone
        finally:
            if fleet is not None:
                fleet.close()


if __name__ == "__main__" and sys.argv[1] == "head":
    run_head(sys.argv[2], sys.argv[3])
