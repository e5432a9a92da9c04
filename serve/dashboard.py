"""The web dashboard: its page at ``/`` and the read-only views it needs beyond the plain API.

The page (``serve/static``: one HTML file, one hand-written script, one stylesheet; no CDN) keeps
the caller's token in ``sessionStorage`` and reads everything through ``/v1`` with it, so a tenant
sees exactly what the API lets it see. The views here are typed and scoped like every handler:
a sorted, filtered page of jobs with its total, the overview's counts and node history, one job's
timeline of attempts, recent preemptions, and the GPU pools' capacity history.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse, HTMLResponse
from pydantic import BaseModel

from controlplane.core.errors import NotFound
from controlplane.core.models import Event, Job, JobKind, JobState, Node
from controlplane.core.readmodels import CapacityPoint
from controlplane.core.units import HOUR
from serve.auth import Auth, authenticated
from serve.schemas import (
    ERROR_CODES,
    ID_CURSOR,
    MAX_CURSOR,
    MAX_OFFSET,
    CostReport,
    declared_errors,
)

STATIC = Path(__file__).with_name("static")
ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css",
          "bills.js": "text/javascript",
          "fairshare.js": "text/javascript",
          "clusters.js": "text/javascript"}
HISTORY_POINTS = 48

SortKey = Literal["submitted", "name", "state", "kind", "tenant", "cost", "preemptions",
                  "checkpoints", "progress", "slack"]

router = APIRouter(responses=declared_errors(*ERROR_CODES))  # the gate answers these too


class JobRow(BaseModel):
    """One row of the jobs table."""

    id: str
    name: str
    tenant_id: str
    kind: JobKind
    state: JobState
    progress_fraction: float
    cost: float
    on_demand_cost: float
    preemptions: int
    checkpoints: int
    slack_hours: float | None  # deadline jobs: hours to the deadline beyond the work left
    zone: str | None
    market: str | None
    submitted_at: float

    @classmethod
    def of(cls, job: Job, now: float) -> JobRow:
        c = job.spec.compute_hours
        slack = None
        if job.deadline_at is not None:
            slack = round((job.deadline_at - now) / HOUR - max(c - job.progress_hours, 0.0), 4)
        return cls(id=job.id, name=job.name, tenant_id=job.tenant_id, kind=job.kind, state=job.state,
                   progress_fraction=min(1.0, job.progress_hours / c) if c > 0 else 0.0,
                   cost=job.cost, on_demand_cost=job.on_demand_cost, preemptions=job.preemptions,
                   checkpoints=job.checkpoints, slack_hours=slack, zone=job.zone,
                   market=job.market.value if job.market else None, submitted_at=job.submitted_at)


class JobPage(BaseModel):
    """A page of the jobs table: its rows, how many jobs match, and the control time."""

    total: int
    offset: int
    limit: int
    now: float
    items: list[JobRow]
    next_after: str | None = None  # the cursor of the next page (a full page)


class NodeCount(BaseModel):
    cloud: str
    zone: str
    market: str
    nodes: int


class NodeHistory(BaseModel):
    """Live nodes per ``cloud/market`` at ``times`` (control-plane seconds)."""

    times: list[float]
    series: dict[str, list[int]]


class Overview(BaseModel):
    now: float
    jobs_by_state: dict[str, int]
    nodes_now: list[NodeCount]
    node_history: NodeHistory
    cost: CostReport


class Segment(BaseModel):
    """One stretch of a job's life in one state, with the nodes (and zone) it held."""

    state: str
    start: float
    end: float
    cause: str
    node_ids: list[str]
    zone: str | None
    market: str | None


# --------------------------------------------------------------------------------------------
# The page and its assets
# --------------------------------------------------------------------------------------------
@router.get("/", include_in_schema=False, response_class=HTMLResponse)
def index() -> HTMLResponse:
    """The dashboard's single page (it logs in and reads ``/v1`` itself)."""
    return HTMLResponse((STATIC / "index.html").read_text(), headers={"Cache-Control": "no-cache"})


@router.get("/dashboard/{asset}", include_in_schema=False)
def asset(asset: str) -> FileResponse:
    if asset not in ASSETS:
        raise NotFound(f"dashboard asset {asset} not found", fix=f"one of {', '.join(ASSETS)}")
    return FileResponse(STATIC / asset, media_type=ASSETS[asset], headers={"Cache-Control": "no-cache"})


# --------------------------------------------------------------------------------------------
# Views
# --------------------------------------------------------------------------------------------
@router.get("/v1/dashboard/jobs", tags=["dashboard"], response_model=JobPage)
def job_page(
    creds: Auth = None,
    state: Annotated[list[JobState] | None, Query(description="repeat for several")] = None,
    kind: JobKind | None = None,
    tenant_id: Annotated[str | None, Query(description="admin only")] = None,
    q: Annotated[str | None, Query(max_length=128, description="part of the job's id or name")] = None,
    sort: SortKey = "submitted",
    desc: bool = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    after: Annotated[str | None, Query(min_length=1, max_length=MAX_CURSOR, pattern=ID_CURSOR, description=(
        "cursor: the page starts past this job in the page's order (next_after of the previous "
        "page); `offset` then only numbers the rows"))] = None,
) -> JobPage:
    """One sorted, filtered page of the caller's jobs (every tenant's for the admin) and the total."""
    service, who = authenticated(creds)
    total, jobs = service.job_page(who, states=state, kind=kind, tenant_id=tenant_id, text=q,
                                   order_by=sort, descending=desc, limit=limit,
                                   offset=0 if after is not None else offset, after=after)
    now = service.control_time()
    cursor = jobs[-1].id if len(jobs) == limit else None
    return JobPage(total=total, offset=offset, limit=limit, now=now,
                   items=[JobRow.of(j, now) for j in jobs], next_after=cursor)


