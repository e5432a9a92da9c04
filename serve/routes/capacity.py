"""Spot quotas, demand forecasts and cost."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from controlplane.core.readmodels import CostSummary, ForecastRow, Quota
from serve.auth import Auth
from serve.gate import API
from serve.routes.common import ERRORS, caller, listed, service
from serve.schemas import (
    CostReport,
)

router = APIRouter()

@router.get(f"{API}/quotas", tags=["capacity"], response_model=list[Quota], responses=ERRORS)
def quotas(creds: Auth = None) -> Response:
    """Spot quota per pool and GPU model (GFS spot quota allocator)."""
    caller(creds)
    return listed(service().quotas())

@router.get(f"{API}/forecasts", tags=["capacity"], response_model=list[ForecastRow], responses=ERRORS)
def forecasts(creds: Auth = None) -> Response:
    """Demand forecasts per tenant (the caller's own; every tenant's for the admin)."""
    return listed(service().forecasts(caller(creds)))

@router.get(f"{API}/cost", tags=["cost"], response_model=CostReport, responses=ERRORS)
def cost(creds: Auth = None) -> CostReport:
    """Spend per tenant against the on-demand-only counterfactual (same GPU hours)."""
    principal = caller(creds)
    rows: list[CostSummary] = service().cost(principal)
    return CostReport.of(rows, service().idle_cost(principal))
