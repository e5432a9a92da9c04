"""Ray's Jobs REST API on spotplane: ``ray job submit|status|logs|stop|list`` and
``JobSubmissionClient(address, headers={"Authorization": "Bearer TOKEN"})`` work unchanged.

The routes are those Ray's dashboard SDK calls (``ray/dashboard/modules/job/sdk.py``,
``dashboard_sdk.py``): version, package existence check and upload, submit, list, get, stop,
delete, logs and the log tail websocket. A submission becomes a spotplane job of the caller's
tenant: spotplane's own fields come in as metadata (:data:`META_FIELDS`),
``entrypoint_num_gpus`` / ``entrypoint_resources`` become its GPUs and accelerator, and the
status Ray's client sees follows the spotplane job across preemptions (:data:`RAY_STATUS`).
The Ray submission id is the spotplane job id.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from clusters.packages import package_name
from controlplane.core.attemptlogs import unsent
from controlplane.core.errors import InvalidInput, NotFound, SpotplaneError
from controlplane.core.models import Job, JobSpec, JobState
from serve.auth import Auth, authenticated, bearer_token, replica_service
from serve.service import ControlPlaneService, Principal

router = APIRouter(include_in_schema=False)

RAY_JOBS_VERSION = "2"  # the Jobs API version Ray's dashboard reports (job_head.CURRENT_VERSION)
SUBMISSION_KEY = "ray.submission_id"  # the id a Ray client chose, kept as the job's metadata
DEFAULT_COMPUTE_HOURS = 1.0
TAIL_POLL_S = 1.0

# spotplane's own fields in a Ray job's metadata, and how each is read
META_FIELDS: dict[str, type] = {
    "spotplane.kind": str,
    "spotplane.deadline_hours": float,
    "spotplane.compute_hours": float,
    "spotplane.accelerator": str,
    "spotplane.workers": int,
    "spotplane.checkpoint_hours": float,
    "spotplane.name": str,
    "spotplane.max_restarts_on_error": int,
    "spotplane.restart_on_exit_codes": list,
    "spotplane.max_duration_hours": float,
    "spotplane.checkpoint_gb": float,
}

RAY_STATUS: dict[JobState, str] = {
    JobState.PENDING: "PENDING",
    JobState.QUEUED: "PENDING",
    JobState.STARTING: "PENDING",
    JobState.PREEMPTED: "PENDING",  # waiting to restore on another node
    JobState.RUNNING: "RUNNING",
    JobState.CHECKPOINTING: "RUNNING",
    JobState.SUCCEEDED: "SUCCEEDED",
    JobState.FAILED: "FAILED",
    JobState.CANCELLED: "STOPPED",
}


class RaySubmitRequest(BaseModel):
    """Ray's ``JobSubmitRequest`` (``ray/dashboard/modules/job/common.py``)."""

    model_config = ConfigDict(extra="forbid")

    entrypoint: str = Field(min_length=1, max_length=4096)
    submission_id: str | None = Field(default=None, max_length=128)
    job_id: str | None = Field(default=None, max_length=128)
    runtime_env: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    entrypoint_num_cpus: float | None = Field(default=None, ge=0)
    entrypoint_num_gpus: float | None = Field(default=None, ge=0)
    entrypoint_memory: int | None = Field(default=None, ge=0)
    entrypoint_resources: dict[str, float] | None = None
    entrypoint_label_selector: dict[str, str] | None = None


def _number(key: str, raw: str, kind: type) -> Any:
    try:
        if kind is list:  # a comma-separated list of integers: "1,3"
            return [int(part) for part in raw.split(",") if part.strip()]
        return kind(raw)
    except ValueError:
        word = {int: "an integer", list: "integers separated by commas"}.get(kind, "a number")
        raise InvalidInput(f"metadata.{key}", f"{raw!r} is not {word}",
                           fix=f"pass --metadata-json '{{\"{key}\": \"<{word}>\"}}'") from None


