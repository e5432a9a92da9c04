"""The reconcile loop's numbers, pinned exactly (simulated fleet, manual clock, no Ray).

Every expected number is computed here from the trace, the catalog prices and the times the
fleet reported, with the arithmetic written out, not read from the code under test.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from clusters.data.catalog import DataCatalog
from clusters.sim.fleet import AWS_COLLECTION, AWS_P3_ON_DEMAND, AWS_P3_SPOT, SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.core.models import Job, JobSpec, JobState, Market, Node, NodeState
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ControllerSettings, ExecutorReport
from controlplane.reconcile.controller import Controller
from controlplane.reconcile.policyhost import PolicyRequest
from controlplane.store import Store
from policies.deadline import Action, Kind
from policies.preemption import default_gce_model
from tests.loops import sim_loop

ZONE = "us-east-2a"  # one AWS p3.2xlarge (1x V100) zone, so every placement is in it


def _run_until(ctl: Controller, clock: SimClock, t: float, dt: float = 60.0) -> None:
    while clock.now() + dt <= t + 1e-9:
        clock.advance(dt)
        ctl.tick()


class SpotUntilItIsGone:
    """A deadline policy host: spot while any zone has spot, then on-demand for good."""

    def __init__(self) -> None:
        self.on_demand = False

    def decide(self, requests: Sequence[PolicyRequest]) -> dict[str, Action]:
        out = {}
        for r in requests:
            if not r.obs.spot_available:
                self.on_demand = True
            out[r.job_id] = Action(Kind.ON_DEMAND) if self.on_demand else Action(Kind.SPOT, ZONE)
        return out

    def forget(self, job_ids: Sequence[str]) -> None:
        pass


def test_gang_bills_spot_then_on_demand_with_preemption_changeover_and_cancel(
        tmp_path: Path, data_root: Path, catalog: DataCatalog) -> None:
    (trace,) = [t for t in catalog.spot_traces(AWS_COLLECTION) if t.zone == ZONE]
    avail, gap = trace.available >= 1, trace.gap_seconds
    i = int(np.flatnonzero(avail[1:] & ~avail[:-1])[0]) + 1  # first tick where spot comes back
    k = i + int(np.flatnonzero(~avail[i:])[0])  # the first tick after it without spot
    assert (i, k, gap) == (9, 13, 195.0)  # the trace stretch this test replays
    # the fleet's time 0 is the middle of tick i: spot is up until tick k starts
    clock = SimClock(start=0.0)
    store = Store(tmp_path / "spotplane.db")
    fleet = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=5, zones=[ZONE],
                                        trace_offset_hours=(i + 0.5) * gap / HOUR,
                                        state_path=tmp_path / "simfleet.db")
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"V100": 8}),
                     policy_host=SpotUntilItIsGone(), epoch=store.take_controller_lease())
    t, _ = store.create_tenant("t")
    d = 0.05  # changeover overhead (h), paid after every (re)start before progress counts
    job = store.submit_job(t.id, JobSpec(
        name="gang", kind="deadline", compute_hours=20, deadline_hours=40, workers=2,
        accelerator="V100", overhead_hours=d,
        # a checkpoint takes 180 s: no time for one in AWS's 120 s notice, and the first
        # periodic one is 0.87 h in, so the preemption rolls progress back to 0
        checkpoint_hours=0.05), now=0.0)

    preempt_at = (k - (i + 0.5)) * gap  # 682.5 s: spot leaves at the start of tick k
    _run_until(ctl, clock, 660.0)  # ticks at 60, 120, ..., 660: placed at 60 on spot
    j = ctl.jobs[job.id]
    assert (j.state, j.market, j.zone) == (JobState.RUNNING, Market.SPOT, ZONE)
    spot_nodes = [ctl.nodes[n] for n in j.node_ids]
    assert len(spot_nodes) == 2 and {n.launched_at for n in spot_nodes} == {60.0}
    up1 = max(n.ready_at or 0.0 for n in spot_nodes)  # the gang runs when its last node is up
    assert 60.0 + 0.8 * 90 <= up1 <= 60.0 + 1.2 * 90  # AWS provisioning: 90 s +- 20 %

    clock.advance(60.0)
    ctl.tick()  # t = 720: both nodes were preempted at 682.5 s
    j = ctl.jobs[job.id]
    assert [n.ended_at for n in spot_nodes] == pytest.approx([preempt_at] * 2, abs=1e-9)
    assert {n.state for n in spot_nodes} == {NodeState.PREEMPTED}
    assert j.preemptions == 1 and j.checkpoints == 0
    spot_progress = (preempt_at - up1) / HOUR - d  # what ran before the preemption, lost
    assert spot_progress > 0
    assert j.progress_hours == 0.0
    # the same tick the policy saw no spot and the gang went on-demand (the changeover)
    assert (j.state, j.market) == (JobState.STARTING, Market.ON_DEMAND)
    od_nodes = [ctl.nodes[n] for n in j.node_ids]
    assert {n.launched_at for n in od_nodes} == {720.0}
    assert {n.price_per_hour for n in od_nodes} == {AWS_P3_ON_DEMAND}

    _run_until(ctl, clock, 3 * HOUR)
    up2 = max(n.ready_at or 0.0 for n in od_nodes)
    store.request_cancel(job.id, t.id)  # mid-interval: between the ticks at 3 h and 3 h + 60 s
    clock.advance(30.0)
    clock.advance(30.0)
    ctl.tick()  # t = 3 h + 60 s: the cancellation is applied and billed up to now
    cancel_at = 3 * HOUR + 60.0
    j = store.get_job(job.id)
    assert j.state is JobState.CANCELLED and j.finished_at == cancel_at and j.node_ids == []

    # spot: 2 nodes x $0.918/h from launch (60 s) to the preemption (682.5 s)
    spot_bill = 2 * AWS_P3_SPOT * (preempt_at - 60.0) / HOUR
    # on-demand: 2 nodes x $3.06/h from launch (720 s) to the cancellation (3 h + 60 s)
    od_bill = 2 * AWS_P3_ON_DEMAND * (cancel_at - 720.0) / HOUR
    assert spot_bill == pytest.approx(2 * 0.918 * 622.5 / 3600)  # $0.31743
    assert od_bill == pytest.approx(2 * 3.06 * 10140 / 3600)  # $17.238
    assert j.cost == pytest.approx(spot_bill + od_bill, rel=1e-12)
    assert j.gpu_hours == pytest.approx(2 * (preempt_at - 60.0 + cancel_at - 720.0) / HOUR,
                                        rel=1e-12)
    # progress on on-demand: from the gang's start (last node ready), less the changeover
    od_progress = (cancel_at - up2) / HOUR - d
    assert j.progress_hours == pytest.approx(od_progress, rel=1e-12)
    # the counterfactual: the most progress ever made, on 2 on-demand workers at $3.06/h
    assert j.on_demand_cost == pytest.approx(
        max(spot_progress, od_progress) * 2 * AWS_P3_ON_DEMAND, rel=1e-12)
    assert j.on_demand_cost == pytest.approx(od_progress * 6.12, rel=1e-12)
    live = [n for n in store.list_nodes() if n.state not in (NodeState.PREEMPTED,
                                                              NodeState.TERMINATED)]
    assert {n.ended_at for n in live} == {cancel_at}


def _world(tmp: Path, data_root: Path, clock: SimClock, pools: dict[str, int],
           **fleet_options: object) -> tuple[Store, SimulatedFleet, Controller]:
    loop = sim_loop(tmp, data_root, pools, clock=clock, lifetime_model=default_gce_model(), **fleet_options)
    store, fleet, ctl = loop.store, loop.fleet, loop.ctl
    return store, fleet, ctl


def test_a_tenant_at_its_gpu_limit_waits_while_another_tenants_job_runs(
        tmp_path: Path, data_root: Path) -> None:
    clock = SimClock(start=0.0)
    store, _, ctl = _world(tmp_path, data_root, clock, {"V100": 8, "H100": 2})
    a, _ = store.create_tenant("a", max_gpus=3)
    b, _ = store.create_tenant("b", max_gpus=3)
    spec = {"kind": "hp", "accelerator": "V100", "overhead_hours": 0.0}
    first = store.submit_job(a.id, JobSpec(name="a1", compute_hours=1, workers=2, **spec), now=0)
    second = store.submit_job(a.id, JobSpec(name="a2", compute_hours=1, workers=2, **spec), now=0)
    other = store.submit_job(b.id, JobSpec(name="b1", compute_hours=1, workers=2, **spec), now=0)
    _run_until(ctl, clock, 60.0)
    # a holds 2 of its 3 GPUs: 2 + 2 > 3, so a2 waits; b's job (2 of b's 3) is placed
    assert ctl.jobs[first.id].state is JobState.STARTING
    assert ctl.jobs[other.id].state is JobState.STARTING
    waiting = ctl.jobs[second.id]
    assert (waiting.state, waiting.message) == (JobState.QUEUED, "waiting: tenant limit: 3 GPUs")
    (d,) = store.job_decisions(second.id)
    assert (d.action, d.reason, d.at) == ("wait", "tenant limit: 3 GPUs", 60.0)
    _run_until(ctl, clock, 1.5 * HOUR)
    done = store.get_job(first.id)
    assert done.state is JobState.SUCCEEDED and ctl.jobs[second.id].state is JobState.RUNNING
    assert store.metrics().get("spot_placements_total", 0.0) == 0.0  # HP placements only
    # a2 is placed on the tick that saw a1 finish (ticks every 60 s), not before
    placed = [x for x in store.job_decisions(second.id) if x.action == "place"]
    assert [x.at for x in placed] == [60.0 * np.ceil((done.finished_at or 0.0) / 60.0)]


def test_a_spot_job_held_by_the_spot_quota_runs_when_the_quota_rises(
        tmp_path: Path, data_root: Path) -> None:
    from controlplane.core.readmodels import Quota

    clock = SimClock(start=0.0)
    store, _, ctl = _world(tmp_path, data_root, clock, {"V100": 8}, gcp=False)
    t, _ = store.create_tenant("t")
    store.set_quotas([Quota(pool="default", accelerator="V100", capacity_gpus=8,
                            spot_quota_gpus=1, updated_at=0.0)])
    job = store.submit_job(t.id, JobSpec(name="s", kind="spot", compute_hours=1, workers=2,
                                         accelerator="V100"), now=0.0)
    _run_until(ctl, clock, 15 * 60.0)
    j = ctl.jobs[job.id]  # 2 GPUs > the quota of 1 GPU (1 node of 1x V100), 8 nodes free
    assert (j.state, j.message) == (
        JobState.QUEUED, "waiting: no room in the V100 pool (0/8 nodes, spot quota 1.0 nodes)")
    store.set_quotas([Quota(pool="default", accelerator="V100", capacity_gpus=8,
                            spot_quota_gpus=2, updated_at=clock.now())])
    _run_until(ctl, clock, 30 * 60.0)  # the controller rereads the quotas every 10 ticks
    j = ctl.jobs[job.id]
    assert j.state in (JobState.STARTING, JobState.RUNNING) and len(j.node_ids) == 2
    assert j.attempts == 1
    # the spot placement is counted: the quota actor's eviction rate is evictions / this
    assert store.metrics()["spot_placements_total"] == 1.0


def test_cancel_while_checkpointing_keeps_the_checkpointed_progress(
        tmp_path: Path, data_root: Path) -> None:
    clock = SimClock(start=0.0)
    store, _, ctl = _world(tmp_path, data_root, clock, {"V100": 2, "H100": 2})
    t, _ = store.create_tenant("t")
    d, delta = 0.05, 0.04  # changeover 180 s; a checkpoint takes 144 s
    job = store.submit_job(t.id, JobSpec(name="c", kind="hp", compute_hours=4, accelerator="V100",
                                         overhead_hours=d, checkpoint_hours=delta), now=0.0)
    _run_until(ctl, clock, 1800.0)
    (node,) = [n for n in ctl.nodes.values() if n.job_id == job.id]
    up = node.ready_at or 0.0
    ctl.external_notice(node.instance_id or "", 600.0)
    _run_until(ctl, clock, 1860.0)  # the notice starts a checkpoint at 1860 s
    at_notice = (1860.0 - up) / HOUR - d
    j = ctl.jobs[job.id]
    assert j.state is JobState.CHECKPOINTING and j.progress_hours == pytest.approx(at_notice)
    _run_until(ctl, clock, 1980.0)  # 120 of its 144 s written
    assert ctl.jobs[job.id].state is JobState.CHECKPOINTING
    store.request_cancel(job.id, t.id)
    _run_until(ctl, clock, 2040.0)  # cancelled at 2040 s: the checkpoint ended at 2004 s
    j = store.get_job(job.id)
    assert j.state is JobState.CANCELLED and j.checkpoints == 1
    assert j.checkpointed_hours == pytest.approx(at_notice, rel=1e-12)
    # after the checkpoint it computed again from 1860 + 144 = 2004 s to 2040 s
    assert j.progress_hours == pytest.approx(at_notice + (2040.0 - 2004.0) / HOUR, rel=1e-12)


def test_paging_through_1000_jobs_returns_each_exactly_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "spotplane.db")
    a, _ = store.create_tenant("a")
    b, _ = store.create_tenant("b")
    specs = [JobSpec(name=f"j{i}", compute_hours=1) for i in range(500)]
    ids = []
    for _ in range(2):  # interleaved with another tenant's jobs
        ids += [j.id for j in store.submit_jobs(a.id, specs, now=0.0)]
        store.submit_jobs(b.id, specs[:7], now=0.0)
    seen: list[str] = []
    for offset in range(0, 1000, 64):
        page = store.list_jobs(a.id, limit=64, offset=offset)
        assert len(page) == min(64, 1000 - offset)
        seen += [j.id for j in page]
    assert seen == ids and len(set(seen)) == 1000
    assert store.list_jobs(a.id, limit=64, offset=1000) == []


def test_notice_and_preemption_in_one_tick_keep_the_checkpoint_written_at_the_notice(
        tmp_path: Path, data_root: Path, catalog: DataCatalog) -> None:
    (trace,) = [t for t in catalog.spot_traces(AWS_COLLECTION) if t.zone == ZONE]
    i, k, gap = 9, 13, trace.gap_seconds  # the stretch of the billing test above
    assert bool(trace.available[i]) and not trace.available[k] and all(trace.available[i:k])
    clock = SimClock(start=0.0)
    store = Store(tmp_path / "spotplane.db")
    fleet = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=5, zones=[ZONE],
                                        trace_offset_hours=(i + 0.5) * gap / HOUR,
                                        state_path=tmp_path / "simfleet.db")
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"V100": 8}),
                     policy_host=SpotUntilItIsGone(), epoch=store.take_controller_lease())
    t, _ = store.create_tenant("t")
    d, delta = 0.05, 0.02  # a checkpoint takes 72 s: it fits in AWS's 120 s notice
    job = store.submit_job(t.id, JobSpec(
        name="gang", kind="deadline", compute_hours=20, deadline_hours=40, workers=2,
        accelerator="V100", overhead_hours=d, checkpoint_hours=delta), now=0.0)
    preempt_at = (k - (i + 0.5)) * gap  # 682.5 s
    notice_at = preempt_at - 120.0  # 562.5 s
    # ticks every 180 s: 540 s, then 720 s, so the notice and the preemption fall in one tick
    _run_until(ctl, clock, 540.0, dt=180.0)
    j = ctl.jobs[job.id]
    assert (j.state, j.checkpoints) == (JobState.RUNNING, 0)
    up = max(ctl.nodes[n].ready_at or 0.0 for n in j.node_ids)
    _run_until(ctl, clock, 720.0, dt=180.0)
    j = ctl.jobs[job.id]
    at_notice = (notice_at - up) / HOUR - d  # computed until the notice, then checkpointed
    assert j.preemptions == 1 and j.checkpoints == 1
    assert j.checkpointed_hours == pytest.approx(at_notice, rel=1e-9)
    assert j.progress_hours == pytest.approx(at_notice, rel=1e-9)  # rolled back to it
    (notice,) = [e for e in store.job_events(job.id) if e.kind == "notice"]
    assert notice.at == pytest.approx(notice_at) and notice.cause.startswith(
        "preemption notice: 120 s left on ")


class ScriptedExecutor:
    """Reports what a real executor would for entrypoint jobs: progress, then failed/finished."""

    def __init__(self, clock: SimClock, outcome: dict[str, str | None]) -> None:
        self.clock, self.outcome = clock, outcome
        self.started: dict[str, float] = {}
        self.stopped: list[str] = []

    def start(self, job: Job, nodes: Sequence[Node]) -> None:
        self.started[job.id] = self.clock.now()

    def stop(self, job: Job, reason: str) -> None:
        self.stopped.append(job.id)

    def notice(self, job: Job, seconds_left: float) -> None:
        pass

    def poll(self, jobs: Sequence[Job]) -> dict[str, ExecutorReport]:
        out = {}
        for j in jobs:
            if j.id not in self.started:
                continue
            done = (self.clock.now() - self.started[j.id]) / HOUR
            end = done >= 0.5
            out[j.id] = ExecutorReport(done, done / 2, checkpoints=3,
                                       finished=end and self.outcome[j.name] is None,
                                       failed=self.outcome[j.name] if end else None)
        return out


def test_executor_reports_finish_and_fail_jobs_and_release_their_nodes(
        tmp_path: Path, data_root: Path) -> None:
    clock = SimClock(start=0.0)
    store = Store(tmp_path / "spotplane.db")
    fleet = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=5, gcp=False,
                                        state_path=tmp_path / "simfleet.db")
    ex = ScriptedExecutor(clock, {"ok": None, "bad": "exit code 3"})
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"V100": 4}),
                     executor=ex, epoch=store.take_controller_lease())
    t, _ = store.create_tenant("t")
    spec = {"kind": "hp", "accelerator": "V100", "compute_hours": 2, "entrypoint": "python x.py"}
    ok = store.submit_job(t.id, JobSpec(name="ok", **spec), now=0.0)
    bad = store.submit_job(t.id, JobSpec(name="bad", **spec), now=0.0)
    _run_until(ctl, clock, HOUR)
    good, failed = store.get_job(ok.id), store.get_job(bad.id)
    started = ex.started[ok.id]
    end = started + 0.5 * HOUR  # the first poll at or after half an hour of running
    end = 60.0 * np.ceil(end / 60.0)
    assert (good.state, good.message, good.finished_at) == (JobState.SUCCEEDED,
                                                            "executor: finished", end)
    assert good.checkpoints == 3 and good.progress_hours == pytest.approx((end - started) / HOUR)
    assert (failed.state, failed.message) == (JobState.FAILED, "executor: exit code 3")
    assert failed.node_ids == [] and good.node_ids == []
    # the failed job's node is terminated at once (not kept for reuse)
    nodes = {n.id: n for n in store.list_nodes()}
    fail_nodes = {e.node_id for e in store.events() if e.kind == "node" and e.job_id == bad.id
                  and e.node_id}
    assert fail_nodes and {nodes[n].ended_at for n in fail_nodes} == {failed.finished_at}
