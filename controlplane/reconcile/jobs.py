"""Step 3 of the reconcile loop: advance jobs on their nodes, and forget finished ones.

The gang up -> RUNNING, progress and periodic checkpoints, billing, preemption notices,
replica replacement, preemption back to the last checkpoint, and releasing nodes when a job
ends. :class:`ForgetFinished` drops terminal jobs and gone nodes once the tick is persisted.
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.core import bills, counters
from controlplane.core.clock import Clock
from controlplane.core.errors import Unavailable
from controlplane.core.models import Event, Job, JobKind, JobState, Node, NodeState
from controlplane.core.units import HOUR
from controlplane.reconcile import workload
from controlplane.reconcile.contracts import (
    ExecutorReport,
    JobExecutor,
    ReplicatingExecutor,
    replicating,
)
from controlplane.reconcile.nodeops import NodeOps
from controlplane.reconcile.policyhost import DeadlinePolicyHost
from controlplane.reconcile.pool import node_age_hours
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.state import UP_STATES, WITH_NODES, LoopState
from controlplane.store import Store
from policies import retries


class AdvanceJobs:
    """Every job with nodes: up, progress, notices, replicas, preemption, done."""

    def __init__(self, state: LoopState, rec: Recorder, ops: NodeOps,
                 executor: JobExecutor | None, clock: Clock) -> None:
        self.state, self.rec, self.ops = state, rec, ops
        self.executor, self.clock = executor, clock
        self._retrying: dict[str, str] = {}  # job id -> the unavailability last told as an event

    def run(self, now: float) -> None:
        s = self.state
        reports: dict[str, ExecutorReport] = {}
        if self._retrying:
            self._retrying = {k: v for k, v in self._retrying.items() if k in s.jobs}
        if self.executor is not None:
            real = [j for j in s.jobs.values()
                    if j.spec.entrypoint is not None and j.state in WITH_NODES]
            if real:
                reports = self.executor.poll(real)
        for job in list(s.jobs.values()):
            if not job.terminal and retries.over_duration(job.started_at, now,
                                                          job.spec.max_duration_hours):
                self._stop_over_duration(job, now)
                continue
            if job.state in WITH_NODES:
                try:
                    self._advance(job, now, reports.get(job.id))
                except Unavailable as exc:  # the workload cluster is busy: the step is retried
                    self._unavailable(job, now, exc)
                except Exception as exc:  # noqa: BLE001 - one job must not stop the tick
                    self.ops.quarantine_job(job, now, f"advancing it raised {exc!r}")

    def _unavailable(self, job: Job, now: float, exc: Unavailable) -> None:
        """Count a step the workload cluster did not take; its event once per job and cause."""
        w = self.state.work
        w.count("executor_unavailable_total")
        cause = f"the workload cluster is unavailable, retrying: {exc.message}"
        if self._retrying.get(job.id) != exc.message:
            self._retrying[job.id] = exc.message
            w.events.append(Event(at=now, tenant_id=job.tenant_id, job_id=job.id,
                                  kind="retry", cause=cause))

    def _advance(self, job: Job, now: float, report: ExecutorReport | None) -> None:
        rec, ops = self.rec, self.ops
        nodes = [self.state.nodes[i] for i in job.node_ids if i in self.state.nodes]
        lost = [n for n in nodes if n.state in (NodeState.PREEMPTED, NodeState.FAILED,
                                                NodeState.TERMINATED)]
        missing = len(nodes) < len(job.node_ids)
        if job.state is JobState.STARTING and not lost and not missing and nodes and all(
                n.state in UP_STATES for n in nodes):
            if self.executor is not None and job.spec.entrypoint is not None:
                self.executor.start(job, nodes)  # Unavailable: still STARTING, retried next tick
                self._retrying.pop(job.id, None)
            up = max([n.ready_at or now for n in nodes] + [job.accounted_at or now])
            rec.move(job, JobState.RUNNING,
                     f"all {len(nodes)} workers ready in {job.zone} ({job.market})", up)
            workload.start(job, max(node_age_hours(n, up) for n in nodes))
            job.accounted_at = up
        if report is not None and report.finished and job.state in (JobState.RUNNING,
                                                                    JobState.CHECKPOINTING):
            lost, missing = [], False  # it finished before its nodes went: not a preemption
        if lost and not missing and self._replace_replicas(job, lost, now):
            lost = []
        if lost or missing:
            end = min((n.ended_at or now for n in lost), default=now)
            if job.state in (JobState.RUNNING, JobState.CHECKPOINTING):
                self._checkpoint_on_late_notice(job, lost, end)
                rec.progress(job, max(end, job.accounted_at or end))
            rec.bill(job, now)
            if job.terminal:
                ops.release(job, now, "job finished", keep=True)
                return
            ops.preempt(job, now, lost)
            return
        if job.state in (JobState.RUNNING, JobState.CHECKPOINTING):
            self._start_replacements(job, nodes)
            self._handle_notices(job, nodes, now)
            if report is not None:
                self._apply_report(job, report, now)
            else:
                rec.progress(job, now)
        rec.bill(job, now)
        if job.state is JobState.SUCCEEDED:
            ops.release(job, now, "job finished", keep=True)
            if job.bag_id:
                self.state.work.count("bag_jobs_succeeded_total")

    def _handle_notices(self, job: Job, nodes: Sequence[Node], now: float) -> None:
        w = self.state.work
        for n in nodes:
            left = w.notices.get(n.id)
            if left is None:
                continue
            at = n.notice_at or now
            self.rec.progress(job, min(max(at, job.accounted_at or at), now))
            cause = f"preemption notice: {left:.0f} s left on {n.id} ({n.zone})"
            if self.executor is not None and job.spec.entrypoint is not None:
                self.executor.notice(job, left)
            elif job.spec.checkpoint_hours * HOUR <= left:
                workload.begin_checkpoint(job, self.rec.move, cause, at)
            w.events.append(Event(at=at, tenant_id=job.tenant_id, job_id=job.id,
                                  node_id=n.id, kind="notice", cause=cause))

    def _replicated(self, job: Job) -> bool:
        return (job.spec.replicas > 1 and job.spec.entrypoint is not None
                and isinstance(self.executor, ReplicatingExecutor))

    def _replace_replicas(self, job: Job, lost: Sequence[Node], now: float) -> bool:
        """Replication: a replica survives the loss of a node, so the job keeps running (no
        rollback) and lets go of the lost nodes; placement then launches their replacements
        (:meth:`controlplane.reconcile.placement.Place.replace`), which restore from the
        survivor's checkpoint. False when no replica survives (the usual preemption)."""
        if not self._replicated(job) or job.state not in (JobState.RUNNING,
                                                          JobState.CHECKPOINTING):
            return False
        w = self.state.work
        executor = replicating(self.executor)
        survive = False
        for n in lost:
            survive = bool(executor.node_preempted(job, n.id, f"node {n.id} {n.state.value.lower()}"))
        if not survive:
            return False
        self.rec.bill(job, now)
        lost_ids = {n.id for n in lost}
        job.node_ids = [i for i in job.node_ids if i not in lost_ids]
        for n in lost:
            n.job_id = n.tenant_id = None
        w.count("replica_replacements_total", len(lost))
        w.events.append(Event(
            at=now, tenant_id=job.tenant_id, job_id=job.id, kind="replica",
            cause=f"{len(lost)} replica node(s) lost ({', '.join(sorted(lost_ids))}); a replica "
                  f"survives, {len(lost)} replacement(s) requested"))
        return True

    def _start_replacements(self, job: Job, nodes: Sequence[Node]) -> None:
        if not self._replicated(job):
            return
        executor = replicating(self.executor)
        for n in nodes:
            if n.replacement and n.state is NodeState.READY:
                executor.start_replacement(job, n)
                n.replacement = False
                self.rec.node_event(n, f"replacement replica started for {job.id}",
                                    self.clock.now())

    def _checkpoint_on_late_notice(self, job: Job, lost: Sequence[Node], end: float) -> None:
        """Notice and preemption fell in one tick: the node's agent checkpointed at the notice
        (the checkpoint survives when it fits in the notice's seconds)."""
        notices = [n for n in lost if n.notice_at is not None and n.notice_at <= end]
        if not notices or job.state is not JobState.RUNNING or (
                self.executor is not None and job.spec.entrypoint is not None):
            return
        n = min(notices, key=lambda x: x.notice_at or end)
        at = max(n.notice_at or end, job.accounted_at or end)
        self.rec.progress(job, at)
        cause = f"preemption notice: {end - at:.0f} s left on {n.id} ({n.zone})"
        self.state.work.events.append(Event(at=at, tenant_id=job.tenant_id, job_id=job.id,
                                            node_id=n.id, kind="notice", cause=cause))
        if job.spec.checkpoint_hours * HOUR <= end - at:
            workload.begin_checkpoint(job, self.rec.move, cause, at)

    def _apply_report(self, job: Job, r: ExecutorReport, now: float) -> None:
        before = job.progress_hours
        job.progress_hours = r.progress_hours
        job.checkpointed_hours = r.checkpointed_hours
        self._count_checkpoint_io(job, r)
        job.checkpoints = max(job.checkpoints, r.checkpoints)
        book_overhead(job, job.accounted_at, now, job.progress_hours - before)
        job.accounted_at = now
        self.state.work.save_now.add(job.id)
        if r.failed is not None:
            self._exited(job, r, now)
        elif r.finished:  # done: its progress does not fall back at the end
            job.progress_hours = max(before, r.progress_hours)
            job.finished_at = now
            self.rec.move(job, JobState.SUCCEEDED, "executor: finished", now)

    def _exited(self, job: Job, r: ExecutorReport, now: float) -> None:
        """An attempt exited with a failure: back to the last checkpoint and the queue when its
        exit code is listed and restarts are left (:func:`policies.retries.on_exit`), else FAILED
        with the code in its message."""
        job.exit_code = r.exit_code
        verdict = retries.on_exit(r.exit_code, job.spec.restart_on_exit_codes,
                                  job.spec.max_restarts_on_error, job.error_restarts)
        if not verdict.restart:
            said = r.failed or ""
            if job.spec.restart_on_exit_codes:
                said = f"{verdict.reason}: {said}"
            elif r.exit_code is not None and f"exit code {r.exit_code}" not in said:
                said = f"exit code {r.exit_code}: {said}"
            self.ops.release(job, now, "job failed", keep=False)
            self.rec.move(job, JobState.FAILED, f"executor: {said}", now)
            return
        hours = workload.roll_back(job)
        job.error_restarts += 1
        self.state.work.count("job_error_restarts_total")
        self.ops.release(job, now, f"job exited ({verdict.reason})", keep=True)
        self.rec.move(job, JobState.QUEUED, f"executor: {verdict.reason}; lost {hours:.3f} h "
                      "since the last checkpoint", now)

    def _stop_over_duration(self, job: Job, now: float) -> None:
        """The job's wall time from its first start reached ``max_duration_hours``: stop it."""
        hours = (now - (job.started_at or now)) / HOUR
        cause = (f"max_duration_hours={job.spec.max_duration_hours:g} reached: {hours:.3f} h "
                 "since the first start")
        if job.state in WITH_NODES:
            if job.spec.entrypoint is None and job.state is not JobState.STARTING:
                self.rec.progress(job, now)
            if self.executor is not None and job.spec.entrypoint is not None:
                self.executor.stop(job, cause)
            self.ops.release(job, now, "job finished" if job.terminal else cause, keep=True)
            if job.terminal:  # it finished within the bound
                return
        self.state.work.count("job_duration_stops_total")
        self.rec.move(job, JobState.FAILED, cause, now)

    def _count_checkpoint_io(self, job: Job, r: ExecutorReport) -> None:
        """New checkpoints, bytes and restore fallbacks since the job's last report (the
        totals are kept on the job, so a restart counts nothing twice)."""
        c = self.state.work.counters
        if r.checkpoints > job.checkpoints:
            counters.count(c, "checkpoint_writes_total", r.checkpoints - job.checkpoints,
                          source="executor")
        if r.checkpoint_bytes > job.checkpoint_bytes:
            counters.count(c, "checkpoint_bytes_total", r.checkpoint_bytes - job.checkpoint_bytes)
            if r.checkpoints > job.checkpoints:  # the newest ones' mean: the newest when one
                job.last_checkpoint_bytes = ((r.checkpoint_bytes - job.checkpoint_bytes)
                                             // (r.checkpoints - job.checkpoints))
            job.checkpoint_bytes = r.checkpoint_bytes
        if r.restore_fallbacks > job.restore_fallbacks:
            counters.count(c, "checkpoint_restore_fallbacks_total",
                          r.restore_fallbacks - job.restore_fallbacks)
            job.restore_fallbacks = r.restore_fallbacks


def book_overhead(job: Job, since: float | None, now: float, progress: float) -> None:
    """An executor's job: wall hours on its nodes that made no progress (restoring, writing
    checkpoints, warming up) are its checkpoint and restore overhead, billed on the checkpoint
    line: ``overhead = max(booked, sum(wall - progress))``, the running sum so that a report
    that lags one tick and catches up the next books nothing twice."""
    if since is None or now <= since:
        return
    slack = job.bill.get("executor_slack_hours", 0.0)
    step = (now - since) / HOUR - progress
    booked = job.bill.get("checkpoint_hours", 0.0)
    bills.add(job, {"executor_slack_hours": step,
                    "checkpoint_hours": max(0.0, slack + step - booked)})


class ForgetFinished:
    """Drops terminal jobs and gone nodes from the state once the tick is persisted."""

    def __init__(self, store: Store, policy_host: DeadlinePolicyHost, state: LoopState) -> None:
        self.store, self.policy_host, self.state = store, policy_host, state

    def run(self) -> None:
        s = self.state
        done = [j for j in s.jobs.values() if j.terminal]
        bags: dict[str, None] = {}  # each bag's estimate once a tick, however many finished
        for j in done:
            del s.jobs[j.id]
            if j.bag_id and j.state is JobState.SUCCEEDED:
                bags[j.bag_id] = None
        for bag_id in bags:
            self.store.update_bag_estimate(bag_id)
        deadline = [j.id for j in done if j.kind is JobKind.DEADLINE]
        if deadline:
            self.policy_host.forget(deadline)
        for n in [n for n in s.nodes.values() if n.gone]:
            del s.nodes[n.id]
            if n.instance_id:
                s.by_instance.pop(n.instance_id, None)
