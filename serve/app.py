"""The HTTP API: one Ray Serve deployment with a FastAPI ingress (OpenAPI at ``/docs``).

``start_api(db_path, admin_token, port)`` binds Serve's HTTP proxy to ``port`` and deploys
:class:`SpotplaneAPI`; every handler authenticates the bearer token, then calls the
:class:`~serve.service.ControlPlaneService` (never the store directly). The app is assembled
here from its parts: the strict query check (:mod:`serve.query`), one error body for every
4xx/5xx (:mod:`serve.errors`), the gate and request metrics (:mod:`serve.gate`), and the routes,
one router per resource (:mod:`serve.routes`), beside the dashboard's and Ray's Jobs API's.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import httpx
from fastapi import Depends, FastAPI
from ray import serve

from clusters.packages import PackageStore
from clusters.rayjobs import LogArchive
from controlplane import __version__
from controlplane.core.errors import InvalidInput, Unavailable
from controlplane.store import LOGS, PACKAGES, is_postgres, open_blobs
from serve.auth import hash_token
from serve.dashboard import router as dashboard_router
from serve.errors import install_error_handlers
from serve.fairness import MAX_ONGOING_REQUESTS, share_the_gil
from serve.gate import Gate, GateState, install_gate, replica_identity
from serve.limits import ApiLimits
from serve.query import refuse_unknown_query
from serve.rayjobs import router as ray_jobs_router
from serve.routes import (
    bags,
    budgets,
    capacity,
    clusters,
    clusterview,
    fairshare,
    fleet,
    jobs,
    nodes,
    ops,
    packages,
    tenants,
)
from serve.service import Caps, ControlPlaneService, Workload

log = logging.getLogger(__name__)

APP_NAME = "spotplane"
HEALTH_CHECK_PERIOD_S = 2.0  # the API replica's Serve health check (see the deployment)
#: How long :func:`start_api` waits for Serve's HTTP proxy in all. Serve's own wait in
#: ``serve.start`` is a fixed 60 s, which a busy machine overruns while the proxy actor starts.
PROXY_WAIT_S = 300.0

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
# every router before @serve.ingress copies the app
app.include_router(dashboard_router)  # the web dashboard at /
app.include_router(ray_jobs_router)  # Ray's Jobs REST API (/api/...), for Ray's own clients
for _routes in (ops, tenants, jobs, packages, bags, fleet, capacity, budgets, nodes, fairshare,
                clusters, clusterview):
    app.include_router(_routes.router)
install_error_handlers(app)
install_gate(app)


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
        self.started = time.monotonic()
        Gate.state.replica, Gate.state.node_id = replica_identity()


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
    start_proxy(host, port)
    serve.run(build_app(db_path, admin_token, limits, package_dir, workload_address,
                        workload_token_path, log_dir, replicas, max_replicas_per_node),
              name=APP_NAME, route_prefix="/", blocking=False)
    return f"http://{host}:{port}"


def start_proxy(host: str, port: int, wait_s: float = PROXY_WAIT_S, **serve_options: Any) -> None:
    """``serve.start`` on ``host:port`` (with ``serve_options``, e.g. ``proxy_location``),
    waiting up to ``wait_s`` for its HTTP proxy: past Serve's own 60 s the controller it started
    stays, and the proxy is awaited until its ``/-/healthz`` answers (any status: it says 503
    until it has a route table, which ``serve.run`` brings)."""
    options = {"host": host, "port": port}
    t0 = time.monotonic()
    try:
        serve.start(http_options=options, **serve_options)
        return
    except TimeoutError as exc:
        log.warning("Serve's HTTP proxy on %s:%d is not up after Serve's own wait (%s); waiting up to "
                    "%.0f s in all", host, port, exc, wait_s)
    serve.start(http_options=options, **serve_options)  # connects to the controller the first call started
    probe = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{port}/-/healthz"
    while not _answers(probe):
        if time.monotonic() - t0 > wait_s:
            raise Unavailable(f"Serve's HTTP proxy on {host}:{port} did not answer {probe} in {wait_s:.0f} s",
                              fix="the machine may be overloaded or the port taken: see Ray's "
                                  "session_latest/logs/serve/ and retry, or pick another --port")
        time.sleep(0.5)


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=2.0)
        return True
    except httpx.HTTPError:
        return False


def stop_api(shutdown_serve: bool = True) -> None:
    """Remove the API application (and Serve itself unless told otherwise)."""
    try:
        serve.delete(APP_NAME)
    except Exception as exc:  # noqa: BLE001 - already gone is fine
        log.debug("serve.delete: %s", exc)
    if shutdown_serve:
        serve.shutdown()


__all__ = ["APP_NAME", "PROXY_WAIT_S", "ApiLimits", "Gate", "SpotplaneAPI", "app", "build_app",
           "start_api", "start_proxy", "stop_api"]
