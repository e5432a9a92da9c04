"""QuotaAllocatorActor: the spot quota of each GPU pool (GFS SQA, ``policies.quota``).

One :class:`~policies.quota.SpotQuotaAllocator` per accelerator pool. The ForecasterActor pushes
the HP demand forecast; the actor computes Eq. 10's quota from the pool's capacity, its idle
GPUs (S0) and the GPUs spot jobs hold (Sa), adapts eta from the eviction rate (Eq. 11), and
writes the quotas to the store, where the controller reads them each tick (spot admission),
with one point per pool in the store's bounded capacity history (what the dashboard draws).
Its eta state is saved in the store, so it survives restarts.
"""

from __future__ import annotations

import json
import math
from typing import Any

import ray

from controlplane.core.models import JobKind, JobState
from controlplane.core.readmodels import CapacityPoint, Quota
from controlplane.store import Store
from policies.forecast import Forecast
from policies.gfs_options import LIVE_DEFAULT
from policies.quota import (
    QuotaParams,
    SpotQuotaAllocator,
    aggregate_mean_demand,
    aggregate_upper_demand,
    guard_backoff,
    guard_quiet_decay,
    spot_guard_acts,
    spot_guard_counts_all_starts,
    spot_guard_gap_s,
    spot_guard_wait_s,
    starvation_guard,
)

STATE_KEY = "quota_allocators"


