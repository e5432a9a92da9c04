"""The HTTP API: one Ray Serve deployment with a FastAPI ingress (OpenAPI at ``/docs``).

``start_api(db_path, admin_token, port)`` binds Serve's HTTP proxy to ``port`` and deploys
:class:`SpotplaneAPI`; every handler authenticates the bearer token, then calls the
:class:`~serve.service.ControlPlaneService` (never SQLite directly). Errors map to HTTP:
InvalidInput 422 (field and fix), Unauthorized 401, Forbidden 403, NotFound 404 (also for other
tenants' things), Conflict 409, body too large 413, RateLimited 429 (with Retry-After); every
one of them, FastAPI's and Starlette's included, has the one :class:`ErrorBody`.

:class:`Gate`, an ASGI middleware, runs before any body is read: it checks the token (401),
the tenant's request rate (429) and the declared body size (413), and caps a chunked body as it
streams in, so an unauthenticated or oversized post costs nothing.
"""


import hmac
import logging
import threading
import time
import types
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

import ray
from fastapi import Body, Depends, FastAPI, Header, HTTPException, Query, Request, Security
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, ValidationError
from ray import serve
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from clusters.packages import PackageStore, package_name
from clusters.rayjobs import LogArchive
from controlplane import __version__
from controlplane.core.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    RateLimited,
    SpotplaneError,
    Unauthorized,
    UnknownReference,
)
from controlplane.core.models import (
    PACKAGE_NAME,
    Bag,
    BagSpec,
    CostSummary,
    Decision,
    Event,
    ForecastRow,
    Job,
    JobKind,
    JobSpec,
    JobState,
    Node,
    Quota,
    Tenant,
    TenantSpec,
    ZoneInfo,
)
from controlplane.store import LOGS, PACKAGES, StoredAnswer, is_postgres, open_blobs
from serve.auth import bearer_scheme, bearer_token, hash_token
from serve.dashboard import router as dashboard_router
from serve.fairness import MAX_ONGOING_REQUESTS, InFlight, share_the_gil
from serve.limits import ApiLimits, TokenBuckets, retry_after_header
from serve.metrics import CONTENT_TYPE, ApiMetrics
from serve.rayjobs import router as ray_jobs_router
from serve.schemas import (
    ERROR_CODES,
    ID_CURSOR,
    MAX_CURSOR,
    MAX_OFFSET,
    NUMBER_CURSOR,
    AvailabilityRow,
    BagCreated,
    ClockView,
    CostReport,
    ErrorBody,
    FieldError,
    JobView,
    PackageView,
    PriceRow,
    TenantCreated,
    clock_view,
    declared_errors,
    error_line,
    field_errors,
    job_spec_example,
)
from serve.service import Caps, ControlPlaneService, Principal, Workload

log = logging.getLogger(__name__)

APP_NAME = "spotplane"
API = "/v1"

_QUERY_NAMES: dict[int, tuple[frozenset[str], frozenset[str]]] = {}


