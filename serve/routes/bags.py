"""Bags of jobs: many parameter sets of one entrypoint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from controlplane.core.models import Bag, BagSpec, Job
from serve.auth import Auth
from serve.gate import API
from serve.paging import (
    CURSOR_PAGE,
    After,
    Limit,
)
from serve.routes.common import (
    ADMIN_TENANT,
    ERRORS,
    IdempotencyKey,
    caller,
    paged,
    replayable,
    service,
)
from serve.schemas import (
    BagCreated,
)

router = APIRouter()

def _render_bag(bag: Bag | None, jobs: Sequence[Job]) -> str:
    assert bag is not None
    return BagCreated(bag=bag, job_ids=[j.id for j in jobs]).model_dump_json()

@router.post(f"{API}/bags", tags=["bags"], status_code=201, response_model=BagCreated, responses=ERRORS)
def submit_bag(
    request: Request,
    spec: BagSpec,
    creds: Auth = None,
    tenant_id: Annotated[str | None, Query(max_length=128, description=ADMIN_TENANT)] = None,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """Many parameter sets of one entrypoint: one job each, one runtime estimate learned."""
    principal = caller(creds)
    if idempotency_key is None:
        bag, jobs = service().submit_bag(principal, spec, tenant_id)
        return BagCreated(bag=bag, job_ids=[j.id for j in jobs])
    answer = service().submit_bag_once(principal, spec, idempotency_key, _render_bag, tenant_id)
    return replayable(answer)

@router.get(f"{API}/bags", tags=["bags"], response_model=list[Bag], responses=ERRORS | CURSOR_PAGE)
def list_bags(creds: Auth = None, after: After = None, limit: Limit = 1000) -> Response:
    """The caller's bags (every tenant's for the admin), oldest first; paged by cursor."""
    bags = service().list_bags(caller(creds), after=after, limit=limit + 1)
    return paged(bags, [b.id for b in bags], limit)

@router.get(f"{API}/bags/{{bag_id}}", tags=["bags"], response_model=Bag, responses=ERRORS)
def get_bag(bag_id: str, creds: Auth = None) -> Bag:
    """One bag with its learned runtime estimate (404 when it is not the caller's)."""
    return service().get_bag(caller(creds), bag_id)
