"""One fleet over N autoscaling ``ray up`` clusters, one per region or cloud (fleet ray-clusters).

Each cluster is one :class:`~clusters.ray.fleet.RayAutoscalerFleet` whose node types come from
that cluster's own YAML, with the cluster's name in their zone (``<cluster>.<zone>``, unique
across clusters and what the cluster is registered with, so the executor runs a job on the
cluster whose node it got). The controller is a driver of no workload cluster: nodes are listed
through each cluster's dashboard (the state API), resources asked by a
:class:`~clusters.ray.driver.ClusterDriver` child of that cluster.

This fleet routes each launch to the cluster of its zone and each terminate, describe and loss
to the cluster that holds the slot; offers and events are merged. A cluster that does not answer
(its node list or its driver fails) has its zones unavailable until it answers again; the other
clusters go on. The clusters are the registry's workload clusters that name a ``ray_config``
(``spotplane clusters add ... --ray-config FILE``), read again every ``refresh_every_s``, or the
``clusters`` option.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from clusters.fleet import FleetEvent, FleetProvider, Instance, LaunchRequest, Offer, typed_options
from clusters.providers import Capability, fleet_provider, notice_clouds
from clusters.ray.catalog import NodeTypeSpec, load_cluster_config, node_types_from_config
from clusters.ray.driver import ClusterDriver
from clusters.ray.fleet import RayAutoscalerFleet
from clusters.workloadhealth import token_headers
from controlplane.core.clock import Clock, WallClock
from controlplane.core.errors import CapacityUnavailable, CloudError, ConfigError, InvalidInput
from controlplane.core.workloadclusters import WorkloadCluster

log = logging.getLogger(__name__)

NAME = "ray-clusters"
REFRESH_EVERY_S = 10.0  # wall seconds between two reads of the registry
LIST_TIMEOUT_S = 10  # a cluster's node list answers within this, or the cluster is down this poll


def cluster_zone(cluster: str, zone: str) -> str:
    """A zone of one cluster, unique across clusters: ``<cluster>.<zone>``."""
    return f"{cluster}.{zone}"


def in_cluster(node_types: Mapping[str, NodeTypeSpec], cluster: str) -> dict[str, NodeTypeSpec]:
    """``node_types`` with the cluster's name in their zone."""
    return {name: dataclasses.replace(spec, zone=cluster_zone(cluster, spec.zone))
            for name, spec in node_types.items()}


def cluster_catalog(cluster: str, config_path: str,
                    prices: Mapping[str, tuple[float, float]] | None = None) -> dict[str, NodeTypeSpec]:
    """The worker node types of the cluster's YAML, zoned in the cluster."""
    found = node_types_from_config(load_cluster_config(config_path), dict(prices) if prices else None)
    return in_cluster(found, cluster)


def dashboard_nodes(dashboard_url: str, token_ref: str | None = None) -> list[dict[str, Any]]:
    """Every node of the cluster whose dashboard is at ``dashboard_url`` (the state API's
    ``list_nodes``, over HTTP: no driver, no ``ray.init``)."""
    from ray.util.state.api import StateApiClient
    from ray.util.state.common import ListApiOptions, StateResource

    client = StateApiClient(address=dashboard_url, headers=token_headers(token_ref))
    options = ListApiOptions(detail=True, limit=10_000, timeout=LIST_TIMEOUT_S)
    rows = client.list(StateResource.NODES, options=options,
                       raise_on_missing_output=False)
    return [n if isinstance(n, dict) else dataclasses.asdict(n) for n in rows]


@dataclass(frozen=True)
class RayClusterRef:
    """One autoscaling Ray cluster: its name, its YAML, where its dashboard and GCS are."""

    name: str
    config: str
    dashboard_url: str
    gcs_address: str
    token_ref: str | None = None
    prices: Mapping[str, tuple[float, float]] | None = None
    region: str = ""  # the cluster's region, on its offers
    cloud: str = ""  # whose metadata server its nodes have (aws, gcp): their notices are watched
    metadata_url: str | None = None  # that metadata server elsewhere than the cloud's (tests)


