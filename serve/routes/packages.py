"""Code packages: a working directory's zip under Ray's content-addressed name."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Request
from fastapi import Path as PathParam
from starlette.concurrency import run_in_threadpool

from clusters.packages import package_name
from controlplane.core.runtime_env import PACKAGE_NAME
from serve.auth import Auth
from serve.gate import API
from serve.routes.common import ERRORS, caller, service
from serve.schemas import (
    PackageView,
    declared_errors,
)

router = APIRouter()

ZIP_TYPES = frozenset({"application/zip", "application/x-zip-compressed", "application/octet-stream"})
ZIP_BODY = {"requestBody": {"required": True, "description": (
    "the zip ray._private.runtime_env.packaging.create_package writes"), "content": {
        "application/zip": {"schema": {"type": "string", "format": "binary"}}}}}
_NOT_A_ZIP: dict[int | str, dict[str, Any]] = {
    413: {"description": "larger than the package cap"}, 415: declared_errors(415)[415]}
PackageName = Annotated[str, PathParam(pattern=PACKAGE_NAME, description=(
    "Ray's content-addressed name of the zip: _ray_pkg_<hex hash>.zip"))]

@router.get(f"{API}/packages/{{name}}", tags=["packages"], response_model=PackageView,
         responses=ERRORS)
def package(name: PackageName, creds: Auth = None) -> PackageView:
    """Whether the caller's tenant holds the package ``name`` (404 when not)."""
    principal = caller(creds)
    store, tenant = service().package_store(principal)
    return PackageView.of(name, store.size(tenant, package_name(name)), created=False)

@router.put(f"{API}/packages/{{name}}", tags=["packages"], response_model=PackageView,
         responses=ERRORS | _NOT_A_ZIP, openapi_extra=ZIP_BODY)
@router.post(f"{API}/packages/{{name}}", tags=["packages"], response_model=PackageView,
          responses=ERRORS | _NOT_A_ZIP, openapi_extra=ZIP_BODY)
async def put_package(name: PackageName, request: Request,
                      creds: Auth = None) -> PackageView:
    """Upload one zip of a working directory under Ray's content-addressed name
    (``_ray_pkg_<hash>.zip``, ``get_uri_for_directory``); the same name again stores
    nothing. Jobs then name it as ``runtime_env.working_dir: gcs://<name>``."""
    principal = await run_in_threadpool(caller, creds)
    media = request.headers.get("content-type", "application/zip").split(";")[0].strip()
    if media.lower() not in ZIP_TYPES:
        raise HTTPException(415, f"a package is a zip, not {media or 'an empty type'}")
    data = await request.body()
    created = await run_in_threadpool(service().put_package, principal, package_name(name), data)
    return PackageView.of(name, len(data), created=created)
