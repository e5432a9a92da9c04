"""Progress reports: what a job's replicas told in one poll, folded into the controller's
:class:`~controlplane.reconcile.contracts.ExecutorReport`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.core.models import Job
from controlplane.reconcile.contracts import ExecutorReport


@dataclass(frozen=True)
class Told:
    """The furthest progress and checkpoint any replica told (fractions of the job's work),
    and the checkpoints and plans of all of them."""

    progress: float
    checkpointed: float
    checkpoints: int
    plans: int

    @classmethod
    def of(cls, job: Job, statuses: Sequence[Mapping[str, Any]]) -> Told:
        """Fold the replicas' statuses; before any attempt has restored or begun (a new one),
        no news is no change: the job's own progress stands."""
        told = [s for s in statuses if s.get("started")]
        if told:
            progress = max(float(s.get("progress", 0.0)) for s in told)
            checkpointed = max(float(s.get("checkpointed", 0.0)) for s in told)
        else:
            progress = job.progress_hours / job.spec.compute_hours
            checkpointed = job.checkpointed_hours / job.spec.compute_hours
        return cls(progress, checkpointed, sum(int(s.get("checkpoints", 0)) for s in statuses),
                   sum(int(s.get("plans", 0)) for s in statuses))

    def report(self, job: Job, *, finished: bool, failed: str | None,
               totals: tuple[int, int], exit_code: int | None = None) -> ExecutorReport:
        """The controller's report: fractions back in hours of the job's work."""
        return ExecutorReport(
            progress_hours=self.progress * job.spec.compute_hours,
            checkpointed_hours=self.checkpointed * job.spec.compute_hours,
            checkpoints=self.checkpoints,
            finished=finished,
            failed=failed,
            checkpoint_bytes=totals[0],
            restore_fallbacks=totals[1],
            exit_code=exit_code,
        )


_EXIT_CODE = re.compile(r"exit code (-?\d+)")


def exit_code_of(driver_exit_code: object, message: str) -> int | None:
    """An attempt's exit code: Ray's ``JobInfo.driver_exit_code`` where it gives one, else the
    code its message states (``... failed with exit code 3 ...``)."""
    if isinstance(driver_exit_code, int):
        return driver_exit_code
    found = _EXIT_CODE.search(message or "")
    return int(found.group(1)) if found else None
