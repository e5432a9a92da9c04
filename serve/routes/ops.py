"""Health, metrics and the control plane's clock."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from serve.auth import Auth
from serve.gate import API, Gate, api_metrics
from serve.metrics import CONTENT_TYPE
from serve.routes.common import ERRORS, caller, replica, service
from serve.schemas import (
    ClockView,
    clock_view,
    declared_errors,
)

router = APIRouter()

@router.get("/healthz", tags=["ops"])
def healthz() -> dict[str, Any]:
    """Liveness: the store answers; no token needed."""
    health = service().health()
    health["uptime_s"] = round(time.monotonic() - replica().started, 3)
    if Gate.state is not None:
        health["replica"], health["node_id"] = Gate.state.replica, Gate.state.node_id
    return health

@router.get("/metrics", tags=["ops"], response_class=PlainTextResponse,
         responses=declared_errors(401, 403, 500))
def metrics(request: Request, creds: Auth = None) -> Response:
    """Every family in Prometheus text format, for the operator (spend by tenant): the admin
    token or the metrics token (``SPOTPLANE_METRICS_TOKEN``) as a bearer token."""
    return Response(service().metrics_text(api_metrics(request)), media_type=CONTENT_TYPE)

@router.get(f"{API}/clock", tags=["ops"], response_model=ClockView, responses=ERRORS)
def clock(creds: Auth = None) -> ClockView:
    """The control plane's time (simulated on the simulated fleet)."""
    caller(creds)
    return clock_view(service().control_time())
