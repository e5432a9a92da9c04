"""The quota allocator actor's logic without Ray (what ``QuotaAllocatorActor`` does on each
push): pool usage from the store, Eq. 10's quota and Eq. 11's eta from the controller's counters.

``tests/actors/test_quota_forecaster.py`` runs the same actor in Ray; these run in-process so
that a mutation run (``make mutation``) can reach them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors import quota
from actors.quota import QuotaAllocatorActor
from controlplane.core.models import Event, JobSpec, JobState, Market, Node, NodeState
from controlplane.store import Store
from policies.gfs_options import GFS_VARIANTS

NO_HP = {"V100": ([[0.0]], [[0.0]])}  # no HP demand: Eq. 9's inventory f = C


def _node(i: int, job_id: str | None, state: NodeState = NodeState.READY) -> Node:
    return Node(id=f"n{i}", provider="sim", cloud="aws", zone="z", instance_type="p3.2xlarge",
                accelerator="V100", accelerator_count=1, market=Market.SPOT, price_per_hour=1.0,
                on_demand_price_per_hour=3.0, state=state, intent_id=f"i{i}", requested_at=0.0,
                job_id=job_id)


def _queued_spot_job(store: Store, tenant_id: str) -> str:
    job = store.submit_job(tenant_id, JobSpec(name="s", kind="spot", compute_hours=1,
                                              accelerator="V100"), now=0.0)
    job.state = JobState.QUEUED  # queued since 0 s, as the controller writes it
    store.commit(jobs=[job], events=[Event(at=0.0, tenant_id=tenant_id, job_id=job.id,
                                           kind="transition", src="PENDING", dst="QUEUED",
                                           cause="accepted by the controller")], control_time=0.0)
    return job.id


def test_usage_counts_every_live_gpu_and_the_spot_jobs_gpus(tmp_path: Path) -> None:
    db = str(tmp_path / "spotplane.db")
    store = Store(db)
    t, _ = store.create_tenant("t")
    spot = store.submit_job(t.id, JobSpec(name="s", kind="spot", compute_hours=1), now=0.0)
    hp = store.submit_job(t.id, JobSpec(name="h", kind="hp", compute_hours=1), now=0.0)
    nodes = [_node(0, spot.id), _node(1, spot.id), _node(2, hp.id), _node(3, None),
             _node(4, spot.id, NodeState.TERMINATED)]
    store.commit(nodes=nodes)
    actor = QuotaAllocatorActor(db, {"V100": 10, "H100": 2}, {"V100": 1, "H100": 8})
    # live: n0-n3 (4 GPUs), of which n0 and n1 hold the spot job; n4 is gone
    assert actor.usage() == {"V100": (4.0, 2.0), "H100": (0.0, 0.0)}
    assert (actor.capacity_gpus("V100"), actor.capacity_gpus("H100")) == (10.0, 16.0)
    quotas = {q.accelerator: q for q in actor.update(NO_HP, 60.0)}
    # Eq. 10: min(f * eta, S0 + Sa) = min(10 * 1, (10 - 4) + 2) = 8; H100: min(16, 16) = 16
    assert (quotas["V100"].spot_quota_gpus, quotas["V100"].capacity_gpus) == (8, 10)
    assert (quotas["H100"].spot_quota_gpus, quotas["H100"].capacity_gpus) == (16, 16)
    assert {q.accelerator: q.spot_quota_gpus for q in store.quotas()} == {"V100": 8, "H100": 16}


def test_eta_falls_after_evictions_rises_after_a_quiet_spell_and_is_saved(tmp_path: Path) -> None:
    db = str(tmp_path / "spotplane.db")
    store = Store(db)
    t, _ = store.create_tenant("t")
    _queued_spot_job(store, t.id)
    actor = QuotaAllocatorActor(db, {"V100": 10}, {"V100": 1})
    store.incr("hp_evictions_total", 3)  # before the first update: only a baseline (and no
    actor.update(NO_HP, 300.0)           # spot placement counter yet: a baseline of 0)
    assert actor.eta() == {"V100": 1.0}
    store.incr("spot_placements_total", 4)
    store.incr("hp_evictions_total", 2)
    actor.update(NO_HP, 600.0)
    # e = (5 - 3) / (4 - 0) = 0.5 > 1.5 eps = 0.15: eta = 1.0 * eps / e = 0.1 / 0.5 = 0.2
    assert actor.eta()["V100"] == pytest.approx(0.2, rel=1e-12)
    assert [q.spot_quota_gpus for q in store.quotas()] == [2]  # min(10 * 0.2, 10)
    store.incr("hp_evictions_total", 5)  # more evictions than runs: e is capped at 1
    store.incr("spot_placements_total", 2)
    actor.update(NO_HP, 900.0)
    assert actor.eta()["V100"] == 0.05  # 0.2 * 0.1 / 1.0 = 0.02, clamped to eta_min = 0.05
    store.incr("spot_placements_total", 4)  # a quiet spell: runs, no eviction
    actor.update(NO_HP, 4000.0)
    # e = 0 < 0.5 eps, the spot job has queued 4000 s > theta = 3600 s: eta = 0.05 * 1.5
    assert actor.eta()["V100"] == pytest.approx(0.075, rel=1e-12)
    actor.update(NO_HP, 4300.0)  # no runs at all: e = 0, still queued 4300 s: x1.5 again
    assert actor.eta()["V100"] == pytest.approx(0.1125, rel=1e-12)
    assert [q.spot_quota_gpus for q in store.quotas()] == [1]  # int(10 * 0.1125)
    # the eta state is in the store: a restarted allocator resumes from it
    again = QuotaAllocatorActor(db, {"V100": 10}, {"V100": 1})
    assert again.eta()["V100"] == pytest.approx(0.1125, rel=1e-12)
    assert again.allocators["V100"].updates == 4


def test_one_spot_placement_with_one_eviction_is_a_rate_of_1(tmp_path: Path) -> None:
    db = str(tmp_path / "spotplane.db")
    store = Store(db)
    actor = QuotaAllocatorActor(db, {"V100": 10}, {"V100": 1})
    actor.update(NO_HP, 300.0)  # the counters' baseline
    store.incr("spot_placements_total", 1)
    store.incr("hp_evictions_total", 1)
    actor.update(NO_HP, 600.0)
    # e = 1 / 1 > 1.5 eps: eta = 1.0 * 0.1 / 1.0 = 0.1 (Eq. 11)
    assert actor.eta()["V100"] == pytest.approx(0.1, rel=1e-12)


def test_a_short_queue_leaves_eta_alone(tmp_path: Path) -> None:
    db = str(tmp_path / "spotplane.db")
    store = Store(db)
    t, _ = store.create_tenant("t")
    _queued_spot_job(store, t.id)
    actor = QuotaAllocatorActor(db, {"V100": 10}, {"V100": 1})
    actor.update(NO_HP, 300.0)
    store.incr("spot_placements_total", 4)
    actor.update(NO_HP, 3600.0)  # queued exactly theta = 3600 s: not above it
    assert actor.eta() == {"V100": 1.0}


def test_quota_uses_the_pools_hp_forecast_and_a_full_pool_has_no_idle_gpu(tmp_path: Path) -> None:
    db = str(tmp_path / "spotplane.db")
    store = Store(db)
    t, _ = store.create_tenant("t")
    hp = store.submit_job(t.id, JobSpec(name="h", kind="hp", compute_hours=1), now=0.0)
    # T4: 2 nodes, both held by the HP job; A100 is no pool of this allocator (a stray node);
    # T4's GPUs per node are not given: 1
    nodes = [_node(0, hp.id), _node(1, hp.id), _node(2, None)]
    nodes[0].accelerator = nodes[1].accelerator = "T4"
    nodes[2].accelerator = "A100"
    store.commit(nodes=nodes)
    actor = QuotaAllocatorActor(db, {"V100": 10, "T4": 2}, {"V100": 1})
    assert actor.usage() == {"V100": (0.0, 0.0), "T4": (2.0, 0.0), "A100": (1.0, 0.0)}
    assert actor.capacity_gpus("T4") == 2.0
    forecasts = {"V100": ([[4.0, 9.0]], [[0.0, 0.0]])}  # V100's HP tenant: 4 GPUs next hour
    quotas = {q.accelerator: q for q in actor.update(forecasts, 60.0)}
    # V100: f = 10 - 4 = 6 (H = 1 h), min(6 * 1.0, S0 + Sa = 10 + 0) = 6
    assert (quotas["V100"].pool, quotas["V100"].spot_quota_gpus) == ("default", 6)
    # T4: no forecast (f = 2), but no idle GPU and no spot GPU: min(2, 0 + 0) = 0
    assert quotas["T4"].spot_quota_gpus == 0


def test_each_update_writes_one_capacity_point_per_pool(tmp_path: Path) -> None:
    db = str(tmp_path / "spotplane.db")
    store = Store(db)
    t, _ = store.create_tenant("t")
    _queued_spot_job(store, t.id)
    actor = QuotaAllocatorActor(db, {"V100": 10}, {"V100": 1})
    # two HP tenants: means 4 then 9 and 1 then 2 GPUs; sigma 1 and 0
    forecasts = {"V100": ([[4.0, 9.0], [1.0, 2.0]], [[1.0, 1.0], [0.0, 0.0]])}
    actor.update(forecasts, 300.0)
    store.incr("spot_placements_total", 4)
    store.incr("hp_evictions_total", 2)
    actor.update(forecasts, 600.0)  # e = 0.5: eta 1.0 -> 0.2 (Eq. 11)
    points = store.capacity_history()
    assert [(p.at, p.accelerator, p.capacity_gpus, p.guarantee_hours) for p in points] == [
        (300.0, "V100", 10, 1), (600.0, "V100", 10, 1)]
    # demand over H = 1 h: means 4 + 1; upper: 4 + z(0.9) * 1 + 1 = 6.2816 (Eq. 9's inner term)
    assert points[0].hp_demand_gpus == pytest.approx(5.0)
    assert points[0].hp_demand_upper_gpus == pytest.approx(6.2815516, rel=1e-6)
    # Eq. 10: min(f * eta, S0 + Sa) with f = 10 - 6.28 = 3.72: 3 at eta 1, int(0.74) = 0 at 0.2
    assert [(p.eta, p.spot_quota_gpus) for p in points] == [(1.0, 3), (pytest.approx(0.2), 0)]
    assert [q.spot_quota_gpus for q in store.quotas()] == [points[-1].spot_quota_gpus]


def test_a_capacity_point_sums_the_tenants_as_one_gaussian_in_the_default_pool(
        tmp_path: Path) -> None:
    """Two HP tenants, each mean 2 GPUs and sigma 1 over H = 1 h: the allocator's aggregation
    (summed Gaussian) bounds the demand by 4 + z(0.9) sqrt(2), not 4 + 2 z(0.9)."""
    db = str(tmp_path / "spotplane.db")
    store = Store(db)
    actor = QuotaAllocatorActor(db, {"V100": 10}, {"V100": 1})
    actor.update({"V100": ([[2.0], [2.0]], [[1.0], [1.0]])}, 300.0)
    (point,) = store.capacity_history()
    assert point.pool == "default"
    z = 1.2815515655446004  # the standard normal's 0.9 quantile
    assert point.hp_demand_upper_gpus == pytest.approx(4.0 + z * 2 ** 0.5, rel=1e-9)


class _FakeRemote:
    """Stands in for the Ray actor class: records the options and the constructor's arguments."""

    def __init__(self) -> None:
        self.opts: dict[str, Any] = {}
        self.args: tuple[Any, ...] = ()

    def options(self, **opts: Any) -> _FakeRemote:
        self.opts = opts
        return self

    def remote(self, *args: Any) -> str:
        self.args = args
        return "handle"


