"""ForecasterActor: every 300 s of control-plane time, refit the HP demand forecaster on the
tenants' hourly histories (from their TenantActors) and push new quotas to the allocator.

Control-plane time is the store's ``control_time`` (the controller writes it every tick), so the
actor follows the simulated clock at any speed. With less than a week of history OrgLinear
cannot be fitted; the last-week-peak estimator (GFS-e) stands in until there is enough.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np
import ray

from actors.tenant import tenant_actor
from controlplane.core.models import JobKind, JobState
from controlplane.core.readmodels import ForecastRow
from controlplane.store import Store
from policies.forecast import HOURS_PER_WEEK, Forecast, LastWeekPeak, OrgLinear

log = logging.getLogger(__name__)

#: HP jobs in these states hold nodes: their GPUs are the demand the forecaster learns.
HOLDING = frozenset({JobState.STARTING, JobState.RUNNING, JobState.CHECKPOINTING})


class ForecasterActor:
    def __init__(self, db_path: str, quota: Any, namespace: str, *, every_seconds: float = 300.0,
                 horizon_hours: int = 4, poll_wall_seconds: float = 0.2,
                 min_wall_seconds: float = 1.0, detached: bool = True) -> None:
        self.db_path, self.quota, self.namespace = db_path, quota, namespace
        self.store = Store(db_path)
        self.every, self.horizon, self.poll = every_seconds, horizon_hours, poll_wall_seconds
        self.min_wall = min_wall_seconds  # at --speed 3600, 300 s pass every 83 ms: throttle
        self._last_wall = -1e18
        self.detached = detached
        self.last_fit = float(self.store.get_meta("forecast_at", "-1e18") or -1e18)
        self.fits = 0
        self.skipped = 0  # refits skipped for want of history
        self._waiting_for: str | None = None  # why refits wait (logged once per reason)
        self._tenant_actors: dict[str, Any] = {}  # tenant id -> TenantActor handle
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                now = self.store.control_time()
                if (now - self.last_fit >= self.every
                        and time.monotonic() - self._last_wall >= self.min_wall):
                    self._last_wall = time.monotonic()
                    self.refit(now)
            except Exception:  # noqa: BLE001 - keep the loop alive; logged
                log.exception("forecaster refit failed")
            self._stop.wait(self.poll)

    def refit(self, now: float) -> int:
        """One refit: forecasts per pool, quotas pushed; returns the number of tenants (0: no
        refit, for want of tenants or of any HP demand in their history yet)."""

        tenants = self.store.list_tenants()
        hours = HOURS_PER_WEEK
        hist = np.zeros((0, hours))
        if tenants:
            # kept: a non-detached TenantActor dies with its last handle (a race with the next
            # refit's lookup of it)
            for t in tenants:
                if t.id not in self._tenant_actors:
                    self._tenant_actors[t.id] = tenant_actor(self.db_path, t.id, self.namespace,
                                                             self.detached)
            handles = [self._tenant_actors[t.id] for t in tenants]
            hist = np.asarray(ray.get([h.history.remote(hours, now, "hp") for h in handles]),
                              dtype=float).reshape(len(tenants), hours)
        if not self._enough_history(len(tenants), hist):
            self.last_fit = now  # look again in `every` seconds of control-plane time
            self.skipped += 1
            return 0
        self._waiting_for = None
        fc = self._forecast(hist)
        self.store.put_forecasts([
            ForecastRow(tenant_id=t.id, at=now, horizon_hours=self.horizon,
                        mean=fc.mean[i].tolist(), upper=fc.upper(0.9)[i].tolist())
            for i, t in enumerate(tenants)])
        pools = self._per_pool(fc, [t.id for t in tenants])
        ray.get(self.quota.update.remote(pools, now))
        self.last_fit = now
        self.store.set_meta("forecast_at", repr(now))
        self.fits += 1
        return len(tenants)

    def _enough_history(self, tenants: int, hist: np.ndarray) -> bool:
        """A forecast needs tenants with some HP demand; until then say so once (info)."""
        if tenants and bool((hist > 0).any()):
            return True
        why = "no tenants yet" if not tenants else f"no HP demand yet from {tenants} tenant(s)"
        if why != self._waiting_for:
            log.info("forecaster: %s; spot quotas wait for demand history", why)
            self._waiting_for = why
        return False

    def _forecast(self, hist: np.ndarray) -> Forecast:
        if hist.shape[0] == 0:
            return Forecast(np.zeros((0, self.horizon)), np.zeros((0, self.horizon)))
        try:

            if (hist > 0).sum(axis=1).min() >= HOURS_PER_WEEK // 2:
                model = OrgLinear(horizon=self.horizon, maxiter=50).fit(hist)
                return model.predict(hist, self.horizon)
        except Exception as exc:  # noqa: BLE001 - fall back to the GFS-e estimator
            log.info("OrgLinear unavailable (%s); last-week peak stands in", exc)
        return LastWeekPeak().predict(hist, self.horizon)

    def _per_pool(self, fc: Forecast, tenant_ids: list[str]
                  ) -> dict[str, tuple[list[list[float]], list[list[float]]]]:
        """Split each tenant's HP forecast over pools by the accelerators of its HP jobs that hold
        nodes now (the demand the forecaster learned), or of all its HP jobs when none does."""
        share: dict[str, dict[str, float]] = {}
        holding: dict[str, dict[str, float]] = {}
        for j in self.store.list_jobs(kind=JobKind.HP, limit=100_000):
            acc = j.spec.accelerator or "any"
            for d in (share, holding) if j.state in HOLDING else (share,):
                d.setdefault(j.tenant_id, {}).setdefault(acc, 0.0)
                d[j.tenant_id][acc] += j.gpus
        share = {t: holding.get(t, s) for t, s in share.items()}
        pools = {q.accelerator for q in self.store.quotas()} | {
            a for s in share.values() for a in s if a != "any"}
        out = {}
        for acc in pools:
            w = np.array([_weight(share.get(t, {}), acc) for t in tenant_ids])[:, None]
            out[acc] = ((fc.mean * w).tolist(), (fc.sigma * w).tolist())
        return out

    def status(self) -> dict[str, Any]:
        return {"fits": self.fits, "last_fit": self.last_fit, "skipped": self.skipped}

    def stop(self) -> None:
        self._stop.set()


def _weight(shares: dict[str, float], acc: str) -> float:
    total = sum(shares.values())
    if total <= 0:
        return 0.0
    return (shares.get(acc, 0.0) + shares.get("any", 0.0) / max(len(shares), 1)) / total


RemoteForecasterActor = ray.remote(  # type: ignore[call-overload]
    num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=2)(ForecasterActor)
