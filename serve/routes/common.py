"""What every route of the API shares: the replica's service and limits, the caller, lists."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Protocol

from fastapi import Header
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel
from ray import serve

from controlplane.store import StoredAnswer
from serve.auth import authenticated, replica_service
from serve.limits import ApiLimits
from serve.paging import bounded_list, cursor_page
from serve.schemas import ERROR_CODES, declared_errors
from serve.service import ControlPlaneService, Principal

ERRORS = declared_errors(*ERROR_CODES)
IDEMPOTENCY_HEADER = "Idempotency-Key"
ADMIN_TENANT = "admin only: the tenant (id or name) to submit for; a tenant's token submits for itself"
IdempotencyKey = Annotated[str | None, Header(
    alias=IDEMPOTENCY_HEADER, min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+$",
    description="a client-chosen key (printable ASCII): a retry with the same key and body "
                "returns the first answer and creates nothing; another body -> 409")]


class Replica(Protocol):
    """The Serve replica answering (:class:`serve.app.SpotplaneAPI`), as routes see it."""

    service: ControlPlaneService
    limits: ApiLimits
    started: float


def replica() -> Replica:
    """The replica this request runs in."""
    found: Any = serve.get_replica_context().servable_object
    return found


def service() -> ControlPlaneService:
    """The replica's control-plane service."""
    return replica_service()


def caller(creds: HTTPAuthorizationCredentials | None) -> Principal:
    """The principal holding the request's bearer token (401 without one)."""
    return authenticated(creds)[1]


def replayable(answer: StoredAnswer) -> Response:
    """The stored answer of an Idempotency-Key, byte for byte (marked when replayed)."""
    headers = {"Idempotent-Replayed": "true"} if answer.replayed else None
    return Response(answer.body, status_code=answer.status, media_type="application/json",
                    headers=headers)


def listed(items: Sequence[BaseModel], offset: int | None = None) -> Response:
    """``items`` as a JSON array cut at the replica's list byte cap."""
    return bounded_list(items, replica().limits.max_list_bytes, offset)


def paged(items: Sequence[BaseModel], ids: Sequence[str], limit: int) -> Response:
    """One cursor page of ``items`` (the store's ``limit + 1`` rows)."""
    return cursor_page(items, ids, limit, replica().limits.max_list_bytes)