def refs_from(registered: Sequence[WorkloadCluster]) -> list[RayClusterRef]:
    """The registered workload clusters that name a ``ray_config`` and a GCS address."""
    return [RayClusterRef(c.name, c.ray_config, c.dashboard_url, c.gcs_address, c.token_ref,
                          region=c.region, cloud=c.cloud)
            for c in registered if c.ray_config and c.gcs_address]


NoticeSource = Callable[[], list[tuple[str, float]]]


class Closeable(Protocol):
    """What stops with the fleet (a cluster's driver child)."""

    def close(self) -> None: ...


@dataclass
class Member:
    """One cluster's provider, what closes with it, why it is down ('' when it answers), and
    whether it was removed from the registry (what runs there stays; nothing new goes there)."""

    ref: RayClusterRef
    fleet: FleetProvider
    closes: Closeable | None = None
    down: str = ""
    removed: bool = False
    notices: NoticeSource | None = None  # the (Ray node id, seconds left) its nodes reported

    @property
    def closed(self) -> str:
        """Why no new node goes to this cluster now ('' when it takes them)."""
        if self.removed:
            return "it is no longer registered"
        return f"it does not answer: {self.down}" if self.down else ""


MemberMaker = Callable[[RayClusterRef], Member]


def notice_cloud(ref: RayClusterRef) -> str | None:
    """The cloud whose metadata server the cluster's nodes are watched on (None: not watched)."""
    if ref.cloud in notice_clouds():
        return ref.cloud
    if ref.cloud:
        log.warning("ray-clusters: cluster %s is on %s, whose nodes announce no preemption: "
                    "its slots are seen lost only when their node dies", ref.name, ref.cloud)
    return None


def cluster_member(ref: RayClusterRef, *, clock: Clock, launch_timeout_s: float) -> Member:
    """A :class:`RayAutoscalerFleet` of the cluster ``ref``: nodes from its dashboard,
    resources asked through its own driver child."""
    cloud = notice_cloud(ref)
    driver = ClusterDriver(ref.gcs_address, ref.token_ref, notice_cloud=cloud,
                           metadata_url=ref.metadata_url)
    fleet = RayAutoscalerFleet(cluster_catalog(ref.name, ref.config, ref.prices), clock=clock,
                               list_nodes=lambda: dashboard_nodes(ref.dashboard_url, ref.token_ref),
                               request=driver.request, launch_timeout_s=launch_timeout_s)
    return Member(ref, fleet, driver, notices=driver.notices if cloud is not None else None)


Registry = Callable[[], Sequence[WorkloadCluster]]


@dataclass(frozen=True)
class RayClustersOptions:
    """What ``--fleet ray-clusters`` takes: the clusters (mappings of :class:`RayClusterRef`'s
    fields) and/or the registry to read them from, how long a launch may take."""

    clusters: Sequence[Mapping[str, Any]] = ()
    registry: Registry | None = None
    launch_timeout_s: float = 900.0
    refresh_every_s: float = REFRESH_EVERY_S
    clock: Clock | None = None


