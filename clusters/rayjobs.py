"""A workload Ray cluster's job server, read from outside it: the logs of a spotplane job's
attempts (every Ray job whose metadata names it), for the API and the CLI.

The executor tags each attempt's Ray job with ``spotplane_job_id``, ``spotplane_replica_id``
and ``spotplane_node_id`` metadata and names it ``spotplane-<job>-<replica>-<attempt>``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import requests

from clusters.artifacts import check_id
from clusters.blobs import DirBlobs
from controlplane.core.attemptlogs import MARKER_PREFIX
from controlplane.core.blobs import Blobs
from controlplane.core.errors import InvalidInput

JOB_KEY = "spotplane_job_id"
# Ray's job SDK raises RuntimeError("Request failed with status code 500: <text>") for every
# non-2xx answer: a 5xx (a busy or restarting job agent) is worth retrying, a 4xx is not.
_RETRYABLE_ANSWER = re.compile(r"status code 5\d\d|No available agent|try again later")


def transient(exc: BaseException) -> bool:
    """Whether a failed call to a workload cluster's job API is worth retrying: its server did
    not answer (connection refused, reset, timed out) or answered 5xx / "try again later"."""
    if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout |
                  ConnectionError | TimeoutError):
        return True
    return isinstance(exc, RuntimeError) and bool(_RETRYABLE_ANSWER.search(str(exc)))


def submission_client(dashboard_address: str, token_path: str | None = None, *,
                      remote: bool = False) -> Any:
    """A ``JobSubmissionClient`` for a workload cluster's dashboard, authenticated with that
    cluster's own Ray token (``token_path``). ``remote`` without a token sends a placeholder
    Authorization header, so Ray never attaches this process's own (the control plane's) token."""
    from ray.job_submission import JobSubmissionClient

    address = dashboard_address if "://" in dashboard_address else f"http://{dashboard_address}"
    headers: dict[str, str] | None = None
    if token_path is not None:
        try:
            token = Path(token_path).read_text().strip()
        except OSError as e:
            raise InvalidInput(
                "workload_token_path",
                f"cannot read the workload cluster's Ray token: {e}",
                fix="point it at the workload cluster's auth_token file",
            ) from e
        headers = {"Authorization": f"Bearer {token}"}
    elif remote:
        headers = {"Authorization": "Bearer none"}
    return JobSubmissionClient(address, headers=headers)


def attempt_marker(submission_id: str, metadata: dict[str, str]) -> str:
    """The line before one attempt's logs: ``=== attempt 2 of job-1 (replica r0 on node n-3)
    ===``; it never changes, so a follower keeps its offset per attempt
    (:mod:`controlplane.core.attemptlogs`)."""
    attempt = submission_id.rsplit("-", 1)[-1]
    return (f"{MARKER_PREFIX}{attempt} of {metadata.get(JOB_KEY, '?')} (replica "
            f"{metadata.get('spotplane_replica_id', '?')} on node "
            f"{metadata.get('spotplane_node_id', '?')}) ===")


def attempts_of(client: Any, job_id: str) -> list[Any]:
    """The Ray jobs of one spotplane job, oldest first."""
    found = [j for j in client.list_jobs() if (j.metadata or {}).get(JOB_KEY) == job_id]
    found.sort(key=lambda j: (j.start_time or 0, str(j.submission_id)))
    return found


class LogArchive:
    """Copies of attempts' logs (blob ``<job>/<submission id>.log``), kept by the executor
    while an attempt runs: Ray serves a job's logs from the node its driver ran on, so a lost
    spot node takes its attempt's logs with it unless they were copied off it. ``blobs`` is a
    directory (:class:`DirBlobs`) or the store's table, which the API reads from any node."""

    def __init__(self, blobs: Blobs | str | Path) -> None:
        self.blobs: Blobs = DirBlobs(blobs) if isinstance(blobs, (str, Path)) else blobs

    @staticmethod
    def key(job_id: str, submission_id: str) -> str:
        return f"{check_id('job_id', job_id)}/{check_id('submission_id', submission_id)}.log"

    def save(self, job_id: str, submission_id: str, text: str) -> None:
        """Keep ``text`` as the attempt's logs (atomically; a shorter copy never replaces a longer)."""
        self.blobs.grow(self.key(job_id, submission_id), text.encode())

    def load(self, job_id: str, submission_id: str) -> str | None:
        data = self.blobs.get(self.key(job_id, submission_id))
        return data.decode(errors="replace") if data is not None else None


def attempt_logs(client: Any, job_id: str, archive: LogArchive | None = None) -> list[tuple[str, str]]:
    """(marker line, text) of every attempt, oldest first; an attempt whose node is gone comes
    from the ``archive`` copy, and each text ends with a newline."""
    parts = []
    for j in attempts_of(client, job_id):
        sid = str(j.submission_id)
        try:
            text = str(client.get_job_logs(sid))
        except Exception as e:  # noqa: BLE001 - one attempt's logs gone: say so, keep the rest
            kept = archive.load(job_id, sid) if archive is not None else None
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            text = kept if kept is not None else f"(logs unavailable: {first})\n"
        if text and not text.endswith("\n"):
            text += "\n"
        parts.append((attempt_marker(sid, dict(j.metadata or {})), text))
    return parts


def concatenated_logs(client: Any, job_id: str, archive: LogArchive | None = None) -> str:
    """Every attempt's logs, oldest first, each after its :func:`attempt_marker` line ('' when
    the job has not started on a node yet)."""
    return "".join(f"{marker}\n{text}" for marker, text in attempt_logs(client, job_id, archive))
