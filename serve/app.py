"""The HTTP API: one Ray Serve deployment with a FastAPI ingress (OpenAPI at ``/docs``).

``start_api(db_path, admin_token, port)`` binds Serve's HTTP proxy to ``port`` and deploys
:class:`SpotplaneAPI`; every handler authenticates the bearer token, then calls the
:class:`~controlplane.service.ControlPlaneService` (never SQLite directly). Errors map to HTTP:
InvalidInput 422 (field and fix), Unauthorized 401, Forbidden 403, NotFound 404 (also for other
tenants' things), Conflict 409.
"""


import logging
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

from fastapi import Body, FastAPI, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials
from ray import serve

from controlplane import __version__
from controlplane.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    SpotplaneError,
    Unauthorized,
)
from controlplane.models import (
    Bag,
    BagSpec,
    CostSummary,
    Decision,
    Event,
    ForecastRow,
    JobKind,
    JobSpec,
    JobState,
    Node,
    Quota,
    Tenant,
    TenantSpec,
    ZoneInfo,
)
from controlplane.service import ControlPlaneService, Forbidden, Principal
from serve.auth import bearer_scheme, bearer_token, hash_token
from serve.dashboard import router as dashboard_router
from serve.schemas import (
    AvailabilityRow,
    BagCreated,
    ClockView,
    CostReport,
    ErrorBody,
    FieldError,
    JobView,
    PriceRow,
    TenantCreated,
    clock_view,
    error_line,
    field_errors,
    job_spec_example,
)

log = logging.getLogger(__name__)

APP_NAME = "spotplane"
API = "/v1"

app = FastAPI(
    title="spotplane",
    version=__version__,
    description=(
        "Run many tenants' GPU jobs on spot capacity across clouds, cheaply and on time. "
        "Authenticate with `Authorization: Bearer <token>`: a tenant's token (from `POST /v1/tenants`) "
        "or the admin token printed by `spotplane up`."
    ),
)

app.include_router(dashboard_router)  # the web dashboard at /; before @serve.ingress copies the app

_api_lock = threading.Lock()


def _api_counts(request: Request) -> Counter[str]:
    """Per-replica API counters, exported at /metrics beside the store's gauges.

    Kept on ``app.state`` (not a module global): Serve ships the app to the replica by value,
    so the request's app is the one object every handler there shares.
    """
    state = request.app.state
    if not hasattr(state, "api_counts"):
        state.api_counts = Counter()
    counts: Counter[str] = state.api_counts
    return counts


def _count(request: Request, name: str, by: int = 1) -> None:
    with _api_lock:
        _api_counts(request)[name] += by


# --------------------------------------------------------------------------------------------
# Errors -> HTTP
# --------------------------------------------------------------------------------------------
def _unprocessable(request: Request, errors: list[FieldError]) -> JSONResponse:
    _count(request, 'api_errors_total{status="422"}')
    body = ErrorBody(message=error_line(errors[0]), fix=errors[0].fix, errors=errors)
    return JSONResponse(status_code=422, content=body.model_dump())


@app.exception_handler(RequestValidationError)
async def _on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    return _unprocessable(request, field_errors(exc.errors()))


_STATUS: list[tuple[type[SpotplaneError], int]] = [
    (InvalidInput, 422),
    (Unauthorized, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (Conflict, 409),
]


@app.exception_handler(SpotplaneError)
async def _on_spotplane_error(request: Request, exc: SpotplaneError) -> JSONResponse:
    if isinstance(exc, InvalidInput):
        message = exc.message.removeprefix(f"{exc.field}: ")
        return _unprocessable(request, [FieldError(field=exc.field, message=message, fix=exc.fix or "see /docs")])
    status = next((code for cls, code in _STATUS if isinstance(exc, cls)), 500)
    _count(request, f'api_errors_total{{status="{status}"}}')
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    body = ErrorBody(message=exc.message, fix=exc.fix)
    return JSONResponse(status_code=status, content=body.model_dump(), headers=headers)


Auth = Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)]
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or unknown token"},
    404: {"model": ErrorBody, "description": "not found (or another tenant's)"},
    422: {"model": ErrorBody, "description": "invalid input: names the field and the fix"},
}


