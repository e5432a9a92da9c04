"""Step 4 of the reconcile loop: one batch of deadline-policy decisions per tick.

Every deadline job's policy gets an ``Observation`` and answers spot / on-demand / idle (and a
zone); a switch releases the job's nodes and queues it again.
"""

from __future__ import annotations

import logging

from controlplane.core import counters
from controlplane.core.models import Job, JobKind, JobState
from controlplane.core.units import HOUR
from controlplane.reconcile import workload
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.nodeops import NodeOps
from controlplane.reconcile.policyhost import (
    DeadlinePolicyHost,
    PolicyFailed,
    PolicyRequest,
    default_policy,
)
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.state import WITH_NODES, LoopState
from policies.deadline import Action, DeadlineTask, Kind, Observation, ZoneView
from policies.egress import GB

log = logging.getLogger(__name__)


class AskPolicies:
    """Deadline policies: spot / on-demand / idle (and a zone) for every deadline job."""

    def __init__(self, policy_host: DeadlinePolicyHost, settings: ControllerSettings,
                 state: LoopState, rec: Recorder, ops: NodeOps) -> None:
        self.policy_host, self.settings = policy_host, settings
        self.state, self.rec, self.ops = state, rec, ops

    def run(self, now: float) -> None:
        s = self.state
        reqs = []
        for job in list(s.jobs.values()):
            if job.kind is not JobKind.DEADLINE or job.terminal or job.deadline_at is None:
                continue
            try:
                req = self._request(job, now)
            except Exception as exc:  # noqa: BLE001 - one job must not stop the tick
                self.ops.quarantine_job(job, now, f"building its policy request raised {exc!r}")
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
            s.work.count("policy_host_errors_total")
            return
        for req in reqs:
            act = actions.get(req.job_id)
            job = s.jobs[req.job_id]
            if isinstance(act, PolicyFailed):
                self.ops.quarantine_job(job, now, act.reason)
            elif act is not None:
                try:
                    self._apply(job, act, req, now)
                except Exception as exc:  # noqa: BLE001 - one job must not stop the tick
                    self.ops.quarantine_job(job, now,
                                            f"applying its policy action raised {exc!r}")

    def _bill_probes(self, job: Job, zones: list[str], now: float) -> None:
        """The job pays for the probes its policy asked for: ``probe_minutes`` of each zone's
        cheapest spot node (what ``SyncFleet`` buys next tick)."""
        minutes = self.settings.probe_minutes
        for zone in zones:
            price = min((o.spot_price for o in self.state.offers if o.zone == zone), default=0.0)
            self.rec.billing.charge(job, "probes", price * minutes / 60.0, now)

    def _request(self, job: Job, now: float) -> PolicyRequest | None:
        """The deadline policy's input for one job over the zones that take new work and the
        one it runs in (None: no offer fits it, or every zone that fits is closed and it runs in
        none: the job keeps its last action)."""
        s = self.state
        running = job.state in WITH_NODES
        offers = s.open_offers_for(job)
        if running and job.zone in s.fleet.closed:  # what runs there is left alone
            offers = offers + [o for o in s.offers_for(job) if o.zone == job.zone]
        if not offers or job.deadline_at is None:
            return None
        spot = min(o.spot_price for o in offers)
        od = min(o.on_demand_price for o in offers)
        c = job.spec.compute_hours
        r = (job.deadline_at - job.submitted_at) / HOUR
        d = min(job.spec.overhead_hours + self.settings.provision_hours, max(r - c, 0.0))
        task = DeadlineTask(c, r, d, od * job.spec.workers, spot * job.spec.workers,
                            job.spec.workers)
        kind = Kind(job.market.value) if running and job.market is not None else Kind.IDLE
        zones = tuple(ZoneView(o.zone, s.fleet.availability.get(o.zone, False), o.spot_price,
                               o.on_demand_price, o.cloud, o.region) for o in offers)
        here = s.fleet.availability.get(job.zone, False) if running and job.zone else any(
            z.spot_available for z in zones)
        obs = Observation((now - job.submitted_at) / HOUR, job.progress_hours, kind,
                          job.zone if running else None, here, zones, move_bytes(job))
        every = s.offers_for(job)
        name = job.spec.policy or self.settings.deadline_policy or default_policy(
            len({o.zone for o in every}), evidence=self.settings.zone_observation == "evidence",
            regions=len({(o.cloud, o.region) for o in every}))
        # a live refusal is seen a tick later, not at once as in the replay: a refused zone is
        # tried again after refused_seconds, so the others believed up are tried meanwhile
        return PolicyRequest(job.id, name, task, obs, self.settings.tick_seconds / HOUR,
                             retry_hours=self.settings.refused_seconds / HOUR)

    def _apply(self, job: Job, act: Action, req: PolicyRequest, now: float) -> None:
        w = self.state.work
        kind = act.kind.value
        asked = [z for z in act.probes if z in self.state.fleet.availability]
        self.state.fleet.probes.update(asked)
        self._bill_probes(job, asked, now)
        if (kind, act.zone) != (job.policy_action, job.policy_zone):
            o = req.obs
            self.rec.decide(job, req.policy, kind, f"elapsed {o.elapsed_hours:.2f} h, progress "
                            f"{o.progress_hours:.2f}/{req.task.compute_hours:.2f} h, on "
                            f"{o.state.value}, spot {'up' if o.spot_available else 'down'}", now,
                            act.zone,
                            {"elapsed_hours": o.elapsed_hours, "progress_hours": o.progress_hours,
                             "state": o.state.value, "zone": o.zone,
                             "spot_available": o.spot_available})
            job.policy_action, job.policy_zone = kind, act.zone
            counters.count(w.counters, "deadline_decisions_total", policy=req.policy,
                          action=kind)
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
            self.rec.progress(job, now)
        if job.terminal:
            return
        workload.keep_progress(job)
        counters.count(w.counters, "evictions_total", cause="policy_switch",
                      **counters.job_where(job, self.state.nodes))
        self.ops.release(job, now, switch, keep=True)
        self.rec.move(job, JobState.QUEUED, switch, now)


def move_bytes(job: Job) -> int | None:
    """What a move of ``job`` between regions carries: its last checkpoint's bytes, else its
    spec'd ``checkpoint_gb`` estimate (None: neither is known)."""
    if job.last_checkpoint_bytes > 0:
        return job.last_checkpoint_bytes
    if job.spec.checkpoint_gb is not None:
        return int(job.spec.checkpoint_gb * GB)
    return None
