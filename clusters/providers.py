"""Pick a fleet provider by name: ``spotplane up --fleet sim|aws|gcp|ray``.

Each provider class offers ``from_options(**options) -> FleetProvider``; its module is imported
only when chosen, so boto3 or the GCP client load only for the cloud in use.
"""

from __future__ import annotations

import importlib
from typing import Any

from clusters.fleet import FleetProvider
from controlplane.core.errors import ConfigError

PROVIDERS: dict[str, str] = {
    "sim": "clusters.simfleet:SimulatedFleet",
    "aws": "clusters.aws:AwsFleet",
    "gcp": "clusters.gcp:GcpFleet",
    "ray": "clusters.rayfleet:RayAutoscalerFleet",
}


def make_provider(name: str, **options: Any) -> FleetProvider:
    """Build the provider called ``name`` from its options (zones, region, project, clock...)."""
    if name not in PROVIDERS:
        raise ConfigError(f"fleet: unknown provider {name!r}", fix=f"use one of {', '.join(PROVIDERS)}")
    module_name, _, cls_name = PROVIDERS[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise ConfigError(f"fleet: provider {name!r} is not available in this build") from exc
    provider: type[FleetProvider] = getattr(module, cls_name)  # the registered class
    return provider.from_options(**options)
