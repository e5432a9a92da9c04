"""Executors: run a job's replicas on their nodes and report progress to the controller.

Both speak ``controlplane.reconcile.controller.JobExecutor`` (``start(job, nodes)``, ``stop(job, reason)``,
``notice(job, seconds_left)``, ``poll(jobs) -> {job_id: ExecutorReport}``); the Ray one also
keeps replicas through a node's loss (``controlplane.reconcile.contracts.ReplicatingExecutor``):

- :class:`RayJobExecutor` runs each replica's ``entrypoint`` as a Ray job
  (``ray.job_submission.JobSubmissionClient``) with the job, replica, artifact store and the
  replica's :class:`~actors.checkpoint.CheckpointActor` named in its environment (read by
  ``controlplane.sdk``). Stopping a replica stops its Ray job: the process is killed and its
  memory is gone; the next replica restores from the freshest valid artifact.
- :class:`~actors.simexecutor.SimulatedExecutor` advances simulated progress on the clock
  (large replays); :func:`make_executor` builds either from a config.

**Pinning to nodes.** A replica (its Ray job's entrypoint and its checkpoint actor) asks for
0.001 of the node's custom resource, so Ray places it on that node:

1. ``spotplane_node:<instance id>`` when the cluster has it (a real node started with
   ``ray start --resources='{"spotplane_node:<id>": 1}'``, as ``SimulatedFleet.ray_resources``
   names them);
2. otherwise a *slot*: the local Ray of the simulated fleet is started with one resource per
   slot, ``ray.init(resources=slot_resources(n))`` (``spotplane_slot:0`` ... ``n-1``), and each
   simulated node is bound to a free slot while it lives (:class:`SlotMap`), so the processes of
   a node share a slot and a "preempted" node's replica is killed with its Ray job;
3. otherwise (a Ray without either, e.g. the shared test cluster) the replica is not pinned and
   a log line says so.

Ray job status -> replica state: PENDING -> STARTING, RUNNING -> RUNNING, SUCCEEDED ->
SUCCEEDED, FAILED -> FAILED, STOPPED -> STOPPED (by us: preemption or cancel). Logs of every
attempt of a job: :meth:`RayJobExecutor.logs` / :func:`actors.jobagent.job_logs`. Replicas,
their states and the slots are in ``actors.replicas``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from actors.actorbridge import ActorBridge, Actors, LocalActors
from actors.checkpoint import actor_name, checkpoint_actor_options
from actors.replicas import (
    NODE_PREFIX,
    PIN_AMOUNT,
    RAY_STATUS,
    SLOT_PREFIX,
    Replica,
    ReplicaState,
    SlotMap,
    is_slot,
    slot_index,
)
from actors.simexecutor import SimulatedExecutor, default_model
from clusters.artifacts import ArtifactStore, check_id, open_store
from clusters.fleet import FleetProvider
from clusters.packages import PackageStore, package_name
from clusters.rayjobs import LogArchive, submission_client, transient
from controlplane import jobenv, sdk
from controlplane.core.blobs import Blobs
from controlplane.core.clock import Clock, ManualClock, WallClock
from controlplane.core.config import REPO_ROOT, load_settings
from controlplane.core.errors import InvalidInput, NotFound, Unavailable
from controlplane.core.models import Job, Node
from controlplane.core.runtime_env import RuntimeEnv
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ExecutorReport, JobExecutor, ReplicatingExecutor
from controlplane.store import IN_STORE, LOGS, PACKAGES, Store, open_blobs
from policies.preemption import PreemptionModel

log = logging.getLogger(__name__)

GPU_MODES = ("auto", "always", "never")
CONTROLLER_SUBMIT_RETRY_S = 5.0  # a tick waits this long on a busy job agent, then moves on


class RayJobExecutor(JobExecutor, ReplicatingExecutor):
    """Runs replicas as Ray jobs pinned to their nodes, each with a checkpoint actor."""

    def __init__(
        self,
        dashboard_address: str,
        artifact_uri: str,
        *,
        namespace: str = "spotplane",
        clock: Clock | None = None,  # the control plane's clock (node ages); waits use wall time
        hours_per_second: float = 1 / 3600,
        model_factory: Callable[[Node | None], Any] | None = None,
        s3_endpoint_url: str | None = None,
        working_dir: str = str(REPO_ROOT),
        python: str = sys.executable,
        pin: str = "auto",
        detached_actors: bool = False,
        stop_timeout_s: float = 30.0,
        submit_timeout_s: float = 120.0,
        submit_retry_s: float | None = None,
        env: dict[str, str] | None = None,
        gpus: str = "auto",
        workload_gcs: str | None = None,
        workload_token_path: str | None = None,
        package_dir: str | Blobs | None = None,
        log_dir: str | Blobs | None = None,
        log_copy_s: float = 5.0,
    ) -> None:
        if pin not in ("auto", "never"):
            raise InvalidInput("pin", f"unknown pin mode {pin!r}", fix="use 'auto' or 'never'")
        if gpus not in GPU_MODES:
            raise InvalidInput(
                "gpus", f"unknown GPU mode {gpus!r}", fix=f"use one of {', '.join(GPU_MODES)}"
            )
        self.client = submission_client(
            dashboard_address, workload_token_path, remote=workload_gcs is not None
        )
        self.address = str(self.client.get_address())
        self.artifact_uri = str(artifact_uri)
        self.s3_endpoint_url = s3_endpoint_url
        self.store: ArtifactStore = open_store(self.artifact_uri, endpoint_url=s3_endpoint_url)
        self.namespace = namespace
        # the checkpoint actors live on the cluster the jobs run on: through a bridge process
        # when that is not this process's own Ray (the executor inside the control plane)
        self.actors: Actors = (
            ActorBridge(workload_gcs, namespace, python=python, token_path=workload_token_path)
            if workload_gcs is not None
            else LocalActors(namespace)
        )
        self.clock = clock or WallClock()
        self.scale = hours_per_second
        self.model_factory = model_factory or default_model
        self.working_dir = working_dir
        self.python = python
        self.pin = pin
        self.detached_actors = detached_actors
        self.stop_timeout_s = stop_timeout_s
        self.submit_timeout_s = submit_timeout_s  # a gang's placement group may take this long
        # how long one submission retries a busy job agent (default: submit_timeout_s); the
        # controller's own executor keeps it short and retries on its next tick instead
        self.submit_retry_s = submit_timeout_s if submit_retry_s is None else submit_retry_s
        self.env = dict(env or {})
        self.gpus = gpus
        # the packages tenants uploaded through the API (clusters.packages), read per attempt
        self.packages = PackageStore(package_dir) if package_dir else None
        # copies of running attempts' logs, for when their node (and Ray's copy) is gone
        self.log_archive = LogArchive(log_dir) if log_dir else None
        self.log_copy_s = log_copy_s
        self._log_copied: dict[str, float] = {}  # submission id -> wall time of its last copy
        self.replicas: dict[str, list[Replica]] = {}  # job id -> every attempt, oldest first
        self._slots: SlotMap | None = None
        self._attempts: dict[tuple[str, str], int] = {}
        self._unstopped: set[str] = set()  # Ray jobs whose stop the job API did not take
        self._io: dict[str, tuple[tuple[int, ...], tuple[int, int]]] = {}  # see _artifact_io

    def artifact_uri_for(self, tenant_id: str | None) -> str:
        """The artifact prefix a tenant's jobs are given: ``<root>/tenants/<tenant id>``."""
        if tenant_id is None:
            return self.artifact_uri
        check_tenant_id(tenant_id)
        return f"{self.artifact_uri.rstrip('/')}/tenants/{tenant_id}"

    def store_for(self, tenant_id: str | None) -> ArtifactStore:
        """The artifact store of one tenant's prefix."""
        return open_store(self.artifact_uri_for(tenant_id), endpoint_url=self.s3_endpoint_url)

    # -- the controller's JobExecutor protocol ---------------------------------------------------
    def start(self, job: Job, nodes: Sequence[Node]) -> None:
        """Start the job's replicas: replica ``r<i>`` on the i-th distinct node (``spec.replicas``);
        those already live are kept, so a start that raised :class:`Unavailable` can be retried."""
        if job.spec.entrypoint is None:
            raise InvalidInput(
                "entrypoint",
                f"job {job.id} has no entrypoint",
                fix="simulated jobs need no executor",
            )
        if not nodes:
            raise InvalidInput("nodes", f"job {job.id} has no node to run on")
        started = {r.replica_id for r in self.live(job.id)}  # a retried start keeps those
        if job.spec.workers > 1:
            if not started:
                self.start_gang(job, nodes)
            return
        n = max(1, min(job.spec.replicas, len(nodes)))
        for i, node in enumerate(nodes[:n]):
            if f"r{i}" in started:
                continue
            age = (
                0.0
                if node.launched_at is None
                else max(0.0, self.clock.now() - node.launched_at) / HOUR
            )
            self.start_replica(
                job_id=job.id,
                replica_id=f"r{i}",
                entrypoint=job.spec.entrypoint,
                work_hours=job.spec.compute_hours,
                node=node,
                node_age_hours=age,
                checkpoint_hours=job.spec.checkpoint_hours,
                env=job.spec.env,
                gpus=job.spec.gpus_per_worker,
                tenant_id=job.tenant_id,
                runtime_env=job.spec.runtime_env,
            )

    def start_gang(self, job: Job, nodes: Sequence[Node]) -> Replica:
        """A gang (``workers > 1``): a placement group of one bundle per worker (its GPUs and
        its node's pin), STRICT_SPREAD, placed before the entrypoint starts on the first node;
        the job finds it with :func:`controlplane.sdk.placement_group`. Losing any node stops
        the whole gang (the controller's preemption), which restores from the last checkpoint."""
        assert job.spec.entrypoint is not None
        if len(nodes) < job.spec.workers:
            raise InvalidInput("nodes", f"job {job.id} is a gang of {job.spec.workers} workers "
                               f"but has {len(nodes)} nodes")
        gang = list(nodes[: job.spec.workers])
        return self.start_replica(
            job_id=job.id, replica_id="r0", entrypoint=job.spec.entrypoint,
            work_hours=job.spec.compute_hours, node=gang[0],
            checkpoint_hours=job.spec.checkpoint_hours, env=job.spec.env,
            gpus=job.spec.gpus_per_worker, tenant_id=job.tenant_id,
            runtime_env=job.spec.runtime_env, gang=gang[1:])

    def stop(self, job: Job, reason: str) -> None:
        """Stop every live replica of the job (preemption of its nodes, or cancel)."""
        for rep in self.live(job.id):
            self.stop_replica(rep, reason)

    def notice(self, job: Job, seconds_left: float) -> None:
        """A preemption notice for the job's nodes (``seconds_left`` on the control-plane clock):
        every live replica checkpoints at once."""
        wall_left = seconds_left / HOUR / self.scale  # control-plane seconds -> the job's seconds
        for rep in self.live(job.id):
            self.notice_replica(rep, wall_left)

    def poll(self, jobs: Sequence[Job]) -> dict[str, ExecutorReport]:
        out: dict[str, ExecutorReport] = {}
        self._stop_again()
        for job in jobs:
            reps = [
                r for r in self.replicas.get(job.id, []) if r.state not in (ReplicaState.STOPPED,)
            ]
            if not reps:
                continue
            statuses = [self.replica_status(r) for r in reps]
            for r in reps:
                self.copy_logs(r)
            told = [s for s in statuses if s.get("started")]
            if told:
                progress = max(float(s.get("progress", 0.0)) for s in told)
                checkpointed = max(float(s.get("checkpointed", 0.0)) for s in told)
            else:  # no attempt has restored or begun yet (a new one): no news is no change
                progress = job.progress_hours / job.spec.compute_hours
                checkpointed = job.checkpointed_hours / job.spec.compute_hours
            ckpts = sum(int(s.get("checkpoints", 0)) for s in statuses)
            finished = any(r.state is ReplicaState.SUCCEEDED for r in reps)
            failed = None
            if not finished and all(r.state is ReplicaState.FAILED for r in reps):
                failed = self._failure(reps)
            changed = (ckpts, len(self.replicas.get(job.id, [])),
                       sum(int(s.get("plans", 0)) for s in statuses),
                       int(finished or failed is not None))  # the end: read the last save
            nbytes, fallbacks = self._artifact_io(job, changed)
            out[job.id] = ExecutorReport(
                progress_hours=progress * job.spec.compute_hours,
                checkpointed_hours=checkpointed * job.spec.compute_hours,
                checkpoints=ckpts,
                finished=finished,
                failed=failed,
                checkpoint_bytes=nbytes,
                restore_fallbacks=fallbacks,
            )
            if finished or failed:
                self._cleanup(job.id)
        return out

    def _artifact_io(self, job: Job, changed: tuple[int, ...]) -> tuple[int, int]:
        """Bytes of the job's checkpoints and its restore fallbacks, from the artifact store;
        listed again only when the job's checkpoints, replicas or restores changed."""
        seen = self._io.get(job.id)
        if seen is not None and seen[0] == changed:
            return seen[1]
        try:
            totals = artifact_totals(self.store_for(job.tenant_id), job.id)
        except Exception as e:  # noqa: BLE001 - a store hiccup: keep the last totals
            log.debug("artifact totals of %s: %s", job.id, e)
            return seen[1] if seen is not None else (0, 0)
        self._io[job.id] = (changed, totals)
        return totals

    # -- replication (seed 004): the hooks a controller calls per node ---------------------------
    def node_preempted(self, job: Job, node_id: str, reason: str = "node preempted") -> bool:
        """One node of a replicated job is gone: stop its replica; a live peer checkpoints at
        once (:meth:`stop_replica`). Returns whether a replica survives (no rollback needed)."""
        for rep in self.live(job.id):
            if rep.node_id == node_id:
                self.stop_replica(rep, reason)
        return bool(self.live(job.id))

    def start_replacement(self, job: Job, node: Node | str) -> Replica:
        """A replacement replica on ``node``: it restores the freshest artifact (the survivor's)."""
        live_ids = {r.replica_id for r in self.live(job.id)}
        free = [
            f"r{i}"
            for i in range(max(job.spec.replicas, len(live_ids) + 1))
            if f"r{i}" not in live_ids
        ]
        assert job.spec.entrypoint is not None
        return self.start_replica(
            job_id=job.id,
            replica_id=free[0],
            entrypoint=job.spec.entrypoint,
            work_hours=job.spec.compute_hours,
            node=node if isinstance(node, Node) else None,
            node_id=node if isinstance(node, str) else None,
            checkpoint_hours=job.spec.checkpoint_hours,
            env=job.spec.env,
            gpus=job.spec.gpus_per_worker,
            tenant_id=job.tenant_id,
            runtime_env=job.spec.runtime_env,
        )

    # -- replicas --------------------------------------------------------------------------------
    def start_replica(
        self,
        *,
        job_id: str,
        replica_id: str,
        entrypoint: str,
        work_hours: float,
        node: Node | None = None,
        node_id: str | None = None,
        node_age_hours: float = 0.0,
        checkpoint_hours: float = 1 / 60,
        env: dict[str, str] | None = None,
        gpus: int = 0,
        tenant_id: str | None = None,
        runtime_env: RuntimeEnv | None = None,
        gang: Sequence[Node] = (),
    ) -> Replica:
        """Submit one replica's Ray job with its checkpoint actor, pinned to the node; the
        entrypoint asks Ray for ``gpus`` GPUs (see :meth:`_num_gpus`), so Ray sets
        ``CUDA_VISIBLE_DEVICES`` to exactly those.

        The job's environment is :func:`job_env`'s allow-list, its artifacts its tenant's prefix
        (``tenant_id`` None: the root, for an operator's own replicas)."""

        nid = node.id if node is not None else (node_id or "local")
        attempt = self._next_attempt(job_id, replica_id)
        resource = self._resource_for(nid)
        name = actor_name(job_id, replica_id)
        self._kill_actor(name)  # a previous attempt's actor (same replica, dead node)
        opts = checkpoint_actor_options(
            job_id, replica_id, self.namespace, resource, detached=self.detached_actors
        )
        group: str | None = None
        try:
            # placed and planned before the job asks it
            self.actors.create(
                opts,
                {
                    "job_id": job_id,
                    "replica_id": replica_id,
                    "work_hours": work_hours,
                    "model": self.model_factory(node),
                    "node_age_hours": node_age_hours,
                    "checkpoint_hours": checkpoint_hours,
                    "hours_per_second": self.scale,
                    "node_id": nid,
                },
            )
            submission_id = f"spotplane-{job_id}-{replica_id}-{attempt}"
            num_gpus = self._num_gpus(gpus)
            if gang:
                group = f"spotplane-pg-{job_id}-{replica_id}-{attempt}"
                self._place_gang(group, [nid, *(g.id for g in gang)], num_gpus, resource)
                num_gpus = 0  # the workers' GPUs are the bundles'; the driver holds none
            user_env = {**self.env, **(env or {}),
                        **(runtime_env.env_vars if runtime_env is not None else {})}
            env_vars = job_env(
                user_env,
                job_id=job_id,
                replica_id=replica_id,
                tenant_id=tenant_id,
                artifact_uri=self.artifact_uri_for(tenant_id),
                actor=name,
                namespace=self.namespace,
                node_id=nid,
                # Ray expands ${VAR} from the node's environment: the job keeps the node's own path
                # (where Ray itself may be installed) behind the repository's
                pythonpath=f"{self.working_dir}{os.pathsep}${{PYTHONPATH}}",
                s3_endpoint_url=self.s3_endpoint_url,
                placement_group=group,
            )
            kwargs: dict[str, Any] = {}
            if resource is not None:
                kwargs["entrypoint_resources"] = {resource: PIN_AMOUNT}
            if num_gpus:
                kwargs["entrypoint_num_gpus"] = num_gpus
            ray_env = self.ray_runtime_env(runtime_env, tenant_id)
            self._submit(
                entrypoint=self._command(entrypoint, jobenv.user_keys(user_env),
                                         own_dir="working_dir" in ray_env),
                submission_id=submission_id,
                runtime_env={**ray_env, "env_vars": env_vars},
                metadata={
                    "spotplane_job_id": job_id,
                    "spotplane_replica_id": replica_id,
                    "spotplane_node_id": nid,
                },
                entrypoint_num_cpus=0,
                **kwargs,
            )
        except Exception as exc:
            self._abandon(name, group, [nid, *(g.id for g in gang)])
            if transient(exc) or died_with_its_node(exc):
                raise Unavailable(f"the workload cluster did not take job {job_id} replica "
                                  f"{replica_id} ({exc})", fix="the controller retries it next "
                                  "tick") from exc
            raise
        rep = Replica(
            job_id,
            replica_id,
            nid,
            attempt,
            submission_id,
            name,
            resource,
            self.clock.now(),
            work_hours,
            group=group,
            group_nodes=[g.id for g in gang],
        )
        self.replicas.setdefault(job_id, []).append(rep)
        log.info(
            "job %s replica %s attempt %d on node %s (%s)",
            job_id,
            replica_id,
            attempt,
            nid,
            resource or "not pinned",
        )
        return rep

    def _place_gang(self, name: str, node_ids: Sequence[str], gpus: int,
                    first_pin: str | None) -> None:
        """Create the gang's placement group: bundle i holds ``gpus`` GPUs and node i's pin."""
        bundles: list[dict[str, float]] = []
        for i, nid in enumerate(node_ids):
            pin = first_pin if i == 0 else self._resource_for(nid)
            bundle: dict[str, float] = {"GPU": float(gpus)} if gpus else {}
            if pin is not None:
                bundle[pin] = PIN_AMOUNT
            bundles.append(bundle or {"CPU": 0.001})
        placed = self.actors.create_group(name, bundles, "STRICT_SPREAD", self.submit_timeout_s)
        log.info("gang %s placed on Ray nodes %s", name, placed)

    def live(self, job_id: str) -> list[Replica]:
        return [
            r
            for r in self.replicas.get(job_id, [])
            if r.state in (ReplicaState.STARTING, ReplicaState.RUNNING)
        ]

    def notice_replica(self, rep: Replica, seconds_left: float) -> None:
        """A notice in the job's own (wall) seconds."""
        self._call(rep, "notice", float(seconds_left), timeout=None)

    def stop_replica(
        self, rep: Replica, reason: str, *, preempted: bool = True
    ) -> dict[str, Any] | None:
        """Stop the replica's Ray job (its process dies with its memory); returns what the
        preemption cost (the checkpoint actor's :class:`~actors.checkpoint.EmergencyOutcome`).

        Seed 004: when another replica of the job is alive, it checkpoints at once, so its
        replacement restores from a checkpoint taken now rather than from the last periodic one.
        """
        self.copy_logs(rep, force=True)
        try:
            rep.outcome = self._call(rep, "node_lost", timeout=10)
        except Exception as e:  # the actor died with its node
            log.warning("checkpoint actor %s unreachable at stop: %s", rep.actor_name, e)
        self._stop_ray_job(rep.submission_id)
        rep.state = ReplicaState.STOPPED
        rep.stopped_reason = reason
        self._kill_actor(rep.actor_name)
        self._release(rep)
        if preempted:
            for peer in self.live(rep.job_id):
                with contextlib.suppress(Exception):
                    self._call(
                        peer, "request_checkpoint", f"peer {rep.replica_id} lost: {reason}",
                        timeout=None,
                    )
        log.info("job %s replica %s stopped (%s)", rep.job_id, rep.replica_id, reason)
        return rep.outcome

    def replica_status(self, rep: Replica) -> dict[str, Any]:
        """Ray job status mapped to a :class:`ReplicaState`, plus the checkpoint actor's status."""
        if rep.state is not ReplicaState.STOPPED:
            try:
                info = self.client.get_job_info(rep.submission_id)
                rep.state = RAY_STATUS[str(info.status.value)]
                rep.ray_message = str(info.message or "").split(",", 1)[0][:300]
            except Exception as e:  # dashboard hiccup: keep the last state
                log.debug("status of %s: %s", rep.submission_id, e)
        try:
            status = self._call(rep, "status", timeout=5)
            if status is not None:
                rep.last_status = dict(status)
        except Exception as e:
            log.debug("checkpoint actor %s: %s", rep.actor_name, e)
        return {**rep.last_status, "state": rep.state.value, "submission_id": rep.submission_id}

    def logs(self, job_id: str) -> str:
        """Logs of every attempt of every replica of the job, oldest first."""
        parts = []
        for rep in self.replicas.get(job_id, []):
            parts.append(
                f"=== {rep.replica_id} attempt {rep.attempt} on {rep.node_id} ({rep.state.value}) ===\n{self._logs(rep)}"
            )
        return "\n".join(parts)

    def close(self) -> None:
        """Stop every live replica and kill every checkpoint actor this executor started."""
        for job_id in list(self.replicas):
            for rep in self.live(job_id):
                self.stop_replica(rep, "executor closed", preempted=False)
            self._cleanup(job_id)
        self.actors.close()

    # -- helpers ---------------------------------------------------------------------------------
    def _command(self, entrypoint: str, user_keys: Sequence[str] = (), *,
                 own_dir: bool = False) -> str:
        """``cd WORKING_DIR && exec python -m controlplane.jobenv KEYS -- ENTRYPOINT``: the
        entrypoint runs in :mod:`controlplane.jobenv`'s allow-listed environment only. With
        its own ``working_dir`` (``own_dir``) it runs where Ray unpacked the package."""
        parts = shlex.split(entrypoint)
        if parts and parts[0] in ("python", "python3"):
            parts[0] = self.python
        launcher = [self.python, "-m", "controlplane.jobenv", ",".join(user_keys), "--"]
        command = "exec " + " ".join(shlex.quote(p) for p in launcher + parts)
        return command if own_dir else f"cd {shlex.quote(self.working_dir)} && {command}"

    def ray_runtime_env(self, runtime_env: RuntimeEnv | None, tenant_id: str | None) -> dict[str, Any]:
        """The job's runtime_env for Ray, less env_vars: each uploaded package put on the
        workload cluster first (:meth:`ensure_package`), so every attempt on any node runs it."""
        if runtime_env is None:
            return {}
        for uri in runtime_env.packages():
            self.ensure_package(uri, tenant_id)
        return runtime_env.for_ray()

    def ensure_package(self, uri: str, tenant_id: str | None) -> bool:
        """Upload the tenant's package ``uri`` to the workload cluster's GCS unless it holds it
        already (Ray drops unreferenced packages, so this is checked for every attempt).
        Returns whether it uploaded."""
        if self.client._package_exists(uri):
            return False
        if self.packages is None or tenant_id is None:
            raise InvalidInput("runtime_env", f"package {uri} is not on the workload cluster and "
                               "this executor has no package store",
                               fix="give the executor package_dir (spotplane up does)")
        data = self.packages.blobs.get(self.packages.key(tenant_id, package_name(uri)))
        if data is None:
            raise NotFound(f"package {uri} of tenant {tenant_id} is not in {self.packages.blobs.where}",
                           fix="upload it again (spotplane submit --working-dir)")
        with tempfile.TemporaryDirectory(prefix="spotplane-pkg-") as tmp:
            path = Path(tmp) / package_name(uri)
            path.write_bytes(data)
            self.client._upload_package(uri, str(path), include_gitignore=False, is_file=True)
        log.info("uploaded %s (%d bytes) to the workload cluster", uri, len(data))
        return True

    def _next_attempt(self, job_id: str, replica_id: str) -> int:
        """The next attempt's number. The count lives in this process, so after a controller
        restart Ray may already hold the ids it would reuse (Ray refuses them): skip those, and
        stop any of them still running, so one replica never runs twice."""
        attempt = self._attempts.get((job_id, replica_id), 0) + 1
        while True:
            sid = f"spotplane-{job_id}-{replica_id}-{attempt}"
            try:
                status = str(self.client.get_job_status(sid).value)
            except Exception as e:  # noqa: BLE001 - unknown to Ray: the id is free
                if transient(e):
                    raise Unavailable(f"the workload cluster's job API did not answer ({e})",
                                      fix="the controller retries next tick") from e
                break
            if status not in ("STOPPED", "SUCCEEDED", "FAILED"):
                log.warning("stopping %s, left running by an earlier controller", sid)
                with contextlib.suppress(Exception):
                    self.client.stop_job(sid)
            attempt += 1
        self._attempts[(job_id, replica_id)] = attempt
        return attempt

    def _submit(self, **kwargs: Any) -> None:
        """``submit_job``, retried briefly (``submit_retry_s``) while the job agent answers "try
        again later" or not at all; past that the error goes up (the tick goes on)."""
        wall = WallClock()
        deadline = wall.now() + self.submit_retry_s
        while True:
            try:
                self.client.submit_job(**kwargs)
                return
            except Exception as e:
                if not transient(e) or wall.now() > deadline:
                    raise
                log.info("Ray job agent not ready (%s): retrying the submission", e)
                wall.sleep(1.0)

    def _abandon(self, actor: str, group: str | None, node_ids: Sequence[str]) -> None:
        """Undo a replica start that failed before its Ray job was taken: its checkpoint actor,
        its gang's placement group and its nodes' slots."""
        with contextlib.suppress(Exception):
            self._kill_actor(actor)
        if group is not None:
            with contextlib.suppress(Exception):
                self.actors.remove_group(group)
        if self._slots is not None:
            for nid in node_ids:
                self._slots.release(nid)

    def _num_gpus(self, wanted: int) -> int:
        """GPUs the entrypoint asks Ray for: ``always`` the job's, ``never`` none, ``auto`` the
        job's when the workload Ray has GPUs (a real GPU node), none on a GPU-less Ray (the
        simulated fleet's local Ray, where the nodes' accelerators are only modelled)."""
        if wanted <= 0 or self.gpus == "never":
            return 0
        if self.gpus == "always":
            return wanted
        return wanted if float(self.actors.resources().get("GPU", 0.0)) > 0 else 0

    def _resource_for(self, node_id: str) -> str | None:
        if self.pin == "never":
            return None
        have = self.actors.resources()
        exact = f"{NODE_PREFIX}{node_id}"
        if exact in have:
            return exact
        slots = [k for k in have if is_slot(k)]
        if self._slots is None:
            self._slots = SlotMap(sorted(slots, key=slot_index))
        else:
            self._slots.learn(slots)
        slot = self._slots.slot_for(node_id, have)
        if slot is None:
            log.info(
                "no %s<id> or free %s<i> resource in this Ray: replica on node %s is not pinned",
                NODE_PREFIX,
                SLOT_PREFIX,
                node_id,
            )
        return slot

    def _call(self, rep: Replica, method: str, *args: Any, timeout: float | None) -> Any:
        """The replica's checkpoint actor's ``method`` (None: a stopped replica or no actor)."""
        if rep.state is ReplicaState.STOPPED:
            return None
        try:
            return self.actors.call(rep.actor_name, method, *args, timeout=timeout)
        except LookupError:
            return None

    def _kill_actor(self, name: str) -> None:
        self.actors.kill(name)

    def _stop_ray_job(self, submission_id: str) -> None:
        """Stop a Ray job and wait (``stop_timeout_s``) until it ends; a job API that does not
        answer leaves it on a list that every :meth:`poll` tries again, so none runs on."""
        try:
            self.client.stop_job(submission_id)
            self._wait_terminal(submission_id)
        except Exception as e:
            if not transient(e):
                raise
            log.warning("stopping Ray job %s: %s; tried again at the next poll", submission_id, e)
            self._unstopped.add(submission_id)
            return
        self._unstopped.discard(submission_id)

    def _stop_again(self) -> None:
        """Another try at the stops the job API did not take."""
        for sid in sorted(self._unstopped):
            try:
                self._stop_ray_job(sid)
            except Exception as e:  # noqa: BLE001 - unknown to Ray (gone with its cluster)
                log.warning("Ray job %s cannot be stopped: %s", sid, e)
                self._unstopped.discard(sid)

    def _wait_terminal(self, submission_id: str) -> None:
        wall = WallClock()  # a real process stops in real time, whatever the control-plane clock
        deadline = wall.now() + self.stop_timeout_s
        while True:
            status = str(self.client.get_job_status(submission_id).value)
            if status in ("STOPPED", "SUCCEEDED", "FAILED"):
                return
            if wall.now() > deadline:
                log.warning("Ray job %s still %s after stop", submission_id, status)
                return
            wall.sleep(0.1)

    def copy_logs(self, rep: Replica, *, force: bool = False) -> None:
        """Copy the attempt's logs into the archive, at most every ``log_copy_s`` wall seconds
        (``force``: now, e.g. before it is stopped)."""
        if self.log_archive is None:
            return
        now = WallClock().now()
        if not force and now - self._log_copied.get(rep.submission_id, -1e18) < self.log_copy_s:
            return
        self._log_copied[rep.submission_id] = now
        try:
            text = self._job_logs(rep.submission_id)
        except Exception as e:  # noqa: BLE001 - its node may be gone: keep the last copy
            log.debug("logs of %s: %s", rep.submission_id, e)
            return
        self.log_archive.save(rep.job_id, rep.submission_id, text)

    def _logs(self, rep: Replica) -> str:
        try:
            return self._job_logs(rep.submission_id)
        except Exception as e:
            kept = self.log_archive.load(rep.job_id, rep.submission_id) if self.log_archive else None
            return kept if kept is not None else f"(logs unavailable: {e})"

    def _job_logs(self, submission_id: str, tries: int = 3) -> str:
        """The Ray job's logs; a job API that did not answer (a loaded head) is asked again."""
        for left in range(tries - 1, -1, -1):
            try:
                return str(self.client.get_job_logs(submission_id))
            except Exception as e:
                if not left or not transient(e):
                    raise
                WallClock().sleep(0.5)
        raise AssertionError("unreachable")

    def _failure(self, reps: Sequence[Replica]) -> str | None:
        """Why the job failed, or None while a replica's node is gone from Ray: its Ray job died
        with the node, which is a preemption the fleet reports, not a failure of the job."""
        gone = [r for r in reps if not self._nodes_present(r)]
        if gone:
            log.warning("job %s: Ray job %s ended with its node (%s); waiting for the fleet "
                        "to report the loss", gone[0].job_id, gone[0].submission_id,
                        gone[0].ray_message or "no message")
            return None
        last = reps[-1]
        said = f" ({last.ray_message})" if last.ray_message else ""
        return f"replica {last.replica_id} failed{said}: {self._tail(last)}"

    def _nodes_present(self, rep: Replica) -> bool:
        """Whether the Ray nodes the replica is pinned to (its own and its gang's) are alive."""
        have = self.actors.resources()
        pins = [rep.resource, *(self._bound_pin(n) for n in rep.group_nodes)]
        return all(p in have for p in pins if p is not None)

    def _bound_pin(self, node_id: str) -> str | None:
        exact = f"{NODE_PREFIX}{node_id}"
        if self._slots is None:
            return exact
        return self._slots.bound.get(node_id, exact)

    def _tail(self, rep: Replica, lines: int = 5) -> str:
        return " | ".join(self._logs(rep).strip().splitlines()[-lines:])

    def _cleanup(self, job_id: str) -> None:
        for rep in self.replicas.get(job_id, []):
            if rep.state is not ReplicaState.STOPPED:
                self.copy_logs(rep, force=True)  # its node may be released next
            self._kill_actor(rep.actor_name)
            self._release(rep)

    def _release(self, rep: Replica) -> None:
        """Give back what the replica held: its gang's placement group and its nodes' slots;
        once, since by a later call its nodes may be bound again for another job's replica."""
        if rep.released:
            return
        rep.released = True
        if rep.group is not None:
            try:
                self.actors.remove_group(rep.group)
            except Exception as e:  # noqa: BLE001 - gone with the cluster: nothing to free
                log.warning("removing placement group %s: %s", rep.group, e)
        if self._slots is not None:
            for nid in (rep.node_id, *rep.group_nodes):
                self._slots.release(nid)


