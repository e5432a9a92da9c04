"""The forecaster refits only once there is history to fit: on an empty one (no tenants, or no
HP demand yet) it says so once at info level and never logs a failed refit."""

from __future__ import annotations

import contextlib
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.forecaster import ForecasterActor
from actors.quota import quota_actor
from controlplane.core.models import JobSpec
from controlplane.store import Store
from tests.support import wait_until


def _advance(store: Store, fc: ForecasterActor, times: int) -> None:
    """Move control-plane time 300 s at a time; wait for the forecaster to look each time."""
    for _ in range(times):
        seen = fc.skipped + fc.fits
        store.commit(control_time=store.control_time() + 300.0)
        wait_until(lambda s=seen: fc.skipped + fc.fits > s, 30, "the forecaster to look")  # type: ignore[misc]


def test_no_tenants_no_refit_and_one_info_line(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    store = Store(tmp_path / "spotplane.db")
    store.commit(control_time=0.0)
    with caplog.at_level(logging.DEBUG, logger="actors.forecaster"):
        fc = ForecasterActor(str(tmp_path / "spotplane.db"), None, "unused", every_seconds=300.0,
                             poll_wall_seconds=0.005, min_wall_seconds=0.0, detached=False)
        try:
            wait_until(lambda: fc.skipped == 1, 30, "the first look")
            _advance(store, fc, 25)
        finally:
            fc.stop()
    assert (fc.fits, fc.skipped) == (0, 26)
    records = [(r.levelname, r.getMessage()) for r in caplog.records
               if r.name == "actors.forecaster"]
    assert records == [("INFO", "forecaster: no tenants yet; spot quotas wait for demand history")]
    assert store.quotas() == [] and store.forecasts() == []


@pytest.mark.ray
@pytest.mark.slow
def test_tenants_without_demand_wait_then_the_first_demand_is_fitted(
        ray_cluster: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ns = f"t-{uuid.uuid4().hex[:8]}"
    db = str(tmp_path / "spotplane.db")
    store = Store(db)
    a, _ = store.create_tenant("a")
    b, _ = store.create_tenant("b")
    store.submit_job(a.id, JobSpec(name="hp", kind="hp", compute_hours=1, accelerator="V100"))
    store.commit(control_time=48 * 3600.0)
    quota = quota_actor(db, {"V100": 10}, {"V100": 1}, ns, detached=False)
    with caplog.at_level(logging.DEBUG, logger="actors.forecaster"):
        fc = ForecasterActor(db, quota, ns, every_seconds=300.0, poll_wall_seconds=0.005,
                             min_wall_seconds=0.0, detached=False)
        try:
            wait_until(lambda: fc.skipped == 1, 60, "the first look")
            _advance(store, fc, 20)
            assert (fc.fits, fc.skipped) == (0, 21)
            assert store.quotas() == []
            store.add_demand(a.id, store.control_time() - 3600.0, 4.0, 0.0)
            _advance(store, fc, 1)
        finally:
            fc.stop()
            for name in ("spotplane-quota", f"spotplane-tenant-{a.id}",
                         f"spotplane-tenant-{b.id}"):
                with contextlib.suppress(ValueError):
                    ray.kill(ray.get_actor(name, namespace=ns))
    assert (fc.fits, fc.skipped) == (1, 21)
    (q,) = store.quotas()
    assert (q.accelerator, q.capacity_gpus, q.spot_quota_gpus) == ("V100", 10, 6)
    messages = [(r.levelname, r.getMessage()) for r in caplog.records
                if r.name == "actors.forecaster" and r.levelno >= logging.INFO
                and not r.getMessage().startswith("OrgLinear unavailable")]
    assert messages == [
        ("INFO", "forecaster: no HP demand yet from 2 tenant(s); spot quotas wait for demand "
                 "history")]
