"""The workload Ray's job agent, seen from outside: is it there and running jobs
(:func:`job_agent_ready`), and the logs of every Ray job of a spotplane job."""

from __future__ import annotations

import logging

from clusters.rayjobs import concatenated_logs, submission_client, transient
from controlplane.core.clock import WallClock
from controlplane.core.errors import NotFound

log = logging.getLogger(__name__)


class JobAgentBroken(RuntimeError):
    """The job agent took a job but did not run it to completion (a product failure)."""


def job_agent_ready(dashboard_address: str, timeout_s: float = 45.0,
                    entrypoint: str = "true") -> bool:
    """Run a no-op Ray job (``entrypoint``) through the dashboard's job agent.

    True when the probe job SUCCEEDED. False only when no job agent took it in ``timeout_s``
    (every submission failed as :func:`~clusters.rayjobs.transient`, e.g. "No available agent":
    none runs, or a Ray started without :func:`~actors.raylocal.init_local_ray` found its fixed
    port 52365 taken by another Ray). Raises :class:`JobAgentBroken` when the agent took the
    probe but it FAILED, was STOPPED or did not finish within ``timeout_s`` + 60 s more.
    """
    import uuid

    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(
        dashboard_address if "://" in dashboard_address else f"http://{dashboard_address}"
    )
    wall = WallClock()
    deadline = wall.now() + timeout_s
    while True:
        try:
            sid = client.submit_job(
                entrypoint=entrypoint,
                submission_id=f"spotplane-probe-{uuid.uuid4().hex[:8]}",
                entrypoint_num_cpus=0,
            )
            break
        except Exception as e:
            if not transient(e):
                raise
            if wall.now() > deadline:
                return False
            wall.sleep(1.0)
    status = "PENDING"
    finish_by = wall.now() + timeout_s + 60.0
    while wall.now() < finish_by:
        status = str(client.get_job_status(sid).value)
        if status == "SUCCEEDED":
            return True
        if status in ("FAILED", "STOPPED"):
            break
        wall.sleep(0.2)
    info = client.get_job_info(sid)
    raise JobAgentBroken(f"the job agent at {dashboard_address} took probe job {sid} but it "
                         f"ended {status} after up to {timeout_s + 60:.0f} s: {info.message or ''}")


def job_logs(dashboard_address: str, job_id: str, token_path: str | None = None) -> str:
    """Logs of every Ray job of a spotplane job, found by metadata (for the API)."""
    text = concatenated_logs(submission_client(dashboard_address, token_path), job_id)
    if not text:
        raise NotFound(
            f"no Ray job of spotplane job {job_id}", fix="the job has not started on a node yet"
        )
    return text