def _is_sequence(annotation: Any) -> bool:
    """Whether a query parameter's type takes several values (``list[X] | None`` does)."""
    origin = get_origin(annotation)
    if origin in (list, tuple, set, frozenset):
        return True
    if origin is Annotated:
        return _is_sequence(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return any(_is_sequence(a) for a in get_args(annotation))
    return False


def _query_names(route: Any) -> tuple[frozenset[str], frozenset[str]]:
    """The query parameters a route declares (its own and its dependencies') and those of them
    that take one value, cached per route."""
    known = _QUERY_NAMES.get(id(route))
    if known is not None:
        return known
    names: set[str] = set()
    single: set[str] = set()
    stack = [route.dependant]
    while stack:
        dependant = stack.pop()
        for p in dependant.query_params:
            names.add(p.alias)
            if not _is_sequence(p.field_info.annotation):
                single.add(p.alias)
        stack.extend(dependant.dependencies)
    known = _QUERY_NAMES[id(route)] = (frozenset(names), frozenset(single))
    return known


async def refuse_unknown_query(request: HTTPConnection) -> None:
    """Strict query strings: a parameter the route does not take is a 422, not silently ignored
    (``?stat=RUNNING`` would otherwise list every job), and so is a one-value parameter given
    twice (``?tenant_id=a&tenant_id=b`` would otherwise take the last)."""
    route = request.scope.get("route")
    if route is None or not request.query_params:
        return
    known, single = _query_names(route)
    errors = [{"type": "extra_forbidden", "loc": ("query", k), "msg": "unknown query parameter"}
              for k in request.query_params if k not in known]
    errors += [{"type": "repeated_parameter", "loc": ("query", k),
                "msg": "is given more than once"}
               for k in sorted(set(request.query_params))
               if k in single and len(request.query_params.getlist(k)) > 1]
    if errors:
        raise RequestValidationError(errors)


app = FastAPI(
    dependencies=[Depends(refuse_unknown_query)],
    title="spotplane",
    version=__version__,
    description=(
        "Run many tenants' GPU jobs on spot capacity across clouds, cheaply and on time. "
        "Authenticate with `Authorization: Bearer <token>`: a tenant's token (from `POST /v1/tenants`) "
        "or the admin token in the file `spotplane up` names (STATE/admin-token)."
    ),
)

app.include_router(dashboard_router)  # the web dashboard at /; before @serve.ingress copies the app
app.include_router(ray_jobs_router)  # Ray's Jobs REST API (/api/...), for Ray's own clients

_api_lock = threading.Lock()
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


def _api_metrics(request: Request) -> ApiMetrics:
    """This replica's request metrics, exported at /metrics beside the store's families.

    Kept on ``app.state`` (not a module global): Serve ships the app to the replica by value,
    so the request's app is the one object every handler there shares.
    """
    state = request.app.state
    with _api_lock:
        if not hasattr(state, "api_metrics"):
            state.api_metrics = ApiMetrics()
    found: ApiMetrics = state.api_metrics
    return found


async def _measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """Count every request by route template and status, and time it."""
    t0 = time.perf_counter()
    status = 500
    try:
        response = await call_next(request)
        status = response.status_code
        if Gate.state is not None and Gate.state.replica:
            response.headers[REPLICA_HEADER] = Gate.state.replica
        return response
    finally:
        route = getattr(request.scope.get("route"), "path", None) or "unmatched"
        method = request.method if request.method in _METHODS else "other"
        _api_metrics(request).record(route, method, status, time.perf_counter() - t0)


MAX_LIST_LIMIT = 10_000  # the largest `limit` of GET /v1/jobs (the byte cap binds first)
TRUNCATED_HEADER = "X-Spotplane-Truncated"
NEXT_OFFSET_HEADER = "X-Spotplane-Next-Offset"
NEXT_AFTER_HEADER = "X-Spotplane-Next-After"
IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLICA_HEADER = "X-Spotplane-Replica"  # the Serve replica that answered (every response)
HEALTH_CHECK_PERIOD_S = 2.0  # the API replica's Serve health check (see the deployment)
PUBLIC_PATHS = frozenset({"/healthz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json",
                          "/"})  # "/" and /dashboard/* are the dashboard's page and assets
PUBLIC_PREFIXES = ("/dashboard/",)
PACKAGE_PATHS = (f"{API}/packages/", "/api/packages/")
# admin-only routes, refused to a tenant by the gate before the body is read (what each does)
ADMIN_ROUTES = {("POST", f"{API}/tenants"): "creating a tenant"}


# --------------------------------------------------------------------------------------------
# Errors -> HTTP: one body for every 4xx/5xx
# --------------------------------------------------------------------------------------------
def error_response(asgi_app: Any, status: int, message: str, fix: str | None = None,
                   errors: Sequence[FieldError] = (), headers: dict[str, str] | None = None) -> JSONResponse:
    """The API's error body with ``status`` (counted by the request metrics' middleware)."""
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    body = ErrorBody(message=message, fix=fix, errors=list(errors))
    return JSONResponse(status_code=status, content=body.model_dump(), headers=headers)


def _unprocessable(request: Request, errors: list[FieldError]) -> JSONResponse:
    return error_response(request.app, 422, error_line(errors[0]), errors[0].fix, errors)


@app.exception_handler(RequestValidationError)
async def _on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    return _unprocessable(request, field_errors(exc.errors()))


@app.exception_handler(ValidationError)
async def _on_model_error(request: Request, exc: ValidationError) -> JSONResponse:
    """A domain model refusing a value past the door (defence in depth): still a 422."""
    return _unprocessable(request, field_errors(exc.errors()))


_STATUS: list[tuple[type[SpotplaneError], int]] = [
    (InvalidInput, 422),
    (Unauthorized, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (Conflict, 409),
    (RateLimited, 429),
]


def spotplane_error_response(asgi_app: Any, exc: SpotplaneError) -> JSONResponse:
    """The HTTP answer to one of spotplane's own errors."""
    if isinstance(exc, InvalidInput):
        message = exc.message.removeprefix(f"{exc.field}: ")
        err = FieldError(field=exc.field, message=message, fix=exc.fix or "see /docs")
        return error_response(asgi_app, 422, error_line(err), err.fix, [err])
    status = next((code for cls, code in _STATUS if isinstance(exc, cls)), 500)
    headers = None
    if isinstance(exc, RateLimited):
        headers = {"Retry-After": retry_after_header(exc.retry_after_s)}
    errors = []
    if isinstance(exc, UnknownReference):
        errors = [FieldError(field=exc.field, message=exc.message.removeprefix(f"{exc.field}: "),
                             fix=exc.fix or "see /docs")]
    return error_response(asgi_app, status, exc.message, exc.fix, errors, headers=headers)


@app.exception_handler(SpotplaneError)
async def _on_spotplane_error(request: Request, exc: SpotplaneError) -> JSONResponse:
    return spotplane_error_response(request.app, exc)


_HTTP_FIX = {
    404: "see the routes at /docs",
    405: "see the methods of this route at /docs",
    413: "send a smaller body (split a bag into several)",
    415: "send the zip as application/zip",
}


def path_methods(routes: Sequence[Any], path: str) -> set[str]:
    """Every method some route of ``routes`` (included routers' too) answers at ``path``."""
    methods: set[str] = set()
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            prefix = route.include_context.prefix
            if path.startswith(prefix):
                methods |= path_methods(included.routes, path.removeprefix(prefix))
        elif getattr(route, "methods", None) and route.path_regex.match(path):
            methods |= set(route.methods)
    return methods


def allow_header(request: Request) -> str:
    """``Allow`` of a 405: the methods of every route of the path, not only the first one's."""
    return ", ".join(sorted(path_methods(request.app.router.routes, request.url.path)))


@app.exception_handler(StarletteHTTPException)
async def _on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Starlette's and FastAPI's own errors (unknown route, wrong method, too large)."""
    if exc.status_code == 400:  # a body FastAPI could not decode (not UTF-8 JSON): bad input
        err = FieldError(field="body", message=f"cannot be read: {exc.detail}",
                         fix="send a UTF-8 JSON object with the fields listed at /docs")
        return _unprocessable(request, [err])
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = allow_header(request) or headers.get("Allow", "")
    return error_response(request.app, exc.status_code, str(exc.detail),
                          _HTTP_FIX.get(exc.status_code), headers=headers or None)


@app.exception_handler(Exception)
async def _on_crash(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(request.app, 500, "internal error", "retry; if it persists, report it")


Auth = Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)]


_ERRORS = declared_errors(*ERROR_CODES)
_LIST_HEADERS = {
    TRUNCATED_HEADER: {"description": "present when the byte cap cut the list short",
                       "schema": {"type": "string"}},
}
_CURSOR_PAGE: dict[int | str, dict[str, Any]] = {200: {"description": "one page, oldest first", "headers": {
    **_LIST_HEADERS, NEXT_AFTER_HEADER: {"description": "`after` of the next page, while one follows",
                                         "schema": {"type": "string"}}}}}
After = Annotated[str | None, Query(min_length=1, max_length=MAX_CURSOR, pattern=ID_CURSOR, description=(
    "cursor: the id of the last item of the previous page (X-Spotplane-Next-After)"))]
NumberAfter = Annotated[str | None, Query(pattern=NUMBER_CURSOR, description=(
    "cursor: the id (a number) of the last item of the previous page (X-Spotplane-Next-After)"))]
PackageName = Annotated[str, PathParam(pattern=PACKAGE_NAME, description=(
    "Ray's content-addressed name of the zip: _ray_pkg_<hex hash>.zip"))]
Limit = Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)]


def bounded_list(items: Sequence[BaseModel], max_bytes: int, offset: int | None = None, *,
                 ids: Sequence[str] | None = None, full: bool = False) -> Response:
    """A JSON array of ``items``, cut before it passes ``max_bytes`` (at least one item kept);
    a cut answer says so in its headers, with the offset to continue from when paged. With
    ``ids`` (the items' ids), a cut or ``full`` page names its last id as the next cursor."""
    parts: list[bytes] = []
    size = 2
    for item in items:
        part = item.model_dump_json().encode()
        if parts and size + len(part) + 1 > max_bytes:
            break
        parts.append(part)
        size += len(part) + 1
    headers: dict[str, str] = {}
    if len(parts) < len(items):
        headers[TRUNCATED_HEADER] = "true"
        if offset is not None:
            headers[NEXT_OFFSET_HEADER] = str(offset + len(parts))
    if ids is not None and parts and (full or len(parts) < len(items)):
        headers[NEXT_AFTER_HEADER] = ids[len(parts) - 1]
    return Response(b"[" + b",".join(parts) + b"]", media_type="application/json", headers=headers)


# --------------------------------------------------------------------------------------------
# The gate: token, rate and size, before any body is read
# --------------------------------------------------------------------------------------------
class _BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes")


class Gate:
    """ASGI middleware: 401 / 429 / 413 before the body is read; caps a streamed body.

    The replica installs its :class:`GateState` (service and limits) at start-up; the class
    holds it because Serve ships the FastAPI app to the replica by value while importing this
    module's classes by reference.
    """

    state: ClassVar["GateState | None"] = None

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["path"] in PUBLIC_PATHS
                or scope["path"].startswith(PUBLIC_PREFIXES)):
            await self.app(scope, receive, send)
            return
        gate = Gate.state
        answering = scope.get("app")
        if gate is None:
            await error_response(answering, 503, "the API is starting", "retry in a few seconds",
                                 headers={"Retry-After": "1"})(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            tenant = await gate.admit(scope["path"], bearer_token(headers.get("authorization")),
                                      scope["method"])
            gate.check_length(headers.get("content-length"), scope["path"])
            held = await gate.in_flight.acquire(tenant)  # 429 past the tenant's requests in flight
        except SpotplaneError as exc:
            await spotplane_error_response(answering, exc)(scope, receive, send)
            return
        except HTTPException as exc:
            await error_response(answering, exc.status_code, str(exc.detail),
                                 _HTTP_FIX.get(exc.status_code))(scope, receive, send)
            return
        try:
            await self.app(scope, gate.capped(receive, scope["path"]), send)
        finally:
            held.release()


class GateState:
    """What the gate checks against: the service (tokens), the limits, the rate buckets."""

    def __init__(self, service: ControlPlaneService, limits: ApiLimits, shared: bool = False) -> None:
        self.service = service
        self.limits = limits
        # ``shared``: one bucket per tenant in the store, which every replica takes from (one
        # upsert per request), so N replicas still allow ``rate``, not N x rate; the embedded
        # single replica keeps its buckets in memory
        self.shared = shared
        self.buckets = TokenBuckets(limits.rate_per_s, limits.burst)
        self.in_flight = InFlight(limits.max_in_flight_per_tenant, wait_s=limits.in_flight_wait_s)
        self.replica, self.node_id = "", ""  # which replica answers (REPLICA_HEADER), on which Ray node

    async def admit(self, path: str, token: str | None, method: str = "GET") -> str | None:
        """Authenticate ``token`` for ``path``, take one from the tenant's rate bucket, and
        refuse a tenant an admin route (403 whatever the body); the tenant's id (None: admin
        or metrics). A token not seen before is looked up in the store off the event loop."""
        if path == "/metrics":
            await run_in_threadpool(self._metrics_token, token)
            return None
        principal = self.service.known(token)
        if principal is None:
            principal = await run_in_threadpool(self.service.authenticate, token)
        if principal.tenant_id is not None:
            if self.shared:
                wait = await run_in_threadpool(self._take_shared, principal.tenant_id)
            else:
                wait = self.buckets.take(principal.tenant_id)
            if wait > 0:
                raise RateLimited(
                    f"more than {self.limits.rate_per_s:g} requests/s (burst {self.limits.burst})",
                    retry_after_s=wait, fix="slow down and retry after the Retry-After seconds")
        admin_only = ADMIN_ROUTES.get((method, path))
        if admin_only is not None:
            ControlPlaneService.require_admin(principal, admin_only)
        return principal.tenant_id

    def _take_shared(self, tenant_id: str) -> float:
        return self.service.store.take_token(f"tenant:{tenant_id}", self.limits.rate_per_s,
                                             float(self.limits.burst), time.time())

    def _metrics_token(self, token: str | None) -> None:
        expected = self.limits.metrics_token_hash
        if token and expected and hmac_equal(hash_token(token), expected):
            return
        principal = self.service.authenticate(token)  # the admin may read metrics too
        ControlPlaneService.require_admin(principal, "/metrics")

    def limit_for(self, path: str) -> int:
        """The body cap of ``path``: uploaded code packages have their own."""
        if path.startswith(PACKAGE_PATHS):
            return self.limits.max_package_bytes
        return self.limits.max_body_bytes

    def check_length(self, content_length: str | None, path: str = "") -> None:
        if content_length is None:
            return
        limit = self.limit_for(path)
        if not content_length.strip().isdigit() or int(content_length) > limit:
            raise _BodyTooLarge(limit)

    def capped(self, receive: Receive, path: str = "") -> Receive:
        """``receive`` that raises 413 once the streamed body passes the cap."""
        limit = self.limit_for(path)
        seen = 0

        async def receive_capped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _BodyTooLarge(limit)
            return message

        return receive_capped


def replica_identity() -> tuple[str, str]:
    """This Serve replica's id and its Ray node's id ('' outside a replica)."""
    try:
        replica = str(serve.get_replica_context().replica_id.unique_id)
    except Exception:  # noqa: BLE001 - not inside a Serve replica (tests build the app bare)
        replica = ""
    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    return replica, node


def hmac_equal(a: str, b: str) -> bool:
    """Constant-time comparison of two token hashes."""
    return hmac.compare_digest(a.encode(), b.encode())


app.add_middleware(Gate)
app.middleware("http")(_measure)  # added last, so outermost: the gate's 401/413/429 are counted too


ZIP_TYPES = frozenset({"application/zip", "application/x-zip-compressed", "application/octet-stream"})
ZIP_BODY = {"requestBody": {"required": True, "description": (
    "the zip ray._private.runtime_env.packaging.create_package writes"), "content": {
        "application/zip": {"schema": {"type": "string", "format": "binary"}}}}}
_NOT_A_ZIP: dict[int | str, dict[str, Any]] = {
    413: {"description": "larger than the package cap"}, 415: declared_errors(415)[415]}
ADMIN_TENANT = "admin only: the tenant (id or name) to submit for; a tenant's token submits for itself"
IdempotencyKey = Annotated[str | None, Header(
    alias=IDEMPOTENCY_HEADER, min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+$",
    description="a client-chosen key (printable ASCII): a retry with the same key and body "
                "returns the first answer and creates nothing; another body -> 409")]


def _render_job(bag: Bag | None, jobs: Sequence[Job]) -> str:
    return JobView.of(jobs[0]).model_dump_json()


def _render_bag(bag: Bag | None, jobs: Sequence[Job]) -> str:
    assert bag is not None
    return BagCreated(bag=bag, job_ids=[j.id for j in jobs]).model_dump_json()


def _replayable(answer: StoredAnswer) -> Response:
    """The stored answer of an Idempotency-Key, byte for byte (marked when replayed)."""
    headers = {"Idempotent-Replayed": "true"} if answer.replayed else None
    return Response(answer.body, status_code=answer.status, media_type="application/json",
                    headers=headers)


# --------------------------------------------------------------------------------------------
# The deployment
# --------------------------------------------------------------------------------------------
@serve.deployment(
    name="SpotplaneAPI",
    num_replicas=1,
    max_ongoing_requests=MAX_ONGOING_REQUESTS,  # tenants share all but serve.fairness's reserve
    ray_actor_options={"num_cpus": 0},
    # a dead replica is noticed at its next health check (Serve's default: every 10 s); every
    # 2 s brings the API back sooner after a crash, for one cheap call per check
    health_check_period_s=HEALTH_CHECK_PERIOD_S,
)
@serve.ingress(app)
class SpotplaneAPI:
    """One replica of the API: owns its store connections, the admin token's hash and the
    limits. Handlers are plain ``def``: FastAPI runs them in its threadpool, off the event loop."""

    def __init__(self, db_path: str, admin_token_hash: str, limits: dict[str, Any] | None = None,
                 package_dir: str | None = None, workload_address: str | None = None,
                 workload_token_path: str | None = None, log_dir: str | None = None,
                 replicas: int = 1) -> None:
        self.limits = ApiLimits.model_validate(limits or {})
        share_the_gil()  # handlers are threads: a heavy one must not stall the short ones
        caps = Caps(max_jobs_in_flight=self.limits.max_jobs_in_flight, max_bag_jobs=self.limits.max_bag_jobs,
                    idempotency_ttl_s=self.limits.idempotency_ttl_s)
        self.service = ControlPlaneService.open(db_path, admin_token_hash, caps)
        # a PostgreSQL store holds the packages and archived logs too: every replica, on any
        # node, reads what another stored (a SQLite store keeps directories beside its file)
        base = self.service.base_store
        self.service.packages = PackageStore(open_blobs(package_dir, base, PACKAGES),
                                             self.limits.max_package_bytes)
        archive = LogArchive(open_blobs(log_dir, base, LOGS))
        self.service.workload = (Workload(workload_address, workload_token_path, archive)
                                 if workload_address else None)
        Gate.state = GateState(self.service, self.limits,
                               shared=replicas > 1 or is_postgres(db_path))
        self._started = time.monotonic()
        Gate.state.replica, Gate.state.node_id = replica_identity()

    def _who(self, creds: HTTPAuthorizationCredentials | None, header: str | None = None) -> Principal:
        token = creds.credentials if creds is not None else bearer_token(header)
        return self.service.authenticate(token)

    def _list(self, items: Sequence[BaseModel], offset: int | None = None) -> Response:
        return bounded_list(items, self.limits.max_list_bytes, offset)

    def _page(self, items: Sequence[BaseModel], ids: Sequence[str], limit: int) -> Response:
        """One cursor page from the store's ``limit + 1`` rows after the cursor (the extra row
        says that another page follows)."""
        more = len(items) > limit
        return bounded_list(items[:limit], self.limits.max_list_bytes, ids=ids[:limit], full=more)

    # -- health and metrics --------------------------------------------------------------------
    @app.get("/healthz", tags=["ops"])
    def healthz(self) -> dict[str, Any]:
        """Liveness: the store answers; no token needed."""
        health = self.service.health()
        health["uptime_s"] = round(time.monotonic() - self._started, 3)
        if Gate.state is not None:
            health["replica"], health["node_id"] = Gate.state.replica, Gate.state.node_id
        return health

    @app.get("/metrics", tags=["ops"], response_class=PlainTextResponse,
             responses=declared_errors(401, 403, 500))
    def metrics(self, request: Request, creds: Auth = None) -> Response:
        """Every family in Prometheus text format, for the operator (spend by tenant): the admin
        token or the metrics token (``SPOTPLANE_METRICS_TOKEN``) as a bearer token."""
        return Response(self.service.metrics_text(_api_metrics(request)), media_type=CONTENT_TYPE)

    @app.get(f"{API}/clock", tags=["ops"], response_model=ClockView, responses=_ERRORS)
    def clock(self, creds: Auth = None) -> ClockView:
        """The control plane's time (simulated on the simulated fleet)."""
        self._who(creds)
        return clock_view(self.service.control_time())

    # -- tenants -------------------------------------------------------------------------------
    @app.post(f"{API}/tenants", tags=["tenants"], status_code=201, response_model=TenantCreated, responses=_ERRORS)
    def create_tenant(self, spec: TenantSpec, creds: Auth = None) -> TenantCreated:
        """Admin only: create a tenant; the answer holds its token, shown only this once."""
        tenant, token = self.service.create_tenant(self._who(creds), spec)
        return TenantCreated(tenant=tenant, token=token)

    @app.get(f"{API}/tenants", tags=["tenants"], response_model=list[Tenant],
             responses=_ERRORS | _CURSOR_PAGE)
    def list_tenants(self, creds: Auth = None, after: After = None, limit: Limit = 1000) -> Response:
        """Every tenant (admin) or just the caller, oldest first; paged by cursor."""
        tenants = self.service.list_tenants(self._who(creds), after=after, limit=limit + 1)
        return self._page(tenants, [t.id for t in tenants], limit)

    @app.get(f"{API}/tenants/me", tags=["tenants"], response_model=Tenant, responses=_ERRORS)
    def me(self, creds: Auth = None) -> Tenant:
        """The calling tenant (403 for the admin token, which is no tenant)."""
        return self.service.me(self._who(creds))

    # -- jobs ----------------------------------------------------------------------------------
    @app.post(f"{API}/jobs", tags=["jobs"], status_code=201, response_model=JobView, responses=_ERRORS)
    def submit_job(
        self,
        request: Request,
        spec: Annotated[JobSpec, Body(openapi_examples={"deadline": {"value": job_spec_example()}})],
        creds: Auth = None,
        tenant_id: Annotated[str | None, Query(max_length=128, description=ADMIN_TENANT)] = None,
        idempotency_key: IdempotencyKey = None,
    ) -> Any:
        """Submit one job; it is PENDING until the controller's next tick queues it.

        With an ``Idempotency-Key`` a retry returns the first answer and creates nothing."""
        who = self._who(creds)
        if idempotency_key is None:
            job = self.service.submit_job(who, spec, tenant_id)
            return JobView.of(job)
        answer = self.service.submit_job_once(who, spec, idempotency_key, _render_job, tenant_id)
        return _replayable(answer)

    @app.get(f"{API}/jobs", tags=["jobs"], response_model=list[JobView], responses=_ERRORS | {
        200: {"description": "the jobs, oldest first", "headers": {
            **_LIST_HEADERS, NEXT_OFFSET_HEADER: {"description": "offset of the next page when cut",
                                                  "schema": {"type": "string"}},
            NEXT_AFTER_HEADER: {"description": "`after` of the next page, when one may follow",
                                "schema": {"type": "string"}}}}})
    def list_jobs(
        self,
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
        jobs = self.service.list_jobs(
            self._who(creds), state=state, kind=kind, bag_id=bag_id, tenant_id=tenant_id,
            limit=limit, offset=offset, max_bytes=self.limits.max_list_bytes, after=after,
        )
        return bounded_list([JobView.of(j) for j in jobs], self.limits.max_list_bytes,
                            None if after is not None else offset, ids=[j.id for j in jobs],
                            full=len(jobs) >= limit)

    @app.get(f"{API}/jobs/{{job_id}}", tags=["jobs"], response_model=JobView, responses=_ERRORS)
    def get_job(self, job_id: str, creds: Auth = None) -> JobView:
        """One job (404 when it is not the caller's)."""
        return JobView.of(self.service.get_job(self._who(creds), job_id))

    @app.post(f"{API}/jobs/{{job_id}}/cancel", tags=["jobs"], status_code=202, response_model=JobView, responses=_ERRORS)
    def cancel_job(self, job_id: str, creds: Auth = None) -> JobView:
        """Ask for cancellation; the controller stops the job and frees its nodes on its next tick."""
        return JobView.of(self.service.cancel_job(self._who(creds), job_id))

    @app.get(f"{API}/jobs/{{job_id}}/logs", tags=["jobs"], response_class=PlainTextResponse,
             responses=_ERRORS)
    def job_logs(self, job_id: str, creds: Auth = None) -> Response:
        """Every attempt's logs (stdout and stderr of the job's Ray jobs on the workload
        cluster), oldest first, each after a ``=== attempt N of JOB (replica R on node X) ===``
        line; empty before the first attempt starts. Each attempt's text only grows while its node
        lives (then an archived copy is served): follow it by an offset per attempt."""
        text = self.service.job_logs(self._who(creds), job_id)
        return PlainTextResponse(text)

    # -- packages ------------------------------------------------------------------------------
    @app.get(f"{API}/packages/{{name}}", tags=["packages"], response_model=PackageView,
             responses=_ERRORS)
    def package(self, name: PackageName, creds: Auth = None) -> PackageView:
        """Whether the caller's tenant holds the package ``name`` (404 when not)."""
        who = self._who(creds)
        store, tenant = self.service.package_store(who)
        return PackageView.of(name, store.size(tenant, package_name(name)), created=False)

    @app.put(f"{API}/packages/{{name}}", tags=["packages"], response_model=PackageView,
             responses=_ERRORS | _NOT_A_ZIP, openapi_extra=ZIP_BODY)
    @app.post(f"{API}/packages/{{name}}", tags=["packages"], response_model=PackageView,
              responses=_ERRORS | _NOT_A_ZIP, openapi_extra=ZIP_BODY)
    async def put_package(self, name: PackageName, request: Request,
                          creds: Auth = None) -> PackageView:
        """Upload one zip of a working directory under Ray's content-addressed name
        (``_ray_pkg_<hash>.zip``, ``get_uri_for_directory``); the same name again stores
        nothing. Jobs then name it as ``runtime_env.working_dir: gcs://<name>``."""
        who = await run_in_threadpool(self._who, creds)
        media = request.headers.get("content-type", "application/zip").split(";")[0].strip()
        if media.lower() not in ZIP_TYPES:
            raise HTTPException(415, f"a package is a zip, not {media or 'an empty type'}")
        data = await request.body()
        created = await run_in_threadpool(self.service.put_package, who, package_name(name), data)
        return PackageView.of(name, len(data), created=created)

    @app.get(f"{API}/jobs/{{job_id}}/events", tags=["jobs"], response_model=list[Event],
             responses=_ERRORS | _CURSOR_PAGE)
    def job_events(self, job_id: str, creds: Auth = None, after: NumberAfter = None,
                   limit: Limit = 1000) -> Response:
        """Every transition of the job with its cause, oldest first; paged by cursor (event id)."""
        events = self.service.job_events(self._who(creds), job_id, after=after, limit=limit + 1)
        return self._page(events, [str(e.id) for e in events], limit)

    @app.get(f"{API}/jobs/{{job_id}}/decisions", tags=["jobs"], response_model=list[Decision],
             responses=_ERRORS | _CURSOR_PAGE)
    def job_decisions(self, job_id: str, creds: Auth = None, after: NumberAfter = None,
                      limit: Limit = 1000) -> Response:
        """The decision trace: each policy decision with the observation it was made on,
        oldest first; paged by cursor (decision id)."""
        decisions = self.service.job_decisions(self._who(creds), job_id, after=after,
                                               limit=limit + 1)
        return self._page(decisions, [str(d.id) for d in decisions], limit)

    # -- bags ----------------------------------------------------------------------------------
    @app.post(f"{API}/bags", tags=["bags"], status_code=201, response_model=BagCreated, responses=_ERRORS)
    def submit_bag(
        self,
        request: Request,
        spec: BagSpec,
        creds: Auth = None,
        tenant_id: Annotated[str | None, Query(max_length=128, description=ADMIN_TENANT)] = None,
        idempotency_key: IdempotencyKey = None,
    ) -> Any:
        """Many parameter sets of one entrypoint: one job each, one runtime estimate learned."""
        who = self._who(creds)
        if idempotency_key is None:
            bag, jobs = self.service.submit_bag(who, spec, tenant_id)
            return BagCreated(bag=bag, job_ids=[j.id for j in jobs])
        answer = self.service.submit_bag_once(who, spec, idempotency_key, _render_bag, tenant_id)
        return _replayable(answer)

    @app.get(f"{API}/bags", tags=["bags"], response_model=list[Bag], responses=_ERRORS | _CURSOR_PAGE)
    def list_bags(self, creds: Auth = None, after: After = None, limit: Limit = 1000) -> Response:
        """The caller's bags (every tenant's for the admin), oldest first; paged by cursor."""
        bags = self.service.list_bags(self._who(creds), after=after, limit=limit + 1)
        return self._page(bags, [b.id for b in bags], limit)

    @app.get(f"{API}/bags/{{bag_id}}", tags=["bags"], response_model=Bag, responses=_ERRORS)
    def get_bag(self, bag_id: str, creds: Auth = None) -> Bag:
        """One bag with its learned runtime estimate (404 when it is not the caller's)."""
        return self.service.get_bag(self._who(creds), bag_id)

    # -- fleet ---------------------------------------------------------------------------------
    @app.get(f"{API}/fleet/nodes", tags=["fleet"], response_model=list[Node],
             responses=_ERRORS | _CURSOR_PAGE)
    def nodes(self, creds: Auth = None, live: bool = False, after: After = None,
              limit: Limit = 1000) -> Response:
        """Every node (admin) or the nodes running the caller's jobs, oldest first; ``live``
        drops gone ones; paged by cursor."""
        nodes = self.service.nodes(self._who(creds), live_only=live, after=after, limit=limit + 1)
        return self._page(nodes, [n.id for n in nodes], limit)

    @app.get(f"{API}/fleet/zones", tags=["fleet"], response_model=list[ZoneInfo], responses=_ERRORS)
    def zones(self, creds: Auth = None) -> Response:
        """The fleet's catalog: every (zone, instance type) with its prices and availability."""
        self._who(creds)
        return self._list(self.service.zones())

    @app.get(f"{API}/fleet/prices", tags=["fleet"], response_model=list[PriceRow], responses=_ERRORS)
    def prices(self, creds: Auth = None) -> Response:
        """Spot and on-demand price per hour of every (zone, instance type), and the discount."""
        self._who(creds)
        return self._list([PriceRow.of(z) for z in self.service.zones()])

    @app.get(f"{API}/fleet/availability", tags=["fleet"], response_model=list[AvailabilityRow], responses=_ERRORS)
    def availability(self, creds: Auth = None) -> Response:
        """Whether spot can be had in each zone now (as of the controller's last tick)."""
        self._who(creds)
        return self._list([
            AvailabilityRow(cloud=z.cloud, zone=z.zone, instance_type=z.instance_type,
                            spot_available=z.spot_available, updated_at=z.updated_at)
            for z in self.service.zones()
        ])

    # -- quotas, forecasts, cost ---------------------------------------------------------------
    @app.get(f"{API}/quotas", tags=["capacity"], response_model=list[Quota], responses=_ERRORS)
    def quotas(self, creds: Auth = None) -> Response:
        """Spot quota per pool and GPU model (GFS spot quota allocator)."""
        self._who(creds)
        return self._list(self.service.quotas())

    @app.get(f"{API}/forecasts", tags=["capacity"], response_model=list[ForecastRow], responses=_ERRORS)
    def forecasts(self, creds: Auth = None) -> Response:
        """Demand forecasts per tenant (the caller's own; every tenant's for the admin)."""
        return self._list(self.service.forecasts(self._who(creds)))

    @app.get(f"{API}/cost", tags=["cost"], response_model=CostReport, responses=_ERRORS)
    def cost(self, creds: Auth = None) -> CostReport:
        """Spend per tenant against the on-demand-only counterfactual (same GPU hours)."""
        who = self._who(creds)
        rows: list[CostSummary] = self.service.cost(who)
        return CostReport.of(rows, self.service.idle_cost(who))


# --------------------------------------------------------------------------------------------
# Start / stop
# --------------------------------------------------------------------------------------------
def build_app(db_path: str | Path, admin_token: str, limits: ApiLimits | None = None,
              package_dir: str | Path | None = None, workload_address: str | None = None,
              workload_token_path: str | None = None, log_dir: str | Path | None = None,
              replicas: int = 1, max_replicas_per_node: int | None = None) -> Any:
    """The deployment graph (``replicas`` Serve replicas sharing the rate budget), bound to
    the store at ``db_path``, the admin token's hash and the API's limits (``SPOTPLANE_API_*``
    settings when not given); uploaded packages live in ``package_dir`` and job logs are read
    from the workload cluster's dashboard ``workload_address`` (the executor's copies in
    ``log_dir``, for attempts whose node is gone). Either may be ``"store"``: the store's blobs
    table, the default of a PostgreSQL store; a SQLite store's default is ``packages/`` and
    ``logs/`` beside its file. ``max_replicas_per_node`` spreads the replicas over Ray nodes."""
    if replicas < 1:
        raise InvalidInput("replicas", f"must be >= 1, got {replicas}", fix="e.g. --api-replicas 2")
    resolved = limits or ApiLimits.from_settings()
    spread = {} if max_replicas_per_node is None else {"max_replicas_per_node": max_replicas_per_node}
    return SpotplaneAPI.options(num_replicas=replicas, **spread).bind(  # type: ignore[attr-defined]
        str(db_path), hash_token(admin_token), resolved.model_dump(),
        str(package_dir) if package_dir is not None else None, workload_address,
        workload_token_path, str(log_dir) if log_dir is not None else None, replicas)


def start_api(db_path: str | Path, admin_token: str, port: int, host: str = "127.0.0.1",
              limits: ApiLimits | None = None, package_dir: str | Path | None = None,
              workload_address: str | None = None, workload_token_path: str | None = None,
              log_dir: str | Path | None = None, replicas: int = 1,
              max_replicas_per_node: int | None = None) -> str:
    """Start Serve's HTTP proxy on ``host:port`` and deploy the API; returns its base URL.

    Needs ``ray.init`` first. When Serve already runs in this Ray cluster its HTTP options stay
    as they were (Serve's rule), so the returned URL is read back from Serve itself.
    """
    serve.start(http_options={"host": host, "port": port})
    serve.run(build_app(db_path, admin_token, limits, package_dir, workload_address,
                        workload_token_path, log_dir, replicas, max_replicas_per_node),
              name=APP_NAME, route_prefix="/", blocking=False)
    return f"http://{host}:{port}"


def stop_api(shutdown_serve: bool = True) -> None:
    """Remove the API application (and Serve itself unless told otherwise)."""
    try:
        serve.delete(APP_NAME)
    except Exception as exc:  # noqa: BLE001 - already gone is fine
        log.debug("serve.delete: %s", exc)
    if shutdown_serve:
        serve.shutdown()


__all__ = ["APP_NAME", "ApiLimits", "Gate", "SpotplaneAPI", "app", "build_app", "start_api",
           "stop_api"]
