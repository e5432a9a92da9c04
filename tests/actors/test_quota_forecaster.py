"""ForecasterActor refits every 300 s of control-plane time on the TenantActors' histories and
pushes GFS spot quotas (Eq. 9-10) through the QuotaAllocatorActor into the store."""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.forecaster import RemoteForecasterActor
from actors.quota import QuotaAllocatorActor, quota_actor
from actors.tenant import tenant_actor
from controlplane.core.models import Event, JobSpec, JobState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.placement import account_demand
from controlplane.reconcile.state import LoopState
from controlplane.store import Store
from tests.support import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_forecaster_pushes_quotas_every_300_s(ray_cluster: Any, tmp_path: Path) -> None:
    ns = f"t-{uuid.uuid4().hex[:8]}"
    db = str(tmp_path / "spotplane.db")
    store = Store(db)
    a, _ = store.create_tenant("a")
    b, _ = store.create_tenant("b")
    store.submit_job(a.id, JobSpec(name="hp", kind="hp", compute_hours=1, accelerator="V100"))
    now = 48 * 3600.0
    for h in range(48):  # tenant a: HP demand of 3 GPUs, peak 5; tenant b: none
        store.add_demand(a.id, h * 3600.0, 5.0 if h == 40 else 3.0, 0.0)
    store.commit(control_time=now)
    quota = quota_actor(db, {"V100": 10}, {"V100": 1}, ns, detached=False)
    fc = RemoteForecasterActor.options(namespace=ns).remote(db, quota, ns, every_seconds=300.0,
                                                            poll_wall_seconds=0.05,
                                                            min_wall_seconds=0.0,
                                                            detached=False)
    try:
        # the quotas are written before the refit counts itself done; the first refit waits on
        # the actors it starts (allocator, forecaster, tenants)
        wait_until(lambda: store.quotas() and ray.get(fc.status.remote())["fits"] >= 1, 180, "the first refit")
        (q,) = store.quotas()
        # Eq. 9: f = C - min(C, peak HP demand) = 10 - 5; Eq. 10: min(f * eta, S0 + Sa) = 5
        assert (q.accelerator, q.capacity_gpus, q.spot_quota_gpus) == ("V100", 10, 5)
        rows = {f.tenant_id: f for f in store.forecasts()}
        assert rows[a.id].upper[0] == pytest.approx(5.0) and rows[b.id].upper[0] == 0.0
        assert ray.get(fc.status.remote())["fits"] == 1
        store.commit(control_time=now + 200)
        time.sleep(0.5)
        assert ray.get(fc.status.remote())["fits"] == 1  # not yet 300 s
        store.commit(control_time=now + 300)
        wait_until(lambda: ray.get(fc.status.remote())["fits"] >= 2, 120, "the refit at +300 s")
        assert ray.get(fc.status.remote())["fits"] == 2
        usage = ray.get(tenant_actor(db, a.id, ns, detached=False).usage.remote())
        assert usage["max_gpus"] == 64 and usage["jobs"] == {"PENDING": 1}
    finally:
        ray.get(fc.stop.remote())
        for name in ("spotplane-quota", f"spotplane-tenant-{a.id}", f"spotplane-tenant-{b.id}"):
            with contextlib.suppress(ValueError):
                ray.kill(ray.get_actor(name, namespace=ns))
        ray.kill(fc)


