"""The Ray job executor: starts a job's replicas on their nodes and reports their progress.

It speaks ``controlplane.reconcile.contracts.JobExecutor`` (``start(job, nodes)``,
``stop(job, reason)``, ``notice(job, seconds_left)``, ``poll(jobs) -> {job_id: ExecutorReport}``)
and keeps replicas through a node's loss (``ReplicatingExecutor``). Each replica's
``entrypoint`` runs as a Ray job (``ray.job_submission.JobSubmissionClient``) with the job,
replica, artifact store and the replica's :class:`~actors.checkpoint.CheckpointActor` named in
its environment (read by ``controlplane.sdk``). Stopping a replica stops its Ray job: the
process is killed and its memory is gone; the next replica restores from the freshest valid
artifact. The work is done by its parts: :mod:`~actors.execution.submission` (attempts),
:mod:`~actors.execution.pinning` (nodes, GPUs, gangs), :mod:`~actors.execution.packages`,
:mod:`~actors.execution.logs` and :mod:`~actors.execution.replicas` (bookkeeping).

Ray job status -> replica state: PENDING -> STARTING, RUNNING -> RUNNING, SUCCEEDED ->
SUCCEEDED, FAILED -> FAILED, STOPPED -> STOPPED (by us: preemption or cancel).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from actors.actorbridge import ActorBridge, Actors, LocalActors
from actors.checkpoint import actor_name, checkpoint_actor_options
from actors.execution.artifacts import TenantArtifacts
from actors.execution.config import ExecutorConfig
from actors.execution.logs import LogCopies
from actors.execution.packages import Packages
from actors.execution.pinning import PIN_AMOUNT, Pinning
from actors.execution.replicas import RAY_STATUS, Replica, ReplicaBook, ReplicaSpec, ReplicaState
from actors.execution.reports import Told, exit_code_of
from actors.execution.submission import (
    Submissions,
    died_with_its_node,
    job_env,
    launch_command,
    submission_id,
)
from actors.simexecutor import default_model
from clusters.artifacts import ArtifactStore
from clusters.packages import PackageStore
from clusters.rayjobs import LogArchive, submission_client, transient
from controlplane import jobenv
from controlplane.core.clock import Clock, WallClock
from controlplane.core.errors import InvalidInput, Unavailable
from controlplane.core.models import Job, Node
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ExecutorReport, JobExecutor, ReplicatingExecutor

log = logging.getLogger(__name__)


class RayJobExecutor(JobExecutor, ReplicatingExecutor):
    """Runs replicas as Ray jobs pinned to their nodes, each with a checkpoint actor."""

    def __init__(self, config: ExecutorConfig, *, clock: Clock | None = None,
                 model_factory: Callable[[Node | None], Any] | None = None) -> None:
        """``clock``: the control plane's (node ages; waits use wall time); ``model_factory``:
        a node's preemption model for its checkpoint actor (default seed 001's GCE fit)."""
        if not config.workload_address or not config.artifact_uri:
            raise InvalidInput("executor_options", "a Ray executor needs workload_address and "
                               "artifact_uri", fix="use actors.execution.make_executor")
        self.config = config
        self.client = submission_client(config.workload_address, config.workload_token_path,
                                        remote=config.workload_gcs is not None)
        self.address = str(self.client.get_address())
        self.artifacts = TenantArtifacts(config.artifact_uri, config.s3_endpoint_url)
        self.store: ArtifactStore = self.artifacts.root
        # the checkpoint actors live on the cluster the jobs run on: through a bridge process
        # when that is not this process's own Ray (the executor inside the control plane)
        self.actors: Actors = (
            ActorBridge(config.workload_gcs, config.namespace, python=config.python_path,
                        token_path=config.workload_token_path)
            if config.workload_gcs is not None
            else LocalActors(config.namespace)
        )
        self.clock = clock or WallClock()
        self.scale = config.scale_on(self.clock)
        self.model_factory = model_factory or default_model
        self.submissions = Submissions(self.client, retry_s=config.retry_s,
                                       stop_timeout_s=config.stop_timeout_s)
        self.pinning = Pinning(self.actors, config.pin, config.gpus)
        self.packages = Packages(
            self.client, PackageStore(config.package_dir) if config.package_dir else None)
        self.log_copies = LogCopies(
            self.submissions, LogArchive(config.log_dir) if config.log_dir else None,
            config.log_copy_s)
        self.book = ReplicaBook()

    @property
    def replicas(self) -> dict[str, list[Replica]]:
        """Every attempt of every replica, by job id, oldest first."""
        return self.book.replicas

    def artifact_uri_for(self, tenant_id: str | None) -> str:
        """The artifact prefix a tenant's jobs are given: ``<root>/tenants/<tenant id>``."""
        return self.artifacts.uri_for(tenant_id)

    def store_for(self, tenant_id: str | None) -> ArtifactStore:
        """The artifact store of one tenant's prefix."""
        return self.artifacts.store_for(tenant_id)

    # -- the controller's JobExecutor protocol ---------------------------------------------------
    def start(self, job: Job, nodes: Sequence[Node]) -> None:
        """Start the job's replicas: replica ``r<i>`` on the i-th distinct node (``spec.replicas``);
        those already live are kept, so a start that raised :class:`Unavailable` can be retried."""
        ReplicaSpec.of(job, "r0")  # a job without an entrypoint is refused before anything starts
        if not nodes:
            raise InvalidInput("nodes", f"job {job.id} has no node to run on")
        started = {r.replica_id for r in self.live(job.id)}  # a retried start keeps those
        if job.spec.workers > 1:
            if not started:
                self.start_gang(job, nodes)
            return
        n = max(1, min(job.spec.replicas, len(nodes)))
        for i, node in enumerate(nodes[:n]):
            if f"r{i}" not in started:
                self.start_replica(ReplicaSpec.of(job, f"r{i}"), node,
                                   node_age_hours=self._age_hours(node))

    def start_gang(self, job: Job, nodes: Sequence[Node]) -> Replica:
        """A gang (``workers > 1``): a placement group of one bundle per worker (its GPUs and
        its node's pin), STRICT_SPREAD, placed before the entrypoint starts on the first node;
        the job finds it with :func:`controlplane.sdk.placement_group`. Losing any node stops
        the whole gang (the controller's preemption), which restores from the last checkpoint."""
        if len(nodes) < job.spec.workers:
            raise InvalidInput("nodes", f"job {job.id} is a gang of {job.spec.workers} workers "
                               f"but has {len(nodes)} nodes")
        gang = list(nodes[: job.spec.workers])
        return self.start_replica(ReplicaSpec.of(job, "r0"), gang[0], gang=gang[1:])

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
        """Each job's progress, checkpoints and end, from its replicas' Ray jobs and actors."""
        out: dict[str, ExecutorReport] = {}
        self.submissions.stop_again()
        for job in jobs:
            reps = self.book.not_stopped(job.id)
            if reps:
                out[job.id] = self._report(job, reps)
        return out

    def _report(self, job: Job, reps: Sequence[Replica]) -> ExecutorReport:
        """One job's report from its replicas' statuses; a job that ended is cleaned up."""
        statuses = [self.replica_status(r) for r in reps]
        for r in reps:
            self.log_copies.copy(r)
        told = Told.of(job, statuses)
        finished = any(r.state is ReplicaState.SUCCEEDED for r in reps)
        failed = None
        if not finished and all(r.state is ReplicaState.FAILED for r in reps):
            failed = self._failure(reps)
        changed = (told.checkpoints, len(self.book.attempts(job.id)), told.plans,
                   int(finished or failed is not None))  # the end: read the last save
        totals = self.artifacts.totals(job.id, job.tenant_id, changed)
        if finished or failed:
            self._cleanup(job.id)
            for r in reps:  # a restarted job's next attempt is polled alone
                r.ended_told = True
        return told.report(job, finished=finished, failed=failed, totals=totals,
                           exit_code=reps[-1].exit_code if failed else None)

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
        return self.start_replica(ReplicaSpec.of(job, self.book.free_replica_id(job)), node)

    # -- replicas --------------------------------------------------------------------------------
    def start_replica(self, spec: ReplicaSpec, node: Node | str, *, node_age_hours: float = 0.0,
                      gang: Sequence[Node] = ()) -> Replica:
        """Submit one attempt of the replica as a Ray job with its checkpoint actor, pinned to
        the node (``gang``: the gang's other nodes). Its entrypoint asks Ray for ``spec.gpus``
        GPUs (:meth:`Pinning.num_gpus`), so Ray sets ``CUDA_VISIBLE_DEVICES`` to exactly those;
        its environment is :func:`job_env`'s allow-list, its artifacts its tenant's prefix."""
        nid = node.id if isinstance(node, Node) else node
        node_ids = [nid, *(g.id for g in gang)]
        attempt = self.submissions.next_attempt(spec.job_id, spec.replica_id)
        resource = self.pinning.resource_for(nid, node.instance_id if isinstance(node, Node) else None)
        name = actor_name(spec.job_id, spec.replica_id)
        self.actors.kill(name)  # a previous attempt's actor (same replica, dead node)
        sid = submission_id(spec.job_id, spec.replica_id, attempt)
        group: str | None = None
        try:
            self._create_checkpoint_actor(spec, nid, resource,
                                          node if isinstance(node, Node) else None, node_age_hours)
            num_gpus = self.pinning.num_gpus(spec.gpus)
            if gang:
                group = f"spotplane-pg-{spec.job_id}-{spec.replica_id}-{attempt}"
                self.pinning.place_gang(group, node_ids, num_gpus, resource,
                                        self.config.submit_timeout_s)
                num_gpus = 0  # the workers' GPUs are the bundles'; the driver holds none
            self._submit(spec, sid, nid, name, resource, num_gpus, group)
        except Exception as exc:
            self._abandon(name, group, node_ids)
            if transient(exc) or died_with_its_node(exc):
                raise Unavailable(f"the workload cluster did not take job {spec.job_id} replica "
                                  f"{spec.replica_id} ({exc})", fix="the controller retries it "
                                  "next tick") from exc
            raise
        rep = Replica(spec.job_id, spec.replica_id, nid, attempt, sid, name, resource,
                      self.clock.now(), spec.work_hours, group=group, group_nodes=node_ids[1:])
        self.book.add(rep)
        log.info("job %s replica %s attempt %d on node %s (%s)", spec.job_id, spec.replica_id,
                 attempt, nid, resource or "not pinned")
        return rep

    def _create_checkpoint_actor(self, spec: ReplicaSpec, node_id: str,
                                 resource: str | None, node: Node | None,
                                 node_age_hours: float) -> None:
        """The replica's checkpoint actor, placed and planned before the job asks it."""
        opts = checkpoint_actor_options(spec.job_id, spec.replica_id, self.config.namespace,
                                        resource, detached=self.config.detached_actors)
        self.actors.create(opts, {
            "job_id": spec.job_id,
            "replica_id": spec.replica_id,
            "work_hours": spec.work_hours,
            "model": self.model_factory(node),
            "node_age_hours": node_age_hours,
            "checkpoint_hours": spec.checkpoint_hours,
            "hours_per_second": self.scale,
            "node_id": node_id,
        })

    def _submit(self, spec: ReplicaSpec, sid: str, node_id: str, actor: str,
                resource: str | None, num_gpus: int, group: str | None) -> None:
        """Submit the attempt's Ray job: its command, runtime_env, pin and GPUs."""
        user_env = {**self.config.env, **spec.env,
                    **(spec.runtime_env.env_vars if spec.runtime_env is not None else {})}
        env_vars = job_env(
            user_env, job_id=spec.job_id, replica_id=spec.replica_id, tenant_id=spec.tenant_id,
            artifact_uri=self.artifact_uri_for(spec.tenant_id), actor=actor,
            namespace=self.config.namespace, node_id=node_id,
            # Ray expands ${VAR} from the node's environment: the job keeps the node's own path
            # (where Ray itself may be installed) behind the repository's
            pythonpath=f"{self.config.working_path}{os.pathsep}${{PYTHONPATH}}",
            s3_endpoint_url=self.config.s3_endpoint_url, placement_group=group,
        )
        kwargs: dict[str, Any] = {}
        if resource is not None:
            kwargs["entrypoint_resources"] = {resource: PIN_AMOUNT}
        if num_gpus:
            kwargs["entrypoint_num_gpus"] = num_gpus
        ray_env = self.packages.ray_runtime_env(spec.runtime_env, spec.tenant_id)
        self.submissions.submit(
            entrypoint=launch_command(spec.entrypoint, self.config.python_path,
                                      self.config.working_path, jobenv.user_keys(user_env),
                                      own_dir="working_dir" in ray_env),
            submission_id=sid,
            runtime_env={**ray_env, "env_vars": env_vars},
            metadata={"spotplane_job_id": spec.job_id, "spotplane_replica_id": spec.replica_id,
                      "spotplane_node_id": node_id},
            entrypoint_num_cpus=0,
            **kwargs,
        )

    def live(self, job_id: str) -> list[Replica]:
        """The job's attempts that are starting or running."""
        return self.book.live(job_id)

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
        self.log_copies.copy(rep, force=True)
        try:
            rep.outcome = self._call(rep, "node_lost", timeout=10)
        except Exception as e:  # the actor died with its node
            log.warning("checkpoint actor %s unreachable at stop: %s", rep.actor_name, e)
        self.submissions.stop(rep.submission_id)
        rep.state = ReplicaState.STOPPED
        rep.stopped_reason = reason
        self.actors.kill(rep.actor_name)
        self.pinning.release(rep)
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
                if rep.state is ReplicaState.FAILED and rep.exit_code is None:
                    rep.exit_code = exit_code_of(getattr(info, "driver_exit_code", None),
                                                 str(info.message or ""))
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
        return "\n".join(
            f"=== {rep.replica_id} attempt {rep.attempt} on {rep.node_id} ({rep.state.value}) "
            f"===\n{self.log_copies.text(rep)}"
            for rep in self.book.attempts(job_id))

    def close(self) -> None:
        """Stop every live replica and kill every checkpoint actor this executor started."""
        for job_id in list(self.book.replicas):
            for rep in self.live(job_id):
                self.stop_replica(rep, "executor closed", preempted=False)
            self._cleanup(job_id)
        self.actors.close()

    # -- helpers ---------------------------------------------------------------------------------
    def _age_hours(self, node: Node) -> float:
        """The node's age on the control plane's clock, in hours."""
        if node.launched_at is None:
            return 0.0
        return max(0.0, self.clock.now() - node.launched_at) / HOUR

    def _call(self, rep: Replica, method: str, *args: Any, timeout: float | None) -> Any:
        """The replica's checkpoint actor's ``method`` (None: a stopped replica or no actor)."""
        if rep.state is ReplicaState.STOPPED:
            return None
        try:
            return self.actors.call(rep.actor_name, method, *args, timeout=timeout)
        except LookupError:
            return None

    def _abandon(self, actor: str, group: str | None, node_ids: Sequence[str]) -> None:
        """Undo a replica start that failed before its Ray job was taken: its checkpoint actor,
        its gang's placement group and its nodes' slots."""
        with contextlib.suppress(Exception):
            self.actors.kill(actor)
        if group is not None:
            with contextlib.suppress(Exception):
                self.actors.remove_group(group)
        self.pinning.free_slots(node_ids)

    def _failure(self, reps: Sequence[Replica]) -> str | None:
        """Why the job failed, or None while a replica's node is gone from Ray: its Ray job died
        with the node, which is a preemption the fleet reports, not a failure of the job."""
        gone = [r for r in reps if not self.pinning.nodes_present(r)]
        if gone:
            log.warning("job %s: Ray job %s ended with its node (%s); waiting for the fleet "
                        "to report the loss", gone[0].job_id, gone[0].submission_id,
                        gone[0].ray_message or "no message")
            return None
        last = reps[-1]
        said = f" ({last.ray_message})" if last.ray_message else ""
        return f"replica {last.replica_id} failed{said}: {self.log_copies.tail(last)}"

    def _cleanup(self, job_id: str) -> None:
        for rep in self.book.attempts(job_id):
            if rep.state is not ReplicaState.STOPPED:
                self.log_copies.copy(rep, force=True)  # its node may be released next
            self.actors.kill(rep.actor_name)
            self.pinning.release(rep)
