"""The simulated executor: progress on the clock, checkpoints on the DP plan (large replays)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from actors.checkpoint import plan_checkpoints
from controlplane.core.clock import Clock
from controlplane.core.models import Job, Node
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ExecutorReport, JobExecutor
from policies.preemption import PreemptionModel, default_gce_model

log = logging.getLogger(__name__)


def default_model(node: Node | None) -> PreemptionModel:
    """The preemption model for a node: seed 001's GCE bathtub fit."""
    return default_gce_model()


@dataclass
class _SimRun:
    started_at: float
    base_hours: float
    checkpointed_hours: float
    plan: tuple[float, ...]
    cost_hours: float
    checkpoints: int = 0
    notice_deadline: float | None = None


class SimulatedExecutor(JobExecutor):
    """Simulated progress on the clock: one work-hour per hour, checkpoints on the DP plan
    (each pausing progress for the checkpoint cost), an immediate checkpoint on a notice when
    it fits before the node dies. Same protocol as :class:`RayJobExecutor`."""

    def __init__(
        self, clock: Clock, *, model_factory: Callable[[Node | None], Any] | None = None
    ) -> None:
        self.clock = clock
        self.model_factory = model_factory or default_model
        self.runs: dict[str, _SimRun] = {}
        self.exits: dict[str, list[tuple[float, int]]] = {}  # job id -> scripted exits, in order

    def exit_at(self, job_id: str, progress_hours: float, exit_code: int) -> None:
        """Script a failure: the job's attempt exits with ``exit_code`` once its progress
        reaches ``progress_hours`` (each scripted exit ends one attempt)."""
        self.exits.setdefault(job_id, []).append((progress_hours, exit_code))

    def start(self, job: Job, nodes: Sequence[Node]) -> None:

        node = nodes[0] if nodes else None
        now = self.clock.now()
        age = (
            0.0
            if node is None or node.launched_at is None
            else max(0.0, now - node.launched_at) / HOUR
        )
        remaining = max(job.spec.compute_hours - job.checkpointed_hours, 1e-6)
        plan = plan_checkpoints(self.model_factory(node), remaining, age, job.spec.checkpoint_hours)
        self.runs[job.id] = _SimRun(
            now, job.checkpointed_hours, job.checkpointed_hours, plan, job.spec.checkpoint_hours
        )

    def stop(self, job: Job, reason: str) -> None:
        self.runs.pop(job.id, None)

    def notice(self, job: Job, seconds_left: float) -> None:
        run = self.runs.get(job.id)
        if run is None:
            return
        now = self.clock.now()
        progress = self._progress(run, now)
        if run.cost_hours * HOUR <= seconds_left:  # the emergency checkpoint fits
            run.checkpointed_hours = progress
            run.checkpoints += 1
        run.notice_deadline = now + seconds_left

    def poll(self, jobs: Sequence[Job]) -> dict[str, ExecutorReport]:
        now = self.clock.now()
        out = {}
        for job in jobs:
            run = self.runs.get(job.id)
            if run is None:
                continue
            progress = min(job.spec.compute_hours, self._progress(run, now))
            done = [c for c in run.plan if run.base_hours + c <= progress]
            ckpt = max([run.checkpointed_hours, *[run.base_hours + c for c in done]])
            scripted = self.exits.get(job.id)
            if scripted and progress >= scripted[0][0] - 1e-9:
                _, code = scripted.pop(0)
                self.runs.pop(job.id, None)
                out[job.id] = ExecutorReport(
                    progress_hours=progress, checkpointed_hours=ckpt,
                    checkpoints=run.checkpoints + len(done), failed=f"exited with code {code}",
                    exit_code=code)
                continue
            out[job.id] = ExecutorReport(
                progress_hours=progress,
                checkpointed_hours=ckpt,
                checkpoints=run.checkpoints + len(done),
                finished=progress >= job.spec.compute_hours - 1e-9,
            )
        return out

    def _progress(self, run: _SimRun, now: float) -> float:
        """Work done: elapsed hours minus the pauses of the checkpoints taken so far."""
        elapsed = (now - run.started_at) / HOUR
        work = elapsed
        for c in run.plan:  # each checkpoint at work c pauses progress for cost_hours
            if c < work:
                work = max(c, work - run.cost_hours)
        return run.base_hours + work
