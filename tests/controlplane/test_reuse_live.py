"""Reuse by age and hot spares in the live plane, on hand-built GCP H100 nodes (no Ray): the
placement plugin's choice with its exact expected hours, the spares ReapIdle keeps and the idle
cost they are billed apart, and a deadline job's policy choice (the 422 for an unknown one)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controlplane.core.errors import InvalidInput, UnknownReference
from controlplane.core.models import Job, JobKind, JobSpec, JobState, Market, Node, NodeState
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.lifetimes import lifetime_models
from controlplane.reconcile.nodeops import NodeOps
from controlplane.reconcile.placement import ReapIdle
from controlplane.reconcile.policyhost import check_policy, default_policy, live_policies
from controlplane.reconcile.pool import PlacementPlan, Pool, plan, task_request
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.spares import HotSpares, reuse_plugin
from controlplane.reconcile.state import Caches, LoopState
from controlplane.store import Store
from policies.reuse import ReuseByAge
from policies.schedulers import make_scheduler, with_plugin
from serve.schemas import CostReport
from serve.service import ControlPlaneService, Principal

PRICE = 29.7858  # a3-highgpu-8g spot, $/h


class _NoModel:
    lifetimes = None


MODELS = lifetime_models(_NoModel())  # type: ignore[arg-type]


def _node(i: int, age_hours: float, now: float, *, job: str | None = None,
          idle_since: float | None = None) -> Node:
    return Node(id=f"node-{i}", provider="sim", cloud="gcp", zone="us-east4-a",
                instance_type="a3-highgpu-8g", accelerator="H100", accelerator_count=8,
                market=Market.SPOT, price_per_hour=PRICE, on_demand_price_per_hour=88.2494,
                state=NodeState.READY, intent_id=f"intent-{i}", instance_id=f"i-{i}",
                requested_at=now - age_hours * HOUR, launched_at=now - age_hours * HOUR,
                job_id=job, idle_since=idle_since)


def _job(store: Store, tenant: str, hours: float) -> Job:
    return store.submit_job(tenant, JobSpec(name="j", kind=JobKind.SPOT, accelerator="H100",
                                            gpus_per_worker=8, compute_hours=hours), now=0.0)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "spotplane.db")


def _place(mode: str, ages: list[float], job: Job,
           now: float = 100 * HOUR) -> tuple[PlacementPlan | None, Pool, ReuseByAge]:
    nodes = {n.id: n for n in (_node(i, a, now, idle_since=now - 60) for i, a in enumerate(ages))}
    plugin = ReuseByAge(MODELS, mode=mode)  # type: ignore[arg-type]
    sched = with_plugin(make_scheduler("gfs"), filter=plugin, score=plugin)
    pool = Pool("H100", 8, list(nodes.values()))
    return plan(sched, pool, {job.id: job}, job, Market.SPOT, None, nodes, now), pool, plugin


def test_gcp_model_is_the_gce_bathtub_stopped_at_24_hours() -> None:
    m = MODELS["gcp"]
    assert (m.max_lifetime, float(m.sf(np.array(23.99))) > 0, float(m.sf(np.array(24.0)))) == (
        24.0, True, 0.0)


def test_a_six_hour_job_takes_the_idle_vm_that_finishes_it_soonest(store: Store) -> None:
    tenant = store.create_tenant("t")[0].id
    job = _job(store, tenant, 6.0)
    p, pool, plugin = _place("by_age", [2.0, 10.0, 18.5], job)
    assert p is not None and (p.reuse, p.launch, p.replace) == (("node-1",), 0, ())
    snap, _ = pool.snapshot({job.id: job}, 100 * HOUR)
    task = task_request(job, "H100")
    assert task.expected_hours == 6.0
    # E[M_s(6 h)] on the idle VMs (2, 10, 18.5 h old) and E[M_0] + 150 s on an empty slot
    assert np.round(-plugin.score(snap, task, None), 4).tolist() == [  # type: ignore[arg-type]
        6.8313, 6.1145, 12.4698] + [7.2394] * 5
    assert plugin.filter(snap, task, None).tolist() == [  # type: ignore[arg-type, union-attr]
        True, True, False] + [True] * 5


def test_an_old_vm_is_refused_for_a_job_that_would_outlive_it(store: Store) -> None:
    tenant = store.create_tenant("t")[0].id
    job = _job(store, tenant, 6.0)
    p, _, _ = _place("by_age", [18.5], job)
    assert p is not None and (p.reuse, p.launch) == ((), 1)
    short = _job(store, tenant, 2.0)  # 18.5 + 2 h ends before the 24 h stop: reused
    p, _, _ = _place("by_age", [18.5], short)
    assert p is not None and (p.reuse, p.launch) == (("node-0",), 0)
    p, _, _ = _place("always", [18.5], job)  # the memoryless policy reuses it anyway
    assert p is not None and (p.reuse, p.launch) == (("node-0",), 0)
    p, _, _ = _place("never", [2.0], job)
    assert p is not None and (p.reuse, p.launch) == ((), 1)


def test_unknown_reuse_mode_is_a_clear_error() -> None:
    with pytest.raises(InvalidInput, match="reuse: unknown reuse mode 'sometimes'") as e:
        reuse_plugin(ControllerSettings(reuse="sometimes"), MODELS, 0.04)
    assert "by_age, always, never" in (e.value.fix or "")


def _reaper(tmp_path: Path, store: Store,
            **settings: object) -> tuple[LoopState, ReapIdle, HotSpares]:
    s = ControllerSettings(typical_job_hours=5.0, **settings)  # type: ignore[arg-type]
    state = LoopState(offers=[], caches=Caches(lifetime_models=dict(MODELS)))

    class _Fleet:
        name = "sim"
        lifetimes = None

    rec = Recorder(state, _Fleet(), None)  # type: ignore[arg-type]
    ops = NodeOps(state, rec, _Fleet(), s, None)  # type: ignore[arg-type]
    spares = HotSpares(s, state, reuse_plugin(s, state.caches.lifetime_models, s.provision_hours))
    return state, ReapIdle(s, state, ops, spares), spares


def test_hot_spares_are_the_vms_worth_their_wait_and_their_idle_cost_is_apart(
        tmp_path: Path, store: Store) -> None:
    tenant = store.create_tenant("t")[0].id
    state, reap, spares = _reaper(tmp_path, store)
    now = 100 * HOUR
    for k in range(8):  # 8 submissions in the last 4 h: 2 jobs an hour
        job = _job(store, tenant, 5.0)
        job.submitted_at = now - k * 0.5 * HOUR
        state.jobs[job.id] = job
    young, stable, old = (_node(i, a, now, idle_since=now - 150) for i, a in
                          enumerate([0.5, 10.0, 20.0]))
    state.nodes = {n.id: n for n in (young, stable, old)}
    assert spares.arrival_rate(now) == 2.0
    plugin = spares.plugin
    assert [round(plugin.spare_saving_hours("gcp", 5.0, a), 4) for a in (0.5, 10.0, 20.0)] == [
        0.1316, 0.9081, 0.0]  # provisioning: the settings' 200 s
    # the 10-h VM waits 1/2 h on average (<= 2 x 0.91 h saved + 1); the 0.5-h one would wait
    # 2/2 h for 0.13 h saved; the 20-h one saves nothing (a 5 h job outlives it)
    reap.run(now)
    assert [n.state for n in (young, stable, old)] == [
        NodeState.TERMINATING, NodeState.READY, NodeState.TERMINATING]
    assert state.spares == {stable.id}
    w = state.work
    assert w.counters["idle_cost_dollars"] == pytest.approx(2 * PRICE * 150 / HOUR)
    assert "spare_idle_cost_dollars" not in w.counters
    reap.run(now + HOUR - 151)  # not yet an hour idle
    assert stable.state is NodeState.READY
    reap.run(now + HOUR - 150)
    assert stable.state is NodeState.TERMINATING and state.spares == set()
    assert w.counters["spare_idle_cost_dollars"] == pytest.approx(PRICE)
    assert w.events[-1].cause == "hot spare idle 1.00 h"


def test_hot_spares_are_at_most_one_plus_rate_times_the_spare_time(
        tmp_path: Path, store: Store) -> None:
    """2 arrivals an hour and 15 min of spare time: at most 1 + 2 x 0.25 = 1.5 spares, so the
    best VM (the 10-h one, 0.91 h saved) is kept and the 0.5-h one (0.13 h) is not."""
    tenant = store.create_tenant("t")[0].id
    state, _, spares = _reaper(tmp_path, store, hot_spare_seconds=900.0)
    now = 100 * HOUR
    for k in range(8):
        job = _job(store, tenant, 5.0)
        job.submitted_at = now - k * 0.5 * HOUR
        state.jobs[job.id] = job
    young, stable = (_node(i, a, now, idle_since=now - 150) for i, a in enumerate([0.5, 10.0]))
    assert spares.arrival_rate(now) == 2.0
    assert spares.select([young, stable], now) == {stable.id}


def test_always_keeps_every_idle_vm_an_hour_and_never_keeps_none(
        tmp_path: Path, store: Store) -> None:
    now = 100 * HOUR
    for mode, seconds, kept in (("always", 3600.0, True), ("never", 3600.0, False),
                                ("by_age", 0.0, False)):
        state, reap, _ = _reaper(tmp_path, store, reuse=mode, hot_spare_seconds=seconds)
        n = _node(0, 20.0, now, idle_since=now - 150)
        state.nodes = {n.id: n}
        reap.run(now)
        assert (n.state is NodeState.READY) is kept, mode


def test_a_deadline_job_names_its_policy_and_an_unknown_one_is_a_404(store: Store) -> None:
    service = ControlPlaneService(store, "admin-hash")
    tenant = store.create_tenant("acme")[0].id
    me = Principal(tenant_id=tenant)
    def spec(policy: str) -> JobSpec:
        return JobSpec(name="ft", kind=JobKind.DEADLINE, compute_hours=4.0, deadline_hours=10.0,
                       policy=policy)

    job = service.submit_job(me, spec("greedy"))
    assert job.spec.policy == "greedy"
    with pytest.raises(UnknownReference) as e:  # a well-formed name of nothing: 404
        service.submit_job(me, spec("yolo"))
    assert (e.value.field, str(e.value.fix)) == ("policy", (
        "use one of spotplane, spotplane_probing, uniform_progress, spotplane_egress, greedy, "
        "on_demand, "
        "semi_markov_dp, time_sliced, uniform_progress_loose, up_eager_failover, or leave it null for "
        "the default"))
    with pytest.raises(ValueError, match="policy: only kind=deadline jobs take a deadline policy"):
        JobSpec(name="s", kind=JobKind.SPOT, compute_hours=1.0, policy="greedy")
    assert check_policy("spotplane") == "spotplane" and "spotplane" in live_policies()
    assert (default_policy(13), default_policy(1)) == ("spotplane", "uniform_progress")
    assert (default_policy(13, evidence=True), default_policy(1, evidence=True)) == (
        "spotplane_probing", "uniform_progress")


def test_the_cost_report_shows_idle_and_spare_cost_to_the_admin_only(store: Store) -> None:
    service = ControlPlaneService(store, "admin-hash")
    tenant = store.create_tenant("acme")[0].id
    store.commit(counters={"idle_cost_dollars": 12.5, "spare_idle_cost_dollars": 10.0},
                 control_time=HOUR)
    admin = CostReport.of(service.cost(Principal.admin()), service.idle_cost(Principal.admin()))
    assert (admin.idle_cost, admin.spare_idle_cost, admin.total_cost) == (12.5, 10.0, 0.0)
    mine = service.idle_cost(Principal(tenant_id=tenant))
    assert mine == (0.0, 0.0)


def test_the_typical_job_is_the_median_of_the_live_jobs_not_the_finished_ones(store: Store) -> None:
    """Live jobs of 2, 4 and 6 h (queued, running) and finished ones of 20 and 30 h: the next
    arrival is expected to need 4 h; with no live job, the 1-h yardstick."""
    tenant = store.create_tenant("t")[0].id
    state = LoopState(offers=[], caches=Caches(lifetime_models=dict(MODELS)))
    s = ControllerSettings()
    assert s.typical_job_hours is None
    spares = HotSpares(s, state, reuse_plugin(s, state.caches.lifetime_models, s.provision_hours))
    done = [(20.0, JobState.SUCCEEDED), (30.0, JobState.CANCELLED)]
    for hours, st in done + [(2.0, JobState.QUEUED), (4.0, JobState.RUNNING), (6.0, JobState.PENDING)]:
        job = _job(store, tenant, hours)
        job.state = st
        state.jobs[job.id] = job
    assert spares.typical_hours() == 4.0
    for job in list(state.jobs.values()):
        if not job.terminal:
            del state.jobs[job.id]
    assert len(state.jobs) == 2 and spares.typical_hours() == 1.0


US_EAST4, EUROPE_WEST1, US_CENTRAL1 = 14.85344, 16.35632, 18.979008  # a3-highgpu-8g spot $/h


def test_a_spare_saves_dollars_only_where_its_zone_is_not_dearer_than_a_fresh_vm() -> None:
    """A typical 5-h job: E[M_0] = 5.9426 h (+ 200 s provisioning), E[M_10] = 5.0901 h. On a
    10-h VM in us-east4 while a fresh one would go to europe-west1: 16.36 x 5.9981 - 14.85 x
    5.0901 = $22.50 saved; the other way round (a $18.98 spare, fresh at $14.85) a loss of $7.51;
    at the 24 h stop nothing is left to save."""
    s = ControllerSettings()
    plugin = reuse_plugin(s, MODELS, s.provision_hours)
    assert plugin.spare_saving_dollars("gcp", 5.0, 10.0, US_EAST4, EUROPE_WEST1) == \
        pytest.approx(22.5027, abs=1e-4)
    assert plugin.spare_saving_dollars("gcp", 5.0, 10.0, US_CENTRAL1, US_EAST4) == \
        pytest.approx(-7.5112, abs=1e-4)
    assert plugin.spare_saving_dollars("gcp", 5.0, 10.0, PRICE, PRICE) == pytest.approx(
        PRICE * (5.9426 + 200 / HOUR - 5.0901), abs=1e-2)
    assert plugin.spare_saving_dollars("gcp", 5.0, 24.0, US_EAST4, EUROPE_WEST1) == -np.inf
    assert plugin.spare_saving_dollars("", 5.0, 10.0, 3.0, 2.0) == pytest.approx(5 * 2.0 + 200 / HOUR * 2.0 - 5 * 3.0)
    with pytest.raises(InvalidInput, match="fresh_price: must be a finite price >= 0"):
        plugin.spare_saving_dollars("gcp", 5.0, 10.0, US_EAST4, float("nan"))


def test_priced_spares_drop_a_vm_dearer_than_the_fresh_one_a_launch_would_get(
        tmp_path: Path, store: Store) -> None:
    """Two stable 10-h spares, one in us-east4 ($14.85) and one in us-central1 ($18.98), 2
    arrivals an hour: unpriced both are kept; priced, while us-east4 takes launches a typical
    job costs $7.51 more on the us-central1 spare than on a fresh VM, so it goes; once us-east4
    is down (a fresh VM would cost $18.98 too) it is a spare again; with no zone up both stay."""
    from clusters.fleet import Offer  # a test helper import: the offers of the two zones

    tenant = store.create_tenant("t")[0].id
    cheap, dear = (_node(i, 10.0, 100 * HOUR, idle_since=100 * HOUR - 150) for i in range(2))
    dear.zone, dear.price_per_hour = "us-central1-a", US_CENTRAL1
    cheap.price_per_hour = US_EAST4
    offers = [Offer("gcp", z, "a3-highgpu-8g", "H100", 8, p, 88.0)
              for z, p in (("us-east4-a", US_EAST4), ("us-central1-a", US_CENTRAL1))]
    kept = {}
    for priced in (False, True):
        state, _, spares = _reaper(tmp_path, store, spare_prices=priced)
        state.offers = offers
        state.fleet.availability = {"us-east4-a": True, "us-central1-a": True}
        now = 100 * HOUR
        for k in range(8):
            job = _job(store, tenant, 5.0)
            job.submitted_at = now - k * 0.5 * HOUR
            state.jobs[job.id] = job
        kept[priced] = spares.select([cheap, dear], now)
        if priced:
            assert spares.fresh_price(dear, now) == US_EAST4
            assert spares.priced_saving(dear, 5.0, now) == pytest.approx(-7.5112, abs=1e-4)
            state.fleet.availability["us-east4-a"] = False
            assert spares.fresh_price(dear, now) == US_CENTRAL1
            assert spares.select([cheap, dear], now) == {cheap.id, dear.id}
            state.fleet.availability["us-central1-a"] = False
            assert spares.fresh_price(dear, now) is None
            assert spares.priced_saving(dear, 5.0, now) == np.inf
            assert spares.select([cheap, dear], now) == {cheap.id, dear.id}
    assert kept == {False: {cheap.id, dear.id}, True: {cheap.id}}
