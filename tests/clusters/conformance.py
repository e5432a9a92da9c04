"""Every fleet provider on its local stand-in, behind one :class:`Harness`, for the contract suite.

``test_conformance.py`` checks the contract of ``clusters/fleet.py`` once per provider through
the parametrized :func:`provider` fixture:

- ``memory``: :class:`MemoryFleet`, the smallest provider (required methods only, so the
  optional ones keep the base class's defaults);
- ``sim``: ``SimulatedFleet`` on the real AWS spot traces;
- ``aws``: ``AwsFleet`` with real boto3 against moto's EC2 server (``test_aws_fleet``'s proxy);
- ``gcp``: ``GcpFleet`` with the real google-cloud-compute client against the local Compute API
  (``gce_fake.py``);
- ``ray``: ``RayAutoscalerFleet`` with the state API and ``request_resources`` stubbed (the real
  autoscaler runs only in ``test_rayfleet``'s slow test);
- ``ray-clusters``: ``RayClustersFleet`` over two such stubbed clusters, driven in the first
  (two real ones: ``test_rayclusters``'s slow test).

A harness knows what the contract cannot say for every cloud: a launchable request, a request
the cloud will refuse, how instances finish booting, and an id the provider never made.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from clusters.fleet import (
    EventKind,
    FleetEvent,
    FleetProvider,
    Instance,
    InstanceState,
    LaunchRequest,
    Offer,
)
from controlplane.core.clock import SimClock
from controlplane.core.errors import CapacityUnavailable, InvalidInput
from controlplane.core.models import Market

TAGS = {"node_id": "n-7", "job_id": "job-3", "tenant_id": "acme"}
PROVIDERS = ["memory", "sim", "aws", "gcp", "ray", "ray-clusters"]


def load_sibling(name: str) -> Any:
    """A test module beside this one, loaded once under its own name (as the other tests do)."""
    key = f"spotplane_tests_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(__file__).with_name(f"{name}.py"))
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


aws = load_sibling("test_aws_fleet")
gce_fake = load_sibling("gce_fake")
moto_port = aws.moto_port  # fixtures the aws harness asks for, re-exported by the test module
proxy = aws.proxy
aws_env = aws.aws_env


# --------------------------------------------------------------------------- the reference
class MemoryFleet(FleetProvider):
    """The smallest provider: instances in a dict, spot refused in ``stockout`` zones; only the
    required methods, so the optional ones are the base class's defaults."""

    name = "memory"

    def __init__(self, clock: SimClock, zones: Sequence[str] = ("mem-a", "mem-b"),
                 instance_type: str = "m1.gpu") -> None:
        self.clock, self.zones, self.instance_type = clock, list(zones), instance_type
        self.stockout: set[str] = set()
        self.instances: dict[str, Instance] = {}
        self.events: list[FleetEvent] = []

    def offers(self) -> list[Offer]:
        return [Offer(self.name, z, self.instance_type, "T4", 1, 0.2, 0.6) for z in self.zones]

    def spot_available(self, zone: str, instance_type: str) -> bool:
        return zone in self.zones and zone not in self.stockout

    def launch(self, request: LaunchRequest) -> list[Instance]:
        if request.count < 1:
            raise InvalidInput("count", f"must be >= 1, got {request.count}")
        mine = [i for i in self.instances.values() if i.intent_id == request.intent_id]
        if mine:
            return mine
        if request.market is Market.SPOT and not self.spot_available(request.zone, request.instance_type):
            raise CapacityUnavailable(request.zone, request.instance_type, "stockout")
        new = [Instance(f"{request.intent_id}/{k}", self.name, request.zone, request.instance_type,
                        request.market, InstanceState.PENDING, self.clock.now(), 0.2, "T4", 1,
                        request.intent_id, dict(request.tags)) for k in range(request.count)]
        self.instances.update({i.instance_id: i for i in new})
        return new

    def boot(self, instance_ids: Sequence[str]) -> None:
        """The cloud finishes booting these (a test knob)."""
        for iid in instance_ids:
            self.instances[iid] = replace(self.instances[iid], state=InstanceState.RUNNING)
            self.events.append(FleetEvent(EventKind.READY, iid, self.instances[iid].zone, self.clock.now()))

    def terminate(self, instance_ids: Sequence[str]) -> None:
        for iid in instance_ids:
            inst = self.instances.get(iid)
            if inst is None or inst.state in (InstanceState.TERMINATED, InstanceState.PREEMPTED):
                continue
            self.instances[iid] = replace(inst, state=InstanceState.TERMINATED)
            self.events.append(FleetEvent(EventKind.TERMINATED, iid, inst.zone, self.clock.now()))

    def describe(self, instance_ids: Sequence[str] | None = None) -> list[Instance]:
        ids = list(self.instances) if instance_ids is None else [i for i in instance_ids if i in self.instances]
        return [self.instances[i] for i in ids]

    def poll_events(self) -> list[FleetEvent]:
        out, self.events = self.events, []
        return out


