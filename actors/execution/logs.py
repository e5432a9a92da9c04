"""Log copying: each running attempt's Ray job logs copied into an archive every ``log_copy_s``
wall seconds (and at its stop and end), read back when its node, and Ray's copy, are gone."""

from __future__ import annotations

import logging

from actors.execution.replicas import Replica
from actors.execution.submission import Submissions
from clusters.rayjobs import LogArchive
from controlplane.core.clock import WallClock

log = logging.getLogger(__name__)


class LogCopies:
    """Attempts' logs: from Ray while their node lives, else from the archive's last copy."""

    def __init__(self, submissions: Submissions, archive: LogArchive | None, copy_s: float) -> None:
        self.submissions = submissions
        self.archive = archive
        self.copy_s = copy_s
        self._copied: dict[str, float] = {}  # submission id -> wall time of its last copy

    def copy(self, rep: Replica, *, force: bool = False) -> None:
        """Copy the attempt's logs into the archive, at most every ``copy_s`` wall seconds
        (``force``: now, e.g. before it is stopped)."""
        if self.archive is None:
            return
        now = WallClock().now()
        if not force and now - self._copied.get(rep.submission_id, -1e18) < self.copy_s:
            return
        self._copied[rep.submission_id] = now
        try:
            text = self.submissions.logs(rep.submission_id)
        except Exception as e:  # noqa: BLE001 - its node may be gone: keep the last copy
            log.debug("logs of %s: %s", rep.submission_id, e)
            return
        self.archive.save(rep.job_id, rep.submission_id, text)

    def text(self, rep: Replica) -> str:
        """The attempt's logs: Ray's, else the last copy, else why there are none."""
        try:
            return self.submissions.logs(rep.submission_id)
        except Exception as e:
            kept = self.archive.load(rep.job_id, rep.submission_id) if self.archive else None
            return kept if kept is not None else f"(logs unavailable: {e})"

    def tail(self, rep: Replica, lines: int = 5) -> str:
        """The attempt's last ``lines`` log lines, on one line."""
        return " | ".join(self.text(rep).strip().splitlines()[-lines:])
