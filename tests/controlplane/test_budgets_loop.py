"""Budgets and bills in the reconcile loop, on the stepped clock (``SimClock``, a
``ManualClock``) and the simulated fleet in one AWS zone whose spot stays up for the first
3.8 h (us-west-2b: 71 ticks of 195 s), p3.2xlarge at $0.918/h spot, $3.06/h on demand, 90 s
to provision. Every expected number is worked out here from those prices and times."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusters.sim.fleet import AWS_P3_SPOT
from controlplane.core.bills import DOLLAR_LINES, job_bill, raw_lines
from controlplane.core.clock import ManualClock
from controlplane.core.models import JobSpec, JobState, TenantBudget
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from tests.loops import sim_loop

ZONE = "us-west-2b"
TICK = 60.0


def _loop(tmp_path: Path, data_root: Path, zone: str) -> tuple[Controller, ManualClock, Store]:
    loop = sim_loop(tmp_path, data_root, {"V100": 8}, seed=3, zones=[zone])
    return loop.ctl, loop.clock, loop.store


@pytest.fixture
def loop(tmp_path: Path, data_root: Path) -> tuple[Controller, ManualClock, Store]:
    return _loop(tmp_path, data_root, ZONE)


def _tick(ctl: Controller, clock: ManualClock, n: int = 1) -> None:
    for _ in range(n):
        clock.advance(TICK)
        ctl.tick()


def test_a_tenant_at_its_hourly_cap_waits_until_its_spend_falls(loop) -> None:  # type: ignore[no-untyped-def]
    ctl, clock, store = loop
    t, _ = store.create_tenant("capped")
    store.set_budget(t.id, TenantBudget(hourly_cap=2.0), now=0.0)
    # A: 2 spot nodes = 2 x 0.918 = $1.836/h <= $2/h; B adds $0.918/h: 2.754 > 2
    a = store.submit_job(t.id, JobSpec(name="a", compute_hours=0.5, workers=2, accelerator="V100",
                                       checkpoint_hours=0.0), now=0.0)
    _tick(ctl, clock)  # t = 60: A placed (B, smaller, would go first in GFS's size order)
    assert ctl.jobs[a.id].state is JobState.STARTING
    b = store.submit_job(t.id, JobSpec(name="b", compute_hours=0.5, accelerator="V100",
                                       checkpoint_hours=0.0), now=clock.now())
    _tick(ctl, clock)  # t = 120: B waits
    job_b = ctl.jobs[b.id]
    assert job_b.state is JobState.QUEUED
    assert job_b.message == ("waiting: hourly spend cap: the tenant's running nodes cost "
                             "$1.84/h and the job adds $0.92/h, over its cap of $2.00/h; it "
                             "starts when spend falls (the admin raises hourly_cap)")
    # A: launched at 60, up when its last node is ready (as the fleet reported it, ~90 s
    # later), changeover 0.05 h = 180 s, then 0.5 h = 1800 s of compute
    while ctl.jobs.get(a.id) is not None and ctl.jobs[a.id].state is not JobState.SUCCEEDED:
        assert ctl.jobs[b.id].state is JobState.QUEUED, clock.now()
        _tick(ctl, clock)
    (up,) = [e.at for e in store.job_events(a.id) if e.dst == JobState.RUNNING.value]
    ready = up  # its last node's ready time, as the fleet reported it
    assert store.get_job(a.id).finished_at == pytest.approx(ready + 180 + 1800)
    assert clock.now() == TICK * -(-(ready + 180 + 1800) // TICK)  # seen at the next tick
    # A's nodes left the tenant's rate in the same tick: B was placed then
    assert ctl.jobs[b.id].state is JobState.STARTING
    starts = [e for e in store.job_events(b.id) if e.dst == JobState.STARTING.value]
    assert [e.at for e in starts] == [clock.now()]
    # A alone ran at $1.836/h, past the soft line (0.8 x $2 = $1.60/h) and under the cap
    told = [e for e in store.events() if e.kind == "budget"]
    assert [(e.dst, e.at) for e in told] == [("soft", 120.0)]
    assert told[0].cause == "hourly spend cap: $1.84/h of $2.00/h, past its soft line"


def test_the_monthly_hard_line_stops_spot_jobs_at_their_checkpoint(loop) -> None:  # type: ignore[no-untyped-def]
    ctl, clock, store = loop
    t, _ = store.create_tenant("monthly")
    store.set_budget(t.id, TenantBudget(monthly_budget=100.0), now=0.0)
    spot = store.submit_job(t.id, JobSpec(name="s", compute_hours=3.0, accelerator="V100",
                                          checkpoint_hours=0.02), now=0.0)
    hp = store.submit_job(t.id, JobSpec(name="h", kind="hp", compute_hours=3.0,
                                        accelerator="V100"), now=0.0)
    _tick(ctl, clock, 20)  # t = 1200: both running
    assert ctl.jobs[spot.id].state is JobState.RUNNING and ctl.jobs[hp.id].state is JobState.RUNNING
    spent = store.month_spend("1970-01")[t.id]
    # the admin lowers the budget under what was spent: the hard line (read within 10 ticks)
    store.set_budget(t.id, TenantBudget(monthly_budget=spent / 2), now=clock.now())
    before = ctl.jobs[spot.id].checkpoints
    while ctl.jobs[spot.id].state is not JobState.QUEUED:
        j = ctl.jobs[spot.id]
        assert j.state in (JobState.RUNNING, JobState.CHECKPOINTING), j.state
        _tick(ctl, clock)
        assert clock.now() < 4 * 3600
    j = ctl.jobs[spot.id]
    # it left at the tick its next checkpoint was written, losing no work
    assert j.checkpoints == before + 1
    written = [e for e in store.job_events(spot.id)
               if e.src == JobState.CHECKPOINTING.value and e.dst == JobState.RUNNING.value]
    stopped = [e for e in store.job_events(spot.id) if e.dst == JobState.QUEUED.value]
    assert stopped[-1].at == clock.now() and written[-1].at > clock.now() - TICK
    assert "monthly budget reached: stopped at checkpoint" in stopped[-1].cause
    assert j.progress_hours == j.checkpointed_hours and j.node_ids == []
    assert j.bill.get("lost_work_hours", 0.0) < TICK / 3600
    assert ctl.jobs[hp.id].state is JobState.RUNNING  # the tenant's rule: HP jobs finish
    _tick(ctl, clock, 3)
    assert ctl.jobs[spot.id].state is JobState.QUEUED
    assert ctl.jobs[spot.id].message.startswith("waiting: monthly budget: the tenant spent $")
    kinds = {(e.kind, e.dst) for e in store.events()}
    assert ("budget", "hard") in kinds


def test_a_jobs_bill_lines_add_up_to_its_total_to_the_cent(loop) -> None:  # type: ignore[no-untyped-def]
    ctl, clock, store = loop
    t, _ = store.create_tenant("billed")
    job = store.submit_job(t.id, JobSpec(name="b", compute_hours=0.5, workers=2,
                                         accelerator="V100", checkpoint_hours=0.01), now=0.0)
    _tick(ctl, clock, 5)
    node_ids = list(ctl.jobs[job.id].node_ids)
    _tick(ctl, clock, 45)  # t = 3000: done at ~2130 s + its checkpoints' time
    done = store.get_job(job.id)
    assert done.state is JobState.SUCCEEDED
    bill = job_bill(done, "1970-01")
    assert list(bill.lines) == list(DOLLAR_LINES)
    assert round(sum(bill.lines.values()), 2) == bill.total == round(sum(raw_lines(done).values()), 2)
    # node time: 2 nodes x $0.918/h from launch (60 s) to the job's end
    assert sum(raw_lines(done).values()) == pytest.approx(done.cost)
    # provisioning: 2 nodes from launch (60 s) to the gang's last one ready (the job's start);
    # changeover: 2 x 180 s, at the spot price
    nodes = store.job_nodes(job.id, node_ids)
    released = [n.idle_since if n.idle_since is not None else n.ended_at for n in nodes]
    assert done.finished_at is not None and all(r is not None for r in released)
    # ... and from the job's end to the tick that let its nodes go
    (up,) = [e.at for e in store.job_events(job.id) if e.dst == JobState.RUNNING.value]
    provisioned = sum(up - 60.0 + (r or 0.0) - done.finished_at for r in released)
    assert raw_lines(done)["provisioning"] == pytest.approx(AWS_P3_SPOT * provisioned / 3600)
    assert raw_lines(done)["changeover"] == pytest.approx(2 * AWS_P3_SPOT * 180 / 3600)
    ckpt_h = done.bill.get("checkpoint_hours", 0.0)
    assert ckpt_h == pytest.approx(0.01 * done.checkpoints)
    assert raw_lines(done)["checkpoint"] == pytest.approx(2 * AWS_P3_SPOT * ckpt_h)
    assert raw_lines(done)["spot_compute"] == pytest.approx(2 * AWS_P3_SPOT * 0.5)


def test_work_lost_to_a_preemption_is_billed_at_the_price_paid(tmp_path: Path,
                                                                data_root: Path) -> None:
    # us-west-2a: spot up for the first 52 ticks of 195 s, gone at 10,140 s
    ctl, clock, store = _loop(tmp_path, data_root, "us-west-2a")
    t, _ = store.create_tenant("lost")
    job = store.submit_job(t.id, JobSpec(name="p", compute_hours=6.0, workers=2,
                                         accelerator="V100", checkpoint_hours=0.01), now=0.0)
    while store.get_job(job.id).preemptions == 0:
        _tick(ctl, clock)
        assert clock.now() < 4 * 3600
    j = ctl.jobs[job.id]
    preempted = [e for e in store.job_events(job.id)
                 if e.kind == "transition" and e.dst == JobState.PREEMPTED.value]
    lost_h = sum(float(e.cause.split("lost ")[1].split(" h")[0]) for e in preempted)
    assert lost_h > 0 and j.bill["lost_work_hours"] == pytest.approx(lost_h, abs=5e-4)
    # hours computed since the last checkpoint, on 2 nodes at $0.918/h
    assert j.bill["lost_work"] == pytest.approx(j.bill["lost_work_hours"] * 2 * AWS_P3_SPOT)
    lines, total = raw_lines(j), job_bill(j, "1970-01")
    assert sum(lines.values()) == pytest.approx(j.cost)
    assert round(sum(total.lines.values()), 2) == total.total


def test_a_job_stops_when_its_bill_reaches_its_max_cost(loop) -> None:  # type: ignore[no-untyped-def]
    ctl, clock, store = loop
    t, _ = store.create_tenant("bounded")
    # 1 spot node at $0.918/h: $0.10 is reached ~6.5 min after launch
    job = store.submit_job(t.id, JobSpec(name="m", compute_hours=2.0, accelerator="V100",
                                         max_cost=0.10), now=0.0)
    _tick(ctl, clock, 12)
    done = store.get_job(job.id)
    assert done.state is JobState.FAILED
    assert done.message.startswith("max_cost: the job's bill $0.1") and "$0.10" in done.message
    # it stopped at the first tick its bill reached $0.10: less than a tick's spend over
    assert 0.10 <= done.cost < 0.10 + AWS_P3_SPOT * TICK / 3600


def test_egress_written_on_the_job_counts_in_the_tenants_month(loop) -> None:  # type: ignore[no-untyped-def]
    ctl, clock, store = loop
    t, _ = store.create_tenant("egress")
    job = store.submit_job(t.id, JobSpec(name="e", compute_hours=2.0, accelerator="V100"),
                           now=0.0)
    _tick(ctl, clock, 3)
    ctl.jobs[job.id].egress_cost = 1.25  # a checkpoint moved between regions
    _tick(ctl, clock, 2)
    ctl.flush()  # the store counts a job's spend as it saves the job
    j = ctl.jobs[job.id]
    spent = store.month_spend("1970-01")[t.id]
    assert spent == pytest.approx(j.cost + 1.25)
    assert job_bill(j, "1970-01").lines["egress"] == 1.25


def test_under_the_stop_rule_hp_jobs_stop_too_after_a_checkpoint(loop) -> None:  # type: ignore[no-untyped-def]
    ctl, clock, store = loop
    t, _ = store.create_tenant("strict")
    store.set_budget(t.id, TenantBudget(monthly_budget=100.0, protected="stop"), now=0.0)
    hp = store.submit_job(t.id, JobSpec(name="h", kind="hp", compute_hours=3.0,
                                        accelerator="V100", checkpoint_hours=0.02), now=0.0)
    _tick(ctl, clock, 20)
    assert ctl.jobs[hp.id].state is JobState.RUNNING and ctl.jobs[hp.id].checkpoints == 0
    store.set_budget(t.id, TenantBudget(monthly_budget=0.5, protected="stop"), now=clock.now())
    while ctl.jobs[hp.id].state is not JobState.QUEUED:
        _tick(ctl, clock)
        assert clock.now() < 3600
    j = ctl.jobs[hp.id]
    # on-demand plans no periodic checkpoint: it wrote one (72 s) and stopped at it
    assert j.checkpoints == 1 and j.progress_hours == j.checkpointed_hours > 0
    written = [e for e in store.job_events(hp.id) if e.dst == JobState.CHECKPOINTING.value]
    assert written[0].cause == "monthly budget reached: a checkpoint before it stops"
