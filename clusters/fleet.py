"""The one interface every fleet provider speaks: simulated, AWS (boto3), GCP (google-cloud-compute), Ray autoscaler.

A provider launches and terminates instances, describes them, reports what happened to them as a
stream of :class:`FleetEvent` (polled), probes spot availability and quotes prices. It decides
nothing: which zone, which market and when are the policies' business.

Idempotency: every launch carries an ``intent_id`` written to the store *before* the call; a
provider must return the instances of an earlier launch with the same ``intent_id`` instead of
creating new ones (AWS ``ClientToken``, GCP ``request_id``, the simulator's own table).

Like Ray's autoscaler ``NodeProvider``, :class:`FleetProvider` is a base class: every provider
subclasses it, implements its abstract methods and may override the optional ones, whose
defaults give the controller's generic path (probe each zone, no lifetime model...).
tests/clusters/conformance.py checks every provider against this contract.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, Self, TypeVar

import numpy as np

from controlplane.core.errors import Conflict, InvalidInput
from controlplane.core.models import Market

OptionsT = TypeVar("OptionsT")


class LifetimeModel(Protocol):
    """Spot VM lifetimes a provider draws from: ``n`` lifetimes in hours (a preemption model)."""

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray: ...


class InstanceState(StrEnum):
    PENDING = "pending"  # requested, not ready yet (provisioning delay)
    RUNNING = "running"
    NOTICED = "noticed"  # preemption notice received, still running
    PREEMPTED = "preempted"
    TERMINATED = "terminated"  # by us


class EventKind(StrEnum):
    READY = "ready"
    PREEMPTION_NOTICE = "preemption_notice"
    PREEMPTED = "preempted"
    TERMINATED = "terminated"
    LAUNCH_FAILED = "launch_failed"


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Launch ``count`` instances of ``instance_type`` in ``zone`` on ``market``."""

    intent_id: str
    zone: str
    instance_type: str
    market: Market
    count: int = 1
    tags: dict[str, str] = field(default_factory=dict)  # node_id, job_id, tenant_id ...


@dataclass(frozen=True, slots=True)
class Instance:
    """A provider's view of one instance."""

    instance_id: str
    cloud: str
    zone: str
    instance_type: str
    market: Market
    state: InstanceState
    launched_at: float  # control-plane clock seconds
    price_per_hour: float
    accelerator: str = ""
    accelerator_count: int = 0
    intent_id: str = ""
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FleetEvent:
    """Something that happened to an instance, at control-plane time ``at``."""

    kind: EventKind
    instance_id: str
    zone: str
    at: float
    seconds_left: float | None = None  # for PREEMPTION_NOTICE
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Offer:
    """An (instance type, zone) the provider sells, with current prices per hour."""

    cloud: str
    zone: str
    instance_type: str
    accelerator: str
    accelerator_count: int
    spot_price: float
    on_demand_price: float
    region: str = ""


class FleetProvider(ABC):
    """What the controller needs from a cloud: required methods, and optional ones with defaults."""

    name: str
    lifetimes: LifetimeModel | None = None
    """The model spot lifetimes are drawn from (hours); None: the cloud's own, unknown."""

    @classmethod
    def from_options(cls, **options: Any) -> Self:
        """Build from ``spotplane up --fleet NAME`` options (default: the constructor's keywords)."""
        return cls(**options)

    @abstractmethod
    def offers(self) -> list[Offer]:
        """The price catalog: every (zone, instance type) with spot and on-demand prices."""

    @abstractmethod
    def spot_available(self, zone: str, instance_type: str) -> bool:
        """Best-effort probe: could a spot instance be launched there now?"""

    def spot_availability(self) -> dict[str, bool] | None:
        """Every zone's spot availability in one call; None (the default): probe each zone with
        :meth:`spot_available`, a cloud API call each, so only every few ticks."""
        return None

    @abstractmethod
    def launch(self, request: LaunchRequest) -> list[Instance]:
        """Launch (idempotent on ``intent_id``); raises ``CapacityUnavailable`` when out of spot."""

    @abstractmethod
    def terminate(self, instance_ids: Sequence[str]) -> None:
        """Terminate; unknown or already-gone ids are ignored."""

    @abstractmethod
    def describe(self, instance_ids: Sequence[str] | None = None) -> list[Instance]:
        """Current view of the given instances (all of ours when None)."""

    @abstractmethod
    def poll_events(self) -> list[FleetEvent]:
        """Events since the previous poll, oldest first."""

    def closed_zones(self) -> frozenset[str]:
        """The zones that take no new work now (a launch there is refused, what runs there is
        left alone); empty (the default) where every zone takes work."""
        return frozenset()

    def instances_per_intent(self) -> dict[str, int]:
        """How many instances each launch intent created, where the provider counts them (a
        relaunch would show up here); empty (the default) when it does not."""
        return {}

    def lose(self, instance_id: str, detail: str = "node lost") -> None:
        """Report ``instance_id`` gone now, as if the cloud had reclaimed it (a Ray node died
        under it). Only a fleet that stands in for a cloud can; a real cloud reports its own."""
        raise Conflict(f"fleet {self.name!r} reports its own losses",
                       fix="lose a node through the provider")


def typed_options(kind: type[OptionsT], provider: str, options: Mapping[str, Any]) -> OptionsT:
    """``options`` as the provider's typed options (a dataclass); one it does not take is
    refused naming the field and the ones it does."""
    known = {f.name for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidInput(f"fleet_options.{unknown[0]}", f"not an option of the {provider} fleet",
                           fix=f"use one of {', '.join(sorted(known))}")
    return kind(**options)
