"""Section 4 of the reconcile loop: one batch of deadline-policy decisions per tick."""

from __future__ import annotations

import logging
from typing import Any

from controlplane import metrics, workload
from controlplane.models import Job, JobKind, JobState
from controlplane.policyhost import PolicyFailed, PolicyRequest
from controlplane.reconcile_base import WITH_NODES, ReconcileState
from controlplane.units import HOUR

log = logging.getLogger(__name__)


class PoliciesMixin(ReconcileState):
    """Deadline policies: spot / on-demand / idle (and a zone) for every deadline job."""

    def _ask_policies(self, now: float) -> None:
        reqs = []
        for job in list(self.jobs.values()):
            if job.kind is not JobKind.DEADLINE or job.terminal or job.deadline_at is None:
                continue
            try:
                req = self._policy_request(job, now)
            except Exception as exc:  # noqa: BLE001 - one job must not stop the tick
                self._quarantine_job(job, now, f"building its policy request raised {exc!r}")
                continue
            if req is not None:
                reqs.append(req)
        if not reqs:
            return
        try:
            actions = self.policy_host.decide(reqs)
        except Exception as exc:  # noqa: BLE001 - the host, not a job: keep last actions
            log.warning("deadline policies unavailable this tick (jobs keep their last "
                        "action): %r", exc)
            self._w.count("policy_host_errors_total")
            return
        for req in reqs:
            act = actions.get(req.job_id)
            job = self.jobs[req.job_id]
            if isinstance(act, PolicyFailed):
                self._quarantine_job(job, now, act.reason)
            elif act is not None:
                try:
                    self._apply_action(job, act, req, now)
                except Exception as exc:  # noqa: BLE001 - one job must not stop the tick
                    self._quarantine_job(job, now, f"applying its policy action raised {exc!r}")

    def _policy_request(self, job: Job, now: float) -> PolicyRequest | None:
        """The deadline policy's input for one job (None: no offer fits it)."""
        from policies.deadline import DeadlineTask, Kind, Observation, ZoneView

        offers = self._offers_for(job)
        if not offers or job.deadline_at is None:
            return None
        spot = min(o.spot_price for o in offers)
        od = min(o.on_demand_price for o in offers)
        c = job.spec.compute_hours
        r = (job.deadline_at - job.submitted_at) / HOUR
        d = min(job.spec.overhead_hours + self.settings.provision_hours, max(r - c, 0.0))
        task = DeadlineTask(c, r, d, od * job.spec.workers, spot * job.spec.workers,
                            job.spec.workers)
        running = job.state in WITH_NODES
        kind = Kind(job.market.value) if running and job.market is not None else Kind.IDLE
        zones = tuple(ZoneView(o.zone, self.availability.get(o.zone, False), o.spot_price,
                               o.on_demand_price) for o in offers)
        here = self.availability.get(job.zone, False) if running and job.zone else any(
            z.spot_available for z in zones)
        obs = Observation((now - job.submitted_at) / HOUR, job.progress_hours, kind,
                          job.zone if running else None, here, zones)
        return PolicyRequest(job.id, self.settings.deadline_policy, task, obs,
                             self.settings.tick_seconds / HOUR)

    def _apply_action(self, job: Job, act: Any, req: PolicyRequest, now: float) -> None:
        kind = act.kind.value
        if (kind, act.zone) != (job.policy_action, job.policy_zone):
            o = req.obs
            self._decide(job, req.policy, kind, f"elapsed {o.elapsed_hours:.2f} h, progress "
                         f"{o.progress_hours:.2f}/{req.task.compute_hours:.2f} h, on {o.state.value}, "
                         f"spot {'up' if o.spot_available else 'down'}", now, act.zone,
                         {"elapsed_hours": o.elapsed_hours, "progress_hours": o.progress_hours,
                          "state": o.state.value, "zone": o.zone,
                          "spot_available": o.spot_available})
            job.policy_action, job.policy_zone = kind, act.zone
            metrics.count(self._w.counters, "deadline_decisions_total", policy=req.policy,
                          action=kind)
            self._w.jobs[job.id] = job
        if job.state not in WITH_NODES:
            return
        switch = None
        if kind == "idle":
            switch = "policy: go idle"
        elif job.market is not None and kind != job.market.value:
            switch = f"policy: switch {job.market.value} -> {kind}"
        elif kind == "spot" and act.zone is not None and act.zone != job.zone:
            switch = f"policy: move to spot in {act.zone}"
        if switch is None:
            return
        if job.state in (JobState.RUNNING, JobState.CHECKPOINTING):
            self._progress(job, now)
        if job.terminal:
            return
        workload.keep_progress(job)
        metrics.count(self._w.counters, "evictions_total", cause="policy_switch",
                      **metrics.job_where(job, self.nodes))
        self._release(job, now, switch, keep=True)
        self._move(job, JobState.QUEUED, switch, now)