def _gpus(req: RaySubmitRequest) -> tuple[int | None, str | None]:
    """GPUs per worker and accelerator from ``entrypoint_num_gpus`` / ``entrypoint_resources``."""
    gpus = req.entrypoint_num_gpus
    accelerator = None
    for key, amount in (req.entrypoint_resources or {}).items():
        if key == "GPU":
            gpus = amount
        elif key.startswith("accelerator_type:"):
            accelerator = key.split(":", 1)[1]
        else:
            raise InvalidInput(f"entrypoint_resources.{key}", "spotplane places jobs on whole nodes "
                               "by GPU count and model only",
                               fix="use entrypoint_num_gpus and accelerator_type:<GPU model>, or "
                                   "metadata spotplane.accelerator")
    if gpus is None:
        return None, accelerator
    if gpus < 1 or gpus != int(gpus):
        raise InvalidInput("entrypoint_num_gpus", f"{gpus:g} is not a whole number of GPUs >= 1",
                           fix="ask for whole GPUs (--entrypoint-num-gpus 1); every spotplane job "
                               "holds at least one")
    return int(gpus), accelerator


def spec_from_ray(req: RaySubmitRequest) -> JobSpec:
    """A spotplane :class:`JobSpec` from Ray's submit request; :class:`InvalidInput` naming the
    field (``metadata.spotplane.*``, ``entrypoint_num_gpus``...) for what spotplane cannot run."""
    metadata = dict(req.metadata or {})
    own = {k: v for k, v in metadata.items() if k.startswith("spotplane.")}
    unknown = sorted(set(own) - set(META_FIELDS))
    if unknown:
        raise InvalidInput(f"metadata.{unknown[0]}", "is not a spotplane field",
                           fix=f"use one of {', '.join(sorted(META_FIELDS))}")
    fields: dict[str, Any] = {k.removeprefix("spotplane."): _number(k, v, META_FIELDS[k])
                              for k, v in own.items()}
    gpus, accelerator = _gpus(req)
    if gpus is not None:
        fields["gpus_per_worker"] = gpus
    if accelerator is not None:
        fields.setdefault("accelerator", accelerator)
    fields.setdefault("name", " ".join(req.entrypoint.split())[:128])
    fields.setdefault("compute_hours", DEFAULT_COMPUTE_HOURS)
    if "deadline_hours" in fields:
        fields.setdefault("kind", "deadline")
    labels = {k: v for k, v in metadata.items() if k not in own}
    sid = req.submission_id or req.job_id
    if sid:
        labels[SUBMISSION_KEY] = sid
    try:
        return JobSpec.model_validate({**fields, "entrypoint": req.entrypoint,
                                       "runtime_env": req.runtime_env, "metadata": labels})
    except ValidationError as e:  # name the metadata key a bad value came from
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "body"
        key = f"spotplane.{loc.split('.')[0]}"
        field = f"metadata.{key}" if key in own else loc
        raise InvalidInput(field, str(first["msg"]).removeprefix("Value error, "),
                           fix="see docs/execution.md, bring your own code") from None


def job_details(job: Job) -> dict[str, Any]:
    """Ray's ``JobDetails`` of a spotplane job (times in ms, as Ray's)."""
    status = RAY_STATUS[job.state]
    message = job.message or {
        "PENDING": "waiting for a node (queued, starting or restoring after a preemption)",
        "RUNNING": "running",
        "SUCCEEDED": "finished successfully",
        "FAILED": "failed",
        "STOPPED": "stopped",
    }[status]
    metadata = {**job.spec.metadata, "spotplane.kind": job.kind.value,
                "spotplane.state": job.state.value, "spotplane.preemptions": str(job.preemptions),
                "spotplane.error_restarts": str(job.error_restarts)}
    renv = job.spec.runtime_env.model_dump(exclude_none=True) if job.spec.runtime_env else {}
    start = job.started_at if job.started_at is not None else job.submitted_at
    return {
        "type": "SUBMISSION", "job_id": None, "submission_id": job.id, "driver_info": None,
        "status": status, "entrypoint": job.spec.entrypoint or "", "message": message,
        "error_type": None, "start_time": int(start * 1000),
        "end_time": int(job.finished_at * 1000) if job.finished_at is not None else None,
        "metadata": metadata, "runtime_env": renv, "driver_agent_http_address": None,
        "driver_node_id": None, "driver_exit_code": job.exit_code,
    }


def find_job(service: ControlPlaneService, who: Principal, job_id: str) -> Job:
    """The caller's job by spotplane id, else by the Ray submission id its client chose."""
    try:
        return service.get_job(who, job_id)
    except NotFound:
        for job in service.list_jobs(who, limit=10_000):
            if job.spec.metadata.get(SUBMISSION_KEY) == job_id:
                return job
        raise