# --------------------------------------------------------------------------------------------
# Prometheus text format
# --------------------------------------------------------------------------------------------
_NAME_OK = re.compile(r"[^a-zA-Z0-9_:]")


def prometheus_text(values: dict[str, float], prefix: str = "spotplane_") -> str:
    """Render ``{"name{label=\\"v\\"}": value}`` as Prometheus text exposition format 0.0.4."""
    families: dict[str, list[tuple[str, float]]] = {}
    for key, value in values.items():
        name, brace, labels = key.partition("{")
        name = prefix + _NAME_OK.sub("_", name)
        families.setdefault(name, []).append((f"{{{labels}" if brace else "", value))
    lines: list[str] = []
    for name in sorted(families):
        kind = "counter" if name.endswith("_total") else "gauge"
        lines.append(f"# HELP {name} spotplane {name.removeprefix(prefix).replace('_', ' ')}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in sorted(families[name]):
            lines.append(f"{name}{labels} {float(value)!r}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# The deployment
# --------------------------------------------------------------------------------------------
@serve.deployment(
    name="SpotplaneAPI",
    num_replicas=1,
    max_ongoing_requests=64,
    ray_actor_options={"num_cpus": 0},
)
@serve.ingress(app)
class SpotplaneAPI:
    """The API's one replica: owns a store connection and the admin token's hash."""

    def __init__(self, db_path: str, admin_token_hash: str) -> None:
        self.service = ControlPlaneService.open(db_path, admin_token_hash)
        self._started = time.monotonic()

    def _who(self, creds: HTTPAuthorizationCredentials | None, header: str | None = None) -> Principal:
        token = creds.credentials if creds is not None else bearer_token(header)
        return self.service.authenticate(token)

    # -- health and metrics --------------------------------------------------------------------
    @app.get("/healthz", tags=["ops"])
    async def healthz(self) -> dict[str, Any]:
        """Liveness: the store answers; no token needed."""
        health = self.service.health()
        health["uptime_s"] = round(time.monotonic() - self._started, 3)
        return health

    @app.get("/metrics", tags=["ops"], response_class=PlainTextResponse)
    async def metrics(self, request: Request) -> PlainTextResponse:
        """Counters and gauges in Prometheus text format; no token needed."""
        values = self.service.metrics()
        with _api_lock:
            values.update({k: float(v) for k, v in _api_counts(request).items()})
        return PlainTextResponse(prometheus_text(values), media_type="text/plain; version=0.0.4")

    @app.get(f"{API}/clock", tags=["ops"], response_model=ClockView)
    async def clock(self) -> ClockView:
        """The control plane's time (simulated on the simulated fleet)."""
        return clock_view(self.service.control_time())

    # -- tenants -------------------------------------------------------------------------------
    @app.post(f"{API}/tenants", tags=["tenants"], status_code=201, response_model=TenantCreated, responses=_ERRORS)
    async def create_tenant(self, spec: TenantSpec, creds: Auth = None) -> TenantCreated:
        """Admin: create a tenant; the answer holds its token, shown only this once."""
        tenant, token = self.service.create_tenant(self._who(creds), spec)
        return TenantCreated(tenant=tenant, token=token)

    @app.get(f"{API}/tenants", tags=["tenants"], response_model=list[Tenant], responses=_ERRORS)
    async def list_tenants(self, creds: Auth = None) -> list[Tenant]:
        """Every tenant (admin) or just the caller."""
        return self.service.list_tenants(self._who(creds))

    @app.get(f"{API}/tenants/me", tags=["tenants"], response_model=Tenant, responses=_ERRORS)
    async def me(self, creds: Auth = None) -> Tenant:
        return self.service.me(self._who(creds))

    # -- jobs ----------------------------------------------------------------------------------
    @app.post(f"{API}/jobs", tags=["jobs"], status_code=201, response_model=JobView, responses=_ERRORS)
    async def submit_job(
        self,
        request: Request,
        spec: Annotated[JobSpec, Body(openapi_examples={"deadline": {"value": job_spec_example()}})],
        creds: Auth = None,
        tenant_id: Annotated[str | None, Query(description="admin only: submit for this tenant")] = None,
    ) -> JobView:
        """Submit one job; it is PENDING until the controller's next tick queues it."""
        job = self.service.submit_job(self._who(creds), spec, tenant_id)
        _count(request, "api_jobs_submitted_total")
        return JobView.of(job)

    @app.get(f"{API}/jobs", tags=["jobs"], response_model=list[JobView], responses=_ERRORS)
    async def list_jobs(
        self,
        creds: Auth = None,
        state: Annotated[list[JobState] | None, Query(description="repeat for several")] = None,
        kind: JobKind | None = None,
        bag_id: str | None = None,
        tenant_id: Annotated[str | None, Query(description="admin only")] = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> list[JobView]:
        """The caller's jobs (every tenant's for the admin), oldest first."""
        jobs = self.service.list_jobs(
            self._who(creds), state=state, kind=kind, bag_id=bag_id, tenant_id=tenant_id,
            limit=limit, offset=offset,
        )
        return [JobView.of(j) for j in jobs]

    @app.get(f"{API}/jobs/{{job_id}}", tags=["jobs"], response_model=JobView, responses=_ERRORS)
    async def get_job(self, job_id: str, creds: Auth = None) -> JobView:
        return JobView.of(self.service.get_job(self._who(creds), job_id))

    @app.post(f"{API}/jobs/{{job_id}}/cancel", tags=["jobs"], status_code=202, response_model=JobView, responses=_ERRORS)
    async def cancel_job(self, job_id: str, creds: Auth = None) -> JobView:
        """Ask for cancellation; the controller stops the job and frees its nodes on its next tick."""
        return JobView.of(self.service.cancel_job(self._who(creds), job_id))

    @app.get(f"{API}/jobs/{{job_id}}/events", tags=["jobs"], response_model=list[Event], responses=_ERRORS)
    async def job_events(self, job_id: str, creds: Auth = None) -> list[Event]:
        """Every transition of the job with its cause."""
        return self.service.job_events(self._who(creds), job_id)

    @app.get(f"{API}/jobs/{{job_id}}/decisions", tags=["jobs"], response_model=list[Decision], responses=_ERRORS)
    async def job_decisions(self, job_id: str, creds: Auth = None) -> list[Decision]:
        """The decision trace: each policy decision with the observation it was made on."""
        return self.service.job_decisions(self._who(creds), job_id)

    # -- bags ----------------------------------------------------------------------------------
    @app.post(f"{API}/bags", tags=["bags"], status_code=201, response_model=BagCreated, responses=_ERRORS)
    async def submit_bag(
        self,
        request: Request,
        spec: BagSpec,
        creds: Auth = None,
        tenant_id: Annotated[str | None, Query(description="admin only: submit for this tenant")] = None,
    ) -> BagCreated:
        """Many parameter sets of one entrypoint: one job each, one runtime estimate learned."""
        bag, jobs = self.service.submit_bag(self._who(creds), spec, tenant_id)
        _count(request, "api_jobs_submitted_total", len(jobs))
        return BagCreated(bag=bag, job_ids=[j.id for j in jobs])

    @app.get(f"{API}/bags", tags=["bags"], response_model=list[Bag], responses=_ERRORS)
    async def list_bags(self, creds: Auth = None) -> list[Bag]:
        return self.service.list_bags(self._who(creds))

    @app.get(f"{API}/bags/{{bag_id}}", tags=["bags"], response_model=Bag, responses=_ERRORS)
    async def get_bag(self, bag_id: str, creds: Auth = None) -> Bag:
        return self.service.get_bag(self._who(creds), bag_id)

    # -- fleet ---------------------------------------------------------------------------------
    @app.get(f"{API}/fleet/nodes", tags=["fleet"], response_model=list[Node], responses=_ERRORS)
    async def nodes(self, creds: Auth = None, live: bool = False) -> list[Node]:
        """Every node (admin) or the nodes running the caller's jobs; ``live`` drops gone ones."""
        return self.service.nodes(self._who(creds), live_only=live)

    @app.get(f"{API}/fleet/zones", tags=["fleet"], response_model=list[ZoneInfo], responses=_ERRORS)
    async def zones(self, creds: Auth = None) -> list[ZoneInfo]:
        self._who(creds)
        return self.service.zones()

    @app.get(f"{API}/fleet/prices", tags=["fleet"], response_model=list[PriceRow], responses=_ERRORS)
    async def prices(self, creds: Auth = None) -> list[PriceRow]:
        """Spot and on-demand price per hour of every (zone, instance type), and the discount."""
        self._who(creds)
        return [PriceRow.of(z) for z in self.service.zones()]

    @app.get(f"{API}/fleet/availability", tags=["fleet"], response_model=list[AvailabilityRow], responses=_ERRORS)
    async def availability(self, creds: Auth = None) -> list[AvailabilityRow]:
        """Whether spot can be had in each zone now (as of the controller's last tick)."""
        self._who(creds)
        return [
            AvailabilityRow(cloud=z.cloud, zone=z.zone, instance_type=z.instance_type,
                            spot_available=z.spot_available, updated_at=z.updated_at)
            for z in self.service.zones()
        ]

    # -- quotas, forecasts, cost ---------------------------------------------------------------
    @app.get(f"{API}/quotas", tags=["capacity"], response_model=list[Quota], responses=_ERRORS)
    async def quotas(self, creds: Auth = None) -> list[Quota]:
        """Spot quota per pool and GPU model (GFS spot quota allocator)."""
        self._who(creds)
        return self.service.quotas()

    @app.get(f"{API}/forecasts", tags=["capacity"], response_model=list[ForecastRow], responses=_ERRORS)
    async def forecasts(self, creds: Auth = None) -> list[ForecastRow]:
        """Demand forecasts per tenant (the caller's own; every tenant's for the admin)."""
        return self.service.forecasts(self._who(creds))

    @app.get(f"{API}/cost", tags=["cost"], response_model=CostReport, responses=_ERRORS)
    async def cost(self, creds: Auth = None) -> CostReport:
        """Spend per tenant against the on-demand-only counterfactual (same GPU hours)."""
        rows: list[CostSummary] = self.service.cost(self._who(creds))
        return CostReport.of(rows)


# --------------------------------------------------------------------------------------------
# Start / stop
# --------------------------------------------------------------------------------------------
def build_app(db_path: str | Path, admin_token: str) -> Any:
    """The deployment graph, bound to the store at ``db_path`` and the admin token's hash."""
    return SpotplaneAPI.bind(str(db_path), hash_token(admin_token))  # type: ignore[attr-defined]


def start_api(db_path: str | Path, admin_token: str, port: int, host: str = "127.0.0.1") -> str:
    """Start Serve's HTTP proxy on ``host:port`` and deploy the API; returns its base URL.

    Needs ``ray.init`` first. When Serve already runs in this Ray cluster its HTTP options stay
    as they were (Serve's rule), so the returned URL is read back from Serve itself.
    """
    serve.start(http_options={"host": host, "port": port})
    serve.run(build_app(db_path, admin_token), name=APP_NAME, route_prefix="/", blocking=False)
    return f"http://{host}:{port}"


def stop_api(shutdown_serve: bool = True) -> None:
    """Remove the API application (and Serve itself unless told otherwise)."""
    try:
        serve.delete(APP_NAME)
    except Exception as exc:  # noqa: BLE001 - already gone is fine
        log.debug("serve.delete: %s", exc)
    if shutdown_serve:
        serve.shutdown()


__all__ = ["APP_NAME", "SpotplaneAPI", "app", "build_app", "prometheus_text", "start_api", "stop_api"]
