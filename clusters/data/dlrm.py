"""Per-tenant GPU demand over 31 days (alibaba-dlrm), the demand forecaster's data."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clusters.data.openb import in_order
from clusters.data.table import Col, FloatArray, read_table
from controlplane.core.units import HOUR


@dataclass(frozen=True, eq=False)
class TenantDemand:
    """Hourly GPU demand per tenant: ``gpus[tenant, hour]`` = mean GPUs requested in that hour."""

    tenants: list[str]
    gpus: FloatArray
    hours: int

    def __len__(self) -> int:
        return len(self.tenants)

    def of(self, tenant: str) -> FloatArray:
        return self.gpus[self.tenants.index(tenant)]


DLRM_HOURS = 744


DLRM_COLUMNS = (
    Col("instance_sn", unique=True), Col("app_name"), Col("gpu_request", "float", low=0.0),
    Col("creation_time", "float", low=0.0, blank=True), Col("scheduled_time", "float", low=0.0, blank=True),
    Col("deletion_time", "float", low=0.0, blank=True),
)


def load_dlrm_demand(path: str | Path, hours: int = DLRM_HOURS) -> TenantDemand:
    """Sum ``gpu_request`` of every instance alive in each hour, per ``app_name`` (one tenant each).

    An instance is alive from ``scheduled_time`` (else ``creation_time``; blank = before the trace
    start) to ``deletion_time`` (blank = after the trace end); a partial hour counts pro rata.
    """
    p = Path(path)
    t = read_table(p, "Alibaba DLRM trace (alibaba-dlrm/disaggregated_DLRM_trace.csv)", DLRM_COLUMNS)
    in_order(p, t, "creation_time", "scheduled_time")
    in_order(p, t, "scheduled_time", "deletion_time")
    apps = sorted(set(t["app_name"].tolist()), key=_natural_key)
    index = {a: i for i, a in enumerate(apps)}
    gpus = np.zeros((len(apps), hours))
    edges = np.arange(hours + 1) * HOUR
    sched, created, deleted = t["scheduled_time"], t["creation_time"], t["deletion_time"]
    for i, app in enumerate(t["app_name"].tolist()):
        start = _first_number(sched[i], created[i], default=0.0)
        end = _first_number(deleted[i], default=hours * HOUR)
        g = float(t["gpu_request"][i])
        if g <= 0 or end <= start:
            continue
        overlap = np.clip(np.minimum(edges[1:], end) - np.maximum(edges[:-1], start), 0.0, HOUR)
        gpus[index[app]] += g * overlap / HOUR
    return TenantDemand(tenants=apps, gpus=gpus, hours=hours)


def _first_number(*values: float, default: float) -> float:
    for v in values:
        if not math.isnan(v):
            return float(v)
    return default


def _natural_key(s: str) -> tuple[str, int]:
    head, _, tail = s.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (s, -1)
