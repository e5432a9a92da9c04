"""CheckpointActor: one per running replica, on the replica's node; says when to checkpoint.

The decisions are seed 001's DP schedule (``policies.checkpoint.CheckpointIntervals``, Eq. 9-13,
the planner of the simulated jobs and of the migration benchmark) for the replica's remaining
work, from the node's preemption model, the node's age and the job's *measured* checkpoint cost
(the first save is measured, later ones update a running mean; the plan is redone when the mean
moves by more than 25%). A restore means a new VM, so the plan is redone from that node's age (0
for a fresh one). On a preemption notice the actor asks the job for an immediate checkpoint and,
when the node dies, reports whether that checkpoint completed in time and how much progress was
lost. Every artifact the job saved is recorded.

Times: the model and the plan are in model hours; the job measures wall seconds. ``hours_per_second``
converts (1/3600 on a real fleet; the simulated fleet's clock speed / 3600 in the demo).

The logic lives in :class:`CheckpointCoordinator` (plain Python, tested without Ray);
:data:`RemoteCheckpointActor` is the same class as a Ray actor. :func:`checkpoint_actor_options`
places it on the replica's node through the node's custom resource (see
``actors.execution.pinning``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

import ray

from controlplane.core.clock import Clock, WallClock
from controlplane.core.errors import InvalidInput
from policies.checkpoint import plan_positions

log = logging.getLogger(__name__)

HOLD_MARGIN_S = 5.0  # hold a little past the notice's deadline: the kill is never exactly on time
REPLAN_DRIFT = 0.25  # re-plan when the measured checkpoint cost moves this much


@dataclass(frozen=True, slots=True)
class EmergencyOutcome:
    """What a preemption cost the replica (fractions of the job's work)."""

    noticed: bool
    checkpoint_requested_at: float | None
    checkpoint_completed_at: float | None
    completed_before_death: bool
    died_at: float
    progress_at_death: float
    checkpointed_progress: float

    @property
    def lost_progress(self) -> float:
        return max(0.0, self.progress_at_death - self.checkpointed_progress)


def actor_name(job_id: str, replica_id: str) -> str:
    return f"spotplane-ckpt-{job_id}-{replica_id}"


class CheckpointCoordinator:
    """The replica's checkpoint schedule, notices and artifact record."""

    def __init__(
        self,
        job_id: str,
        replica_id: str,
        *,
        work_hours: float,
        model: Any = None,
        node_age_hours: float = 0.0,
        checkpoint_hours: float = 1 / 60,
        hours_per_second: float = 1 / 3600,
        clock: Clock | None = None,
        node_id: str = "",
    ) -> None:
        if not (math.isfinite(work_hours) and work_hours > 0):
            raise InvalidInput(
                "work_hours", f"must be > 0, got {work_hours}", fix="pass the job's compute hours"
            )
        if hours_per_second <= 0:
            raise InvalidInput("hours_per_second", f"must be > 0, got {hours_per_second}")
        self.job_id, self.replica_id, self.node_id = job_id, replica_id, node_id
        self.work_hours = float(work_hours)
        self.model = model
        self.scale = float(hours_per_second)
        self.clock = clock or WallClock()
        self.started_at = self.clock.now()
        self.node_age0 = float(node_age_hours)
        self.prior_cost_hours = float(checkpoint_hours)
        self.cost_seconds: list[float] = []
        self.planned_cost_hours = self.prior_cost_hours
        self.progress = 0.0
        self.checkpointed = 0.0
        self.started = False  # the replica restored (or began afresh): its progress means something
        self.base = 0.0  # progress at the start of the current plan
        self.plan: tuple[float, ...] = ()  # cumulative work hours from ``base``
        self.plans = 0
        self.artifacts: list[dict[str, Any]] = []
        self.notice_at: float | None = None
        self.notice_deadline: float | None = None
        self.emergency_done_at: float | None = None
        self.finished = False
        self.requested: str | None = None
        self.restored_from: dict[str, Any] | None = None
        self._replan()

    # -- what the SDK calls ---------------------------------------------------------------------
    def directive(self, progress: float) -> dict[str, Any]:
        """Checkpoint now (a notice is pending) and/or at which progress next."""
        self.progress = max(self.progress, float(progress))
        self.started = True
        return {
            "checkpoint_now": self.urgent or self.requested is not None,
            "next_at_progress": self.next_at_progress(),
            "reason": self.directive_reason(),
            "hold_seconds": self.hold_seconds(),
        }

    @property
    def urgent(self) -> bool:
        """A notice is pending and its emergency checkpoint not yet durable."""
        return self.notice_at is not None and self.emergency_done_at is None

    def directive_reason(self) -> str:
        """Why the next save is taken: the notice, a request (a lost peer), or the DP schedule."""
        return "preemption notice" if self.urgent else (self.requested or "dp schedule")

    def request_checkpoint(self, reason: str) -> None:
        """Checkpoint at the next step (seed 004: the survivor, when a peer replica is lost)."""
        self.requested = reason

    def hold_seconds(self) -> float:
        """After the emergency checkpoint, work until the node dies is lost: wait it out."""
        if self.emergency_done_at is None or self.notice_deadline is None:
            return 0.0
        return max(0.0, self.notice_deadline + HOLD_MARGIN_S - self.clock.now())

    def record_save(self, ref: dict[str, Any], seconds: float) -> dict[str, Any]:
        """A checkpoint is durable: update the cost estimate, the record and the plan; returns
        the next directive (``hold_seconds`` > 0 after an emergency checkpoint)."""
        now = self.clock.now()
        reason = self.directive_reason()
        self.requested = None
        self.artifacts.append({**ref, "seconds": float(seconds), "recorded_at": now, "reason": reason})
        self.checkpointed = max(self.checkpointed, float(ref.get("progress", 0.0)))
        self.progress = max(self.progress, self.checkpointed)
        self.cost_seconds.append(max(0.0, float(seconds)))
        if self.notice_at is not None and self.emergency_done_at is None:
            self.emergency_done_at = now
            log.info(
                "job %s/%s: emergency checkpoint done %.2f s after the notice",
                self.job_id,
                self.replica_id,
                now - self.notice_at,
            )
        cost = self.checkpoint_cost_hours
        if abs(cost - self.planned_cost_hours) > REPLAN_DRIFT * max(self.planned_cost_hours, 1e-12):
            self._replan()
        return self.directive(self.progress)

    def record_restore(self, ref: dict[str, Any] | None) -> None:
        """The replica (re)started on this node, from ``ref`` or from scratch: plan afresh."""
        self.restored_from = ref
        p = float(ref.get("progress", 0.0)) if ref else 0.0
        self.progress = self.checkpointed = p
        self.started = True
        self._replan()

    def record_finished(self) -> None:
        self.finished = True

    # -- what the executor calls -----------------------------------------------------------------
    def notice(self, seconds_left: float) -> None:
        """A preemption notice: ask for a checkpoint at once; the node dies in ``seconds_left``."""
        now = self.clock.now()
        if self.notice_at is None:
            self.notice_at = now
            self.notice_deadline = now + float(seconds_left)
            log.info(
                "job %s/%s: preemption notice, %.1f s left",
                self.job_id,
                self.replica_id,
                seconds_left,
            )

    def node_lost(self, at: float | None = None) -> dict[str, Any]:
        """The node died at ``at`` (default now): did the emergency checkpoint make it?"""
        died = self.clock.now() if at is None else float(at)
        done = self.emergency_done_at
        out = EmergencyOutcome(
            noticed=self.notice_at is not None,
            checkpoint_requested_at=self.notice_at,
            checkpoint_completed_at=done,
            completed_before_death=done is not None and done <= died,
            died_at=died,
            progress_at_death=self.progress,
            checkpointed_progress=self.checkpointed,
        )
        return {**asdict(out), "lost_progress": out.lost_progress}

    def status(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "replica_id": self.replica_id,
            "node_id": self.node_id,
            "progress": self.progress,
            "checkpointed": self.checkpointed,
            "started": self.started,
            "checkpoints": len(self.artifacts),
            "checkpoint_cost_hours": self.checkpoint_cost_hours,
            "node_age_hours": self.node_age_hours(),
            "next_at_progress": self.next_at_progress(),
            "plan_work_hours": list(self.plan),
            "plans": self.plans,
            "noticed": self.notice_at is not None,
            "emergency_done": self.emergency_done_at is not None,
            "finished": self.finished,
            "restored_from": self.restored_from,
            "artifacts": list(self.artifacts),
        }

    # -- the schedule ----------------------------------------------------------------------------
    @property
    def checkpoint_cost_hours(self) -> float:
        """Measured mean save time in model hours (the prior until the first save)."""
        if not self.cost_seconds:
            return self.prior_cost_hours
        return sum(self.cost_seconds) / len(self.cost_seconds) * self.scale

    def node_age_hours(self) -> float:
        return self.node_age0 + (self.clock.now() - self.started_at) * self.scale

    def next_at_progress(self) -> float | None:
        done = (self.progress - self.base) * self.work_hours
        for c in self.plan:
            if c > done + 1e-9:
                return min(1.0, self.base + c / self.work_hours)
        return None

    def _replan(self) -> None:
        """Seed 001 Eq. 9-13 for the remaining work from the node's current age."""
        self.base = self.progress
        remaining = (1.0 - self.base) * self.work_hours
        self.planned_cost_hours = self.checkpoint_cost_hours
        self.plans += 1
        if remaining <= 0:
            self.plan = ()
            return
        self.plan = plan_checkpoints(
            self.model, remaining, self.node_age_hours(), self.planned_cost_hours
        )
        log.debug(
            "job %s/%s: plan %d for %.3f h: %s",
            self.job_id,
            self.replica_id,
            self.plans,
            remaining,
            self.plan[:8],
        )


def plan_checkpoints(
    model: Any, remaining_hours: float, age_hours: float, cost_hours: float
) -> tuple[float, ...]:
    """Checkpoint positions (work hours from now): ``policies.checkpoint.plan_positions`` (seed
    001's DP schedule, Young's interval without a model); a node older than the model's limit is
    planned as a fresh one."""
    try:
        return plan_positions(model, remaining_hours, age_hours, cost_hours)
    except InvalidInput as e:  # e.g. an age past the model's limit: plan as if fresh
        log.warning("checkpoint plan at age %.2f h failed (%s): planning from age 0", age_hours, e)
        return plan_positions(model, remaining_hours, 0.0, cost_hours)


RemoteCheckpointActor = ray.remote(num_cpus=0, max_restarts=0)(CheckpointCoordinator)


def checkpoint_actor_options(
    job_id: str, replica_id: str, namespace: str, resource: str | None, *, detached: bool = False
) -> dict[str, Any]:
    """Named actor options; pinned to the replica's node through its custom ``resource``."""
    opts: dict[str, Any] = {
        "name": actor_name(job_id, replica_id),
        "namespace": namespace,
        "get_if_exists": True,
    }
    if resource is not None:
        opts["resources"] = {resource: 0.001}
    if detached:
        opts["lifetime"] = "detached"
    return opts
