"""A launched node's own reports: its preemption notice and a failed boot.

The bootstrap's watcher (``clusters/nodewatch.py``) calls these with its launch's report
credential (``controlplane.core.nodecreds``), not a tenant's or the admin's token; the gate lets
them through (``serve.gate.NODE_PATHS``) and the service checks the credential against the node
that holds the instance. The controller takes the reports at its next tick.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParam

from controlplane.reconcile.fleet import BOOT_FAILED_REPORT as BOOT_FAILED
from controlplane.reconcile.fleet import NOTICE_REPORT as NOTICE
from serve.auth import Auth
from serve.gate import API
from serve.routes.common import ERRORS, service
from serve.schemas import BootFailure, NodeNotice, NodeReportAck

router = APIRouter()

InstanceId = Annotated[str, PathParam(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$",
                                      description="the instance id its fleet provider reports")]


@router.post(f"{API}/nodes/{{instance_id}}/notice", tags=["nodes"], status_code=202,
             response_model=NodeReportAck, responses=ERRORS)
def node_notice(instance_id: InstanceId, body: NodeNotice, creds: Auth = None) -> NodeReportAck:
    """A node's preemption notice (its report credential as the bearer token)."""
    token = creds.credentials if creds is not None else None
    service().node_report(instance_id, token, NOTICE, body.model_dump())
    return NodeReportAck(instance_id=instance_id, kind=NOTICE)


@router.post(f"{API}/nodes/{{instance_id}}/boot-failure", tags=["nodes"], status_code=202,
             response_model=NodeReportAck, responses=ERRORS)
def boot_failure(instance_id: InstanceId, body: BootFailure, creds: Auth = None) -> NodeReportAck:
    """A node whose bootstrap failed: the controller fails it with the reason and terminates it."""
    token = creds.credentials if creds is not None else None
    service().node_report(instance_id, token, BOOT_FAILED, body.model_dump())
    return NodeReportAck(instance_id=instance_id, kind=BOOT_FAILED)