@pytest.mark.parametrize("detached", [True, False])
def test_quota_actor_is_one_named_actor_per_namespace_built_from_its_arguments(
        monkeypatch: pytest.MonkeyPatch, detached: bool) -> None:
    fake = _FakeRemote()
    monkeypatch.setattr(quota, "RemoteQuotaAllocatorActor", fake)
    assert quota.quota_actor("/db", {"V100": 2}, {"V100": 8}, "ns", detached=detached) == "handle"
    assert fake.args == ("/db", {"V100": 2}, {"V100": 8})
    expected: dict[str, Any] = {"name": "spotplane-quota", "namespace": "ns", "get_if_exists": True}
    if detached:
        expected["lifetime"] = "detached"
    assert fake.opts == expected


@pytest.mark.parametrize("guard", ["off", "oldest", "oldest_calm", "oldest_calm_4h", "oldest_calm_4h_1ph",
                                   "oldest_calm_4h_2ph", "oldest_calm_2h_2ph", "oldest_calm_2h_1ph"])
def test_the_spot_guard_admits_the_oldest_waiting_spot_job_after_theta(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guard: str) -> None:
    from dataclasses import replace

    monkeypatch.setattr(quota, "LIVE_DEFAULT", replace(GFS_VARIANTS["fcfs_eta_max_1"], spot_guard=guard))
    db = str(tmp_path / "spotplane.db")
    store = Store(db)
    t, _ = store.create_tenant("t")
    job = store.submit_job(t.id, JobSpec(name="s", kind="spot", compute_hours=1, accelerator="V100",
                                         workers=4), now=0.0)
    actor = QuotaAllocatorActor(db, {"V100": 10}, {"V100": 1})
    assert actor.oldest_waiting_spot(600.0) == {"V100": (4.0, 600.0)} and job.state is JobState.PENDING
    forecasts = {"V100": ([[8.0]], [[0.0]])}  # f = 10 - 8 = 2 GPUs, below the job's 4
    assert actor.update(forecasts, 600.0)[0].spot_quota_gpus == 2  # before theta (3600 s)
    # after theta (n theta: _<n>h) the guard gives it room (4 <= S0 + Sa = 10), unless off
    t = 4 * 3600.0 if "_4h" in guard else 2 * 3600.0 if "_2h" in guard else 3600.0
    assert actor.update(forecasts, t - 300.0)[0].spot_quota_gpus == 2
    assert actor.update(forecasts, t)[0].spot_quota_gpus == (2 if guard == "off" else 4)
    # _1ph / _2ph: one raised step per H / per H / 2; the others raise it again at the next step
    assert actor.update(forecasts, t + 300.0)[0].spot_quota_gpus == (2 if guard == "off" or guard.endswith("ph") else 4)
    store.incr("spot_placements_total", 1)  # e = 1 > 1.5 eps: eta 0.1, Eq. 10 gives int(0.2) = 0
    store.incr("hp_evictions_total", 1)
    # and the calm guard stands down (e above Eq. 11's growth threshold 0.5 eps)
    assert actor.update(forecasts, t + 3700.0)[0].spot_quota_gpus == (4 if guard == "oldest" else 0)