@fleet_provider(NAME, capabilities=frozenset({Capability.RAY_NODES}))
class RayClustersFleet(FleetProvider):
    """Routes every call to the autoscaler fleet of one of N Ray clusters."""

    name = NAME

    def __init__(self, refs: Sequence[RayClusterRef] = (), *, clock: Clock | None = None,
                 registry: Registry | None = None, make: MemberMaker | None = None,
                 launch_timeout_s: float = 900.0, refresh_every_s: float = REFRESH_EVERY_S) -> None:
        self.clock: Clock = clock or WallClock()
        self.registry = registry
        self.make: MemberMaker = make or (lambda r: cluster_member(
            r, clock=self.clock, launch_timeout_s=launch_timeout_s))
        self.refresh_every_s = refresh_every_s
        self.members: dict[str, Member] = {}
        self.zones: dict[str, str] = {}  # zone -> the cluster it is in
        self.owner: dict[str, str] = {}  # slot id -> the cluster that holds it
        self._refreshed_at = float("-inf")
        self.from_registry: set[str] = set()  # the clusters the registry gave (not the options)
        self.refused: dict[str, str] = {}  # registered clusters not taken in, and why
        for ref in refs:
            self.add(ref)
        self.refresh()

    @classmethod
    def from_options(cls, **options: Any) -> RayClustersFleet:
        """Build from :class:`RayClustersOptions`."""
        opts = typed_options(RayClustersOptions, NAME, options)
        refs = [RayClusterRef(**dict(c)) for c in opts.clusters]
        return cls(refs, clock=opts.clock, registry=opts.registry,
                   launch_timeout_s=float(opts.launch_timeout_s),
                   refresh_every_s=float(opts.refresh_every_s))

    # ---------------------------------------------------------------- the clusters
    def add(self, ref: RayClusterRef) -> None:
        """Take in the cluster ``ref`` (ConfigError when its zones are another cluster's)."""
        if ref.name in self.members:
            return
        member = self.make(ref)
        offers = member.fleet.offers()
        unpriced = sorted(o.instance_type for o in offers if not math.isfinite(o.on_demand_price))
        if unpriced:
            raise ConfigError(f"ray-clusters: cluster {ref.name}: node type {unpriced[0]} has no price",
                              fix="give its node_config an InstanceType/machineType the catalogs know")
        zones = {o.zone for o in offers}
        taken = sorted(z for z in zones if z in self.zones)
        if taken:
            raise ConfigError(f"ray-clusters: zone {taken[0]} of cluster {ref.name} is already "
                              f"cluster {self.zones[taken[0]]}'s", fix="give each cluster its own name")
        self.members[ref.name] = member
        self.zones.update(dict.fromkeys(zones, ref.name))
        log.info("ray-clusters: cluster %s (zones %s)", ref.name, ", ".join(sorted(zones)))

    def refresh(self, *, force: bool = False) -> None:
        """Take in the clusters registered since the last read, close those no longer registered
        (at most every ``refresh_every_s``)."""
        if self.registry is None or (not force and time.monotonic() - self._refreshed_at < self.refresh_every_s):
            return
        self._refreshed_at = time.monotonic()
        try:
            refs = refs_from(self.registry())
        except Exception as exc:  # noqa: BLE001 - the store is away: the clusters known go on
            log.warning("ray-clusters: the registry was not read: %s", exc)
            return
        for ref in refs:
            try:
                self.add(ref)
            except (ConfigError, CloudError) as exc:
                if self.refused.get(ref.name) != str(exc):  # once per reason, not every read
                    log.error("ray-clusters: cluster %s not taken in: %s", ref.name, exc)
                self.refused[ref.name] = str(exc)
        registered = {ref.name for ref in refs}
        for name in self.from_registry:
            self.members[name].removed = name not in registered
        self.from_registry |= registered & set(self.members)

    def _member_of_zone(self, zone: str) -> Member:
        name = self.zones.get(zone)
        if name is None:
            raise InvalidInput("zone", f"{zone!r} is in no Ray cluster of the fleet",
                               fix=f"use one of {', '.join(sorted(self.zones)) or '(none registered)'}")
        return self.members[name]

    def _down(self, member: Member, why: str) -> None:
        if not member.down:
            log.warning("ray-clusters: cluster %s does not answer, its zones are unavailable: %s",
                        member.ref.name, why)
        member.down = why

    # ---------------------------------------------------------------- catalog
    def offers(self) -> list[Offer]:
        """Every cluster's offers, in its region."""
        return [dataclasses.replace(o, region=o.region or m.ref.region)
                for m in self.members.values() for o in m.fleet.offers()]

    def spot_available(self, zone: str, instance_type: str) -> bool:
        name = self.zones.get(zone)
        member = self.members.get(name) if name is not None else None
        return member is not None and not member.closed and member.fleet.spot_available(zone, instance_type)

    def spot_availability(self) -> dict[str, bool]:
        """Every cluster's zones: its own answer, or none available while it does not answer."""
        out: dict[str, bool] = {}
        for member in self.members.values():
            found = member.fleet.spot_availability()
            if found is None:
                found = {o.zone: member.fleet.spot_available(o.zone, o.instance_type)
                         for o in member.fleet.offers() if o.spot_price == o.spot_price}
            out.update({zone: up and not member.closed for zone, up in found.items()})
        return out

    # ---------------------------------------------------------------- launch / terminate
    def launch(self, request: LaunchRequest) -> list[Instance]:
        member = self._member_of_zone(request.zone)
        if member.closed:
            raise CapacityUnavailable(request.zone, request.instance_type,
                                      f"cluster {member.ref.name}: {member.closed}")
        try:
            launched = member.fleet.launch(request)
        except CapacityUnavailable:
            raise  # the cluster answered: that type is full there
        except CloudError as exc:
            self._down(member, str(exc))
            raise
        for inst in launched:
            self.owner[inst.instance_id] = member.ref.name
        return launched

    def terminate(self, instance_ids: Sequence[str]) -> None:
        """Release each slot in its own cluster; a cluster that does not answer gets the
        withdrawal when it answers again."""
        for name, ids in self._by_member(instance_ids).items():
            member = self.members[name]
            try:
                member.fleet.terminate(ids)
            except CloudError as exc:  # the withdrawal is sent again at the cluster's next poll
                self._down(member, str(exc))

    def _by_member(self, instance_ids: Sequence[str]) -> dict[str, list[str]]:
        """The given slot ids by the cluster that holds them (unknown ids left out)."""
        out: dict[str, list[str]] = {}
        for iid in instance_ids:
            name = self.owner.get(iid)
            if name in self.members:
                out.setdefault(name, []).append(iid)
        return out

    # ---------------------------------------------------------------- views and events
    def describe(self, instance_ids: Sequence[str] | None = None) -> list[Instance]:
        if instance_ids is None:
            return [i for m in self.members.values() for i in m.fleet.describe()]
        return [i for name, ids in self._by_member(instance_ids).items()
                for i in self.members[name].fleet.describe(ids)]

    def poll_events(self) -> list[FleetEvent]:
        """Every cluster's events; a cluster that does not answer reports none and is down."""
        self.refresh()
        events: list[FleetEvent] = []
        for member in self.members.values():
            try:
                events += member.fleet.poll_events()
            except CloudError as exc:
                self._down(member, str(exc))
                continue
            events += self._noticed(member)
            if isinstance(member.fleet, RayAutoscalerFleet) and member.fleet.send_pending:
                self._down(member, "its autoscaler was not reached")
            elif member.down:
                log.warning("ray-clusters: cluster %s answers again", member.ref.name)
                member.down = ""
        return sorted(events, key=lambda e: e.at)

    @staticmethod
    def _noticed(member: Member) -> list[FleetEvent]:
        """The notices the cluster's nodes reported, as their slots' PREEMPTION_NOTICE events
        (asked only while a node fills one of its slots)."""
        fleet = member.fleet
        if member.notices is None or not isinstance(fleet, RayAutoscalerFleet) or not fleet.watched_slots():
            return []
        try:
            reported = member.notices()
        except Exception as exc:  # noqa: BLE001 - the node list says when the cluster is down
            log.warning("ray-clusters: cluster %s: notices not read: %s", member.ref.name, exc)
            return []
        return [e for node_id, left in reported for e in fleet.notice(node_id, left)]

    def lose(self, instance_id: str, detail: str = "node lost") -> None:
        """Report the slot lost through the cluster that holds it."""
        for name in self._by_member([instance_id]):
            self.members[name].fleet.lose(instance_id, detail)

    def instances_per_intent(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for m in self.members.values():
            out.update(m.fleet.instances_per_intent())
        return out

    def close(self) -> None:
        """Stop every cluster's driver child."""
        for member in self.members.values():
            if member.closes is not None:
                try:
                    member.closes.close()
                except Exception as exc:  # noqa: BLE001 - a child already gone
                    log.warning("ray-clusters: cluster %s driver not closed: %s", member.ref.name, exc)
