"""Retries and bounds of one job: whether an attempt that exited restarts, and whether its wall
time from the first start is spent.

Pure: the job's spec fields and counts in, a verdict out. A listed exit code restarts the job
from its last checkpoint while restarts are left (counted apart from preemptions, as Kubernetes
counts a Job's ``backoffLimit`` apart from pod disruptions); any other code, or a listed one
with none left, fails it with the code and the reason in its message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ExitVerdict", "on_exit", "over_duration"]


@dataclass(frozen=True)
class ExitVerdict:
    """What to do with a job whose attempt exited with a failure."""

    restart: bool
    reason: str


def on_exit(exit_code: int | None, restart_codes: Sequence[int], max_restarts: int,
            restarts: int) -> ExitVerdict:
    """Restart when ``exit_code`` is listed and ``restarts < max_restarts``; fail otherwise."""
    code = "an unknown exit code" if exit_code is None else f"exit code {exit_code}"
    if exit_code is None or exit_code not in restart_codes:
        listed = ", ".join(str(c) for c in restart_codes) or "none"
        return ExitVerdict(False, f"{code} (restarting codes: {listed})")
    if restarts >= max_restarts:
        return ExitVerdict(False, f"{code} after {restarts} of max_restarts_on_error="
                                  f"{max_restarts} restarts")
    return ExitVerdict(True, f"{code}: restart {restarts + 1} of {max_restarts} from the last "
                             "checkpoint")


def over_duration(started_at: float | None, now: float, max_duration_hours: float | None) -> bool:
    """True once ``now - started_at`` reaches ``max_duration_hours`` (seconds vs hours * 3600)."""
    if started_at is None or max_duration_hours is None:
        return False
    return now - started_at >= max_duration_hours * 3600.0 - 1e-6
