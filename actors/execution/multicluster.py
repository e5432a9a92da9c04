"""One executor over many workload Ray clusters: each job's replicas run on the cluster of their
nodes, through a :class:`~actors.execution.executor.RayJobExecutor` of that cluster (its own job
client, its own actor bridge for the checkpoint actors, its own package uploads and log copies).

A node belongs to the registered cluster whose ``zones`` hold its zone (else the only cluster,
else ``local``). A job that starts on another cluster than the one it ran on moves: its
freshest checkpoint is read from the shared artifact store in the new region, and the bytes and
their price (:mod:`policies.egress`) are added to ``Job.egress_bytes`` / ``Job.egress_cost``.
Health checks (:mod:`clusters.workloadhealth`) run every ``check_every_s`` wall seconds and are
recorded in the registry, which placement reads.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from actors.execution.config import ExecutorConfig
from actors.execution.executor import RayJobExecutor
from actors.execution.factory import make_executor
from actors.execution.replicas import Replica, ReplicaState
from actors.simexecutor import SimulatedExecutor
from clusters.fleet import FleetProvider
from clusters.rayjobs import transient
from clusters.workloadhealth import ClusterHealth, check_cluster
from controlplane.core.clock import Clock, WallClock
from controlplane.core.errors import InvalidInput, Unavailable
from controlplane.core.models import Job, Node
from controlplane.core.workloadclusters import LOCAL_CLUSTER, WorkloadCluster, dashboard_url_of
from controlplane.reconcile.contracts import ExecutorReport, JobExecutor, ReplicatingExecutor
from controlplane.store import Store
from policies.egress import egress_usd

log = logging.getLogger(__name__)

CHECK_EVERY_S = 10.0  # wall seconds between two health checks of the registered clusters
CLOSE_WAIT_S = 30.0  # a health check in flight when the executor closes ends within this


class ClusterRegistry(Protocol):
    """Where the clusters are registered and their health recorded (the store)."""

    def list_clusters(self) -> list[WorkloadCluster]: ...

    def record_cluster_health(self, name: str, *, healthy: bool, nodes_alive: int, message: str,
                              at: float) -> WorkloadCluster: ...


Checker = Callable[[WorkloadCluster], ClusterHealth]
ExecutorMaker = Callable[[ExecutorConfig], RayJobExecutor]


CLOSED_ZONES_TTL_S = 1.0  # wall seconds the closed zones are read once for (one tick's calls)


def closed_zones(registry: ClusterRegistry,
                 ttl_s: float = CLOSED_ZONES_TTL_S) -> Callable[[], set[str]]:
    """The zones of the registered clusters that take no new work (draining or unhealthy),
    read from ``registry`` at most every ``ttl_s``: what
    :class:`clusters.clusterfleet.ClusterGatedFleet` keeps placement away from."""
    held: list[Any] = [float("-inf"), set()]

    def closed() -> set[str]:
        if time.monotonic() - held[0] >= ttl_s:
            held[1] = {z for c in registry.list_clusters() if not c.takes_work for z in c.zones}
            held[0] = time.monotonic()
        found: set[str] = held[1]
        return found
    return closed


def cluster_gone(exc: BaseException) -> bool:
    """Whether a call failed because the cluster no longer answers (its head, job API or actor
    bridge is gone), not because of what was asked."""
    return isinstance(exc, OSError | TimeoutError | Unavailable) or transient(exc)


def probe(cluster: WorkloadCluster) -> ClusterHealth:
    """Ray's dashboard of ``cluster``: its job API and its node list."""
    return check_cluster(cluster.dashboard_url, cluster.token_ref)


