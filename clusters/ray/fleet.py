"""Fleet provider backed by the Ray autoscaler, for spotplane running inside ``ray up ray-cluster.yaml``.

Calls made (and nothing else): ``ray.autoscaler.sdk.request_resources(bundles=...)`` and
``ray.util.state.list_nodes(detail=True)``.

An "instance" here is a *slot*: one whole node of a Ray node type (``gpu_spot_a10g``...), asked
of the autoscaler as one bundle holding all of that type's resources, so one bundle means one
node. Slot ids are ``<intent_id>/<index>`` and stay the same for the slot's life; the Ray node
that fills it is in ``tags['ray_node_id']``. ``request_resources`` is declarative (each call
replaces the last), so the provider always sends the bundles of every live slot.

- READY: an alive node whose custom resources match the slot's node type and no other slot holds.
- PREEMPTED: that node is DEAD in the state API and we did not release it (the state message,
  e.g. "Unexpected termination: health check failed", is the detail). The two-minute / 30 s
  notice comes from the node's own metadata watcher (:mod:`clusters.notices`), not from here;
  :meth:`RayAutoscalerFleet.notice` turns one, by Ray node id, into the slot's PREEMPTION_NOTICE.
- LAUNCH_FAILED: no node came within ``launch_timeout_s``; the bundle is withdrawn.
- TERMINATED: we released the slot (its bundle is withdrawn; the autoscaler removes the idle node).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusters.fleet import (
    EventKind,
    FleetEvent,
    FleetProvider,
    Instance,
    InstanceState,
    LaunchRequest,
    Offer,
    typed_options,
)
from clusters.providers import Capability, fleet_provider
from clusters.ray.catalog import (
    Bundle,
    NodeTypeSpec,
    load_cluster_config,
    node_types_from_config,
    unpriced,
)
from controlplane.core.clock import Clock, WallClock
from controlplane.core.config import load_settings
from controlplane.core.errors import CapacityUnavailable, CloudError, ConfigError, InvalidInput
from controlplane.core.models import Market

log = logging.getLogger(__name__)

CLOUD = "ray"

NodeLister = Callable[[], list[dict[str, Any]]]
ResourceRequester = Callable[[list[Bundle]], None]


@dataclass
class Slot:
    slot_id: str
    intent_id: str
    spec: NodeTypeSpec
    tags: dict[str, str]
    requested_at: float
    node_id: str = ""
    state: InstanceState = InstanceState.PENDING
    released: bool = False
    reported: set[EventKind] = field(default_factory=set)


def _state_api_nodes() -> list[dict[str, Any]]:
    """Every node of the cluster this process is connected to (not "the" Ray on this machine)."""
    import ray
    from ray.util.state import list_nodes

    address = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
    return [n if isinstance(n, dict) else n.__dict__ for n in
            list_nodes(address=address, detail=True, limit=10_000, raise_on_missing_output=False)]


def _request(bundles: list[Bundle]) -> None:
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=bundles)


@dataclass(frozen=True)
class RayOptions:
    """What ``--fleet ray`` takes: the cluster yaml (``config``; default the settings'
    ``SPOTPLANE_RAY_CONFIG``, else ~/ray_bootstrap_config.yaml on a ``ray up`` head, else
    ./ray-cluster.yaml), node type prices, how long a launch may take, the cluster's address."""

    config: str | None = None
    prices: Mapping[str, Any] | None = None
    launch_timeout_s: float = 900.0
    address: str = "auto"
    clock: Clock | None = None


