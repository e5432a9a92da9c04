"""Section 3 of the reconcile loop: advance jobs on their nodes.

Progress and periodic checkpoints, billing, preemption notices, replica replacement,
preemption back to the last checkpoint, and releasing nodes when a job ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from clusters.fleet import Offer
from controlplane import metrics, replicas, standins, workload
from controlplane.models import HOUR, Event, Job, JobKind, JobState, Market, Node, NodeState
from controlplane.reconcile_base import UP_STATES, WITH_NODES, ReconcileState

if TYPE_CHECKING:
    from controlplane.controller import ExecutorReport


class JobsMixin(ReconcileState):
    """Jobs: gang up -> RUNNING, progress, billing, notices, replicas, preemption, release."""

    def _interval(self, job: Job) -> float:
        if job.market is Market.ON_DEMAND:  # nothing preempts it: no periodic checkpoints
            return max(job.spec.compute_hours - job.progress_hours, 1e-3) + 1.0
        return self._planner(job).interval_hours(job.progress_hours - job.segment_start_hours)

    def _planner(self, job: Job) -> Any:
        key = round(job.spec.checkpoint_hours, 6)
        cache = self.__dict__.setdefault("_planners", {})
        if key not in cache:
            from controlplane.standins import load_checkpoint_planner, load_lifetime_model

            model = self.fleet.lifetimes
            if not isinstance(model, standins.SurvivalModel):
                model = load_lifetime_model()
            cache[key] = load_checkpoint_planner(model, job.spec.checkpoint_hours)
        return cache[key]

    def _progress(self, job: Job, until: float) -> None:
        if job.accounted_at is None:
            job.accounted_at = until
        if job.spec.entrypoint is not None and self.executor is not None:
            job.accounted_at = until
            return
        if until > job.accounted_at:
            workload.advance(job, job.accounted_at, until, self._move, self._interval)
            job.accounted_at = until
            self._w.progress[job.id] = job

    def _bill(self, job: Job, until: float) -> None:
        """Charge the job for its nodes' time since it was last billed (provisioning included)."""
        start = job.billed_at if job.billed_at is not None else until
        if until <= start:
            job.billed_at = max(start, until)
            return
        cost = gpu_h = 0.0
        for node_id in job.node_ids:
            n = self.nodes.get(node_id)
            if n is None or n.launched_at is None:
                continue
            a = max(start, n.launched_at)
            b = min(until, n.ended_at if n.ended_at is not None else until)
            if b > a:
                cost += n.price_per_hour * (b - a) / HOUR
                gpu_h += n.accelerator_count * (b - a) / HOUR
        job.cost += cost
        job.gpu_hours += gpu_h
        job.billed_at = until
        od = self._od_price(job)
        job.on_demand_cost = max(job.on_demand_cost, job.progress_hours * job.spec.workers * od)
        self._w.progress[job.id] = job

    def _od_price(self, job: Job) -> float:
        prices = [o.on_demand_price for o in self._offers_for(job)]
        return min(prices, default=0.0)

    def _offers_for(self, job: Job) -> list[Offer]:
        key = (job.spec.accelerator, job.spec.gpus_per_worker)
        hit = self._offer_cache.get(key)
        if hit is None:
            acc = job.spec.accelerator
            hit = [o for o in self.offers if (acc is None or o.accelerator.lower() == acc.lower())
                   and o.accelerator_count >= job.spec.gpus_per_worker]
            self._offer_cache[key] = hit
        return hit

    def _advance_jobs(self, now: float) -> None:
        reports: dict[str, ExecutorReport] = {}
        if self.executor is not None:
            real = [j for j in self.jobs.values()
                    if j.spec.entrypoint is not None and j.state in WITH_NODES]
            if real:
                reports = self.executor.poll(real)
        for job in list(self.jobs.values()):
            if job.state in WITH_NODES:
                try:
                    self._advance_job(job, now, reports.get(job.id))
                except Exception as exc:  # noqa: BLE001 - one job must not stop the tick
                    self._quarantine_job(job, now, f"advancing it raised {exc!r}")

    def _advance_job(self, job: Job, now: float, report: ExecutorReport | None) -> None:
        nodes = [self.nodes[i] for i in job.node_ids if i in self.nodes]
        lost = [n for n in nodes if n.state in (NodeState.PREEMPTED, NodeState.FAILED,
                                                NodeState.TERMINATED)]
        missing = len(nodes) < len(job.node_ids)
        if job.state is JobState.STARTING and not lost and not missing and nodes and all(
                n.state in UP_STATES for n in nodes):
            up = max([n.ready_at or now for n in nodes] + [job.accounted_at or now])
            self._move(job, JobState.RUNNING,
                       f"all {len(nodes)} workers ready in {job.zone} ({job.market})", up)
            workload.start(job)
            job.accounted_at = up
            if self.executor is not None and job.spec.entrypoint is not None:
                self.executor.start(job, nodes)
        if lost and not missing and self._replace_replicas(job, nodes, lost, now):
            lost = []
        if lost or missing:
            end = min((n.ended_at or now for n in lost), default=now)
            if job.state in (JobState.RUNNING, JobState.CHECKPOINTING):
                self._checkpoint_on_late_notice(job, lost, end)
                self._progress(job, max(end, job.accounted_at or end))
            self._bill(job, now)
            if job.terminal:
                self._release(job, now, "job finished", keep=True)
                return
            self._preempt(job, now, lost)
            return
        if job.state in (JobState.RUNNING, JobState.CHECKPOINTING):
            self._start_replacements(job, nodes)
            self._handle_notices(job, nodes, now)
            if report is not None:
                self._apply_report(job, report, now)
            else:
                self._progress(job, now)
        self._bill(job, now)
        if job.state is JobState.SUCCEEDED:
            self._release(job, now, "job finished", keep=True)
            if job.bag_id:
                self._w.count("bag_jobs_succeeded_total")

    def _handle_notices(self, job: Job, nodes: Sequence[Node], now: float) -> None:
        for n in nodes:
            left = self._w.notices.get(n.id)
            if left is None:
                continue
            at = n.notice_at or now
            self._progress(job, min(max(at, job.accounted_at or at), now))
            cause = f"preemption notice: {left:.0f} s left on {n.id} ({n.zone})"
            if self.executor is not None and job.spec.entrypoint is not None:
                self.executor.notice(job, left)
            elif job.spec.checkpoint_hours * HOUR <= left:
                workload.begin_checkpoint(job, self._move, cause, at)
            self._w.events.append(Event(at=at, tenant_id=job.tenant_id, job_id=job.id,
                                        node_id=n.id, kind="notice", cause=cause))

    def _replicated(self, job: Job) -> bool:
        return (job.spec.replicas > 1 and job.spec.entrypoint is not None
                and isinstance(self.executor, replicas.ReplicatingExecutor))

    def _replace_replicas(self, job: Job, nodes: Sequence[Node], lost: Sequence[Node],
                          now: float) -> bool:
        """Seed 004 replication: a replica survives the loss of a node, so the job keeps
        running (no rollback) and each lost node gets a replacement that restores from the
        survivor's checkpoint. False when no replica survives (the usual preemption)."""
        if not self._replicated(job) or job.state not in (JobState.RUNNING,
                                                          JobState.CHECKPOINTING):
            return False
        executor = replicas.replicating(self.executor)
        survive = False
        for n in lost:
            survive = bool(executor.node_preempted(job, n.id, f"node {n.id} {n.state.value.lower()}"))
        if not survive:
            return False
        self._bill(job, now)
        market = job.market or Market.SPOT
        offers = self._zones(job, market, now) or self._zones(job, Market.ON_DEMAND, now)
        lost_ids = {n.id for n in lost}
        job.node_ids = [i for i in job.node_ids if i not in lost_ids]
        for n in lost:
            n.job_id = n.tenant_id = None
            self._w.nodes[n.id] = n
        new = []
        if offers:
            m = market if self._zones(job, market, now) else Market.ON_DEMAND
            new = self._launch(job, offers[0], m, len(lost), now)
            for n in new:
                n.replacement = True
            job.node_ids += [n.id for n in new]
        self._w.count("replica_replacements_total", len(lost))
        self._w.events.append(Event(
            at=now, tenant_id=job.tenant_id, job_id=job.id, kind="replica",
            cause=f"{len(lost)} replica node(s) lost ({', '.join(sorted(lost_ids))}); a replica "
                  f"survives, {len(new)} replacement(s) launched"))
        self._w.jobs[job.id] = job
        return True

    def _start_replacements(self, job: Job, nodes: Sequence[Node]) -> None:
        if not self._replicated(job):
            return
        executor = replicas.replicating(self.executor)
        for n in nodes:
            if n.replacement and n.state is NodeState.READY:
                executor.start_replacement(job, n)
                n.replacement = False
                self._node_event(n, f"replacement replica started for {job.id}", self.clock.now())

    def _checkpoint_on_late_notice(self, job: Job, lost: Sequence[Node], end: float) -> None:
        """Notice and preemption fell in one tick: the node's agent checkpointed at the notice
        (the checkpoint survives when it fits in the notice's seconds)."""
        notices = [n for n in lost if n.notice_at is not None and n.notice_at <= end]
        if not notices or job.state is not JobState.RUNNING or (
                self.executor is not None and job.spec.entrypoint is not None):
            return
        n = min(notices, key=lambda x: x.notice_at or end)
        at = max(n.notice_at or end, job.accounted_at or end)
        self._progress(job, at)
        cause = f"preemption notice: {end - at:.0f} s left on {n.id} ({n.zone})"
        self._w.events.append(Event(at=at, tenant_id=job.tenant_id, job_id=job.id,
                                    node_id=n.id, kind="notice", cause=cause))
        if job.spec.checkpoint_hours * HOUR <= end - at:
            workload.begin_checkpoint(job, self._move, cause, at)

    def _apply_report(self, job: Job, r: ExecutorReport, now: float) -> None:
        job.progress_hours = r.progress_hours
        job.checkpointed_hours = r.checkpointed_hours
        self._count_checkpoint_io(job, r)
        job.checkpoints = max(job.checkpoints, r.checkpoints)
        job.accounted_at = now
        self._w.jobs[job.id] = job
        if r.failed is not None:
            self._release(job, now, "job failed", keep=False)
            self._move(job, JobState.FAILED, f"executor: {r.failed}", now)
        elif r.finished:
            job.finished_at = now
            self._move(job, JobState.SUCCEEDED, "executor: finished", now)

    def _count_checkpoint_io(self, job: Job, r: ExecutorReport) -> None:
        """New checkpoints, bytes and restore fallbacks since the job's last report (the
        totals are kept on the job, so a restart counts nothing twice)."""
        c = self._w.counters
        if r.checkpoints > job.checkpoints:
            metrics.count(c, "checkpoint_writes_total", r.checkpoints - job.checkpoints,
                          source="executor")
        if r.checkpoint_bytes > job.checkpoint_bytes:
            metrics.count(c, "checkpoint_bytes_total", r.checkpoint_bytes - job.checkpoint_bytes)
            job.checkpoint_bytes = r.checkpoint_bytes
        if r.restore_fallbacks > job.restore_fallbacks:
            metrics.count(c, "checkpoint_restore_fallbacks_total",
                          r.restore_fallbacks - job.restore_fallbacks)
            job.restore_fallbacks = r.restore_fallbacks

    def _preempt(self, job: Job, now: float, lost: Sequence[Node], cause: str = "") -> None:
        """The job lost a worker: back to its checkpoint, release the rest, queue again."""
        if not cause and not lost:
            cause = "a node of the gang is gone"
        if not cause:
            n = lost[0]
            cause = (f"launch failed for {n.id} in {n.zone}" if n.state is NodeState.FAILED
                     else f"node {n.id} {n.state.value.lower()} in {n.zone}")
        was = job.state
        where = metrics.job_where(job, self.nodes)
        hours = workload.roll_back(job)
        if self.executor is not None and job.spec.entrypoint is not None:
            self.executor.stop(job, cause)
        self._release(job, now, cause, keep=False)
        if was is JobState.STARTING and lost and lost[0].state is NodeState.FAILED:
            self._move(job, JobState.QUEUED, cause, now)
            return
        job.preemptions += 1
        self._w.count("job_preemptions_total")
        metrics.count(self._w.counters, "preemptions_total", cause=_preemption_cause(cause, lost),
                      **where)
        if self._w.report is not None:
            self._w.report.preempted += 1
        self._move(job, JobState.PREEMPTED, f"{cause}; lost {hours:.3f} h since the last "
                   f"checkpoint", now)
        self._move(job, JobState.QUEUED, "requeued after preemption", now)

    def _release(self, job: Job, now: float, cause: str, *, keep: bool) -> None:
        """Detach the job's nodes: ready ones stay a while for reuse (``keep``), others end."""
        self._bill(job, now)
        for node_id in job.node_ids:
            n = self.nodes.get(node_id)
            if n is None:
                continue
            n.job_id = n.tenant_id = None
            self._w.nodes[n.id] = n
            if n.gone or n.state is NodeState.TERMINATING:
                continue
            if keep and n.state is NodeState.READY:
                n.idle_since = now
            else:
                self._terminate(n, now, cause)
        job.node_ids = []
        job.billed_at = None
        self._w.jobs[job.id] = job

    def _forget_finished(self) -> None:
        done = [j for j in self.jobs.values() if j.terminal]
        for j in done:
            del self.jobs[j.id]
            if j.bag_id and j.state is JobState.SUCCEEDED:
                self.store.update_bag_estimate(j.bag_id)
        deadline = [j.id for j in done if j.kind is JobKind.DEADLINE]
        if deadline:
            self.policy_host.forget(deadline)
        for n in [n for n in self.nodes.values() if n.gone]:
            del self.nodes[n.id]
            if n.instance_id:
                self.by_instance.pop(n.instance_id, None)


def _preemption_cause(cause: str, lost: Sequence[Node]) -> str:
    """A bounded label for why a job was preempted."""
    if cause.startswith("launch refused"):
        return "launch_refused"
    if cause.startswith("preempted by"):
        return "eviction"
    if lost:
        return lost[0].state.value.lower()
    return "gang_incomplete"
