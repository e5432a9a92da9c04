"""Read models: the rows the API lists beside the domain (catalog, cost, quotas, capacity, forecasts)."""

from __future__ import annotations

from pydantic import (
    BaseModel,
)


class ZoneInfo(BaseModel):
    """The fleet's catalog entry for one zone with its current availability."""

    cloud: str
    zone: str
    region: str = ""
    instance_type: str
    accelerator: str
    accelerator_count: int
    spot_price: float
    on_demand_price: float
    spot_available: bool
    updated_at: float


class CostSummary(BaseModel):
    tenant_id: str
    tenant_name: str
    cost: float
    on_demand_cost: float  # counterfactual: the same GPU hours, every node on-demand
    savings_pct: float
    gpu_hours: float
    jobs: int


class Quota(BaseModel):
    pool: str
    accelerator: str
    capacity_gpus: int
    spot_quota_gpus: int
    updated_at: float


class CapacityPoint(BaseModel):
    """One GPU pool at one quota refresh: the aggregate HP demand forecast (max over the
    guarantee window H of the tenants' summed mean, and Eq. 9's inner upper bound), the pool's
    capacity, its spot quota (Eq. 10), H and the safety coefficient eta (Eq. 11).

    ``id`` is the store's row number (the history's paging cursor). The demand fields are None
    for a tenant: they sum every tenant's forecast."""

    id: int = 0
    at: float
    pool: str
    accelerator: str
    capacity_gpus: int
    spot_quota_gpus: int
    hp_demand_gpus: float | None
    hp_demand_upper_gpus: float | None
    guarantee_hours: int
    eta: float


class ForecastRow(BaseModel):
    tenant_id: str
    at: float
    horizon_hours: int
    mean: list[float]
    upper: list[float]
