"""Budgets and bills: a tenant's spend limits (set by the admin), its spend and headroom, and
every job's bill with its lines, per job or summed per tenant and month, as JSON or CSV."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from controlplane.core.bills import Bill, summed, to_csv
from controlplane.core.models import TenantBudget
from serve.auth import Auth
from serve.gate import API
from serve.routes.common import ERRORS, caller, listed, service
from serve.schemas import SpendView

router = APIRouter()

Month = Annotated[str | None, Query(pattern=r"^\d{4}-\d{2}$",
                                    description="UTC calendar month (YYYY-MM); all when left out.")]


@router.put(f"{API}/tenants/{{tenant_id}}/budget", tags=["budgets"], response_model=SpendView,
            responses=ERRORS)
def set_budget(tenant_id: str, budget: TenantBudget, creds: Auth = None) -> SpendView:
    """Admin only: a tenant's hourly spend cap, monthly budget, soft line and rule for HP and
    deadline jobs at the monthly hard line (null: no limit)."""
    return service().set_budget(caller(creds), tenant_id, budget)


@router.get(f"{API}/tenants/{{tenant_id}}/budget", tags=["budgets"], response_model=SpendView,
            responses=ERRORS)
def get_budget(tenant_id: str, creds: Auth = None) -> SpendView:
    """A tenant's limits, spend this month, spend rate and headroom (a tenant: its own)."""
    return service().budget_view(caller(creds), tenant_id)


@router.get(f"{API}/budgets", tags=["budgets"], response_model=list[SpendView], responses=ERRORS)
def budgets(creds: Auth = None) -> Response:
    """Every tenant's spend and headroom (admin), or the caller's own."""
    return listed(service().budgets(caller(creds)))


BILLS_CSV: dict[int | str, dict[str, Any]] = {200: {"content": {
    "text/csv": {"schema": {"type": "string"}, "example": "month,tenant_id,job_id,..."}},
    "description": "JSON (format=json) or CSV (format=csv)"}}


@router.get(f"{API}/bills", tags=["budgets"], response_model=list[Bill],
            responses=ERRORS | BILLS_CSV)
def bills(creds: Auth = None, month: Month = None,
          per: Literal["job", "tenant"] = "job",
          format: Literal["json", "csv"] = "json") -> Response:  # noqa: A002 - the query's name
    """Every job's bill in the caller's scope (per=tenant: summed per tenant and month); each
    bill's lines add up to its total to the cent; format=csv for a spreadsheet."""
    rows = service().job_bills(caller(creds), month=month)
    if per == "tenant":
        rows = summed(rows)
    if format == "csv":
        return PlainTextResponse(to_csv(rows), media_type="text/csv",
                                 headers={"Content-Disposition": "attachment; filename=bills.csv"})
    return JSONResponse([r.model_dump(mode="json") for r in rows])


@router.get(f"{API}/jobs/{{job_id}}/bill", tags=["budgets"], response_model=Bill, responses=ERRORS)
def job_bill(job_id: str, creds: Auth = None) -> Bill:
    """One job's bill: spot and on-demand GPU hours and dollars, lost work, checkpoint and
    changeover overhead, provisioning, probes, egress and hot spares, summing to its total."""
    return service().job_bill(caller(creds), job_id)
