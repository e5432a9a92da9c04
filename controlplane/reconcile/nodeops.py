"""What phases do to nodes on a job's behalf: launch, terminate, release, preempt, quarantine.

A :class:`NodeOps` only records: a launch or terminate is an intent in the tick's work, acted
on by :mod:`controlplane.reconcile.persist` after the intents are durable. Phases receive it
explicitly, next to the :class:`~controlplane.reconcile.recorder.Recorder` it records with.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from enum import StrEnum

from clusters.fleet import FleetProvider, LaunchRequest, Offer
from controlplane.core import counters
from controlplane.core.bills import node_price
from controlplane.core.models import (
    Event,
    Job,
    JobState,
    Market,
    Node,
    NodeState,
    new_id,
)
from controlplane.core.units import HOUR
from controlplane.reconcile import workload
from controlplane.reconcile.contracts import ControllerSettings, JobExecutor
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.state import LoopState
from controlplane.store import BadRow, Intent

log = logging.getLogger(__name__)


class PreemptionReason(StrEnum):
    """Why a job went back to its checkpoint: the bounded label of ``preemptions_total``."""

    LAUNCH_REFUSED = "launch_refused"  # the fleet refused its nodes' launch
    EVICTION = "eviction"  # placement evicted it for a higher-priority job
    NODE_PREEMPTED = "preempted"  # the cloud took a node back
    NODE_FAILED = "failed"  # a node failed to come up
    NODE_TERMINATED = "terminated"  # a node was terminated under it
    GANG_INCOMPLETE = "gang_incomplete"  # a node of the gang is no longer known

    @classmethod
    def of_lost(cls, lost: Sequence[Node]) -> PreemptionReason:
        """The reason the first lost node gives (a gang missing a node when none is listed)."""
        if not lost:
            return cls.GANG_INCOMPLETE
        return {NodeState.PREEMPTED: cls.NODE_PREEMPTED, NodeState.FAILED: cls.NODE_FAILED,
                NodeState.TERMINATED: cls.NODE_TERMINATED}.get(lost[0].state, cls.NODE_TERMINATED)


class NodeOps:
    """Launches, terminations, releases, preemptions and quarantines of one loop."""

    def __init__(self, state: LoopState, rec: Recorder, fleet: FleetProvider,
                 settings: ControllerSettings, executor: JobExecutor | None) -> None:
        self.state, self.rec, self.fleet = state, rec, fleet
        self.settings, self.executor = settings, executor

    # -- launch and terminate --------------------------------------------------------------------
    def launch(self, job: Job, offer: Offer, market: Market, count: int,
               now: float) -> list[Node]:
        """New nodes for the job and the launch intent that will make them."""
        w = self.state.work
        intent = Intent(id=new_id("launch"), kind="launch", created_at=now, payload={})
        nodes = [Node(id=new_id("node"), provider=self.fleet.name, cloud=offer.cloud,
                      zone=offer.zone, instance_type=offer.instance_type,
                      accelerator=offer.accelerator, accelerator_count=offer.accelerator_count,
                      market=market,
                      price_per_hour=offer.spot_price if market is Market.SPOT
                      else offer.on_demand_price,
                      on_demand_price_per_hour=offer.on_demand_price, intent_id=intent.id,
                      job_id=job.id, tenant_id=job.tenant_id, requested_at=now)
                 for _ in range(count)]
        intent.payload = {"zone": offer.zone, "instance_type": offer.instance_type,
                          "market": market.value, "count": count, "job_id": job.id,
                          "node_ids": [n.id for n in nodes]}
        for n in nodes:
            self.state.nodes[n.id] = n
        req = LaunchRequest(intent.id, offer.zone, offer.instance_type, market,
                            count, {"job_id": job.id, "tenant_id": job.tenant_id})
        w.intents.append(intent)
        w.launches.append((intent, req, [n.id for n in nodes]))
        return nodes

    def terminate(self, node: Node, now: float, cause: str) -> None:
        """Mark a node TERMINATING and record the terminate intent for its instance."""
        if node.gone or node.state is NodeState.TERMINATING:
            return
        if node.job_id is None:
            self.end_idle(node, now)
        node.state = NodeState.TERMINATING
        node.ended_at = now
        self.rec.node_event(node, cause, now)
        if node.instance_id is None:
            return  # its launch intent is still pending; the launch step cancels it
        self._terminate_instances([node.instance_id], [node.id], now)

    def fail_boot(self, node: Node, now: float, cause: str) -> None:
        """A node whose bootstrap failed: FAILED with ``cause``, its instance terminated; its
        job, having lost it, is placed elsewhere by the next ``AdvanceJobs``."""
        if node.gone or node.state is NodeState.TERMINATING:
            return
        if node.job_id is None:
            self.end_idle(node, now)
        node.state, node.ended_at = NodeState.FAILED, now
        self.rec.node_event(node, cause, now)
        self.state.work.count("nodes_boot_failed_total")
        if node.instance_id is not None:
            self._terminate_instances([node.instance_id], [node.id], now)

    def end_idle(self, node: Node, now: float) -> float:
        """An idle stretch ends (reuse or termination): its cost, apart from job costs, is
        ``idle_cost_dollars`` (and ``spare_idle_cost_dollars`` for a hot spare's); returns a hot
        spare's idle cost (0 for any other node)."""
        if node.idle_since is None:
            return 0.0
        w = self.state.work
        cost = node_price(node) * max(0.0, now - node.idle_since) / HOUR
        w.count("idle_cost_dollars", cost)
        if node.id in self.state.spares:
            w.count("spare_idle_cost_dollars", cost)
            self.state.spares.discard(node.id)
            return cost
        return 0.0

    def _terminate_instances(self, instance_ids: list[str], node_ids: list[str],
                             now: float) -> None:
        w = self.state.work
        intent = Intent(id=new_id("term"), kind="terminate", created_at=now,
                        payload={"instance_ids": instance_ids, "node_ids": node_ids})
        w.intents.append(intent)
        w.terminations.append((intent, instance_ids))

    # -- a job lets go of its nodes --------------------------------------------------------------
    def release(self, job: Job, now: float, cause: str, *, keep: bool) -> None:
        """Detach the job's nodes: ready ones stay a while for reuse (``keep``), others end."""
        self.rec.bill(job, now)
        for node_id in job.node_ids:
            n = self.state.nodes.get(node_id)
            if n is None:
                continue
            n.job_id = n.tenant_id = None
            if n.gone or n.state is NodeState.TERMINATING:
                continue
            if keep and n.state is NodeState.READY:
                n.idle_since = now
            else:
                self.terminate(n, now, cause)
        job.node_ids = []
        job.billed_at = None

    def preempt(self, job: Job, now: float, lost: Sequence[Node], cause: str = "",
                reason: PreemptionReason | None = None, *, keep: bool = False) -> None:
        """The job lost a worker: back to its checkpoint, release the rest, queue again
        (``reason``, the metric's label, defaults to what happened to the first lost node;
        ``keep``: its ready nodes stay for reuse, as when another job takes them over)."""
        if not cause and not lost:
            cause = "a node of the gang is gone"
        if not cause:
            n = lost[0]
            cause = (f"launch failed for {n.id} in {n.zone}" if n.state is NodeState.FAILED
                     else f"node {n.id} {n.state.value.lower()} in {n.zone}")
        reason = reason or PreemptionReason.of_lost(lost)
        w = self.state.work
        was = job.state
        where = counters.job_where(job, self.state.nodes)
        hours = workload.roll_back(job)
        self.rec.billing.lose(job, hours)
        if self.executor is not None and job.spec.entrypoint is not None:
            self.executor.stop(job, cause)
        self.release(job, now, cause, keep=keep)
        if was is JobState.STARTING and lost and lost[0].state is NodeState.FAILED:
            self.rec.move(job, JobState.QUEUED, cause, now)
            return
        job.preemptions += 1
        w.count("job_preemptions_total")
        counters.count(w.counters, "preemptions_total", cause=reason.value, **where)
        if w.report is not None:
            w.report.preempted += 1
        self.rec.move(job, JobState.PREEMPTED, f"{cause}; lost {hours:.3f} h since the last "
                      f"checkpoint", now)
        self.rec.move(job, JobState.QUEUED, "requeued after preemption", now)

    # -- quarantine: a row or job the loop cannot handle is set aside, the tick goes on -----------
    def quarantine_job(self, job: Job, now: float, reason: str) -> None:
        """Fail one job the loop could not handle (a policy or a step raised on it); its nodes
        are released and the reason is its FAILED event, so the tick goes on for the others."""
        log.error("quarantined job %s: %s", job.id, reason)
        w = self.state.work
        self.state.admission.quarantined.add(("jobs", job.id))
        w.quarantine.append(BadRow("jobs", job.id, reason, state=job.state.value,
                                   tenant_id=job.tenant_id))
        w.count("rows_quarantined_total")
        try:
            self.release(job, now, f"job {job.id} quarantined", keep=False)
        except Exception:  # noqa: BLE001 - the job fails either way
            log.exception("releasing quarantined job %s", job.id)
        if not job.terminal:
            self.rec.move(job, JobState.FAILED, f"quarantined: {reason}", now)

    def quarantine_rows(self, rows: Sequence[BadRow], now: float) -> None:
        """Set aside stored rows that do not load: a job is FAILED (its nodes terminated), a
        node is marked FAILED (its instance terminated), a tenant's jobs are no longer placed;
        each with an event naming the reason, recorded once in the store's quarantine table."""
        w = self.state.work
        for bad in rows:
            if (bad.table, bad.id) in self.state.admission.quarantined:
                continue
            self.state.admission.quarantined.add((bad.table, bad.id))
            log.error("quarantined stored %s", bad.describe())
            w.quarantine.append(bad)
            w.count("rows_quarantined_total")
            cause = f"quarantined: the stored {bad.table[:-1]} {bad.reason}"
            if bad.table == "jobs":
                w.events.append(Event(at=now, tenant_id=bad.tenant_id, job_id=bad.id,
                                      kind="transition", src=bad.state,
                                      dst=JobState.FAILED.value, cause=cause))
                w.count("jobs_failed_total")
                for n in [n for n in self.state.nodes.values() if n.job_id == bad.id]:
                    n.job_id = n.tenant_id = None
                    self.terminate(n, now, f"job {bad.id} quarantined")
            elif bad.table == "nodes":
                w.events.append(Event(at=now, job_id=bad.job_id, node_id=bad.id, kind="node",
                                      src=bad.state, dst=NodeState.FAILED.value, cause=cause))
                self._terminate_instance_of(bad, now)
            else:
                w.events.append(Event(at=now, tenant_id=bad.id, kind="tenant",
                                      cause=cause + "; its jobs are not placed"))

    def _terminate_instance_of(self, bad: BadRow, now: float) -> None:
        """Terminate the instance an unloadable node row names, if its body still names one."""
        try:
            instance_id = json.loads(bad.body or "").get("instance_id")
        except (ValueError, AttributeError):
            instance_id = None
        if not isinstance(instance_id, str) or not instance_id:
            return
        self._terminate_instances([instance_id], [bad.id], now)
