"""A fleet whose zones are gated by the workload clusters that hold them: a zone of a cluster
that takes no new work (draining or unhealthy) has no spot available and refuses launches, so
placement (the zone ranking, the deadline policies, the quota) sees only the clusters that take
work. The catalog of offers stays whole (the loop reads it once). What runs there is left alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from clusters.fleet import FleetEvent, FleetProvider, Instance, LaunchRequest, Offer
from controlplane.core.errors import CapacityUnavailable

ClosedZones = Callable[[], set[str]]  # the zones of clusters that take no new work, now


class ClusterGatedFleet(FleetProvider):
    """``inner``'s zones less those ``closed()`` names (read at every call)."""

    def __init__(self, inner: FleetProvider, closed: ClosedZones) -> None:
        self.inner = inner
        self.closed = closed
        self.name = inner.name
        self.lifetimes = inner.lifetimes

    def offers(self) -> list[Offer]:
        """Every zone's offer: the loop reads its catalog once, and a closed zone opens again."""
        return self.inner.offers()

    def spot_available(self, zone: str, instance_type: str) -> bool:
        return zone not in self.closed() and self.inner.spot_available(zone, instance_type)

    def spot_availability(self) -> dict[str, bool] | None:
        found = self.inner.spot_availability()
        if found is None:
            return None
        shut = self.closed()
        return {zone: up and zone not in shut for zone, up in found.items()}

    def closed_zones(self) -> frozenset[str]:
        """The zones of the clusters that take no new work now, as ``closed()`` names them."""
        return frozenset(self.closed())

    def launch(self, request: LaunchRequest) -> list[Instance]:
        if request.zone in self.closed():
            raise CapacityUnavailable(request.zone, request.instance_type,
                                      "its workload cluster takes no new work")
        return self.inner.launch(request)

    def terminate(self, instance_ids: Sequence[str]) -> None:
        self.inner.terminate(instance_ids)

    def describe(self, instance_ids: Sequence[str] | None = None) -> list[Instance]:
        return self.inner.describe(instance_ids)

    def poll_events(self) -> list[FleetEvent]:
        return self.inner.poll_events()

    def instances_per_intent(self) -> dict[str, int]:
        return self.inner.instances_per_intent()

    def lose(self, instance_id: str, detail: str = "node lost") -> None:
        self.inner.lose(instance_id, detail)