def artifact_totals(store: ArtifactStore, job_id: str) -> tuple[int, int]:
    """(bytes of every checkpoint manifest the job has, restores that fell back past a bad one)."""
    nbytes = sum(ref.size for ref in store.list(job_id))
    return nbytes, sum(1 for e in store.events(job_id) if e.kind == "fallback")


def check_tenant_id(tenant_id: str) -> str:
    return check_id("tenant_id", tenant_id)


def job_env(
    user_env: dict[str, str],
    *,
    job_id: str,
    replica_id: str,
    tenant_id: str | None,
    artifact_uri: str,
    actor: str,
    namespace: str,
    node_id: str,
    pythonpath: str,
    s3_endpoint_url: str | None = None,
    placement_group: str | None = None,
) -> dict[str, str]:
    """A replica's ``runtime_env`` env_vars, built from an explicit list and nothing inherited:
    the user's own variables (without ``SPOTPLANE_*`` names) and the job's own ids, artifact
    prefix and checkpoint actor. No control-plane secret is ever among them."""
    env = {k: str(user_env[k]) for k in jobenv.user_keys(user_env)}
    env.update({
        sdk.ENV_JOB_ID: job_id,
        sdk.ENV_REPLICA_ID: replica_id,
        sdk.ENV_ARTIFACT_URI: artifact_uri,
        sdk.ENV_CHECKPOINT_ACTOR: actor,
        sdk.ENV_RAY_NAMESPACE: namespace,
        sdk.ENV_NODE_ID: node_id,
        "PYTHONPATH": pythonpath,
    })
    if tenant_id is not None:
        env["SPOTPLANE_TENANT_ID"] = tenant_id
    if s3_endpoint_url:
        env[sdk.ENV_S3_ENDPOINT] = s3_endpoint_url
    if placement_group:
        env[sdk.ENV_PLACEMENT_GROUP] = placement_group
    assert all(k in jobenv.SPOTPLANE_KEYS for k in env if k.startswith(jobenv.RESERVED_PREFIX))
    return env


