"""Tenants: create (admin), list, and the caller itself."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from controlplane.core.models import Tenant, TenantSpec
from serve.auth import Auth
from serve.gate import API
from serve.paging import (
    CURSOR_PAGE,
    After,
    Limit,
)
from serve.routes.common import ERRORS, caller, paged, service
from serve.schemas import (
    TenantCreated,
    TenantMe,
)

router = APIRouter()

@router.post(f"{API}/tenants", tags=["tenants"], status_code=201, response_model=TenantCreated, responses=ERRORS)
def create_tenant(spec: TenantSpec, creds: Auth = None) -> TenantCreated:
    """Admin only: create a tenant; the answer holds its token, shown only this once."""
    tenant, token = service().create_tenant(caller(creds), spec)
    return TenantCreated(tenant=tenant, token=token)

@router.get(f"{API}/tenants", tags=["tenants"], response_model=list[Tenant],
         responses=ERRORS | CURSOR_PAGE)
def list_tenants(creds: Auth = None, after: After = None, limit: Limit = 1000) -> Response:
    """Every tenant (admin) or just the caller, oldest first; paged by cursor."""
    tenants = service().list_tenants(caller(creds), after=after, limit=limit + 1)
    return paged(tenants, [t.id for t in tenants], limit)

@router.get(f"{API}/tenants/me", tags=["tenants"], response_model=TenantMe, responses=ERRORS)
def me(creds: Auth = None) -> TenantMe:
    """The calling tenant with its spend and headroom (403 for the admin token, no tenant)."""
    return service().me_with_spend(caller(creds))