@router.get("/v1/dashboard/overview", tags=["dashboard"], response_model=Overview)
def overview(creds: Auth = None) -> Overview:
    """Jobs per state, nodes now by cloud/zone/market and over time, spend against on-demand."""
    service, who = authenticated(creds)
    now = service.control_time()
    nodes = service.nodes(who)
    counts: dict[tuple[str, str, str], int] = {}
    for n in nodes:
        if not n.gone:
            key = (n.cloud, n.zone, n.market.value)
            counts[key] = counts.get(key, 0) + 1
    return Overview(
        now=now, jobs_by_state=service.job_counts(who),
        nodes_now=[NodeCount(cloud=c, zone=z, market=m, nodes=k) for (c, z, m), k in sorted(counts.items())],
        node_history=node_history(nodes, now), cost=CostReport.of(service.cost(who)))


def node_history(nodes: list[Node], now: float, points: int = HISTORY_POINTS) -> NodeHistory:
    """Nodes alive (ready, not yet ended) per ``cloud/market`` at ``points`` evenly spaced times."""
    spans = [(n.ready_at, n.ended_at if n.ended_at is not None else now, f"{n.cloud}/{n.market.value}")
             for n in nodes if n.ready_at is not None]
    if not spans:
        return NodeHistory(times=[], series={})
    start = min(s for s, _, _ in spans)
    step = max(now - start, 1.0) / max(points - 1, 1)
    times = [start + i * step for i in range(points)]
    series = {key: [0] * points for key in sorted({k for _, _, k in spans})}
    for s, e, key in spans:
        for i, t in enumerate(times):
            if s <= t <= e:
                series[key][i] += 1
    return NodeHistory(times=times, series=series)


@router.get("/v1/dashboard/jobs/{job_id}/timeline", tags=["dashboard"], response_model=list[Segment])
def timeline(job_id: str, creds: Auth = None) -> list[Segment]:
    """The job's states over time from its transition events, each with the nodes it held."""
    service, who = authenticated(creds)
    job = service.get_job(who, job_id)
    events = service.job_events(who, job_id)
    nodes = {n.id: n for n in service.job_nodes(who, job_id)}
    end = job.finished_at if job.finished_at is not None else service.control_time()
    return segments(events, nodes, end)


HOLDING = frozenset({JobState.STARTING.value, JobState.RUNNING.value, JobState.CHECKPOINTING.value})


def segments(events: list[Event], nodes: dict[str, Node], end: float) -> list[Segment]:
    """Cut a job's events into one segment per state it entered, up to ``end``; a segment in a
    state that holds nodes lists the job's nodes alive during it (their zone and market)."""
    moves = [e for e in events if e.kind == "transition" and e.dst]
    out: list[Segment] = []
    for i, e in enumerate(moves):
        stop = moves[i + 1].at if i + 1 < len(moves) else max(end, e.at)
        held = sorted(n.id for n in nodes.values() if e.dst in HOLDING and n.requested_at < stop
                      and (n.ended_at is None or n.ended_at > e.at)) if e.dst in HOLDING else []
        zones = {nodes[n].zone for n in held}
        markets = {nodes[n].market.value for n in held}
        out.append(Segment(state=str(e.dst), start=e.at, end=stop, cause=e.cause, node_ids=held,
                           zone=zones.pop() if len(zones) == 1 else None,
                           market=markets.pop() if len(markets) == 1 else None))
    return out


@router.get("/v1/dashboard/preemptions", tags=["dashboard"], response_model=list[Event])
def preemptions(creds: Auth = None, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[Event]:
    """The newest preemptions of the caller's jobs (every tenant's for the admin)."""
    service, who = authenticated(creds)
    return service.recent_preemptions(who, limit)


class CapacityHistory(BaseModel):
    """Capacity points oldest first, and the cursor that fetches the points after them."""

    items: list[CapacityPoint]
    next_cursor: int | None  # pass as ``after`` to get newer points; None: no point yet


@router.get("/v1/capacity/history", tags=["capacity"], response_model=CapacityHistory)
def capacity_history(
    creds: Auth = None,
    accelerator: Annotated[str | None, Query(min_length=1, max_length=64,
                                             description="one GPU pool, e.g. V100")] = None,
    after: Annotated[int | None, Query(ge=0, le=MAX_OFFSET, description=(
        "cursor: only points newer than it (a previous answer's next_cursor); "
        "without it the newest `limit` points"))] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> CapacityHistory:
    """Per GPU pool over time: forecast HP demand and its upper bound (admin only; null for a
    tenant), capacity, spot quota, guarantee hours H and eta, one point per quota refresh."""
    service, who = authenticated(creds)
    items = service.capacity_history(who, accelerator=accelerator, after=after, limit=limit)
    cursor = items[-1].id if items else after
    return CapacityHistory(items=items, next_cursor=cursor)


__all__ = ["HOLDING", "CapacityHistory", "JobPage", "JobRow", "Overview", "Segment", "node_history", "router", "segments"]

