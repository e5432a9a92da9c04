"""Step 6 of the reconcile loop: persist intents, act on the fleet, persist the results.

:meth:`Persist.intents` commits every launch/terminate intent (the barrier) before :class:`Act`
calls the fleet; :meth:`Persist.results` commits what acting changed. A crash between the two
commits leaves pending intents that ``recover()`` re-applies (:func:`resume_intent`); the
fleet's launch is idempotent on the intent id, so nothing launches twice.
"""

from __future__ import annotations

import logging
import zlib

from clusters.fleet import FleetProvider, LaunchRequest
from controlplane.core import counters
from controlplane.core.errors import CapacityUnavailable, CloudError
from controlplane.core.models import Job, JobState, Market, NodeState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.nodeops import NodeOps, PreemptionReason
from controlplane.reconcile.placement import Demand
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.state import PROGRESS_FIELDS, LoopState, TickWork
from controlplane.store import INTENT_DONE, INTENT_FAILED, Intent, Store

log = logging.getLogger(__name__)


class Persist:
    """One store commit of the tick's work (fenced by the controller's epoch)."""

    def __init__(self, store: Store, settings: ControllerSettings, state: LoopState,
                 epoch: int | None) -> None:
        self.store, self.settings, self.state, self.epoch = store, settings, state, epoch

    def intents(self, now: float, demand: Demand) -> None:
        """The barrier: every intent (and every changed job and node) is durable before acting."""
        self._commit(now, self._changed_jobs(progress=False), demand)

    def results(self, now: float, *, flush: bool = False) -> None:
        """After acting: the changes, plus the progress-only jobs due this tick (all if
        ``flush``): job j is due when (crc32(j) + ticks) mod persist_progress_every = 0."""
        self._commit(now, self._changed_jobs(progress=True, flush=flush), None)

    def _changed_jobs(self, *, progress: bool, flush: bool = False) -> list[Job]:
        """The jobs with assigned fields to save now: any but progress (:data:`PROGRESS_FIELDS`),
        or an executor's report; with ``progress``, also the progress-only ones due this tick."""
        s = self.state
        now_ids = s.work.save_now
        k = max(1, self.settings.persist_progress_every)
        out = []
        for job in s.jobs.values():
            assigned = job.assigned
            if not assigned:
                continue
            if not assigned <= PROGRESS_FIELDS or job.id in now_ids or (progress and (
                    flush or (zlib.crc32(job.id.encode()) + s.ticks) % k == 0)):
                out.append(job)
        return out

    def _commit(self, now: float, jobs: list[Job], demand: Demand | None) -> None:
        w = self.state.work
        nodes = [n for n in self.state.nodes.values() if n.assigned]
        self.store.commit(jobs=jobs, nodes=nodes, events=w.events, decisions=w.decisions,
                          intents=w.intents, control_time=now, counters=w.counters,
                          demand=demand, demand_at=now, epoch=self.epoch,
                          quarantine=w.quarantine)
        for row in [*jobs, *nodes]:
            row.mark_saved()
        w.save_now -= {j.id for j in jobs}
        w.events, w.decisions, w.intents, w.counters, w.quarantine = [], [], [], {}, []


class Act:
    """Calls the fleet for the tick's terminations, then its launches."""

    def __init__(self, fleet: FleetProvider, store: Store, state: LoopState, rec: Recorder,
                 ops: NodeOps) -> None:
        self.fleet, self.store, self.state, self.rec, self.ops = fleet, store, state, rec, ops

    def run(self, now: float) -> None:
        w = self.state.work
        for intent, ids in w.terminations:
            try:
                self.fleet.terminate(ids)
                intent.status, intent.done_at = INTENT_DONE, now
            except CloudError as exc:
                log.warning("terminate %s failed: %s (retried next start)", ids, exc)
                continue
            w.intents.append(intent)
            if w.report is not None:
                w.report.terminated += len(ids)
        for intent, req, node_ids in w.launches:
            self._launch(intent, req, node_ids, now)
        w.launches, w.terminations = [], []

    def _launch(self, intent: Intent, req: LaunchRequest, node_ids: list[str],
                now: float) -> None:
        s, w = self.state, self.state.work
        nodes = [s.nodes[i] for i in node_ids if i in s.nodes]
        job = s.jobs.get(req.tags.get("job_id", ""))
        try:
            insts = self.fleet.launch(req)
        except CapacityUnavailable as exc:
            intent.status, intent.done_at = INTENT_FAILED, now
            w.intents.append(intent)
            s.fleet.refused[req.zone] = now
            if req.market is Market.SPOT:
                s.fleet.evidence[req.zone] = False  # a refused launch: free, and now known down
            w.count("launches_refused_total")
            counters.count(w.counters, "launch_failures_total", provider=self.fleet.name,
                          error=type(exc).__name__)
            for n in nodes:
                n.state, n.ended_at = NodeState.FAILED, now
                self.rec.node_event(n, str(exc), now)
            if job is not None and job.state is JobState.STARTING and any(
                    i in job.node_ids for i in node_ids):
                self.ops.preempt(job, now, nodes, f"launch refused: {exc.reason} ({req.zone})",
                                PreemptionReason.LAUNCH_REFUSED)
            return
        except CloudError as exc:  # the tick aborts and the intent is retried: count it apart,
            # since the tick's own counters are rolled back with it
            self.store.incr(counters.counter_key("launch_failures_total", provider=self.fleet.name,
                                                error=type(exc).__name__))
            raise
        intent.status, intent.done_at = INTENT_DONE, now
        w.intents.append(intent)
        if req.market is Market.SPOT:
            s.fleet.evidence[req.zone] = True
        w.count("nodes_launched_total", len(insts))
        counters.count(w.counters, "launches_total", provider=self.fleet.name,
                      market=req.market.value)
        counters.count(w.counters, "launched_nodes_total", len(insts), provider=self.fleet.name,
                      market=req.market.value)
        if w.report is not None:
            w.report.launched += len(insts)
        for n, inst in zip(nodes, insts, strict=False):
            n.instance_id = inst.instance_id
            n.launched_at = inst.launched_at
            s.by_instance[inst.instance_id] = n.id
            if n.state is NodeState.REQUESTED:
                n.state = NodeState.PROVISIONING
                self.rec.node_event(n, f"launched {inst.instance_id} ({req.market.value})", now)
            elif n.state is NodeState.TERMINATING:  # released before its launch was confirmed
                self.fleet.terminate([inst.instance_id])
                self.rec.node_event(n, f"terminated {inst.instance_id} (released before launch)",
                                    now)


def resume_intent(work: TickWork, intent: Intent, now: float) -> None:
    """Queue a pending intent for re-application (one that cannot be read is failed)."""
    p = intent.payload
    try:
        if intent.kind == "launch":
            req = LaunchRequest(intent.id, p["zone"], p["instance_type"],
                                Market(p["market"]), int(p["count"]),
                                {"job_id": p["job_id"]})
            work.launches.append((intent, req, [str(i) for i in p["node_ids"]]))
        elif intent.kind == "terminate":
            work.terminations.append((intent, [str(i) for i in p["instance_ids"]]))
    except (KeyError, TypeError, ValueError) as exc:
        log.error("pending intent %s does not load (%r): marked failed", intent.id, exc)
        intent.status, intent.done_at = INTENT_FAILED, now
        work.intents.append(intent)
