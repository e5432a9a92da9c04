"""The tick's journal: job transitions (with their counters), node events and policy decisions.

A :class:`Journal` writes into the tick's work (``LoopState.work``), from which the persist step
commits them with the rows they describe.
"""

from __future__ import annotations

from typing import Any

from controlplane.core import counters
from controlplane.core.models import Decision, Event, Job, JobKind, JobState, Node, check_transition
from controlplane.core.units import HOUR
from controlplane.reconcile.state import LoopState


class Journal:
    """Records what phases do to jobs and nodes into the tick's work."""

    def __init__(self, state: LoopState) -> None:
        self.state = state

    def move(self, job: Job, dst: JobState, cause: str, at: float) -> None:
        """Move a job to ``dst`` (a legal transition), with its event and counters."""
        w = self.state.work
        check_transition(job.id, job.state, dst)
        self._count_transition(job, dst, at)
        w.events.append(Event(at=at, tenant_id=job.tenant_id, job_id=job.id,
                              kind="transition", src=job.state.value, dst=dst.value,
                              cause=cause))
        job.state = dst
        job.message = cause
        if dst is JobState.RUNNING and job.started_at is None:
            job.started_at = at
        if dst in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
            job.finished_at = job.finished_at if dst is JobState.SUCCEEDED else at
            w.count(f"jobs_{dst.value.lower()}_total")
            if w.report is not None:
                w.report.finished += 1

    def _count_transition(self, job: Job, dst: JobState, at: float) -> None:
        c = self.state.work.counters
        if job.state is JobState.CHECKPOINTING and dst is JobState.RUNNING:
            counters.count(c, "checkpoint_writes_total", source="simulated")
            counters.observe(c, "checkpoint_duration_seconds", job.spec.checkpoint_hours * HOUR)
        if dst is JobState.SUCCEEDED and job.kind is JobKind.DEADLINE and job.deadline_at:
            slack = job.deadline_at - (job.finished_at if job.finished_at is not None else at)
            if slack >= 0:
                counters.observe(c, "deadline_slack_at_finish_seconds", slack)
            else:
                counters.count(c, "deadline_misses_total")
                counters.observe(c, "deadline_lateness_seconds", -slack)

    def node_event(self, node: Node, cause: str, at: float) -> None:
        """Record a node's new state (and persist the node this tick)."""
        w = self.state.work
        w.events.append(Event(at=at, tenant_id=node.tenant_id, job_id=node.job_id,
                              node_id=node.id, kind="node", dst=node.state.value, cause=cause))

    def decide(self, job: Job, policy: str, action: str, reason: str, at: float,
               zone: str | None = None, obs: dict[str, Any] | None = None) -> None:
        """Record a policy's decision for a job."""
        self.state.work.decisions.append(Decision(
            at=at, job_id=job.id, tenant_id=job.tenant_id, policy=policy, action=action,
            zone=zone, reason=reason, observation=obs or {}))