# --------------------------------------------------------------------------- harnesses
@dataclass
class Harness(ABC):
    """One provider on its stand-in, and what the suite needs to drive it."""

    fleet: FleetProvider
    clock: SimClock
    unknown_id: str  # an id of the provider's own form that it never made

    @abstractmethod
    def request(self, intent: str, count: int = 1, market: Market = Market.SPOT) -> LaunchRequest:
        """A request the provider can satisfy now."""

    @abstractmethod
    def refused(self, intent: str) -> LaunchRequest:
        """Arrange a spot refusal and return the request the provider will refuse."""

    @abstractmethod
    def boot(self, instance_ids: Sequence[str]) -> None:
        """Let the cloud finish booting these instances."""

    def rebuilt(self) -> FleetProvider | None:
        """The same provider built again with ``from_options`` (None: it cannot be, here)."""
        return None


@dataclass
class MemoryHarness(Harness):
    def request(self, intent: str, count: int = 1, market: Market = Market.SPOT) -> LaunchRequest:
        return LaunchRequest(intent, "mem-a", "m1.gpu", market, count, dict(TAGS))

    def refused(self, intent: str) -> LaunchRequest:
        assert isinstance(self.fleet, MemoryFleet)
        self.fleet.stockout.add("mem-b")
        return LaunchRequest(intent, "mem-b", "m1.gpu", Market.SPOT, 1, dict(TAGS))

    def boot(self, instance_ids: Sequence[str]) -> None:
        assert isinstance(self.fleet, MemoryFleet)
        self.fleet.boot(instance_ids)

    def rebuilt(self) -> FleetProvider:
        return MemoryFleet.from_options(clock=self.clock, zones=["mem-a"])


@dataclass
class SimHarness(Harness):
    data_root: Path = field(default=Path("."))

    def _zones(self) -> tuple[list[str], list[str]]:
        avail = self.fleet.spot_availability() or {}
        return [z for z, ok in avail.items() if ok], [z for z, ok in avail.items() if not ok]

    def request(self, intent: str, count: int = 1, market: Market = Market.SPOT) -> LaunchRequest:
        from clusters.sim import SimulatedFleet

        assert isinstance(self.fleet, SimulatedFleet)
        fleet, now = self.fleet, self.clock.now()
        up, _ = self._zones()
        # the up zone whose spot lasts longest: nothing is preempted while the suite runs
        zone = max(up, key=lambda z: fleet.zones[z].next_down(fleet._rel(now)))
        return LaunchRequest(intent, zone, "p3.2xlarge", market, count, dict(TAGS))

    def refused(self, intent: str) -> LaunchRequest:
        _, down = self._zones()
        return LaunchRequest(intent, down[0], "p3.2xlarge", Market.SPOT, 1, dict(TAGS))

    def boot(self, instance_ids: Sequence[str]) -> None:
        self.clock.advance(300.0)  # past every provisioning delay (90 s +- 20 %)

    def rebuilt(self) -> FleetProvider:
        from clusters.sim import SimulatedFleet

        return SimulatedFleet.from_options(clock=self.clock, data_dir=self.data_root, gcp=False)


@dataclass
class AwsHarness(Harness):
    ec2: Any = None  # the proxy in front of moto
    url: str = ""

    def request(self, intent: str, count: int = 1, market: Market = Market.SPOT) -> LaunchRequest:
        return LaunchRequest(intent, "us-east-1a", aws.GPU, market, count, dict(TAGS))

    def refused(self, intent: str) -> LaunchRequest:
        self.ec2.fail("RunInstances", "InsufficientInstanceCapacity", status=500)
        return LaunchRequest(intent, "us-east-1b", aws.GPU, Market.SPOT, 1, dict(TAGS))

    def boot(self, instance_ids: Sequence[str]) -> None:
        for iid in instance_ids:
            aws.moto_backend().get_instance(iid).start()
        self.clock.advance(60.0)

    def rebuilt(self) -> FleetProvider:
        from clusters.aws.fleet import AwsFleet

        return AwsFleet.from_options(endpoint_url=self.url, zones=aws.ZONES, clock=self.clock)


