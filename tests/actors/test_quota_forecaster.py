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
from actors.quota import quota_actor
from actors.tenant import tenant_actor
from controlplane.models import JobSpec
from controlplane.store import Store

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
        t0 = time.monotonic()
        while not store.quotas() and time.monotonic() - t0 < 60:
            time.sleep(0.1)
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
        t0 = time.monotonic()
        while ray.get(fc.status.remote())["fits"] < 2 and time.monotonic() - t0 < 30:
            time.sleep(0.1)
        assert ray.get(fc.status.remote())["fits"] == 2
        usage = ray.get(tenant_actor(db, a.id, ns, detached=False).usage.remote())
        assert usage["max_gpus"] == 64 and usage["jobs"] == {"PENDING": 1}
    finally:
        ray.get(fc.stop.remote())
        for name in ("spotplane-quota", f"spotplane-tenant-{a.id}", f"spotplane-tenant-{b.id}"):
            with contextlib.suppress(ValueError):
                ray.kill(ray.get_actor(name, namespace=ns))
        ray.kill(fc)
