"""Workload clusters in the store: registered, read, health recorded, drained and removed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controlplane.core.errors import Conflict, NotFound
from controlplane.core.workloadclusters import (
    FAILURE_THRESHOLD,
    ClusterState,
    WorkloadCluster,
    WorkloadClusterSpec,
)
from controlplane.store.base import StoreBase
from controlplane.store.rows import log


class ClusterRows(StoreBase):
    """The registry of workload Ray clusters (table ``workload_clusters``)."""

    def add_cluster(self, spec: WorkloadClusterSpec, *, now: float | None = None,
                    replace: bool = False) -> WorkloadCluster:
        """Register ``spec`` (Conflict when the name is taken, unless ``replace``)."""
        at = self.control_time() if now is None else now
        cluster = WorkloadCluster(**spec.model_dump(), registered_at=at)
        verb = "DO UPDATE SET state = excluded.state, body = excluded.body" if replace else "DO NOTHING"
        with self._tx() as db:
            written = db.execute(
                "INSERT INTO workload_clusters (name, state, registered_at, body) VALUES (?, ?, ?, ?) "
                f"ON CONFLICT (name) {verb} RETURNING 1",
                (cluster.name, cluster.state.value, at, cluster.model_dump_json())).fetchall()
        if not written:
            raise Conflict(f"cluster {spec.name!r} is already registered",
                           fix="choose another name, or remove it first")
        return cluster

    def _cluster(self, row: tuple[Any, ...]) -> WorkloadCluster | None:
        try:
            return WorkloadCluster.model_validate_json(row[0])
        except ValueError as exc:
            log.error("workload cluster row does not load: %s", exc)
            return None

    def list_clusters(self) -> list[WorkloadCluster]:
        """Every registered cluster that loads, oldest first."""
        rows = self._q("SELECT body FROM workload_clusters ORDER BY registered_at, name")
        return [c for c in map(self._cluster, rows) if c is not None]

    def get_cluster(self, name: str) -> WorkloadCluster:
        rows = self._q("SELECT body FROM workload_clusters WHERE name = ?", (name,))
        found = self._cluster(rows[0]) if rows else None
        if found is None:
            raise NotFound(f"cluster {name!r} is not registered",
                           fix="list them with `spotplane clusters list`")
        return found

    def save_cluster(self, cluster: WorkloadCluster) -> None:
        """Write ``cluster``'s state and health (NotFound when it was removed meanwhile)."""
        with self._tx() as db:
            n = db.execute("UPDATE workload_clusters SET state = ?, body = ? WHERE name = ?",
                           (cluster.state.value, cluster.model_dump_json(), cluster.name)).rowcount
        if not n:
            raise NotFound(f"cluster {cluster.name!r} is not registered")

    def _change_cluster(self, name: str,
                        change: Callable[[WorkloadCluster], None]) -> WorkloadCluster:
        """Read, ``change`` and write one cluster in one write transaction, so a health check
        and a drain never undo each other."""
        with self._tx() as db:
            rows = db.execute("SELECT body FROM workload_clusters WHERE name = ?",
                              (name,)).fetchall()
            cluster = self._cluster(rows[0]) if rows else None
            if cluster is None:
                raise NotFound(f"cluster {name!r} is not registered",
                               fix="list them with `spotplane clusters list`")
            change(cluster)
            db.execute("UPDATE workload_clusters SET state = ?, body = ? WHERE name = ?",
                       (cluster.state.value, cluster.model_dump_json(), name))
        return cluster

    def drain_cluster(self, name: str) -> WorkloadCluster:
        """Mark ``name`` draining: it finishes what runs and takes nothing new."""
        def drain(cluster: WorkloadCluster) -> None:
            cluster.state = ClusterState.DRAINING
        return self._change_cluster(name, drain)

    def record_cluster_health(self, name: str, *, healthy: bool, nodes_alive: int, message: str,
                              at: float) -> WorkloadCluster:
        """Record one health check: ``FAILURE_THRESHOLD`` failed ones in a row mark the cluster
        unhealthy, a passed one brings it back to active (a draining one stays draining)."""
        def record(cluster: WorkloadCluster) -> None:
            cluster.checked_at, cluster.nodes_alive = at, nodes_alive
            cluster.health_message = "" if healthy else message
            cluster.failed_checks = 0 if healthy else cluster.failed_checks + 1
            if cluster.failed_checks >= FAILURE_THRESHOLD and cluster.state is ClusterState.ACTIVE:
                cluster.state = ClusterState.UNHEALTHY
            elif healthy and cluster.state is ClusterState.UNHEALTHY:
                cluster.state = ClusterState.ACTIVE
        return self._change_cluster(name, record)

    def remove_cluster(self, name: str) -> None:
        with self._tx() as db:
            n = db.execute("DELETE FROM workload_clusters WHERE name = ?", (name,)).rowcount
        if not n:
            raise NotFound(f"cluster {name!r} is not registered",
                           fix="list them with `spotplane clusters list`")