@fleet_provider(CLOUD, capabilities=frozenset({Capability.RAY_NODES}))
class RayAutoscalerFleet(FleetProvider):
    """FleetProvider that asks the Ray autoscaler for whole nodes of its configured node types."""

    name = CLOUD

    def __init__(self, node_types: dict[str, NodeTypeSpec], *, clock: Clock | None = None,
                 list_nodes: NodeLister | None = None, request: ResourceRequester | None = None,
                 launch_timeout_s: float = 900.0) -> None:
        if not node_types:
            raise ConfigError("ray fleet: the autoscaler config has no worker node types",
                              fix="add GPU worker types to ray-cluster.yaml")
        self.node_types = node_types
        self.clock: Clock = clock or WallClock()
        self._list_nodes = list_nodes or _state_api_nodes
        self._request = request or _request
        self.launch_timeout_s = launch_timeout_s
        self.slots: dict[str, Slot] = {}
        self.requested: list[Bundle] = []
        self.send_pending = False  # the last request did not reach the autoscaler: sent again at the next poll

    @classmethod
    def from_options(cls, **options: Any) -> RayAutoscalerFleet:
        """Build from :class:`RayOptions`, joining the running Ray cluster."""
        import ray

        opts = typed_options(RayOptions, "ray", options)
        configured = opts.config or load_settings().ray_config
        bootstrap = Path("~/ray_bootstrap_config.yaml").expanduser()
        path = Path(configured) if configured else (
            bootstrap if bootstrap.exists() else Path("ray-cluster.yaml"))
        prices = dict(opts.prices) if opts.prices is not None else None
        node_types = node_types_from_config(load_cluster_config(path), prices)
        missing = unpriced(node_types)
        if missing:
            raise ConfigError(f"ray fleet: node type {missing[0]} has no price (its machine type is in no "
                              "cloud's catalog): a tenant's spend would not be a number",
                              fix="give its node_config an InstanceType/machineType the catalogs know, "
                                  f"or pass the fleet option prices={{{missing[0]!r}: [spot, on_demand]}} (USD/hour)")
        if not ray.is_initialized():
            ray.init(address=opts.address, log_to_driver=False)
        return cls(node_types, clock=opts.clock, launch_timeout_s=float(opts.launch_timeout_s))

    # ---------------------------------------------------------------- catalog
    def offers(self) -> list[Offer]:
        return [Offer(CLOUD, s.zone, s.name, s.accelerator, s.accelerator_count,
                      s.spot_price if s.market == Market.SPOT else math.nan, s.on_demand_price)
                for s in self.node_types.values()]

    def _live_slots(self, type_name: str) -> int:
        return sum(1 for s in self.slots.values() if s.spec.name == type_name and not s.released
                   and s.state in (InstanceState.PENDING, InstanceState.RUNNING, InstanceState.NOTICED))

    def spot_available(self, zone: str, instance_type: str) -> bool:
        spec = self.node_types.get(instance_type)
        if spec is None or spec.market != Market.SPOT or zone not in (spec.zone, CLOUD):
            return False
        return self._live_slots(instance_type) < spec.max_workers

    def spot_availability(self) -> dict[str, bool]:
        """Every zone's spot availability in one call (no cloud call): a zone is available while
        one of its spot node types has a worker left under its ``max_workers``."""
        out: dict[str, bool] = {}
        for spec in self.node_types.values():
            out[spec.zone] = out.get(spec.zone, False) or self.spot_available(spec.zone, spec.name)
        return out

    # ---------------------------------------------------------------- launch / terminate
    def launch(self, request: LaunchRequest) -> list[Instance]:
        spec = self.node_types.get(request.instance_type)
        if spec is None:
            raise InvalidInput("instance_type", f"{request.instance_type!r} is not a node type of the cluster",
                               fix=f"use one of {', '.join(sorted(self.node_types))}")
        if spec.market != request.market:
            raise InvalidInput("market", f"node type {spec.name} is {spec.market.value}, not {request.market.value}",
                               fix="pick a node type of that market")
        if request.count < 1:
            raise InvalidInput("count", f"must be >= 1, got {request.count}", fix="launch at least one")
        mine = [s for s in self.slots.values() if s.intent_id == request.intent_id]
        if mine:
            return [self._instance(s) for s in mine]
        if self._live_slots(spec.name) + request.count > spec.max_workers:
            raise CapacityUnavailable(request.zone, spec.name, f"max_workers={spec.max_workers} reached")
        now = self.clock.now()
        new = [Slot(f"{request.intent_id}/{i}", request.intent_id, spec, dict(request.tags), now)
               for i in range(request.count)]
        for slot in new:
            self.slots[slot.slot_id] = slot
        self._send()
        return [self._instance(s) for s in new]

    def _send(self) -> None:
        bundles = [s.spec.bundle() for s in self.slots.values()
                   if not s.released and s.state in (InstanceState.PENDING, InstanceState.RUNNING, InstanceState.NOTICED)]
        try:
            self._request(bundles)
        except Exception as exc:
            self.send_pending = True
            raise CloudError(f"ray: request_resources failed: {exc}",
                             fix="is this process connected to the cluster (ray.init(address='auto'))?") from exc
        self.requested, self.send_pending = bundles, False

    def terminate(self, instance_ids: Sequence[str]) -> None:
        changed = False
        for iid in instance_ids:
            slot = self.slots.get(iid)
            if slot is None or slot.released or slot.state in (InstanceState.PREEMPTED, InstanceState.TERMINATED):
                continue
            slot.released, slot.state, changed = True, InstanceState.TERMINATED, True
        if changed:
            self._send()

    # ---------------------------------------------------------------- views and events
    def describe(self, instance_ids: Sequence[str] | None = None) -> list[Instance]:
        ids = list(self.slots) if instance_ids is None else [i for i in instance_ids if i in self.slots]
        return [self._instance(self.slots[i]) for i in ids]

    def _instance(self, slot: Slot) -> Instance:
        spec = slot.spec
        price = spec.spot_price if spec.market == Market.SPOT else spec.on_demand_price
        tags = dict(slot.tags)
        if slot.node_id:
            tags["ray_node_id"] = slot.node_id
        return Instance(slot.slot_id, CLOUD, spec.zone, spec.name, spec.market, slot.state, slot.requested_at,
                        price, spec.accelerator, spec.accelerator_count, slot.intent_id, tags)

    def poll_events(self) -> list[FleetEvent]:
        now = self.clock.now()
        try:
            nodes = [n for n in self._list_nodes() if not n.get("is_head_node")]
        except Exception as exc:
            raise CloudError(f"ray: state API list_nodes failed: {exc}",
                             fix="is the dashboard (state API) running on the head?") from exc
        by_id = {n["node_id"]: n for n in nodes}
        events = self._deaths(by_id, now)
        events += self._bindings(nodes, now)
        events += self._timeouts(now)
        if self.send_pending or any(e.kind in (EventKind.PREEMPTED, EventKind.LAUNCH_FAILED) for e in events):
            try:
                self._send()  # withdraw the bundles of slots that are over
            except CloudError as exc:  # the events stand; the withdrawal goes with the next poll
                log.warning("%s", exc)
        return events

    def notice(self, ray_node_id: str, seconds_left: float, detail: str = "metadata notice") -> list[FleetEvent]:
        """The running slot filled by the Ray node ``ray_node_id`` got its preemption notice:
        it is NOTICED, with its PREEMPTION_NOTICE event (once; none for an unknown node)."""
        for slot in self.slots.values():
            if slot.node_id == ray_node_id and not slot.released and slot.state == InstanceState.RUNNING:
                slot.state = InstanceState.NOTICED
                return self._event(slot, EventKind.PREEMPTION_NOTICE, self.clock.now(), detail,
                                   seconds_left=float(seconds_left))
        return []

    def watched_slots(self) -> int:
        """The slots a node fills now, whose node may get a notice."""
        return sum(1 for s in self.slots.values() if s.node_id and not s.released
                   and s.state in (InstanceState.RUNNING, InstanceState.NOTICED))

    def _event(self, slot: Slot, kind: EventKind, now: float, detail: str = "",
               seconds_left: float | None = None) -> list[FleetEvent]:
        if kind in slot.reported:
            return []
        slot.reported.add(kind)
        return [FleetEvent(kind, slot.slot_id, slot.spec.zone, now, seconds_left, detail)]

    def _deaths(self, by_id: dict[str, dict[str, Any]], now: float) -> list[FleetEvent]:
        events = []
        for slot in self.slots.values():
            if slot.released:
                events += self._event(slot, EventKind.TERMINATED, now, "released")
                continue
            node = by_id.get(slot.node_id) if slot.node_id else None
            if node is not None and node.get("state") == "DEAD" and slot.state != InstanceState.PREEMPTED:
                slot.state = InstanceState.PREEMPTED
                events += self._event(slot, EventKind.PREEMPTED, now, str(node.get("state_message") or "node died"))
        return events

    def _bindings(self, nodes: list[dict[str, Any]], now: float) -> list[FleetEvent]:
        taken = {s.node_id for s in self.slots.values() if s.node_id}
        events = []
        for slot in sorted(self.slots.values(), key=lambda s: (s.requested_at, s.slot_id)):
            if slot.node_id or slot.released or slot.state != InstanceState.PENDING:
                continue
            for node in nodes:
                if node.get("state") == "ALIVE" and node["node_id"] not in taken and _fits(slot.spec, node):
                    slot.node_id, slot.state = node["node_id"], InstanceState.RUNNING
                    taken.add(node["node_id"])
                    events += self._event(slot, EventKind.READY, now)
                    break
        return events

    def _timeouts(self, now: float) -> list[FleetEvent]:
        events = []
        for slot in self.slots.values():
            if slot.state == InstanceState.PENDING and not slot.released and now - slot.requested_at > self.launch_timeout_s:
                slot.state = InstanceState.TERMINATED
                events += self._event(slot, EventKind.LAUNCH_FAILED, now,
                                      f"no {slot.spec.name} node within {self.launch_timeout_s:.0f}s")
        return events


def _fits(spec: NodeTypeSpec, node: dict[str, Any]) -> bool:
    total = node.get("resources_total") or {}
    return all(abs(float(total.get(k, 0.0)) - v) < 1e-9 for k, v in spec.custom.items())
