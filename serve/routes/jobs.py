"""Jobs: submit, list, one job, cancel, its logs, events and decisions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import PlainTextResponse, Response

from controlplane.core.models import Bag, Decision, Event, Job, JobKind, JobSpec, JobState
from serve.auth import Auth
from serve.gate import API
from serve.paging import (
    CURSOR_PAGE,
    LIST_HEADERS,
    MAX_LIST_LIMIT,
    NEXT_AFTER_HEADER,
    NEXT_OFFSET_HEADER,
    Limit,
    NumberAfter,
    bounded_list,
)
from serve.routes.common import (
    ADMIN_TENANT,
    ERRORS,
    IdempotencyKey,
    caller,
    paged,
    replayable,
    replica,
    service,
)
from serve.schemas import (
    ID_CURSOR,
    MAX_CURSOR,
    MAX_OFFSET,
    JobView,
    job_spec_example,
)

router = APIRouter()

def _render_job(bag: Bag | None, jobs: Sequence[Job]) -> str:
    return JobView.of(jobs[0]).model_dump_json()

@router.post(f"{API}/jobs", tags=["jobs"], status_code=201, response_model=JobView, responses=ERRORS)
def submit_job(
    request: Request,
    spec: Annotated[JobSpec, Body(openapi_examples={"deadline": {"value": job_spec_example()}})],
    creds: Auth = None,
    tenant_id: Annotated[str | None, Query(max_length=128, description=ADMIN_TENANT)] = None,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """Submit one job; it is PENDING until the controller's next tick queues it.

    With an ``Idempotency-Key`` a retry returns the first answer and creates nothing."""
    principal = caller(creds)
    if idempotency_key is None:
        job = service().submit_job(principal, spec, tenant_id)
        return JobView.of(job)
    answer = service().submit_job_once(principal, spec, idempotency_key, _render_job, tenant_id)
    return replayable(answer)

@router.get(f"{API}/jobs", tags=["jobs"], response_model=list[JobView], responses=ERRORS | {
    200: {"description": "the jobs, oldest first", "headers": {
        **LIST_HEADERS, NEXT_OFFSET_HEADER: {"description": "offset of the next page when cut",
                                              "schema": {"type": "string"}},
        NEXT_AFTER_HEADER: {"description": "`after` of the next page, when one may follow",
                            "schema": {"type": "string"}}}}})
def list_jobs(
    creds: Auth = None,
    state: Annotated[list[JobState] | None, Query(description="repeat for several")] = None,
    kind: JobKind | None = None,
    bag_id: Annotated[str | None, Query(max_length=64)] = None,
    tenant_id: Annotated[str | None, Query(max_length=128, description="admin only: one tenant's jobs")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 1000,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    after: Annotated[str | None, Query(
        min_length=1, max_length=MAX_CURSOR, pattern=ID_CURSOR, description=(
            "cursor: the id of the last job of the previous page (X-Spotplane-Next-After); "
            "`offset` then skips that many more"))] = None,
) -> Response:
    """The caller's jobs (every tenant's for the admin), oldest first; at most ``limit`` and
    at most the list byte cap. ``X-Spotplane-Next-After`` names the cursor of the next page
    (pass it as ``after``: as fast a million jobs deep as on the first page); the older
    ``offset`` paging still works (``X-Spotplane-Next-Offset`` when the byte cap cut)."""
    jobs = service().list_jobs(
        caller(creds), state=state, kind=kind, bag_id=bag_id, tenant_id=tenant_id,
        limit=limit, offset=offset, max_bytes=replica().limits.max_list_bytes, after=after,
    )
    return bounded_list([JobView.of(j) for j in jobs], replica().limits.max_list_bytes,
                        None if after is not None else offset, ids=[j.id for j in jobs],
                        full=len(jobs) >= limit)

@router.get(f"{API}/jobs/{{job_id}}", tags=["jobs"], response_model=JobView, responses=ERRORS)
def get_job(job_id: str, creds: Auth = None) -> JobView:
    """One job (404 when it is not the caller's)."""
    return JobView.of(service().get_job(caller(creds), job_id))

@router.post(f"{API}/jobs/{{job_id}}/cancel", tags=["jobs"], status_code=202, response_model=JobView, responses=ERRORS)
def cancel_job(job_id: str, creds: Auth = None) -> JobView:
    """Ask for cancellation; the controller stops the job and frees its nodes on its next tick."""
    return JobView.of(service().cancel_job(caller(creds), job_id))

@router.get(f"{API}/jobs/{{job_id}}/logs", tags=["jobs"], response_class=PlainTextResponse,
         responses=ERRORS)
def job_logs(job_id: str, creds: Auth = None) -> Response:
    """Every attempt's logs (stdout and stderr of the job's Ray jobs on the workload
    cluster), oldest first, each after a ``=== attempt N of JOB (replica R on node X) ===``
    line; empty before the first attempt starts. Each attempt's text only grows while its node
    lives (then an archived copy is served): follow it by an offset per attempt."""
    text = service().job_logs(caller(creds), job_id)
    return PlainTextResponse(text)

@router.get(f"{API}/jobs/{{job_id}}/events", tags=["jobs"], response_model=list[Event],
         responses=ERRORS | CURSOR_PAGE)
def job_events(job_id: str, creds: Auth = None, after: NumberAfter = None,
               limit: Limit = 1000) -> Response:
    """Every transition of the job with its cause, oldest first; paged by cursor (event id)."""
    events = service().job_events(caller(creds), job_id, after=after, limit=limit + 1)
    return paged(events, [str(e.id) for e in events], limit)

@router.get(f"{API}/jobs/{{job_id}}/decisions", tags=["jobs"], response_model=list[Decision],
         responses=ERRORS | CURSOR_PAGE)
def job_decisions(job_id: str, creds: Auth = None, after: NumberAfter = None,
                  limit: Limit = 1000) -> Response:
    """The decision trace: each policy decision with the observation it was made on,
    oldest first; paged by cursor (decision id)."""
    decisions = service().job_decisions(caller(creds), job_id, after=after,
                                           limit=limit + 1)
    return paged(decisions, [str(d.id) for d in decisions], limit)
