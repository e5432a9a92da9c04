"""A job's attempts on every workload cluster it ran on, read from each cluster's job server
(an attempt whose node is gone from the log archive), oldest first across clusters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clusters.rayjobs import LogArchive, attempt_marker, attempts_of


def attempt_logs_across(clients: Sequence[Any], job_id: str,
                        archive: LogArchive | None = None) -> list[tuple[str, str]]:
    """(marker line, text) of every attempt of ``job_id`` on every cluster's ``clients``,
    oldest first; a cluster whose job server does not answer adds nothing."""
    found: list[tuple[float, str, Any, Any]] = []
    for client in clients:
        try:
            attempts = attempts_of(client, job_id)
        except Exception:  # noqa: BLE001 - a cluster that is down: its attempts come from the archive
            continue
        found += [(float(j.start_time or 0), str(j.submission_id), j, client) for j in attempts]
    found.sort(key=lambda f: (f[0], f[1]))
    parts = []
    for _, sid, info, client in found:
        try:
            text = str(client.get_job_logs(sid))
        except Exception as e:  # noqa: BLE001 - one attempt's logs gone: the copy, else say so
            kept = archive.load(job_id, sid) if archive is not None else None
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            text = kept if kept is not None else f"(logs unavailable: {first})\n"
        if text and not text.endswith("\n"):
            text += "\n"
        parts.append((attempt_marker(sid, dict(info.metadata or {})), text))
    return parts