@dataclass
class GcpHarness(Harness):
    fake: Any = None
    endpoint: str = ""

    def request(self, intent: str, count: int = 1, market: Market = Market.SPOT) -> LaunchRequest:
        return LaunchRequest(intent, "us-central1-a", "g2-standard-4", market, count, dict(TAGS))

    def refused(self, intent: str) -> LaunchRequest:
        self.fake.stockout["us-central1-b"] = "ZONE_RESOURCE_POOL_EXHAUSTED"
        return LaunchRequest(intent, "us-central1-b", "g2-standard-4", Market.SPOT, 1, dict(TAGS))

    def boot(self, instance_ids: Sequence[str]) -> None:
        for iid in instance_ids:
            self.fake.set_status(iid, "RUNNING")
        self.clock.advance(60.0)

    def rebuilt(self) -> FleetProvider:
        from clusters.gcp.fleet import GcpFleet

        return GcpFleet.from_options(project=self.fake.project, credentials="anonymous",
                                     api_endpoint=self.endpoint, clock=self.clock)


RAY_CONFIG: dict[str, Any] = {
    "head_node_type": "head",
    "provider": {"availability_zone": "fake-zone-a"},
    "available_node_types": {
        "head": {"resources": {"CPU": 1}, "max_workers": 0},
        "gpu_spot_fake": {"resources": {"CPU": 1, "spot": 1, "accelerator_type:FAKE": 1},
                          "max_workers": 4},
        "gpu_on_demand_fake": {"resources": {"CPU": 1, "on_demand": 1, "accelerator_type:FAKE": 1},
                               "max_workers": 4},
    },
}


RAY_PRICES = {"gpu_spot_fake": (0.35, 1.0), "gpu_on_demand_fake": (0.35, 1.0)}


@dataclass
class RayHarness(Harness):
    nodes: list[dict[str, Any]] = field(default_factory=list)  # what the state API lists
    requests: list[list[dict[str, float]]] = field(default_factory=list)  # request_resources calls

    def request(self, intent: str, count: int = 1, market: Market = Market.SPOT) -> LaunchRequest:
        itype = "gpu_spot_fake" if market is Market.SPOT else "gpu_on_demand_fake"
        return LaunchRequest(intent, "fake-zone-a", itype, market, count, dict(TAGS))

    def refused(self, intent: str) -> LaunchRequest:
        from clusters.ray.fleet import RayAutoscalerFleet

        assert isinstance(self.fleet, RayAutoscalerFleet)
        left = self.fleet.node_types["gpu_spot_fake"].max_workers - self.fleet._live_slots("gpu_spot_fake")
        if left > 0:  # the autoscaler's max_workers is the capacity: fill it
            self.fleet.launch(self.request(f"{intent}-fill", left))
        return self.request(intent)

    def boot(self, instance_ids: Sequence[str]) -> None:
        from clusters.ray.fleet import RayAutoscalerFleet

        assert isinstance(self.fleet, RayAutoscalerFleet)
        for iid in instance_ids:  # the autoscaler starts one node per slot
            spec = self.fleet.slots[iid].spec
            self.nodes.append({"node_id": f"node-{len(self.nodes)}", "state": "ALIVE",
                               "is_head_node": False, "resources_total": dict(spec.resources),
                               "state_message": None})
        self.clock.advance(60.0)


@dataclass
class RayClustersHarness(RayHarness):
    """Two stubbed clusters, ``east`` (driven) and ``west``; every node is listed by both."""

    config_path: Path = field(default=Path("unused.yaml"))  # RAY_CONFIG, for from_options

    def request(self, intent: str, count: int = 1, market: Market = Market.SPOT) -> LaunchRequest:
        itype = "gpu_spot_fake" if market is Market.SPOT else "gpu_on_demand_fake"
        return LaunchRequest(intent, "east.fake-zone-a", itype, market, count, dict(TAGS))

    def _east(self) -> Any:
        from clusters.ray.multi import RayClustersFleet

        assert isinstance(self.fleet, RayClustersFleet)
        return self.fleet.members["east"].fleet

    def refused(self, intent: str) -> LaunchRequest:
        east = self._east()
        left = east.node_types["gpu_spot_fake"].max_workers - east._live_slots("gpu_spot_fake")
        if left > 0:
            self.fleet.launch(self.request(f"{intent}-fill", left))
        return self.request(intent)

    def boot(self, instance_ids: Sequence[str]) -> None:
        east = self._east()
        for iid in instance_ids:
            spec = east.slots[iid].spec
            self.nodes.append({"node_id": f"node-{len(self.nodes)}", "state": "ALIVE",
                               "is_head_node": False, "resources_total": dict(spec.resources),
                               "state_message": None})
        self.clock.advance(60.0)

    def rebuilt(self) -> FleetProvider:
        from clusters.providers import make_provider

        return make_provider("ray-clusters", clock=self.clock, clusters=[
            {"name": "east", "config": str(self.config_path), "dashboard_url": "http://127.0.0.1:1",
             "gcs_address": "127.0.0.1:2", "prices": RAY_PRICES}])


