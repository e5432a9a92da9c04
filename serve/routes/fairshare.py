"""Fair share between tenants: the admin sets weights and nominal GPUs; everyone reads lines."""

from __future__ import annotations

from fastapi import APIRouter

from controlplane.core.models import TenantShare, TenantShareSpec
from serve.auth import Auth
from serve.gate import API
from serve.routes.common import ERRORS, caller, service
from serve.schemas import FairShareLine, FairShareSet

router = APIRouter()


@router.post(f"{API}/fairshare", tags=["tenants"], response_model=TenantShare, responses=ERRORS)
def set_fair_share(body: FairShareSet, creds: Auth = None) -> TenantShare:
    """Admin only: a tenant's weight and nominal GPUs per pool (idle share is lent to others)."""
    spec = TenantShareSpec(weight=body.weight, nominal_gpus=body.nominal_gpus)
    return service().set_fair_share(caller(creds), body.tenant, spec)


@router.get(f"{API}/fairshare", tags=["tenants"], response_model=list[FairShareLine],
            responses=ERRORS)
def fair_share(creds: Auth = None) -> list[FairShareLine]:
    """Each tenant's nominal, entitled, held, borrowed and lent GPUs per pool (a tenant: its
    own), as the controller last published them."""
    return [FairShareLine(**row) for row in service().fair_share(caller(creds))]
