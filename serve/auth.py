"""Bearer-token authentication: one token per tenant, one admin token set at ``spotplane up``.

Tokens are random, shown once, and only their SHA-256 is kept (the admin token's hash lives in
the Serve replica, tenants' hashes in the store). The resolved :class:`Principal` scopes every
read and write, so a tenant asking for another tenant's job gets 404 exactly as for a job that
does not exist.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any

from fastapi import Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from ray import serve

from controlplane.core.tokens import hash_token
from serve.service import ControlPlaneService, Principal

__all__ = ["ADMIN_PREFIX", "Auth", "Principal", "authenticated", "bearer_scheme", "bearer_token",
           "hash_token", "new_admin_token", "replica_service"]

ADMIN_PREFIX = "spa_"

# Declares the scheme in OpenAPI (the "Authorize" button at /docs); we parse the header ourselves
# so a missing token is a 401 with our own message.
bearer_scheme = HTTPBearer(auto_error=False, description="tenant token, or the admin token from `spotplane up`")
Auth = Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)]


def new_admin_token() -> str:
    """A fresh random admin token (kept in its 0600 file by ``spotplane up``; only its hash reaches the API)."""
    return ADMIN_PREFIX + secrets.token_urlsafe(32)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None when absent/malformed."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def replica_service() -> ControlPlaneService:
    """The replica's service (the one :class:`serve.app.SpotplaneAPI` opened), for routers
    mounted beside the API's own routes."""
    api: Any = serve.get_replica_context().servable_object
    service: ControlPlaneService = api.service
    return service


def authenticated(creds: HTTPAuthorizationCredentials | None) -> tuple[ControlPlaneService, Principal]:
    """The replica's service and the principal holding the request's bearer token."""
    service = replica_service()
    return service, service.authenticate(creds.credentials if creds is not None else None)
