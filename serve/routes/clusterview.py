"""The dashboard's view of the workload clusters: the admin sees every registered cluster with its
health and the jobs running there; a tenant sees only the clusters its own jobs run on, with its
own jobs and nodes alone (the registry itself, ``/v1/clusters``, is the admin's)."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter
from pydantic import BaseModel, Field

from controlplane.core.models import Job, JobState
from controlplane.core.workloadclusters import ClusterState, WorkloadCluster
from serve.auth import Auth, authenticated
from serve.routes.common import ERRORS

router = APIRouter()

HOLDING = (JobState.STARTING, JobState.RUNNING, JobState.CHECKPOINTING)  # jobs on their nodes
MAX_RUNNING_JOBS = 100_000  # jobs holding nodes read at most (nodes bound them well below this)


class ClusterRow(BaseModel):
    """One workload cluster as the dashboard's clusters page shows it."""

    name: str
    cloud: str
    region: str
    state: ClusterState
    takes_work: bool = Field(description="Active: new work may be placed there.")
    zones: list[str]
    checked_at: float | None = Field(description="Last health check, control-plane seconds.")
    health_age_s: float | None = Field(description="Seconds since the last health check.")
    failed_checks: int
    health_message: str = Field(description="The last check's message (the admin's view only).")
    nodes: int = Field(description="Nodes alive there (a tenant: the nodes its jobs hold there).")
    jobs_running: int = Field(description="Jobs holding nodes there (a tenant: its own).")


def cluster_of(job: Job, clusters: Sequence[WorkloadCluster]) -> str | None:
    """The cluster a job runs on: the one its executor named, else the one holding its zone."""
    if job.cluster is not None:
        return job.cluster
    return next((c.name for c in clusters if job.zone is not None and job.zone in c.zones), None)


def cluster_rows(clusters: Sequence[WorkloadCluster], running: Sequence[Job], now: float, *,
                 admin: bool) -> list[ClusterRow]:
    """Every cluster with the running jobs on it (the admin), or only the clusters ``running``
    holds, counting only those jobs and their nodes (a tenant)."""
    jobs: dict[str, list[Job]] = {}
    for job in running:
        name = cluster_of(job, clusters)
        if name is not None:
            jobs.setdefault(name, []).append(job)
    rows = []
    for c in clusters:
        mine = jobs.get(c.name, [])
        if not admin and not mine:
            continue
        age = None if c.checked_at is None else max(0.0, now - c.checked_at)
        rows.append(ClusterRow(
            name=c.name, cloud=c.cloud, region=c.region, state=c.state, takes_work=c.takes_work,
            zones=list(c.zones), checked_at=c.checked_at, health_age_s=age,
            failed_checks=c.failed_checks, health_message=c.health_message if admin else "",
            nodes=c.nodes_alive if admin else sum(len(j.node_ids) for j in mine),
            jobs_running=len(mine)))
    return rows


@router.get("/v1/dashboard/clusters", tags=["dashboard"], response_model=list[ClusterRow],
            responses=ERRORS)
def clusters_view(creds: Auth = None) -> list[ClusterRow]:
    """The workload clusters with their health and running jobs (a tenant: where its jobs run)."""
    service, who = authenticated(creds)
    running = service.list_jobs(who, state=HOLDING, limit=MAX_RUNNING_JOBS)
    return cluster_rows(service.store.list_clusters(), running, service.control_time(),
                        admin=who.is_admin)