@router.get("/api/version")
def version(creds: Auth = None) -> dict[str, Any]:
    import ray

    authenticated(creds)
    return {"version": RAY_JOBS_VERSION, "ray_version": ray.__version__,
            "ray_commit": getattr(ray, "__commit__", ""), "session_name": "spotplane"}


@router.get("/api/packages/{protocol}/{file}")
def package_exists(protocol: str, file: str, creds: Auth = None) -> JSONResponse:
    service, who = authenticated(creds)
    _gcs(protocol)
    if not service.package_exists(who, package_name(file)):
        raise NotFound(f"package {file} does not exist", fix="upload it (PUT)")
    return JSONResponse({"exists": True})


@router.put("/api/packages/{protocol}/{file}")
async def package_upload(protocol: str, file: str, request: Request, creds: Auth = None) -> JSONResponse:
    service, who = await asyncio.to_thread(authenticated, creds)
    _gcs(protocol)
    created = await asyncio.to_thread(service.put_package, who, package_name(file), await request.body())
    return JSONResponse({"created": created})


def _gcs(protocol: str) -> None:
    if protocol != "gcs":
        raise InvalidInput("protocol", f"{protocol!r} packages are not stored here",
                           fix="upload gcs:// packages (what `ray job submit --working-dir` sends)")


@router.post("/api/jobs/")
def submit(req: RaySubmitRequest, creds: Auth = None) -> dict[str, str]:
    service, who = authenticated(creds)
    job = service.submit_job(who, spec_from_ray(req))
    return {"job_id": job.id, "submission_id": job.id}


@router.get("/api/jobs/")
def list_jobs(creds: Auth = None) -> list[dict[str, Any]]:
    service, who = authenticated(creds)
    return [job_details(j) for j in service.list_jobs(who, limit=10_000)
            if j.spec.entrypoint is not None]


@router.get("/api/jobs/{job_id}")
def get_job(job_id: str, creds: Auth = None) -> dict[str, Any]:
    service, who = authenticated(creds)
    return job_details(find_job(service, who, job_id))


@router.post("/api/jobs/{job_id}/stop")
def stop(job_id: str, creds: Auth = None) -> dict[str, bool]:
    service, who = authenticated(creds)
    job = find_job(service, who, job_id)
    if job.terminal:
        return {"stopped": False}
    service.cancel_job(who, job.id)
    return {"stopped": True}


@router.delete("/api/jobs/{job_id}")
def delete(job_id: str, creds: Auth = None) -> dict[str, bool]:
    """spotplane keeps a finished job's record (its bill): nothing is deleted."""
    service, who = authenticated(creds)
    job = find_job(service, who, job_id)
    if not job.terminal:
        raise InvalidInput("job_id", f"job {job.id} is {RAY_STATUS[job.state]}, not finished",
                           fix="stop it first (ray job stop)")
    return {"deleted": False}


@router.get("/api/jobs/{job_id}/logs")
def logs(job_id: str, creds: Auth = None) -> dict[str, str]:
    service, who = authenticated(creds)
    job = find_job(service, who, job_id)
    return {"logs": service.job_logs(who, job.id)}


@router.websocket("/api/jobs/{job_id}/logs/tail")
async def tail(websocket: WebSocket, job_id: str) -> None:
    """New log text as it comes, every attempt's, until the job is finished (then closes)."""
    service = replica_service()
    try:
        who = await asyncio.to_thread(service.authenticate, bearer_token(websocket.headers.get("authorization")))
        job = await asyncio.to_thread(find_job, service, who, job_id)
    except SpotplaneError as exc:
        await websocket.close(code=1008, reason=exc.message[:120])
        return
    await websocket.accept()
    sent: dict[str, int] = {}  # per attempt's marker: characters of its text sent
    try:
        while True:
            done = (await asyncio.to_thread(service.get_job, who, job.id)).terminal
            parts = await asyncio.to_thread(service.job_log_parts, who, job.id)
            if new := unsent(parts, sent):
                await websocket.send_text(new)
            if done:
                break
            await asyncio.sleep(TAIL_POLL_S)
    except WebSocketDisconnect:
        return
    except SpotplaneError as exc:  # e.g. no workload cluster to read from
        await websocket.close(code=1011, reason=exc.message[:120])
        return
    await websocket.close()