NODE_DEATHS = ("ActorDiedError", "ActorUnavailableError", "NodeDiedError")


def died_with_its_node(exc: BaseException) -> bool:
    """Whether a replica's start failed because its Ray node is going (a SIGKILLed raylet that
    Ray has not yet marked DEAD): its checkpoint actor died, or was not placed in time. Through
    the actor bridge Ray's error arrives as ``RuntimeError("ActorDiedError: ...")``."""
    return isinstance(exc, TimeoutError) or any(
        type(exc).__name__ == d or str(exc).startswith(f"{d}:") for d in NODE_DEATHS)


WORKLOAD_FIX = (
    "pass the workload Ray cluster's dashboard (executor_options.workload_address, "
    "`spotplane up --workload-address`, SPOTPLANE_WORKLOAD_ADDRESS); `spotplane up` starts a "
    "local one by default (docs/security.md)"
)


def make_executor(config: dict[str, Any], *, clock: Clock) -> RayJobExecutor | SimulatedExecutor:
    """The executor a config names (the hook ``ControllerActor`` needs, one call):

    ``{"kind": "ray", "workload_address": "http://head:8265", "workload_gcs": "head:6379",
    "workload_token_path": None, "artifact_uri": "/state/artifacts" | "s3://b/p",
    "namespace": "spotplane", "hours_per_second": speed / 3600, "s3_endpoint_url": None}``
    or ``{"kind": "simulated"}``. The executor's checkpoint actors live on the workload cluster
    (through an :class:`~actors.actorbridge.ActorBridge`): ``workload_gcs`` defaults to
    the dashboard's host on Ray's GCS port 6379.
    """
    kind = config.get("kind", "ray")
    if kind == "simulated":
        return SimulatedExecutor(clock)
    if kind != "ray":
        raise InvalidInput(
            "executor.kind", f"unknown executor {kind!r}", fix="use 'ray' or 'simulated'"
        )
    if not config.get("workload_address"):
        raise InvalidInput("executor.workload_address", "is missing", fix=WORKLOAD_FIX)
    if not config.get("artifact_uri"):
        raise InvalidInput(
            "executor.artifact_uri", "is missing", fix="pass where checkpoint artifacts go"
        )
    dashboard = str(config["workload_address"])
    return RayJobExecutor(
        dashboard,
        str(config["artifact_uri"]),
        namespace=str(config.get("namespace", "spotplane")),
        clock=clock,
        hours_per_second=float(config.get("hours_per_second", 1 / 3600)),
        s3_endpoint_url=config.get("s3_endpoint_url"),
        detached_actors=bool(config.get("detached_actors", False)),
        gpus=str(config.get("gpus", "auto")),
        workload_gcs=str(config.get("workload_gcs") or default_gcs(dashboard)),
        workload_token_path=config.get("workload_token_path"),
        package_dir=config.get("package_dir"),
        log_dir=config.get("log_dir"),
        submit_retry_s=float(config.get("submit_retry_s", CONTROLLER_SUBMIT_RETRY_S)),
    )


