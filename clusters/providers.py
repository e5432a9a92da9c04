"""The fleet providers, registered by name: ``spotplane up --fleet NAME`` picks one.

Each cloud is one package under ``clusters/`` (``aws``, ``gcp``, ``ray``, ``sim``) whose provider
class carries ``@fleet_provider(NAME, capabilities=...)``; :func:`registered` imports every such
package once, so adding a cloud is its package and that one decorated line. Provider modules
import their cloud's client library (boto3, google-cloud-compute, Ray) only when an instance is
built, so listing the providers loads none of them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar

import clusters
from clusters.fleet import FleetProvider, LifetimeModel
from clusters.notices import NoticeWatcher
from controlplane.core.clock import Clock
from controlplane.core.errors import CloudError, ConfigError, InvalidInput


class Capability(StrEnum):
    """What a provider offers beyond :class:`~clusters.fleet.FleetProvider`."""

    NOTICES = "notices"  # its VMs' metadata server announces a preemption (``notice_watcher``)
    RAY_NODES = "ray_nodes"  # its instances are Ray nodes, named by Ray node id
    SIMULATED = "simulated"  # stands in for clouds, on the control plane's simulated clock


WatcherFactory = Callable[..., NoticeWatcher]
Prices = Callable[[str], tuple[float | None, float] | None]
P = TypeVar("P", bound=type[FleetProvider])
L = TypeVar("L", bound=LifetimeModel)


class Lifetimes(Protocol):
    """A cloud's spot lifetimes from a fitted model: the same kind of model, the cloud's limits on."""

    def __call__(self, fitted: L) -> L: ...


@dataclass(frozen=True)
class ProviderEntry:
    """One registered provider: its class and what it declares."""

    name: str
    provider: type[FleetProvider]
    capabilities: frozenset[Capability] = frozenset()
    notice_watcher: WatcherFactory | None = None
    list_prices: Prices | None = None  # machine type -> (spot or None, on-demand) USD/hour
    spot_lifetimes: Lifetimes | None = None  # the fitted model -> this cloud's; None: memoryless

    def can(self, capability: Capability) -> bool:
        """Whether the provider declared ``capability``."""
        return capability in self.capabilities


_REGISTRY: dict[str, ProviderEntry] = {}
_LOADED: list[bool] = []


def fleet_provider(name: str, *, capabilities: frozenset[Capability] = frozenset(),
                   notice_watcher: WatcherFactory | None = None, list_prices: Prices | None = None,
                   spot_lifetimes: Lifetimes | None = None) -> Callable[[P], P]:
    """Register the decorated provider class as ``name`` with what it declares."""
    if Capability.NOTICES in capabilities and notice_watcher is None:
        raise InvalidInput("notice_watcher", f"provider {name!r} declares notices without a watcher",
                           fix="pass notice_watcher=<its metadata watcher class>")

    def register(cls: P) -> P:
        _REGISTRY[name] = ProviderEntry(name, cls, frozenset(capabilities), notice_watcher,
                                        list_prices, spot_lifetimes)
        return cls

    return register


def registered() -> dict[str, ProviderEntry]:
    """Every provider, by name, in the order their packages were found."""
    if not _LOADED:
        for pkg in pkgutil.iter_modules(clusters.__path__, "clusters."):
            if pkg.ispkg:
                importlib.import_module(pkg.name)
        _LOADED.append(True)
    return dict(_REGISTRY)


def provider_names() -> list[str]:
    """The names ``--fleet`` accepts."""
    return list(registered())


def provider_entry(name: str) -> ProviderEntry:
    """The registered provider ``name``, or ConfigError listing the choices."""
    entry = registered().get(name)
    if entry is None:
        raise ConfigError(f"fleet: unknown provider {name!r}", fix=f"use one of {', '.join(registered())}")
    return entry


def make_provider(name: str, **options: Any) -> FleetProvider:
    """Build the provider called ``name`` from its options (zones, region, project, clock...)."""
    return provider_entry(name).provider.from_options(**options)


def list_prices(machine: str) -> tuple[float | None, float] | None:
    """A machine type's list prices from the first cloud whose catalog knows it (USD/hour)."""
    for entry in registered().values():
        found = entry.list_prices(machine) if entry.list_prices is not None else None
        if found is not None:
            return found
    return None


def notice_clouds() -> list[str]:
    """The clouds whose VMs' metadata servers announce preemptions."""
    return [name for name, entry in registered().items() if entry.can(Capability.NOTICES)]


def watcher_for(cloud: str, base_url: str | None = None, clock: Clock | None = None) -> NoticeWatcher:
    """The notice watcher of ``cloud``, optionally at a test metadata server."""
    entry = registered().get(cloud)
    if entry is None or entry.notice_watcher is None:
        raise InvalidInput("cloud", f"no metadata watcher for {cloud!r}",
                           fix=f"use one of {', '.join(notice_clouds())}")
    if base_url is None:
        return entry.notice_watcher(clock=clock)
    return entry.notice_watcher(base_url, clock=clock)


def instance_identity(cloud: str, base_url: str | None = None) -> str:
    """This node's instance id from its metadata server (EC2 instance id, GCE VM name)."""
    ident = watcher_for(cloud, base_url).instance_id()
    if not ident:
        raise CloudError(f"{cloud} metadata server gave an empty instance id",
                         fix="is this process on a cloud VM (or is the metadata URL right)?")
    return ident
