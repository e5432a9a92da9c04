"""The Ray fleet's catalog: the worker node types of a cluster-launcher config (``ray-cluster.yaml``),
each priced from the catalog of the cloud its machine type belongs to."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusters.providers import list_prices
from controlplane.core.errors import ConfigError
from controlplane.core.models import Market

NOT_CUSTOM = frozenset({"CPU", "GPU", "memory", "object_store_memory"})
DEFAULT_SPOT_DISCOUNT = 0.35  # spot ~ 1/3 of on-demand when the config names no price

Bundle = dict[str, float]


@dataclass(frozen=True)
class NodeTypeSpec:
    """One worker node type of the autoscaler config, as the placement sees it."""

    name: str
    resources: dict[str, float]
    max_workers: int
    zone: str
    on_demand_price: float
    spot_price: float

    @property
    def market(self) -> Market:
        return Market.SPOT if self.resources.get("spot", 0) > 0 else Market.ON_DEMAND

    @property
    def accelerator(self) -> str:
        names = [k.split(":", 1)[1] for k in self.resources if k.startswith("accelerator_type:")]
        return names[0] if names else ""

    @property
    def accelerator_count(self) -> int:
        return int(self.resources.get("GPU", 1 if self.accelerator else 0))

    @property
    def custom(self) -> dict[str, float]:
        return {k: v for k, v in self.resources.items() if k not in NOT_CUSTOM}

    def bundle(self) -> Bundle:
        return {k: float(v) for k, v in self.resources.items() if k not in ("memory", "object_store_memory")}


def node_types_from_config(config: dict[str, Any], prices: dict[str, tuple[float, float]] | None = None,
                           ) -> dict[str, NodeTypeSpec]:
    """Worker node types of a cluster-launcher config (``ray-cluster.yaml`` shape)."""
    if not isinstance(config, dict):
        raise ConfigError("ray fleet: the cluster config must be a mapping", fix="give the yaml `ray up` used")
    types = config.get("available_node_types") or {}
    if not isinstance(types, dict) or not all(isinstance(n, dict) for n in types.values()):
        raise ConfigError("ray fleet: available_node_types must map each node type name to a mapping",
                          fix="see ray-cluster.yaml")
    head = config.get("head_node_type")
    zone = str((config.get("provider") or {}).get("availability_zone", "ray")).split(",")[0] or "ray"
    out = {}
    for name, node in types.items():
        if name == head:
            continue
        resources = {k: _config_number(name, f"resources.{k}", v) for k, v in (node.get("resources") or {}).items()}
        if "spot" not in resources and "on_demand" not in resources:
            raise ConfigError(f"ray fleet: node type {name!r} has neither a 'spot' nor an 'on_demand' resource",
                              fix="add resources: {spot: 1} or {on_demand: 1} to it")
        nc = node.get("node_config") or {}
        machine = str(nc.get("InstanceType") or nc.get("machineType") or name)
        spot, od = _machine_prices(machine)
        if prices and name in prices:
            spot, od = prices[name]
        max_workers = _config_number(name, "max_workers", node.get("max_workers", config.get("max_workers", 0)))
        if max_workers != int(max_workers):
            raise ConfigError(f"ray fleet: node type {name!r}: max_workers {max_workers:g} is not a whole number",
                              fix="write a whole number of workers")
        out[name] = NodeTypeSpec(name, resources, int(max_workers), zone, od, spot)
    if not out:
        raise ConfigError("ray fleet: the cluster config has no worker node types (only the head, or none)",
                          fix="add a node type with resources: {spot: 1} or {on_demand: 1} to available_node_types")
    return out


def unpriced(node_types: dict[str, NodeTypeSpec]) -> list[str]:
    """The node types without a price of their market (and an on-demand one), sorted."""
    def priced(s: NodeTypeSpec) -> bool:
        return math.isfinite(s.on_demand_price) and (s.market != Market.SPOT or math.isfinite(s.spot_price))

    return sorted(name for name, spec in node_types.items() if not priced(spec))


def _machine_prices(machine: str) -> tuple[float, float]:
    """(spot, on-demand) USD/hour of the machine a node type runs on, from its cloud's catalog
    (spot at ``DEFAULT_SPOT_DISCOUNT`` of on-demand where the catalog has no spot price)."""
    found = list_prices(machine)
    if found is None:
        return math.nan, math.nan
    spot, on_demand = found
    return (on_demand * DEFAULT_SPOT_DISCOUNT if spot is None else spot), on_demand


def _config_number(node_type: str, key: str, value: Any) -> float:
    """A finite number >= 0 from the cluster config, or ConfigError naming the node type and key."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if isinstance(value, bool) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"ray fleet: node type {node_type!r}: {key} is {value!r}, not a number >= 0",
                          fix="write a finite number >= 0")
    return v


def load_cluster_config(path: str | Path) -> dict[str, Any]:
    """The cluster-launcher YAML at ``path``, or ConfigError (one line: file, line, problem)."""
    import yaml

    p = Path(path)
    try:
        config = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"ray fleet: no cluster config at {p}", fix="pass config=PATH of the yaml `ray up` used") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"ray fleet: {p} is not UTF-8 text", fix="pass the yaml `ray up` used") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1}: {getattr(exc, 'problem', '')})" if mark else ""
        raise ConfigError(f"ray fleet: {p} is not valid YAML{where}", fix="fix the YAML syntax") from exc
    if not isinstance(config, dict):
        raise ConfigError(f"ray fleet: {p} must hold a mapping", fix="pass the yaml `ray up` used")
    return config
