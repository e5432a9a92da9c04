"""The fleet: nodes, the catalog of zones, prices and spot availability."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from controlplane.core.models import Node
from controlplane.core.readmodels import ZoneInfo
from serve.auth import Auth
from serve.gate import API
from serve.paging import (
    CURSOR_PAGE,
    After,
    Limit,
)
from serve.routes.common import ERRORS, caller, listed, paged, service
from serve.schemas import (
    AvailabilityRow,
    PriceRow,
)

router = APIRouter()

@router.get(f"{API}/fleet/nodes", tags=["fleet"], response_model=list[Node],
         responses=ERRORS | CURSOR_PAGE)
def nodes(creds: Auth = None, live: bool = False, after: After = None,
          limit: Limit = 1000) -> Response:
    """Every node (admin) or the nodes running the caller's jobs, oldest first; ``live``
    drops gone ones; paged by cursor."""
    nodes = service().nodes(caller(creds), live_only=live, after=after, limit=limit + 1)
    return paged(nodes, [n.id for n in nodes], limit)

@router.get(f"{API}/fleet/zones", tags=["fleet"], response_model=list[ZoneInfo], responses=ERRORS)
def zones(creds: Auth = None) -> Response:
    """The fleet's catalog: every (zone, instance type) with its prices and availability."""
    caller(creds)
    return listed(service().zones())

@router.get(f"{API}/fleet/prices", tags=["fleet"], response_model=list[PriceRow], responses=ERRORS)
def prices(creds: Auth = None) -> Response:
    """Spot and on-demand price per hour of every (zone, instance type), and the discount."""
    caller(creds)
    return listed([PriceRow.of(z) for z in service().zones()])

@router.get(f"{API}/fleet/availability", tags=["fleet"], response_model=list[AvailabilityRow], responses=ERRORS)
def availability(creds: Auth = None) -> Response:
    """Whether spot can be had in each zone now (as of the controller's last tick)."""
    caller(creds)
    return listed([
        AvailabilityRow(cloud=z.cloud, zone=z.zone, instance_type=z.instance_type,
                        spot_available=z.spot_available, updated_at=z.updated_at)
        for z in service().zones()
    ])