def test_the_bkall_guard_doubles_its_wait_after_a_job_it_admitted_is_preempted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    monkeypatch.setattr(quota, "LIVE_DEFAULT", replace(GFS_VARIANTS["fcfs_eta_max_1"], spot_guard="oldest_calm_2h_2ph_bkall"))
    db = str(tmp_path / "spotplane.db")
    store = Store(db)
    t, _ = store.create_tenant("t")
    first = store.submit_job(t.id, JobSpec(name="s", kind="spot", compute_hours=1, accelerator="V100",
                                           workers=4), now=0.0)
    actor = QuotaAllocatorActor(db, {"V100": 10}, {"V100": 1})
    forecasts = {"V100": ([[8.0]], [[0.0]])}  # f = 2 GPUs, below the job's 4
    assert actor.update(forecasts, 2 * 3600.0)[0].spot_quota_gpus == 4  # raised after 2 theta
    first.state, first.started_at = JobState.RUNNING, 2 * 3600.0 + 60.0  # placed under the raise
    store.commit(jobs=[first], control_time=2 * 3600.0 + 60.0)
    actor.update(forecasts, 2 * 3600.0 + 300.0)
    assert first.id in actor._guard_admitted
    first.state, first.preemptions = JobState.QUEUED, 1  # preempted within H
    store.commit(jobs=[first], control_time=2 * 3600.0 + 600.0)
    actor.update(forecasts, 2 * 3600.0 + 900.0)
    assert actor._guard_factor["V100"] == 2.0 and first.id not in actor._guard_admitted
    # a job submitted now waits 4 h, not 2 h, for the next raise (the first one's wait counts from
    # its submission, so it is cancelled here to leave the new one the oldest)
    store.request_cancel(first.id)
    first.state = JobState.CANCELLED
    store.commit(jobs=[first], control_time=2 * 3600.0 + 900.0)
    store.submit_job(t.id, JobSpec(name="s2", kind="spot", compute_hours=1, accelerator="V100", workers=4),
                     now=3 * 3600.0)
    assert actor.update(forecasts, 5 * 3600.0)[0].spot_quota_gpus == 2
    assert actor.update(forecasts, 7 * 3600.0)[0].spot_quota_gpus == 4
