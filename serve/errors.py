"""Errors -> HTTP: one :class:`~serve.schemas.ErrorBody` for every 4xx/5xx of the API.

InvalidInput 422 (field and fix), Unauthorized 401, Forbidden 403, NotFound 404 (also for other
tenants' things), Conflict 409, body too large 413, RateLimited 429 (with Retry-After); FastAPI's
and Starlette's own errors get the same body. :func:`install_error_handlers` registers them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

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
from serve.limits import retry_after_header
from serve.schemas import ErrorBody, FieldError, error_line, field_errors

log = logging.getLogger(__name__)


def error_response(asgi_app: Any, status: int, message: str, fix: str | None = None,
                   errors: Sequence[FieldError] = (), headers: dict[str, str] | None = None) -> JSONResponse:
    """The API's error body with ``status`` (counted by the request metrics' middleware)."""
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    body = ErrorBody(message=message, fix=fix, errors=list(errors))
    return JSONResponse(status_code=status, content=body.model_dump(), headers=headers)


def _unprocessable(request: Request, errors: list[FieldError]) -> JSONResponse:
    return error_response(request.app, 422, error_line(errors[0]), errors[0].fix, errors)


async def _on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    return _unprocessable(request, field_errors(exc.errors()))


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


async def _on_spotplane_error(request: Request, exc: SpotplaneError) -> JSONResponse:
    return spotplane_error_response(request.app, exc)


HTTP_FIX = {
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
                          HTTP_FIX.get(exc.status_code), headers=headers or None)


async def _on_crash(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(request.app, 500, "internal error", "retry; if it persists, report it")


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error ``app`` raises with the API's one error body."""
    app.add_exception_handler(RequestValidationError, _on_validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(ValidationError, _on_model_error)  # type: ignore[arg-type]
    app.add_exception_handler(SpotplaneError, _on_spotplane_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _on_http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _on_crash)