class QuotaAllocatorActor:
    def __init__(self, db_path: str, pools: dict[str, int], gpus_per_node: dict[str, int]) -> None:
        """``pools``: accelerator -> capacity in nodes; ``gpus_per_node``: accelerator -> GPUs."""
        self.store = Store(db_path)
        self.pools, self.per_node = dict(pools), dict(gpus_per_node)
        # the live plane's GFS options (policies.gfs_options.LIVE_DEFAULT): aggregation, eta clamp
        self.allocators = {acc: SpotQuotaAllocator(QuotaParams.for_options(LIVE_DEFAULT)) for acc in self.pools}
        saved = self.store.get_meta(STATE_KEY)
        if saved:
            for acc, state in json.loads(saved).items():
                if acc in self.allocators:
                    self.allocators[acc].load_state_dict(state)
        self._last_counts: dict[str, float] = {}
        self._last_rate: float | None = None  # Eq. 11's e at the last update (the guard reads it)
        self._guard_at: dict[str, float] = {}  # when the spot guard last raised each pool's quota
        # spot_guard='*_bkall' (policies.quota.spot_guard_backs_off): per pool the wait factor, since when
        # no job the guard admitted was preempted, the spot jobs waiting at a raise, and the jobs admitted
        # then (job id -> pool, preemptions at admission, admitted at)
        self._guard_factor: dict[str, float] = {}
        self._guard_quiet_since: dict[str, float] = {}
        self._waiting_at_raise: dict[str, set[str]] = {}
        self._guard_admitted: dict[str, tuple[str, int, float]] = {}

    def capacity_gpus(self, acc: str) -> float:
        return float(self.pools[acc] * self.per_node.get(acc, 1))

    def usage(self) -> dict[str, tuple[float, float]]:
        """Per pool: (GPUs held by anything, GPUs held by spot jobs)."""
        jobs = {j.id: j for j in self.store.active_jobs()}
        out: dict[str, tuple[float, float]] = {acc: (0.0, 0.0) for acc in self.pools}
        for n in self.store.live_nodes():
            used, spot = out.get(n.accelerator, (0.0, 0.0))
            used += n.accelerator_count
            job = jobs.get(n.job_id or "")
            if job is not None and job.kind is JobKind.SPOT:
                spot += n.accelerator_count
            out[n.accelerator] = (used, spot)
        return out

    def update(self, forecasts: dict[str, tuple[list[list[float]], list[list[float]]]],
               now: float) -> list[Quota]:
        """New quotas from per-pool HP forecasts ``(mean, sigma)`` [tenants, hours]."""
        import numpy as np

        usage = self.usage()
        self._adapt_eta(now)
        waiting = self.oldest_waiting_spot(now)
        if spot_guard_counts_all_starts(LIVE_DEFAULT.spot_guard):
            self._guard_outcomes(now)
        quotas, points = [], []
        for acc, alloc in self.allocators.items():
            mean, sigma = forecasts.get(acc, ([[0.0]], [[0.0]]))
            fc = Forecast(np.asarray(mean, dtype=float), np.asarray(sigma, dtype=float))
            cap = self.capacity_gpus(acc)
            used, spot = usage.get(acc, (0.0, 0.0))
            q = alloc.quota(cap, fc, max(cap - used, 0.0), spot)
            if spot_guard_acts(LIVE_DEFAULT.spot_guard, self._last_rate, alloc.params.tolerated_eviction_rate):
                q = self._guarded(acc, alloc, q, waiting.get(acc, (0.0, 0.0)), max(cap - used, 0.0), spot, now)
            quotas.append(Quota(pool="default", accelerator=acc, capacity_gpus=int(cap),
                                spot_quota_gpus=int(q), updated_at=now))
            h = alloc.params.horizon_hours
            points.append(CapacityPoint(
                at=now, pool="default", accelerator=acc, capacity_gpus=int(cap),
                spot_quota_gpus=int(q), hp_demand_gpus=aggregate_mean_demand(fc, h),
                hp_demand_upper_gpus=aggregate_upper_demand(fc, alloc.params.p, h,
                                                            alloc.params.aggregation),
                guarantee_hours=h, eta=alloc.eta))
        self.store.set_quotas(quotas)
        self.store.add_capacity(points)
        self.store.set_meta(STATE_KEY, json.dumps({a: al.state_dict()
                                                   for a, al in self.allocators.items()}))
        return quotas

    def _guarded(self, acc: str, alloc: SpotQuotaAllocator, quota: float, oldest: tuple[float, float],
                 idle: float, spot: float, now: float) -> float:
        """The pool's quota after the live preset's spot guard (``policies.quota.starvation_guard``)."""
        mode = LIVE_DEFAULT.spot_guard
        if now - self._guard_at.get(acc, -math.inf) < spot_guard_gap_s(mode, alloc.params.horizon_hours):
            return quota
        factor = self._guard_wait_factor(acc, now)
        raised = starvation_guard(quota, oldest[0], oldest[1], spot, idle,
                                  spot_guard_wait_s(mode, alloc.params.theta_seconds) * factor)
        if raised > quota:
            self._guard_at[acc] = now
            if spot_guard_counts_all_starts(mode):
                self._waiting_at_raise[acc] = self._waiting_spot_ids(acc)
        return raised

    def _guard_wait_factor(self, acc: str, now: float) -> float:
        """``*_bkall``: the pool's wait factor after its quiet-time halvings
        (:func:`policies.quota.guard_quiet_decay`); 1 for the other guards."""
        if not spot_guard_counts_all_starts(LIVE_DEFAULT.spot_guard):
            return 1.0
        since = self._guard_quiet_since.setdefault(acc, now)
        factor, used = guard_quiet_decay(self._guard_factor.get(acc, 1.0), now - since)
        self._guard_factor[acc] = factor
        self._guard_quiet_since[acc] = since + used
        return factor

    def _waiting_spot_ids(self, acc: str) -> set[str]:
        """The spot jobs waiting to be placed (PENDING or QUEUED) that may use pool ``acc``."""
        return {j.id for j in self.store.active_jobs()
                if j.kind is JobKind.SPOT and j.state in (JobState.PENDING, JobState.QUEUED)
                and j.spec.accelerator in (None, acc)}

    def _guard_outcomes(self, now: float) -> None:
        """``*_bkall``: the jobs waiting at a pool's last raise that have started since count as the
        guard's; one of them preempted doubles the pool's wait (:func:`policies.quota.guard_backoff`),
        one that ended or held its nodes for H is dropped."""
        jobs = {j.id: j for j in self.store.active_jobs()}
        for acc, ids in self._waiting_at_raise.items():
            for jid in ids:
                job = jobs.get(jid)
                if job is not None and job.state not in (JobState.PENDING, JobState.QUEUED):
                    self._guard_admitted[jid] = (acc, job.preemptions, now)
        self._waiting_at_raise.clear()
        for jid, (acc, preemptions, at) in list(self._guard_admitted.items()):
            job = jobs.get(jid)
            horizon_s = self.allocators[acc].params.horizon_hours * 3600.0
            if job is not None and job.preemptions > preemptions:
                self._guard_factor[acc] = guard_backoff(self._guard_factor.get(acc, 1.0), True)
                self._guard_quiet_since[acc] = now
                del self._guard_admitted[jid]
            elif job is None or now - at >= horizon_s:
                del self._guard_admitted[jid]

    def oldest_waiting_spot(self, now: float) -> dict[str, tuple[float, float]]:
        """Per pool: (GPUs, seconds since submission) of the oldest spot job still waiting to be
        placed (PENDING or QUEUED) that may use the pool (its accelerator, or any)."""
        out: dict[str, tuple[float, float, float]] = {}
        for job in self.store.active_jobs():
            if job.kind is not JobKind.SPOT or job.state not in (JobState.PENDING, JobState.QUEUED):
                continue
            for acc in self.pools if job.spec.accelerator is None else (job.spec.accelerator,):
                if acc in self.pools and (acc not in out or job.submitted_at < out[acc][2]):
                    out[acc] = (float(job.gpus), max(now - job.submitted_at, 0.0), job.submitted_at)
        return {acc: (g, w) for acc, (g, w, _) in out.items()}

    def _adapt_eta(self, now: float) -> None:
        """Eq. 11 from the controller's counters since the last update (HP evictions / spot runs)
        and the longest spot queueing time over the last H hours, both measured by the store."""
        m = self.store.metrics()
        counts = {k: m.get(k, 0.0) for k in ("hp_evictions_total", "spot_placements_total")}
        if self._last_counts:
            ev = counts["hp_evictions_total"] - self._last_counts["hp_evictions_total"]
            runs = counts["spot_placements_total"] - self._last_counts["spot_placements_total"]
            rate = min(1.0, ev / runs) if runs > 0 else 0.0
            self._last_rate = rate
            waits: dict[float, float] = {}  # one query per distinct H
            for alloc in self.allocators.values():
                window = alloc.params.horizon_hours * 3600.0
                if window not in waits:
                    waits[window] = self.store.max_spot_queue_seconds(now, window)
                alloc.update_eta(rate, waits[window])
        self._last_counts = counts

    def quotas(self) -> list[Quota]:
        return self.store.quotas()

    def eta(self) -> dict[str, float]:
        return {a: al.eta for a, al in self.allocators.items()}


RemoteQuotaAllocatorActor = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(
    QuotaAllocatorActor)


def quota_actor(db_path: str, pools: dict[str, int], gpus_per_node: dict[str, int],
                namespace: str, detached: bool = True) -> Any:
    opts: dict[str, Any] = {"name": "spotplane-quota", "namespace": namespace,
                            "get_if_exists": True}
    if detached:
        opts["lifetime"] = "detached"
    return RemoteQuotaAllocatorActor.options(**opts).remote(db_path, pools, gpus_per_node)
