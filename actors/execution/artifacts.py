"""The artifacts of the executor's jobs: each tenant's prefix of the artifact store, and the
bytes and restore fallbacks of a job's checkpoints read back from it for the controller."""

from __future__ import annotations

import logging

from clusters.artifacts import ArtifactStore, check_id, open_store

log = logging.getLogger(__name__)


def check_tenant_id(tenant_id: str) -> str:
    return check_id("tenant_id", tenant_id)


def artifact_totals(store: ArtifactStore, job_id: str) -> tuple[int, int]:
    """(bytes of every checkpoint manifest the job has, restores that fell back past a bad one)."""
    nbytes = sum(ref.size for ref in store.list(job_id))
    return nbytes, sum(1 for e in store.events(job_id) if e.kind == "fallback")


class TenantArtifacts:
    """The artifact store's root and each tenant's prefix ``<root>/tenants/<tenant id>``."""

    def __init__(self, uri: str, endpoint_url: str | None) -> None:
        self.uri = str(uri)
        self.endpoint_url = endpoint_url
        self.root: ArtifactStore = open_store(self.uri, endpoint_url=endpoint_url)
        self._seen: dict[str, tuple[tuple[int, ...], tuple[int, int]]] = {}  # see totals

    def uri_for(self, tenant_id: str | None) -> str:
        """The artifact prefix a tenant's jobs are given: ``<root>/tenants/<tenant id>``."""
        if tenant_id is None:
            return self.uri
        check_tenant_id(tenant_id)
        return f"{self.uri.rstrip('/')}/tenants/{tenant_id}"

    def store_for(self, tenant_id: str | None) -> ArtifactStore:
        """The artifact store of one tenant's prefix."""
        return open_store(self.uri_for(tenant_id), endpoint_url=self.endpoint_url)

    def totals(self, job_id: str, tenant_id: str | None, changed: tuple[int, ...]) -> tuple[int, int]:
        """:func:`artifact_totals` of the job, listed again only when ``changed`` (its
        checkpoints, replicas or restores) differs from the last listing's."""
        seen = self._seen.get(job_id)
        if seen is not None and seen[0] == changed:
            return seen[1]
        try:
            totals = artifact_totals(self.store_for(tenant_id), job_id)
        except Exception as e:  # noqa: BLE001 - a store hiccup: keep the last totals
            log.debug("artifact totals of %s: %s", job_id, e)
            return seen[1] if seen is not None else (0, 0)
        self._seen[job_id] = (changed, totals)
        return totals