class MultiClusterExecutor(JobExecutor, ReplicatingExecutor):
    """Routes each job to the per-cluster executor of its nodes' cluster."""

    def __init__(self, config: ExecutorConfig, registry: ClusterRegistry, *,
                 clock: Clock | None = None, make: ExecutorMaker | None = None,
                 checker: Checker = probe, check_every_s: float = CHECK_EVERY_S) -> None:
        """``config``: every cluster's options but its address (taken from the registry);
        ``make``: builds one cluster's executor (default :class:`RayJobExecutor`)."""
        self.config = config
        self.registry = registry
        self.clock = clock or WallClock()
        self.make: ExecutorMaker = make or (lambda c: RayJobExecutor(c, clock=self.clock))
        self.checker = checker
        self.check_every_s = check_every_s
        self.executors: dict[str, RayJobExecutor] = {}
        self.gone: list[tuple[str, RayJobExecutor]] = []  # of clusters that stopped answering
        self.clusters: dict[str, WorkloadCluster] = {}
        self.placed: dict[str, str] = {}  # job id -> the cluster its replicas run on
        self._checked_at = float("-inf")
        self._closed = threading.Event()
        self._checks: threading.Thread | None = None
        self.refresh()

    def start_health_checks(self) -> None:
        """Check every cluster's health every ``check_every_s`` on a thread of its own, so a
        cluster that answers slowly never holds a tick."""
        if self._checks is not None:
            return

        def loop() -> None:
            while not self._closed.is_set():
                try:
                    self.check_health(force=True)
                except Exception as exc:  # noqa: BLE001 - the registry's store is away: next round
                    log.warning("cluster health checks failed: %s", exc)
                self._closed.wait(self.check_every_s)

        self._checks = threading.Thread(target=loop, name="cluster-health", daemon=True)
        self._checks.start()

    # -- the registry ----------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read the registry again (clusters added, drained or removed)."""
        self.clusters = {c.name: c for c in self.registry.list_clusters()}

    def check_health(self, *, force: bool = False) -> None:
        """Check every registered cluster's health when due, and record it."""
        if not force and time.monotonic() - self._checked_at < self.check_every_s:
            return
        self._checked_at = time.monotonic()
        for cluster in list(self.registry.list_clusters()):
            found = self.checker(cluster)
            try:
                self.registry.record_cluster_health(
                    cluster.name, healthy=found.healthy, nodes_alive=found.nodes_alive,
                    message=found.message, at=self.clock.now())
            except Exception as exc:  # noqa: BLE001 - removed meanwhile: the next refresh forgets it
                log.warning("cluster %s: health not recorded: %s", cluster.name, exc)
        self.refresh()

    def cluster_of(self, node: Node) -> str:
        """The cluster ``node`` belongs to: the one whose zones hold its zone."""
        for cluster in self.clusters.values():
            if node.zone in cluster.zones:
                return cluster.name
        if len(self.clusters) == 1:
            return next(iter(self.clusters))
        if LOCAL_CLUSTER in self.clusters:
            return LOCAL_CLUSTER
        raise InvalidInput("node.zone", f"node {node.id} in zone {node.zone} is in no registered "
                           "workload cluster", fix="register the cluster with --zone "
                           f"{node.zone} (spotplane clusters add)")

    def executor_for(self, name: str) -> RayJobExecutor:
        """The executor of cluster ``name``, made the first time a job needs it there."""
        found = self.executors.get(name)
        if found is not None:
            return found
        cluster = self.clusters.get(name)
        if cluster is None:
            self.refresh()
            cluster = self.clusters.get(name)
        if cluster is None:
            raise Unavailable(f"workload cluster {name} is not registered",
                              fix="register it with `spotplane clusters add`")
        made = self.make(dataclasses.replace(
            self.config, workload_address=cluster.dashboard_url,
            workload_gcs=cluster.gcs_address or self.config.workload_gcs,
            workload_token_path=cluster.token_ref))
        self.executors[name] = made
        return made

    # -- the controller's JobExecutor protocol ---------------------------------------------------
    def start(self, job: Job, nodes: Sequence[Node]) -> None:
        """Start the job on its nodes' cluster (a gang's nodes must share one); a job that ran
        on another cluster moves, and its egress is billed."""
        if not nodes:
            raise InvalidInput("nodes", f"job {job.id} has no node to run on")
        names = {self.cluster_of(n) for n in nodes[: max(job.spec.workers, 1)]}
        if len(names) > 1:
            raise InvalidInput("nodes", f"job {job.id}'s gang spans clusters {sorted(names)}",
                               fix="place a gang's nodes in one cluster")
        name = names.pop()
        executor = self.executor_for(name)
        before = self.placed.get(job.id, job.cluster)
        self._carry_attempts(job.id, executor)
        executor.start(job, nodes)
        self.placed[job.id] = name
        if before is not None and before != name:
            self.bill_move(job, before, name, executor)
        if job.cluster != name:
            job.cluster = name

    def _carry_attempts(self, job_id: str, target: RayJobExecutor) -> None:
        """Number the job's next attempt on ``target`` after every cluster's last one, so an
        attempt's id (and its log copy) is one across clusters."""
        counts = target.submissions.attempts
        for executor in [*(ex for _, ex in self.gone), *self.executors.values()]:
            for (jid, rid), n in executor.submissions.attempts.items():
                if jid == job_id and n > counts.get((jid, rid), 0):
                    counts[(jid, rid)] = n

    def bill_move(self, job: Job, src: str, dst: str, executor: RayJobExecutor) -> None:
        """Add the freshest checkpoint's bytes, and their price, to the job's egress."""
        refs = executor.store_for(job.tenant_id).list(job.id)
        if not refs:
            return
        freshest = max(refs, key=lambda r: (r.progress, r.t, r.seq))
        a, b = self.clusters.get(src), self.clusters.get(dst)
        usd = egress_usd(freshest.size, a.cloud, a.region, b.cloud, b.region) if a and b else 0.0
        job.egress_bytes = job.egress_bytes + freshest.size
        job.egress_cost = job.egress_cost + usd
        log.info("job %s moved %s -> %s: %d checkpoint bytes, $%.6f egress", job.id, src, dst,
                 freshest.size, usd)

    def _executor_of(self, job: Job) -> RayJobExecutor | None:
        name = self.placed.get(job.id, job.cluster)
        return self.executors.get(name) if name is not None else None

    def stop(self, job: Job, reason: str) -> None:
        """Stop the job's replicas on every cluster; on a cluster that no longer answers they
        are gone with it and are marked stopped."""
        for name, executor in list(self.executors.items()):
            if not executor.live(job.id):
                continue
            try:
                executor.stop(job, reason)
            except Exception as exc:
                if not cluster_gone(exc):
                    raise
                self._lost(name, executor, job.id, f"{reason}; cluster {name} unreachable: {exc}")

    def _lost(self, name: str, executor: RayJobExecutor, job_id: str, why: str) -> None:
        """The job's replicas on an unreachable cluster are gone: marked stopped, and the
        cluster's executor is made again (a new job client and actor bridge) when next needed."""
        log.warning("job %s: %s", job_id, why)
        for rep in executor.live(job_id):
            rep.state, rep.stopped_reason = ReplicaState.STOPPED, why
        self.gone.append((name, self.executors.pop(name)))
        try:  # its actor bridge: stopped, never restarted against a cluster that is gone
            executor.actors.close()
        except Exception as exc:  # noqa: BLE001 - nothing left to stop there
            log.warning("cluster %s: actor bridge not closed cleanly: %s", name, exc)

    def notice(self, job: Job, seconds_left: float) -> None:
        executor = self._executor_of(job)
        if executor is None:
            return
        try:
            executor.notice(job, seconds_left)
        except Exception as exc:
            if not cluster_gone(exc):
                raise
            log.warning("job %s: notice not delivered, its cluster is unreachable: %s", job.id, exc)

    def poll(self, jobs: Sequence[Job]) -> dict[str, ExecutorReport]:
        """Every job's report from the cluster it runs on (health checks run beside it when
        :meth:`start_health_checks` started them, else here when due); a cluster that does not
        answer reports nothing this tick (its nodes' loss is the fleet's to declare)."""
        if self._checks is None:
            self.check_health()
        out: dict[str, ExecutorReport] = {}
        for name, executor in list(self.executors.items()):
            mine = [j for j in jobs if self.placed.get(j.id, j.cluster) == name]
            if not mine:
                continue
            try:
                out.update(executor.poll(mine))
            except Exception as exc:
                if not cluster_gone(exc):
                    raise
                log.warning("cluster %s did not report: %s", name, exc)
        return out

    def node_preempted(self, job: Job, node_id: str, reason: str = "node preempted") -> bool:
        executor = self._executor_of(job)
        if executor is None:
            return False
        try:
            return executor.node_preempted(job, node_id, reason)
        except Exception as exc:
            if not cluster_gone(exc):
                raise
            name = self.placed.get(job.id, job.cluster) or "?"
            self._lost(name, executor, job.id, f"{reason}; cluster {name} unreachable: {exc}")
            return False

    def start_replacement(self, job: Job, node: Node | str) -> Replica:
        """A replacement replica: on the cluster the job runs on (a replica set stays there)."""
        executor = self._executor_of(job)
        if executor is None:
            raise InvalidInput("job", f"job {job.id} runs on no cluster yet")
        return executor.start_replacement(job, node)

    # -- what tests, benchmarks and the API read -------------------------------------------------
    @property
    def replicas(self) -> dict[str, list[Replica]]:
        """Every attempt of every job on every cluster, by job id, oldest first."""
        out: dict[str, list[Replica]] = {}
        for executor in [*(ex for _, ex in self.gone), *self.executors.values()]:
            for job_id, reps in executor.replicas.items():
                out.setdefault(job_id, []).extend(reps)
        for reps in out.values():
            reps.sort(key=lambda r: r.started_at)
        return out

    def attempts_by_cluster(self, job_id: str) -> dict[str, int]:
        """How many attempts of the job each cluster ran."""
        out: dict[str, int] = {}
        for name, ex in [*self.gone, *self.executors.items()]:
            if ex.replicas.get(job_id):
                out[name] = out.get(name, 0) + len(ex.replicas[job_id])
        return out

    def logs(self, job_id: str) -> str:
        """Every attempt's logs on every cluster, each cluster's after a line naming it."""
        return "\n".join(f"=== cluster {name} ===\n{ex.logs(job_id)}"
                         for name, ex in [*self.gone, *self.executors.items()]
                         if ex.replicas.get(job_id))

    def close(self) -> None:
        """Stop the health checks (the round in flight ends first, so none outlives its store)
        and every cluster's executor."""
        self._closed.set()
        if self._checks is not None and self._checks is not threading.current_thread():
            self._checks.join(timeout=CLOSE_WAIT_S)
        for name, executor in self.executors.items():  # a gone cluster's was closed at its loss
            try:
                executor.close()
            except Exception as exc:  # noqa: BLE001 - a cluster that is gone: nothing left to stop
                log.warning("cluster %s: executor not closed cleanly: %s", name, exc)

    def describe(self) -> dict[str, Any]:
        """Each cluster's state and executor, for logs and tests."""
        return {name: {"state": c.state.value, "executor": name in self.executors}
                for name, c in self.clusters.items()}


def make_cluster_executor(
    config: ExecutorConfig, *, clock: Clock, fleet: FleetProvider | None = None,
    namespace: str | None = None, store: Store | None = None,
) -> RayJobExecutor | SimulatedExecutor | MultiClusterExecutor:
    """The controller's executor: one :class:`MultiClusterExecutor` when the store registers a
    workload cluster other than ``config``'s own, each cluster's executor made as
    :func:`~actors.execution.factory.make_executor` makes one; else ``make_executor``'s (the
    single cluster, ``local``, exactly as before). Clusters registered later are seen at the
    controller's next activation."""
    def one(c: ExecutorConfig) -> Any:
        return make_executor(c, clock=clock, fleet=fleet, namespace=namespace, store=store)

    own = dashboard_url_of(config.workload_address or "").rstrip("/")
    others = ([c for c in store.list_clusters() if c.dashboard_url.rstrip("/") != own]
              if store is not None and config.kind == "ray" else [])
    if store is None or not others:
        return one(config)
    executor = MultiClusterExecutor(config, store, clock=clock, make=one)
    executor.start_health_checks()
    return executor
