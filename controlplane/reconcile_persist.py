"""Section 6 of the reconcile loop: persist the tick's work, then act on the fleet."""

from __future__ import annotations

import logging
import zlib

from clusters.fleet import LaunchRequest
from controlplane import metrics
from controlplane.errors import CapacityUnavailable, CloudError
from controlplane.models import JobState, NodeState
from controlplane.reconcile_base import ReconcileState
from controlplane.store import INTENT_DONE, INTENT_FAILED, Intent

log = logging.getLogger(__name__)


class PersistMixin(ReconcileState):
    """Persist and act: one store commit per phase; launches and terminations on the fleet."""

    def _persist(self, now: float, barrier: bool = False, flush: bool = False) -> None:
        w = self._w
        demand = getattr(self, "_demand", None) if barrier else None
        jobs = dict(w.jobs)
        if not barrier:
            k = max(1, self.settings.persist_progress_every)
            for job_id, job in w.progress.items():
                if flush or (zlib.crc32(job_id.encode()) + self.ticks) % k == 0:
                    jobs.setdefault(job_id, job)
            w.progress = {}
        self.store.commit(jobs=list(jobs.values()), nodes=list(w.nodes.values()),
                          events=w.events, decisions=w.decisions, intents=w.intents,
                          control_time=now, counters=w.counters, demand=demand, demand_at=now,
                          epoch=self.epoch, quarantine=w.quarantine)
        w.jobs, w.nodes, w.events, w.decisions, w.intents, w.counters = {}, {}, [], [], [], {}
        w.quarantine = []

    def flush(self) -> None:
        """Write every active job's progress and cost now (before a clean stop)."""
        for job in self.jobs.values():
            self._w.progress[job.id] = job
        self._persist(self.clock.now(), flush=True)

    def _act(self, now: float) -> None:
        w = self._w
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
            self._do_launch(intent, req, node_ids, now)
        w.launches, w.terminations = [], []

    def _do_launch(self, intent: Intent, req: LaunchRequest, node_ids: list[str],
                   now: float) -> None:
        w = self._w
        nodes = [self.nodes[i] for i in node_ids if i in self.nodes]
        job = self.jobs.get(req.tags.get("job_id", ""))
        try:
            insts = self.fleet.launch(req)
        except CapacityUnavailable as exc:
            intent.status, intent.done_at = INTENT_FAILED, now
            w.intents.append(intent)
            self.refused[req.zone] = now
            w.count("launches_refused_total")
            metrics.count(w.counters, "launch_failures_total", provider=self.fleet.name,
                          error=type(exc).__name__)
            for n in nodes:
                n.state, n.ended_at = NodeState.FAILED, now
                self._node_event(n, str(exc), now)
            if job is not None and job.state is JobState.STARTING and any(
                    i in job.node_ids for i in node_ids):
                self._preempt(job, now, nodes, f"launch refused: {exc.reason} ({req.zone})")
            return
        except CloudError as exc:  # the tick aborts and the intent is retried: count it apart,
            # since the tick's own counters are rolled back with it
            self.store.incr(metrics.counter_key("launch_failures_total", provider=self.fleet.name,
                                                error=type(exc).__name__))
            raise
        intent.status, intent.done_at = INTENT_DONE, now
        w.intents.append(intent)
        w.count("nodes_launched_total", len(insts))
        metrics.count(w.counters, "launches_total", provider=self.fleet.name,
                      market=req.market.value)
        metrics.count(w.counters, "launched_nodes_total", len(insts), provider=self.fleet.name,
                      market=req.market.value)
        if w.report is not None:
            w.report.launched += len(insts)
        for n, inst in zip(nodes, insts, strict=False):
            n.instance_id = inst.instance_id
            n.launched_at = inst.launched_at
            self.by_instance[inst.instance_id] = n.id
            if n.state is NodeState.REQUESTED:
                n.state = NodeState.PROVISIONING
                self._node_event(n, f"launched {inst.instance_id} ({req.market.value})", now)
            elif n.state is NodeState.TERMINATING:  # released before its launch was confirmed
                self.fleet.terminate([inst.instance_id])
                self._node_event(n, f"terminated {inst.instance_id} (released before launch)", now)
            w.nodes[n.id] = n
