"""Submission and attempts: each attempt of a replica is one Ray job
(``spotplane-<job>-<replica>-<attempt>``) submitted to the workload cluster's job API, retried
while that API is busy, and stopped (again at every poll when the API did not take the stop).
Its command runs through :mod:`controlplane.jobenv` with :func:`job_env`'s allow-list."""

from __future__ import annotations

import contextlib
import logging
import shlex
from collections.abc import Sequence
from typing import Any

from clusters.rayjobs import transient
from controlplane import jobenv, sdk
from controlplane.core.clock import WallClock
from controlplane.core.errors import Unavailable

log = logging.getLogger(__name__)

TERMINAL = ("STOPPED", "SUCCEEDED", "FAILED")
NODE_DEATHS = ("ActorDiedError", "ActorUnavailableError", "NodeDiedError")


def submission_id(job_id: str, replica_id: str, attempt: int) -> str:
    """The Ray job id of one attempt of one replica."""
    return f"spotplane-{job_id}-{replica_id}-{attempt}"


class Submissions:
    """The workload cluster's job API, as the executor uses it: attempts numbered, submitted,
    stopped and their logs read."""

    def __init__(self, client: Any, *, retry_s: float, stop_timeout_s: float) -> None:
        self.client = client
        self.retry_s = retry_s  # how long one submission retries a busy job agent
        self.stop_timeout_s = stop_timeout_s
        self.attempts: dict[tuple[str, str], int] = {}
        self.unstopped: set[str] = set()  # Ray jobs whose stop the job API did not take

    def next_attempt(self, job_id: str, replica_id: str) -> int:
        """The next attempt's number. The count lives in this process, so after a controller
        restart Ray may already hold the ids it would reuse (Ray refuses them): skip those, and
        stop any of them still running, so one replica never runs twice."""
        attempt = self.attempts.get((job_id, replica_id), 0) + 1
        while True:
            sid = submission_id(job_id, replica_id, attempt)
            try:
                status = str(self.client.get_job_status(sid).value)
            except Exception as e:  # noqa: BLE001 - unknown to Ray: the id is free
                if transient(e):
                    raise Unavailable(f"the workload cluster's job API did not answer ({e})",
                                      fix="the controller retries next tick") from e
                break
            if status not in TERMINAL:
                log.warning("stopping %s, left running by an earlier controller", sid)
                with contextlib.suppress(Exception):
                    self.client.stop_job(sid)
            attempt += 1
        self.attempts[(job_id, replica_id)] = attempt
        return attempt

    def submit(self, **kwargs: Any) -> None:
        """``submit_job``, retried briefly (``retry_s``) while the job agent answers "try
        again later" or not at all; past that the error goes up (the tick goes on)."""
        wall = WallClock()
        deadline = wall.now() + self.retry_s
        while True:
            try:
                self.client.submit_job(**kwargs)
                return
            except Exception as e:
                if not transient(e) or wall.now() > deadline:
                    raise
                log.info("Ray job agent not ready (%s): retrying the submission", e)
                wall.sleep(1.0)

    def stop(self, sid: str) -> None:
        """Stop a Ray job and wait (``stop_timeout_s``) until it ends; a job API that does not
        answer leaves it on a list that :meth:`stop_again` tries again, so none runs on."""
        try:
            self.client.stop_job(sid)
            self._wait_terminal(sid)
        except Exception as e:
            if not transient(e):
                raise
            log.warning("stopping Ray job %s: %s; tried again at the next poll", sid, e)
            self.unstopped.add(sid)
            return
        self.unstopped.discard(sid)

    def stop_again(self) -> None:
        """Another try at the stops the job API did not take."""
        for sid in sorted(self.unstopped):
            try:
                self.stop(sid)
            except Exception as e:  # noqa: BLE001 - unknown to Ray (gone with its cluster)
                log.warning("Ray job %s cannot be stopped: %s", sid, e)
                self.unstopped.discard(sid)

    def _wait_terminal(self, sid: str) -> None:
        wall = WallClock()  # a real process stops in real time, whatever the control-plane clock
        deadline = wall.now() + self.stop_timeout_s
        while True:
            status = str(self.client.get_job_status(sid).value)
            if status in TERMINAL:
                return
            if wall.now() > deadline:
                log.warning("Ray job %s still %s after stop", sid, status)
                return
            wall.sleep(0.1)

    def logs(self, sid: str, tries: int = 3) -> str:
        """The Ray job's logs; a job API that did not answer (a loaded head) is asked again."""
        for left in range(tries - 1, -1, -1):
            try:
                return str(self.client.get_job_logs(sid))
            except Exception as e:
                if not left or not transient(e):
                    raise
                WallClock().sleep(0.5)
        raise AssertionError("unreachable")


def launch_command(entrypoint: str, python: str, working_dir: str,
                   user_keys: Sequence[str] = (), *, own_dir: bool = False) -> str:
    """``cd WORKING_DIR && exec python -m controlplane.jobenv KEYS -- ENTRYPOINT``: the
    entrypoint runs in :mod:`controlplane.jobenv`'s allow-listed environment only. With
    its own ``working_dir`` (``own_dir``) it runs where Ray unpacked the package."""
    parts = shlex.split(entrypoint)
    if parts and parts[0] in ("python", "python3"):
        parts[0] = python
    launcher = [python, "-m", "controlplane.jobenv", ",".join(user_keys), "--"]
    command = "exec " + " ".join(shlex.quote(p) for p in launcher + parts)
    return command if own_dir else f"cd {shlex.quote(working_dir)} && {command}"


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


def died_with_its_node(exc: BaseException) -> bool:
    """Whether a replica's start failed because its Ray node is going (a SIGKILLed raylet that
    Ray has not yet marked DEAD): its checkpoint actor died, or was not placed in time. Through
    the actor bridge Ray's error arrives as ``RuntimeError("ActorDiedError: ...")``."""
    return isinstance(exc, TimeoutError) or any(
        type(exc).__name__ == d or str(exc).startswith(f"{d}:") for d in NODE_DEATHS)