def test_live_eta_falls_after_evictions_and_rises_after_a_quiet_spell(ray_cluster: Any,
                                                                       tmp_path: Path) -> None:
    ns = f"t-{uuid.uuid4().hex[:8]}"
    db = str(tmp_path / "spotplane.db")
    store = Store(db)
    t, _ = store.create_tenant("t")
    job = store.submit_job(t.id, JobSpec(name="s", kind="spot", compute_hours=1,
                                         accelerator="V100"), now=0.0)
    job.state = JobState.QUEUED  # a spot job queued since 0 s (what the controller writes)
    store.commit(jobs=[job], events=[Event(at=0.0, tenant_id=t.id, job_id=job.id,
                                           kind="transition", src="PENDING", dst="QUEUED",
                                           cause="accepted by the controller")], control_time=0.0)
    quota = quota_actor(db, {"V100": 10}, {"V100": 1}, ns, detached=False)
    no_hp = {"V100": ([[0.0]], [[0.0]])}  # no HP demand: Eq. 9's inventory f = C = 10 GPUs
    try:
        ray.get(quota.update.remote(no_hp, 300.0))  # the first update only reads the counters
        assert ray.get(quota.eta.remote()) == {"V100": 1.0}
        store.incr("spot_placements_total", 4)
        store.incr("hp_evictions_total", 2)
        ray.get(quota.update.remote(no_hp, 600.0))
        # e = 2 / 4 = 0.5 > 1.5 eps = 0.15: eta = 1.0 * eps / e = 0.1 / 0.5 = 0.2
        assert ray.get(quota.eta.remote())["V100"] == pytest.approx(0.2, rel=1e-12)
        (q,) = store.quotas()  # Eq. 10: min(f * eta, S0 + Sa) = min(10 * 0.2, 10 + 0) = 2
        assert q.spot_quota_gpus == 2
        store.incr("spot_placements_total", 4)  # a quiet spell: runs, no eviction
        ray.get(quota.update.remote(no_hp, 4000.0))
        # e = 0 < 0.5 eps and the spot job has queued 4000 s > theta = 3600 s:
        # eta = 0.2 * (1.5 - 0 / 0.1) = 0.3
        assert ray.get(quota.eta.remote())["V100"] == pytest.approx(0.3, rel=1e-12)
        (q,) = store.quotas()  # min(10 * 0.3, 10) = 3
        assert q.spot_quota_gpus == 3
        # eta is saved in the store: a restarted allocator resumes from it
        assert QuotaAllocatorActor(db, {"V100": 10}, {"V100": 1}).eta()["V100"] == pytest.approx(
            0.3, rel=1e-12)
    finally:
        ray.kill(quota)


def test_a_queued_hp_gang_does_not_zero_the_pools_quota(ray_cluster: Any, tmp_path: Path) -> None:
    # V100 pool: 10 GPUs. Tenant a runs a 2-GPU HP job for two days while an 8-GPU HP gang waits
    # in the queue. The controller's demand accounting (one tick every 300 s) records only the
    # GPUs running HP holds, so the forecast peak is 2 and the quota is 10 - 2 = 8; counting the
    # queued gang too would forecast 10 and leave spot jobs no GPU of the pool for days.
    ns = f"t-{uuid.uuid4().hex[:8]}"
    db = str(tmp_path / "spotplane.db")
    store = Store(db)
    a, _ = store.create_tenant("a")
    running = store.submit_job(a.id, JobSpec(name="run", kind="hp", compute_hours=100, accelerator="V100",
                                             gpus_per_worker=2), now=0.0)
    gang = store.submit_job(a.id, JobSpec(name="gang", kind="hp", compute_hours=100, accelerator="V100",
                                          workers=8), now=0.0)
    running.state, gang.state = JobState.RUNNING, JobState.QUEUED
    settings = ControllerSettings(tick_seconds=300.0)
    state = LoopState(offers=[], jobs={running.id: running, gang.id: gang})
    for tick in range(48 * 12):
        t = tick * 300.0
        store.commit(jobs=[running, gang] if tick == 0 else (), demand=account_demand(state, settings),
                     demand_at=t, control_time=t)
    assert store.demand_history(a.id, 48, 48 * 3600.0, "hp") == [pytest.approx(2.0)] * 48
    store.commit(control_time=48 * 3600.0)
    quota = quota_actor(db, {"V100": 10}, {"V100": 1}, ns, detached=False)
    fc = RemoteForecasterActor.options(namespace=ns).remote(db, quota, ns, every_seconds=300.0,
                                                            poll_wall_seconds=0.05, min_wall_seconds=0.0,
                                                            detached=False)
    try:
        wait_until(lambda: store.quotas(), 180, "the first refit")
        (q,) = store.quotas()
        assert (q.accelerator, q.capacity_gpus, q.spot_quota_gpus) == ("V100", 10, 8)
    finally:
        ray.get(fc.stop.remote())
        for name in ("spotplane-quota", f"spotplane-tenant-{a.id}"):
            with contextlib.suppress(ValueError):
                ray.kill(ray.get_actor(name, namespace=ns))
        ray.kill(fc)
