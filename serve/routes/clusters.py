"""Workload clusters (admin only): register, list, show, drain and remove."""

from __future__ import annotations

from fastapi import APIRouter, Path
from fastapi.responses import Response

from controlplane.core.workloadclusters import NAME_PATTERN, WorkloadCluster, WorkloadClusterSpec
from serve.auth import Auth
from serve.gate import API
from serve.routes.common import ERRORS, caller, listed, service
from serve.service import ControlPlaneService

router = APIRouter()
ClusterName = Path(pattern=NAME_PATTERN, description="The workload cluster's name.")
_WHAT = "managing workload clusters"


@router.post(f"{API}/clusters", tags=["clusters"], status_code=201, response_model=WorkloadCluster,
             responses=ERRORS)
def add_cluster(spec: WorkloadClusterSpec, creds: Auth = None) -> WorkloadCluster:
    """Register a workload Ray cluster (409 when its name is taken)."""
    ControlPlaneService.require_admin(caller(creds), _WHAT)
    return service().store.add_cluster(spec)


@router.get(f"{API}/clusters", tags=["clusters"], response_model=list[WorkloadCluster],
            responses=ERRORS)
def list_clusters(creds: Auth = None) -> Response:
    """Every registered workload cluster with its state and last health check."""
    ControlPlaneService.require_admin(caller(creds), _WHAT)
    return listed(service().store.list_clusters())


@router.post(API + "/clusters/{name}/drain", tags=["clusters"], response_model=WorkloadCluster,
             responses=ERRORS)
def drain_cluster(name: str = ClusterName, creds: Auth = None) -> WorkloadCluster:
    """Drain a cluster: what runs there finishes, nothing new is placed there."""
    ControlPlaneService.require_admin(caller(creds), _WHAT)
    return service().store.drain_cluster(name)


@router.get(API + "/clusters/{name}", tags=["clusters"], response_model=WorkloadCluster,
            responses=ERRORS)
def show_cluster(name: str = ClusterName, creds: Auth = None) -> WorkloadCluster:
    """One workload cluster (404 when not registered)."""
    ControlPlaneService.require_admin(caller(creds), _WHAT)
    return service().store.get_cluster(name)


@router.delete(API + "/clusters/{name}", tags=["clusters"], status_code=204, responses=ERRORS)
def remove_cluster(name: str = ClusterName, creds: Auth = None) -> Response:
    """Forget a workload cluster (its Ray cluster is left as it is)."""
    ControlPlaneService.require_admin(caller(creds), _WHAT)
    service().store.remove_cluster(name)
    return Response(status_code=204)
