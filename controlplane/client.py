"""The HTTP client of spotplane's API; the CLI and the demo use it like any other client.

Errors come back as the same :class:`~controlplane.core.errors.SpotplaneError` types the server raised:
401 -> :class:`Unauthorized`, 404 -> :class:`NotFound`, 409 -> :class:`Conflict`, 422 ->
:class:`InvalidInput` (naming the field and the fix), anything else -> :class:`SpotplaneError`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from controlplane.core.attemptlogs import split_attempts, unsent
from controlplane.core.errors import (
    ConfigError,
    Conflict,
    InvalidInput,
    NotFound,
    SpotplaneError,
    Unauthorized,
)

log = logging.getLogger(__name__)

API = "/v1"
NEXT_AFTER_HEADER = "X-Spotplane-Next-After"  # the API's cursor of the next page of jobs
DEFAULT_PAGE = 1000  # GET /v1/jobs without a limit
ENDPOINT_FILE = "endpoint.json"
ADMIN_TOKEN_FILE = "admin-token"
FINISHED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


class ApiError(SpotplaneError):
    """The API answered with an error status the client has no better type for."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}")


class ServerUnreachable(SpotplaneError):
    """Nothing answers at the API's URL."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(
            f"cannot reach the spotplane API at {url} ({reason})",
            fix="start it with `spotplane up`, or pass --url / set SPOTPLANE_URL",
        )


def _decoded(response: httpx.Response) -> Any:
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()
    return response.text


# The API refuses a request past its tenant's requests in flight before running it (429 naming
# the bound): one client's own parallel calls are retried after Retry-After, a few times.
IN_FLIGHT_RETRIES = 3
IN_FLIGHT_FIELDS = ("max_in_flight_per_tenant:", "tenants_in_flight:")


def _busy(response: httpx.Response) -> bool:
    """A 429 of the in-flight bound (not of the rate limit or a quota, which a retry cannot cure)."""
    if response.status_code != 429:
        return False
    try:
        message = str(response.json().get("message", ""))
    except ValueError:
        return False
    return message.startswith(IN_FLIGHT_FIELDS)


def _error_from(response: httpx.Response) -> SpotplaneError:
    """Turn an error response into the matching SpotplaneError."""
    try:
        body: Any = response.json()
    except ValueError:
        body = {"message": response.text}
    message = str(body.get("message") or body.get("detail") or response.reason_phrase)
    status = response.status_code
    if status == 401:
        return Unauthorized(message, fix="pass the tenant's token (--token or SPOTPLANE_TOKEN)")
    if status == 404:
        return NotFound(message)
    if status == 409:
        return Conflict(message)
    if status == 422:
        errors = body.get("errors") or [{}]
        first = errors[0]
        return InvalidInput(
            str(first.get("field") or "request"),
            str(first.get("message") or message),
            fix=first.get("fix"),
        )
    return ApiError(status, message)


class SpotplaneClient:
    """A small synchronous client of the spotplane HTTP API (``/v1``)."""

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def __enter__(self) -> SpotplaneClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def with_token(self, token: str) -> SpotplaneClient:
        """A client for the same server acting as another principal."""
        return SpotplaneClient(self.base_url, token, timeout=self._http.timeout.read or 30.0)

    # -- plumbing ------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """One call; returns the decoded JSON body (or text for non-JSON answers)."""
        return _decoded(self.send(method, path, json_body=json_body, params=params))

    def send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
    ) -> httpx.Response:
        """One call; returns the response (headers included), raising on any 4xx/5xx."""
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        for attempt in range(IN_FLIGHT_RETRIES + 1):
            try:
                response = self._http.request(method, path, json=json_body, params=clean,
                                              content=content)
            except httpx.TransportError as exc:
                raise ServerUnreachable(self.base_url, type(exc).__name__) from exc
            if not _busy(response) or attempt == IN_FLIGHT_RETRIES:
                break
            time.sleep(min(float(response.headers.get("retry-after") or 1), 5.0))
        if response.status_code >= 400:
            raise _error_from(response)
        return response

    # -- health --------------------------------------------------------------------------------
    def healthz(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/healthz")
        return result

    def metrics(self) -> str:
        return str(self.request("GET", "/metrics"))

    def clock(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"{API}/clock")
        return result

    # -- tenants -------------------------------------------------------------------------------
    def create_tenant(self, name: str, max_gpus: int = 64) -> dict[str, Any]:
        """Admin: create a tenant; the answer holds its token (shown only this once)."""
        result: dict[str, Any] = self.request(
            "POST", f"{API}/tenants", json_body={"name": name, "max_gpus": max_gpus}
        )
        return result

    def tenants(self) -> list[dict[str, Any]]:
        return self.every_page(f"{API}/tenants")

    def me(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"{API}/tenants/me")
        return result

    # -- jobs ----------------------------------------------------------------------------------
    def submit(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", f"{API}/jobs", json_body=dict(spec))
        return result

    def jobs(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        bag_id: str | None = None,
        tenant_id: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Jobs, oldest first: follows the cursor (``X-Spotplane-Next-After``) page after page,
        byte-cap cuts included, until ``limit`` jobs (the API's default page of 1,000 when None)."""
        want = DEFAULT_PAGE if limit is None else limit
        params: dict[str, Any] = {"state": state, "kind": kind, "bag_id": bag_id,
                                  "tenant_id": tenant_id, "limit": limit}
        out: list[dict[str, Any]] = []
        while True:
            response = self.send("GET", f"{API}/jobs", params=params)
            out.extend(response.json())
            after = response.headers.get(NEXT_AFTER_HEADER)
            if after is None or len(out) >= want:
                return out
            params = {**params, "after": after, "limit": want - len(out)}

    def job(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"{API}/jobs/{job_id}")
        return result

    def logs(self, job_id: str) -> str:
        """Every attempt's logs of one job, oldest first, each after its marker line."""
        return str(self.send("GET", f"{API}/jobs/{job_id}/logs").text)

    def follow_logs(self, job_id: str, emit: Callable[[str], Any], *, poll_s: float = 1.0,
                    sleep: Callable[[float], Any] = time.sleep) -> dict[str, Any]:
        """Emit the job's logs as they grow until it is finished; returns the finished job.

        The job's state is read before each fetch, so the last fetch holds everything; the
        text is followed attempt by attempt (:mod:`controlplane.core.attemptlogs`)."""
        sent: dict[str, int] = {}
        while True:
            job = self.job(job_id)
            if new := unsent(split_attempts(self.logs(job_id)), sent):
                emit(new)
            if job["state"] in FINISHED:
                return job
            sleep(poll_s)

    # -- packages ------------------------------------------------------------------------------
    def package_exists(self, name: str) -> bool:
        """Whether the caller's tenant already holds the package ``name``."""
        try:
            self.send("GET", f"{API}/packages/{name}")
        except NotFound:
            return False
        return True

    def upload_package(self, name: str, data: bytes) -> dict[str, Any]:
        """Upload one package (a zip under Ray's content-addressed name)."""
        return dict(self.send("PUT", f"{API}/packages/{name}", content=data).json())

    def cancel(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", f"{API}/jobs/{job_id}/cancel")
        return result

    def events(self, job_id: str) -> list[dict[str, Any]]:
        return self.every_page(f"{API}/jobs/{job_id}/events")

    def decisions(self, job_id: str) -> list[dict[str, Any]]:
        return self.every_page(f"{API}/jobs/{job_id}/decisions")

    # -- bags ----------------------------------------------------------------------------------
    def submit_bag(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", f"{API}/bags", json_body=dict(spec))
        return result

    def bags(self) -> list[dict[str, Any]]:
        return self.every_page(f"{API}/bags")

    def bag(self, bag_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"{API}/bags/{bag_id}")
        return result

    # -- fleet, quotas, cost -------------------------------------------------------------------
    def nodes(self, *, active_only: bool = False) -> list[dict[str, Any]]:
        return self.every_page(f"{API}/fleet/nodes", {"live": "true" if active_only else None})

    def every_page(self, path: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Every item of a cursor-paged list, following ``X-Spotplane-Next-After``."""
        out: list[dict[str, Any]] = []
        query = dict(params or {})
        while True:
            response = self.send("GET", path, params=query)
            out.extend(response.json())
            after = response.headers.get(NEXT_AFTER_HEADER)
            if after is None:
                return out
            query["after"] = after

    def zones(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", f"{API}/fleet/zones")
        return result

    def prices(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", f"{API}/fleet/prices")
        return result

    def availability(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", f"{API}/fleet/availability")
        return result

    def quotas(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", f"{API}/quotas")
        return result

    def forecasts(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", f"{API}/forecasts")
        return result

    def cost(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"{API}/cost")
        return result

    def set_budget(self, tenant_id: str, budget: Mapping[str, Any]) -> dict[str, Any]:
        """Admin: a tenant's spend limits (hourly_cap, monthly_budget, soft_fraction, protected)."""
        result: dict[str, Any] = self.request("PUT", f"{API}/tenants/{tenant_id}/budget",
                                              json_body=dict(budget))
        return result

    def budgets(self) -> list[dict[str, Any]]:
        """Every tenant's spend and headroom this month (admin), or the caller's own."""
        result: list[dict[str, Any]] = self.request("GET", f"{API}/budgets")
        return result

    def bills(self, *, month: str | None = None, per: str = "job",
              fmt: str = "json") -> Any:
        """Bills per job or per tenant and month, as decoded JSON or CSV text."""
        return self.request("GET", f"{API}/bills",
                            params={"month": month, "per": per, "format": fmt})


def admin_token_file(state_dir: Path) -> Path:
    """Where ``spotplane up`` keeps its admin token (mode 0600, in the 0700 state directory)."""
    return state_dir / ADMIN_TOKEN_FILE


def load_admin_token(state_dir: Path, create: Callable[[], str] | None = None) -> str | None:
    """The admin token of :func:`admin_token_file`, made with ``create`` (mode 0600) where there
    is none yet; None when there is none and nothing to create it with. A token file that others
    can read is refused: it would not be a secret."""
    path = admin_token_file(state_dir)
    try:
        mode = path.stat().st_mode & 0o777
    except PermissionError:  # another user's state directory: that user's token
        return None
    except FileNotFoundError:
        if create is None:
            return None
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(create() + "\n")
        mode = 0o600
    if mode & 0o077:
        raise ConfigError(f"admin token: {path} is readable by others (mode {mode:o})",
                          fix=f"chmod 600 {path}, or delete it for a new token")
    token = path.read_text().strip()
    if not token:
        raise ConfigError(f"admin token: {path} is empty", fix=f"delete {path} for a new token")
    return token


def write_endpoint(state_dir: Path, url: str, pid: int) -> Path:
    """Record where ``spotplane up`` serves, the file of its admin token and its pid (mode
    0600) for later commands; the token itself stays in its own file."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / ENDPOINT_FILE
    tmp = path.with_suffix(".tmp")
    record = {"url": url, "admin_token_file": str(admin_token_file(state_dir)), "pid": pid}
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(record))
    tmp.replace(path)
    return path


def read_endpoint(state_dir: Path) -> dict[str, Any] | None:
    """What :func:`write_endpoint` recorded, or None when no ``up`` is recorded there."""
    path = state_dir / ENDPOINT_FILE
    if not path.is_file():
        return None
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


def clear_endpoint(state_dir: Path) -> None:
    """Forget the recorded endpoint (``up`` stopped)."""
    (state_dir / ENDPOINT_FILE).unlink(missing_ok=True)
