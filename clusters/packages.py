"""Uploaded code packages: Ray's content-addressed ``_ray_pkg_<hash>.zip`` files, kept as
blobs (``controlplane.core.blobs``) under ``<tenant id>/<name>``: in a directory, or in the
store's ``blobs`` table so every API replica and the executor share them from any node.

The API writes them (``PUT /v1/packages/{name}``, Ray's ``PUT /api/packages/gcs/{name}``); the
executor reads them to upload the same bytes to the workload cluster before every attempt. The
name is Ray's hash of the directory's content (``get_uri_for_directory``), so the same tree is
stored once and a second upload of it is skipped by the client's existence check.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

from clusters.artifacts import check_id
from clusters.blobs import DirBlobs
from controlplane.core.blobs import Blobs
from controlplane.core.errors import InvalidInput, NotFound
from controlplane.core.runtime_env import PACKAGE_NAME

GCS_PREFIX = "gcs://"
DEFAULT_MAX_PACKAGE_BYTES = 512 << 20  # Ray's own cap on a package in its GCS


def package_name(uri_or_name: str) -> str:
    """``_ray_pkg_<hash>.zip`` of a name or ``gcs://`` URI; :class:`InvalidInput` otherwise."""
    name = uri_or_name.removeprefix(GCS_PREFIX)
    if not re.match(PACKAGE_NAME, name):
        raise InvalidInput("package", f"{uri_or_name!r} is not a package name",
                           fix="use Ray's content-addressed name _ray_pkg_<hex hash>.zip "
                               "(ray._private.runtime_env.packaging.get_uri_for_directory)")
    return name


class PackageStore:
    """Packages scoped by tenant, in ``blobs`` (a directory path means :class:`DirBlobs`)."""

    def __init__(self, blobs: Blobs | str | Path, max_bytes: int = DEFAULT_MAX_PACKAGE_BYTES) -> None:
        self.blobs: Blobs = DirBlobs(blobs) if isinstance(blobs, (str, Path)) else blobs
        self.max_bytes = max_bytes

    def key(self, tenant_id: str, name: str) -> str:
        return f"{check_id('tenant_id', tenant_id)}/{package_name(name)}"

    def exists(self, tenant_id: str, name: str) -> bool:
        return self.blobs.size(self.key(tenant_id, name)) is not None

    def size(self, tenant_id: str, name: str) -> int:
        size = self.blobs.size(self.key(tenant_id, name))
        if size is None:
            raise _missing(name)
        return size

    def get(self, tenant_id: str, name: str) -> bytes:
        """The package's zip; :class:`NotFound` when this tenant did not upload it."""
        data = self.blobs.get(self.key(tenant_id, name))
        if data is None:
            raise _missing(name)
        return data

    def put(self, tenant_id: str, name: str, data: bytes) -> bool:
        """Store one package (atomically); False when it was already there."""
        key = self.key(tenant_id, name)
        if len(data) > self.max_bytes:
            raise InvalidInput("package", f"{len(data)} bytes is more than the cap of "
                               f"{self.max_bytes}", fix="exclude data files (runtime_env.excludes, "
                               ".gitignore) and fetch them from the job instead")
        if not zipfile.is_zipfile(io.BytesIO(data)):
            raise InvalidInput("package", "the body is not a zip file",
                               fix="send the zip ray._private.runtime_env.packaging.create_package writes")
        return self.blobs.put(key, data)


def _missing(name: str) -> NotFound:
    return NotFound(f"package {package_name(name)} was not uploaded by this tenant",
                    fix="upload it first (PUT /v1/packages/{name})")