def _memory(request: pytest.FixtureRequest, clock: SimClock) -> Harness:
    return MemoryHarness(MemoryFleet(clock), clock, "never-made/0")


def _sim(request: pytest.FixtureRequest, clock: SimClock) -> Harness:
    from clusters.providers import make_provider

    data_root = request.getfixturevalue("data_root")
    tmp = request.getfixturevalue("tmp_path")
    fleet = make_provider("sim", clock=clock, data_dir=data_root, gcp=False, seed=7,
                          state_path=tmp / "simfleet.db")
    return SimHarness(fleet, clock, "i-000000000000", data_root)


def _aws(request: pytest.FixtureRequest, clock: SimClock) -> Harness:
    from clusters.providers import make_provider

    ec2, url = request.getfixturevalue("proxy")
    request.getfixturevalue("aws_env")
    fleet = make_provider("aws", endpoint_url=url, zones=aws.ZONES, instance_types=[aws.GPU],
                          clock=clock, seed=7, image_id="ami-12c6146b")
    return AwsHarness(fleet, clock, "i-0000000000000dead", ec2, url)


def _gcp(request: pytest.FixtureRequest, clock: SimClock) -> Iterator[Harness]:
    from clusters.providers import make_provider

    fake = gce_fake.GceFake(project="spotplane-test")
    with gce_fake.GceServer(fake) as server:
        fleet = make_provider("gcp", project=fake.project, zones=list(fake.zones),
                              credentials="anonymous", api_endpoint=server.endpoint, clock=clock,
                              seed=3, machine_types=["g2-standard-4"])
        yield GcpHarness(fleet, clock, "sp-does-not-exist-0", fake, server.endpoint)


def _ray(request: pytest.FixtureRequest, clock: SimClock) -> Harness:
    from clusters.ray.catalog import node_types_from_config
    from clusters.ray.fleet import RayAutoscalerFleet

    nodes: list[dict[str, Any]] = []
    requests: list[list[dict[str, float]]] = []
    prices = {"gpu_spot_fake": (0.35, 1.0), "gpu_on_demand_fake": (0.35, 1.0)}
    fleet = RayAutoscalerFleet(node_types_from_config(RAY_CONFIG, prices), clock=clock,
                               list_nodes=lambda: nodes, request=requests.append,
                               launch_timeout_s=900)
    return RayHarness(fleet, clock, "never-made/0", nodes, requests)


def _ray_clusters(request: pytest.FixtureRequest, clock: SimClock) -> Harness:
    from clusters.ray.catalog import node_types_from_config
    from clusters.ray.fleet import RayAutoscalerFleet
    from clusters.ray.multi import Member, RayClusterRef, RayClustersFleet, in_cluster

    nodes: list[dict[str, Any]] = []
    requests: list[list[dict[str, float]]] = []
    prices = RAY_PRICES

    def make(ref: RayClusterRef) -> Member:
        types = in_cluster(node_types_from_config(RAY_CONFIG, prices), ref.name)
        return Member(ref, RayAutoscalerFleet(types, clock=clock, list_nodes=lambda: nodes,
                                              request=requests.append, launch_timeout_s=900))

    refs = [RayClusterRef(name, "unused.yaml", "http://127.0.0.1:1", "127.0.0.1:2")
            for name in ("east", "west")]
    fleet = RayClustersFleet(refs, clock=clock, make=make)
    config_path = request.getfixturevalue("tmp_path") / "cluster.json"
    config_path.write_text(json.dumps(RAY_CONFIG))
    return RayClustersHarness(fleet, clock, "never-made/0", nodes, requests, config_path)


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """Each fleet provider in turn, fresh for every test."""
    clock = SimClock(start=1_700_000_000.0)
    made = {"memory": _memory, "sim": _sim, "aws": _aws, "gcp": _gcp, "ray": _ray,
            "ray-clusters": _ray_clusters}[request.param](
        request, clock)
    if isinstance(made, Harness):
        yield made
    else:
        yield from made