def default_gcs(dashboard_address: str) -> str:
    """Ray's default GCS address on the dashboard's host (``head:6379``)."""
    from urllib.parse import urlparse

    host = urlparse(dashboard_address if "://" in dashboard_address else f"http://{dashboard_address}")
    return f"{host.hostname}:6379"


def _same_endpoint(a: str, b: str) -> bool:
    def norm(x: str) -> str:
        return x.split("://", 1)[-1].rstrip("/").replace("localhost", "127.0.0.1")

    return norm(a) == norm(b)


def runtime_executor(
    *, clock: Clock, fleet: FleetProvider | None = None, namespace: str = "spotplane",
    store: Store | None = None, **options: Any
) -> RayJobExecutor | SimulatedExecutor:
    """``RuntimeSettings(executor_factory="actors.executor:runtime_executor", executor_options=...)``.

    Runs inside the control plane (the controller actor). Options: ``kind`` ("ray" default, or
    "simulated"), ``workload_address`` (required: the dashboard of the workload Ray cluster
    tenants' jobs run on; refused when it is the control plane's own Ray), ``workload_gcs``
    (default ``<dashboard host>:6379``), ``workload_token_path`` (that cluster's Ray auth token
    file), ``artifact_uri`` (default ``<state_dir>/artifacts``), ``hours_per_second``
    (default: the simulated clock's speed / 3600, else 1/3600), ``s3_endpoint_url``. The
    checkpoint actors plan with the fleet's lifetime model when it has one (the simulated
    fleet's), else seed 001's GCE fit. ``package_dir`` / ``log_dir``: directories, or
    ``"store"`` for the ``store``'s blobs table (the default of a PostgreSQL store, so the
    executor reads the packages any API replica stored and its log copies reach every replica).
    """
    kind = options.pop("kind", "ray")
    model = fleet.lifetimes if fleet is not None else None
    model_factory = (lambda node: model) if isinstance(model, PreemptionModel) else None
    if kind == "simulated":
        return SimulatedExecutor(clock, model_factory=model_factory)
    dashboard = options.pop("workload_address", None)
    if not dashboard:
        raise InvalidInput("executor_options.workload_address", "is missing", fix=WORKLOAD_FIX)
    from ray._private.services import get_webui_url_from_internal_kv

    own = get_webui_url_from_internal_kv()
    if own and _same_endpoint(str(own), str(dashboard)):
        raise InvalidInput(
            "executor_options.workload_address",
            f"{dashboard} is the control plane's own Ray cluster: tenants' code there could "
            "reach the controller, the store and their secrets",
            fix=WORKLOAD_FIX,
        )
    for name, ns in (("package_dir", PACKAGES), ("log_dir", LOGS)):
        if store is not None and (options.get(name) == IN_STORE or (
                options.get(name) is None and store.backend == "postgresql")):
            options[name] = open_blobs(IN_STORE, store, ns)  # what every API replica reads
    options.setdefault("package_dir", str(load_settings().state_dir / "packages"))
    options.setdefault("log_dir", str(load_settings().state_dir / "logs"))
    uri = options.pop("artifact_uri", None)
    if not uri:

        uri = str(load_settings().state_dir / "artifacts")
    speed = clock.speed if isinstance(clock, ManualClock) else 0.0
    scale = float(options.pop("hours_per_second", speed / HOUR if speed > 0 else 1 / HOUR))
    gcs = options.pop("workload_gcs", None) or default_gcs(str(dashboard))
    return RayJobExecutor(
        str(dashboard),
        str(uri),
        namespace=namespace,
        clock=clock,
        hours_per_second=scale,
        model_factory=model_factory,
        workload_gcs=str(gcs),
        **{"submit_retry_s": CONTROLLER_SUBMIT_RETRY_S, **options},
    )
