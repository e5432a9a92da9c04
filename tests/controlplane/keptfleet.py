"""A fleet for reconcile-loop tests that keeps its instances: launches are idempotent on the
intent id, spot can be refused per zone, instances change state with events, and every spot
probe is remembered."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

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
from controlplane.core.errors import CapacityUnavailable
from controlplane.core.models import Market


class KeptFleet(FleetProvider):
    """``offers`` as given, each zone's spot up until the test says not; a launch's instances
    start in ``boot_state``."""

    name = "kept"

    def __init__(self, clock: SimClock, offers: Sequence[Offer],
                 boot_state: InstanceState = InstanceState.PENDING) -> None:
        self.clock = clock
        self._offers = list(offers)
        self.boot_state = boot_state
        self.spot_up = {o.zone: True for o in self._offers}
        self.instances: dict[str, Instance] = {}
        self.by_intent: dict[str, list[str]] = {}
        self.events: list[FleetEvent] = []
        self.probed: list[tuple[str, str]] = []  # every spot_available call, in order

    def offers(self) -> list[Offer]:
        return list(self._offers)

    def spot_available(self, zone: str, instance_type: str) -> bool:
        self.probed.append((zone, instance_type))
        return self.spot_up[zone]

    def launch(self, request: LaunchRequest) -> list[Instance]:
        if request.intent_id in self.by_intent:
            return [self.instances[i] for i in self.by_intent[request.intent_id]]
        if request.market is Market.SPOT and not self.spot_up[request.zone]:
            raise CapacityUnavailable(request.zone, request.instance_type, "no spot here")
        offer = next(o for o in self._offers if o.zone == request.zone)
        price = offer.spot_price if request.market is Market.SPOT else offer.on_demand_price
        made = [Instance(f"i-{len(self.instances) + k}", offer.cloud, request.zone,
                         request.instance_type, request.market, self.boot_state,
                         self.clock.now(), price, offer.accelerator, offer.accelerator_count,
                         request.intent_id, dict(request.tags)) for k in range(request.count)]
        for inst in made:
            self.instances[inst.instance_id] = inst
        self.by_intent[request.intent_id] = [i.instance_id for i in made]
        return made

    def terminate(self, instance_ids: Sequence[str]) -> None:
        for iid in instance_ids:
            self.become(iid, InstanceState.TERMINATED, EventKind.TERMINATED, self.clock.now())

    def describe(self, instance_ids: Sequence[str] | None = None) -> list[Instance]:
        ids = list(self.instances) if instance_ids is None else instance_ids
        return [self.instances[i] for i in ids if i in self.instances]

    def poll_events(self) -> list[FleetEvent]:
        out, self.events = self.events, []
        return out

    def become(self, iid: str, state: InstanceState, kind: EventKind, at: float,
               seconds_left: float | None = None) -> None:
        """The instance turns ``state`` at ``at``, with its event."""
        inst = self.instances[iid]
        self.instances[iid] = replace(inst, state=state)
        self.events.append(FleetEvent(kind, iid, inst.zone, at, seconds_left=seconds_left))
