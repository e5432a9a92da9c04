"""The API's door, before any handler: token, rate, in-flight share and body size; and metrics.

:class:`Gate`, an ASGI middleware, runs before any body is read: it checks the token (401),
the tenant's request rate (429), its requests in flight (429) and the declared body size (413),
and caps a chunked body as it streams in, so an unauthenticated or oversized post costs nothing.
:func:`measure` counts and times every request by route template and status.
"""

from __future__ import annotations

import hmac
import re
import threading
import time
from collections.abc import Awaitable, Callable
from typing import ClassVar

import ray
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response
from ray import serve
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controlplane.core.errors import RateLimited, SpotplaneError
from serve.auth import bearer_token, hash_token
from serve.errors import HTTP_FIX, error_response, spotplane_error_response
from serve.fairness import InFlight
from serve.limits import ApiLimits, TokenBuckets
from serve.metrics import ApiMetrics
from serve.nodelimits import NodeReportLimiter, NodeReportsLimited
from serve.service import ControlPlaneService

API = "/v1"
REPLICA_HEADER = "X-Spotplane-Replica"  # the Serve replica that answered (every response)
PUBLIC_PATHS = frozenset({"/healthz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json",
                          "/"})  # "/" and /dashboard/* are the dashboard's page and assets
PUBLIC_PREFIXES = ("/dashboard/",)
PACKAGE_PATHS = (f"{API}/packages/", "/api/packages/")
NODE_PATHS = f"{API}/nodes/"  # a launched node's reports: its own credential, checked by the route
# admin-only routes, refused to a tenant by the gate before the body is read (what each does)
ADMIN_ROUTES = {("POST", f"{API}/tenants"): "creating a tenant",
                ("POST", f"{API}/fairshare"): "setting a tenant's fair share",
                ("POST", f"{API}/clusters"): "registering a workload cluster",
                ("GET", f"{API}/clusters"): "listing workload clusters"}
# admin-only path prefixes: every method on the path and below it
ADMIN_PREFIXES = {f"{API}/clusters": "managing workload clusters"}
# admin-only routes with a path parameter: (method, the path as a regular expression)
ADMIN_PATTERNS = {("PUT", re.compile(rf"^{API}/tenants/[^/]+/budget$")): "setting a tenant's budget"}

_api_lock = threading.Lock()
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


def api_metrics(request: Request) -> ApiMetrics:
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


async def measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
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
        api_metrics(request).record(route, method, status, time.perf_counter() - t0)


class _BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes")


class Gate:
    """ASGI middleware: 401 / 429 / 413 before the body is read; caps a streamed body.

    The replica installs its :class:`GateState` (service and limits) at start-up; the class
    holds it because Serve ships the FastAPI app to the replica by value while importing this
    module's classes by reference.
    """

    state: ClassVar[GateState | None] = None

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
            if scope["path"].startswith(NODE_PATHS):  # before the credential: refusing is cheap
                gate.admit_node_report(scope)
            tenant = await gate.admit(scope["path"], bearer_token(headers.get("authorization")),
                                      scope["method"])
            gate.check_length(headers.get("content-length"), scope["path"])
            held = await gate.in_flight.acquire(tenant)  # 429 past the tenant's requests in flight
        except SpotplaneError as exc:
            await spotplane_error_response(answering, exc)(scope, receive, send)
            return
        except HTTPException as exc:
            await error_response(answering, exc.status_code, str(exc.detail),
                                 HTTP_FIX.get(exc.status_code))(scope, receive, send)
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
        self.node_reports = NodeReportLimiter(limits)

    def admit_node_report(self, scope: Scope) -> None:
        """Take from the reporting instance's and client's buckets; 429, counted, when empty."""
        client = scope.get("client")
        try:
            self.node_reports.admit(scope["path"], client[0] if client else None)
        except NodeReportsLimited as refused:
            api_metrics(Request(scope)).node_reports_limited.labels(refused.limit).inc()
            raise

    async def admit(self, path: str, token: str | None, method: str = "GET") -> str | None:
        """Authenticate ``token`` for ``path``, take one from the tenant's rate bucket, and
        refuse a tenant an admin route (403 whatever the body); the tenant's id (None: admin
        or metrics). A token not seen before is looked up in the store off the event loop."""
        if path == "/metrics":
            await run_in_threadpool(self._metrics_token, token)
            return None
        if path.startswith(NODE_PATHS):
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
        admin_only = (ADMIN_ROUTES.get((method, path)) or admin_prefix(path)
                      or admin_pattern(method, path))
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


def admin_prefix(path: str) -> str | None:
    """What the admin-only prefix holding ``path`` does (None: no such prefix)."""
    for prefix, what in ADMIN_PREFIXES.items():
        if path == prefix or path.startswith(prefix + "/"):
            return what
    return None


def admin_pattern(method: str, path: str) -> str | None:
    """What the admin-only parameterised route matching ``method path`` does (None: none)."""
    return next((what for (m, rx), what in ADMIN_PATTERNS.items()
                 if m == method and rx.match(path)), None)


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


def install_gate(app: FastAPI) -> None:
    """The gate inside, the request metrics outermost (the gate's 401/413/429 are counted too)."""
    app.add_middleware(Gate)
    app.middleware("http")(measure)
