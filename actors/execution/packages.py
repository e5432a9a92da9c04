"""Packages: a job's uploaded ``working_dir`` / ``py_modules`` put on the workload cluster's GCS
before every attempt (Ray drops unreferenced packages), from the tenant's stored copy."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

from clusters.packages import PackageStore, package_name
from controlplane.core.errors import InvalidInput, NotFound
from controlplane.core.runtime_env import RuntimeEnv

log = logging.getLogger(__name__)


class Packages:
    """The tenants' packages (``clusters.packages``, read per attempt) and the workload's GCS."""

    def __init__(self, client: Any, store: PackageStore | None) -> None:
        self.client = client
        self.store = store

    def ray_runtime_env(self, runtime_env: RuntimeEnv | None, tenant_id: str | None) -> dict[str, Any]:
        """The job's runtime_env for Ray, less env_vars: each uploaded package put on the
        workload cluster first (:meth:`ensure`), so every attempt on any node runs it."""
        if runtime_env is None:
            return {}
        for uri in runtime_env.packages():
            self.ensure(uri, tenant_id)
        return runtime_env.for_ray()

    def ensure(self, uri: str, tenant_id: str | None) -> bool:
        """Upload the tenant's package ``uri`` to the workload cluster's GCS unless it holds it
        already (Ray drops unreferenced packages, so this is checked for every attempt).
        Returns whether it uploaded."""
        if self.client._package_exists(uri):
            return False
        if self.store is None or tenant_id is None:
            raise InvalidInput("runtime_env", f"package {uri} is not on the workload cluster and "
                               "this executor has no package store",
                               fix="give the executor package_dir (spotplane up does)")
        data = self.store.blobs.get(self.store.key(tenant_id, package_name(uri)))
        if data is None:
            raise NotFound(f"package {uri} of tenant {tenant_id} is not in {self.store.blobs.where}",
                           fix="upload it again (spotplane submit --working-dir)")
        with tempfile.TemporaryDirectory(prefix="spotplane-pkg-") as tmp:
            path = Path(tmp) / package_name(uri)
            path.write_bytes(data)
            self.client._upload_package(uri, str(path), include_gitignore=False, is_file=True)
        log.info("uploaded %s (%d bytes) to the workload cluster", uri, len(data))
        return True
