"""Replica bookkeeping: what a replica runs (:class:`ReplicaSpec`), each attempt of it on a
node (:class:`Replica`), its states and the Ray job status each maps from, and every attempt of
every job (:class:`ReplicaBook`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from controlplane.core.errors import InvalidInput
from controlplane.core.models import Job
from controlplane.core.runtime_env import RuntimeEnv


class ReplicaState(StrEnum):
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"


RAY_STATUS = {
    "PENDING": ReplicaState.STARTING,
    "RUNNING": ReplicaState.RUNNING,
    "SUCCEEDED": ReplicaState.SUCCEEDED,
    "FAILED": ReplicaState.FAILED,
    "STOPPED": ReplicaState.STOPPED,
}


@dataclass
class Replica:
    """One run of one replica of a job on one node (a Ray job + a checkpoint actor)."""

    job_id: str
    replica_id: str
    node_id: str
    attempt: int
    submission_id: str
    actor_name: str
    resource: str | None
    started_at: float
    work_hours: float
    state: ReplicaState = ReplicaState.STARTING
    stopped_reason: str | None = None
    outcome: dict[str, Any] | None = None  # EmergencyOutcome of a preemption
    last_status: dict[str, Any] = field(default_factory=dict)
    group: str | None = None  # a gang's placement group (named), removed when it stops
    group_nodes: list[str] = field(default_factory=list)  # the gang's other nodes
    ray_message: str = ""  # what Ray said of the job's end (e.g. its node died)
    released: bool = False  # its group and slots given back (once: a node may serve a new job)
    exit_code: int | None = None  # its entrypoint's exit code, once Ray reports one
    ended_told: bool = False  # its end (success or failure) was reported: not polled again




@dataclass(frozen=True)
class ReplicaSpec:
    """What one replica of a job runs: its entrypoint, work, checkpoint cost and environment."""

    job_id: str
    replica_id: str
    entrypoint: str
    work_hours: float
    checkpoint_hours: float = 1 / 60
    env: Mapping[str, str] = field(default_factory=dict)
    gpus: int = 0  # GPUs its entrypoint asks Ray for
    tenant_id: str | None = None  # None: the artifact root, for an operator's own replicas
    runtime_env: RuntimeEnv | None = None

    @classmethod
    def of(cls, job: Job, replica_id: str) -> ReplicaSpec:
        """Replica ``replica_id`` of ``job``, as its spec says."""
        if job.spec.entrypoint is None:
            raise InvalidInput("entrypoint", f"job {job.id} has no entrypoint",
                               fix="simulated jobs need no executor")
        return cls(job.id, replica_id, job.spec.entrypoint, job.spec.compute_hours,
                   job.spec.checkpoint_hours, dict(job.spec.env), job.spec.gpus_per_worker,
                   job.tenant_id, job.spec.runtime_env)


LIVE = (ReplicaState.STARTING, ReplicaState.RUNNING)


class ReplicaBook:
    """Every attempt of every replica this executor started, by job, oldest first."""

    def __init__(self) -> None:
        self.replicas: dict[str, list[Replica]] = {}

    def add(self, rep: Replica) -> None:
        self.replicas.setdefault(rep.job_id, []).append(rep)

    def attempts(self, job_id: str) -> list[Replica]:
        """Every attempt of the job's replicas, oldest first."""
        return self.replicas.get(job_id, [])

    def live(self, job_id: str) -> list[Replica]:
        """The job's attempts that are starting or running."""
        return [r for r in self.attempts(job_id) if r.state in LIVE]

    def not_stopped(self, job_id: str) -> list[Replica]:
        """The job's attempts not stopped by us: live, or ended on their own and not yet told."""
        return [r for r in self.attempts(job_id)
                if r.state is not ReplicaState.STOPPED and not r.ended_told]

    def free_replica_id(self, job: Job) -> str:
        """The first ``r<i>`` no live replica of the job holds (a replacement's id)."""
        live_ids = {r.replica_id for r in self.live(job.id)}
        return next(f"r{i}" for i in range(max(job.spec.replicas, len(live_ids) + 1))
                    if f"r{i}" not in live_ids)
