"""Fair share with borrowing in the live controller, on the simulated fleet's stepped clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusters.sim import SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.core.models import JobSpec, JobState, TenantShareSpec
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.reconcile.fairshare import META_KEY
from controlplane.store import Store
from policies.preemption import ExponentialModel
from tests.loops import sim_loop

TICK = 60.0


def _world(tmp: Path, data_root: Path, nodes: int) -> tuple[Store, Controller, SimClock]:
    # spot VMs that outlive the test: shares, not luck
    loop = sim_loop(tmp, data_root, {"V100": nodes}, lifetime_model=ExponentialModel(rate=1e-4, limit=1000.0))
    store, clock, ctl = loop.store, loop.clock, loop.ctl
    return store, ctl, clock


def _spot(name: str, hours: float) -> JobSpec:
    return JobSpec(name=name, kind="spot", accelerator="V100", compute_hours=hours)


def _held(ctl: Controller) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in ctl.state.nodes.values():
        job = ctl.state.jobs.get(n.job_id) if n.job_id else None
        if job is not None and job.state in (JobState.STARTING, JobState.RUNNING,
                                             JobState.CHECKPOINTING):
            out[job.tenant_id] = out.get(job.tenant_id, 0) + 1
    return out


def test_three_busy_tenants_weighted_1_1_2_share_25_25_50_over_a_day(
        tmp_path: Path, data_root: Path) -> None:
    store, ctl, clock = _world(tmp_path, data_root, nodes=8)
    tenants = []
    for name, weight in (("a", 1), ("b", 1), ("c", 2)):
        t, _ = store.create_tenant(name, max_gpus=100)
        store.set_tenant_share(t.id, TenantShareSpec(weight=weight))
        tenants.append(t.id)
        for k in range(60):  # more work than a day of the pool holds: all busy all day
            store.submit_job(t.id, _spot(f"{name}-{k}", 1.5), now=0.0)
    sums = dict.fromkeys(tenants, 0.0)
    ticks = 0  # the ticks with GPUs held (the fleet's spot outages leave a few without)
    for _ in range(int(24 * 3600 / TICK)):
        clock.advance(TICK)
        ctl.tick()
        held = _held(ctl)
        total = sum(held.values())
        ticks += total > 0
        for t in tenants:
            sums[t] += held.get(t, 0) / total if total else 0.0
    assert ticks > 0.9 * 24 * 3600 / TICK
    shares = [sums[t] / ticks for t in tenants]
    assert shares == pytest.approx([0.25, 0.25, 0.5], abs=0.05), shares
    assert all(store.jobs_in_flight(t) > 0 for t in tenants)  # still busy at the end
    lines = json.loads(store.get_meta(META_KEY) or "{}")["pools"]["V100"]
    assert lines[tenants[2]]["entitled_gpus"] == pytest.approx(4.0)


def test_a_tenant_back_from_idle_gets_its_share_within_a_tick_and_a_checkpoint(
        tmp_path: Path, data_root: Path) -> None:
    store, ctl, clock = _world(tmp_path, data_root, nodes=2)
    a, _ = store.create_tenant("a", max_gpus=100)
    b, _ = store.create_tenant("b", max_gpus=100)
    fresh = store.submit_job(b.id, _spot("fresh", 8.0), now=0.0)
    stale = store.submit_job(b.id, _spot("stale", 8.0), now=0.0)
    for _ in range(int(8 * 3600 / TICK)):  # b borrows a's idle share: both nodes, 3 h in
        clock.advance(TICK)
        ctl.tick()
        running = [ctl.state.jobs.get(j.id) for j in (fresh, stale)]
        if _held(ctl) == {b.id: 2} and all(j is not None and j.state is JobState.RUNNING
                                           and j.progress_hours > 3.0 for j in running):
            break
    assert _held(ctl) == {b.id: 2}
    jobs = ctl.state.jobs
    # one checkpointed a minute ago, the other would lose three hours
    for job, since in ((jobs[fresh.id], 1 / 60), (jobs[stale.id], 3.0)):
        assert job.progress_hours > 3.0
        job.checkpointed_hours = job.progress_hours - since
        job.next_checkpoint_hours = job.progress_hours + 5.0
    before = {j.id: jobs[j.id].preemptions for j in (fresh, stale)}
    jobs_checkpoints = jobs[fresh.id].checkpoints
    back = store.submit_job(a.id, _spot("back", 1.0), now=clock.now())
    clock.advance(TICK)
    ctl.tick()  # the tick that ingests a's job asks the victim to checkpoint first (18 s)
    assert store.get_job(back.id).state is JobState.QUEUED
    assert jobs[fresh.id].state is JobState.CHECKPOINTING
    assert jobs[stale.id].state is JobState.RUNNING
    clock.advance(TICK)
    ctl.tick()  # one tick plus the checkpoint later, a holds its share
    assert _held(ctl) == {a.id: 1, b.id: 1}
    assert store.get_job(back.id).state is JobState.STARTING
    f, s = store.get_job(fresh.id), store.get_job(stale.id)
    assert f.checkpoints == jobs_checkpoints + 1  # it wrote one before giving its node back
    assert (f.state, f.preemptions) == (JobState.QUEUED, before[fresh.id] + 1)
    assert s.state is JobState.RUNNING and s.preemptions == before[stale.id]
    cause = [e.cause for e in store.job_events(fresh.id) if e.dst == JobState.PREEMPTED.value]
    assert cause and cause[-1].startswith(f"reclaimed for tenant {a.id}'s fair share")
    lost_h = float(cause[-1].rsplit("; lost ", 1)[1].split()[0])
    assert lost_h < TICK / 3600  # it lost less than the tick since its checkpoint, not 1 min
    # b does not borrow the node back while a holds its share
    for _ in range(10):
        clock.advance(TICK)
        ctl.tick()
        assert _held(ctl).get(b.id, 0) <= 1


def test_a_real_jobs_victim_is_told_to_checkpoint_before_it_gives_its_node_back(
        tmp_path: Path, data_root: Path) -> None:
    from actors.simexecutor import SimulatedExecutor

    clock = SimClock(start=0.0)
    store = Store(tmp_path / "spotplane.db")
    fleet = SimulatedFleet.from_options(
        clock=clock, data_dir=data_root, seed=5, state_path=tmp_path / "simfleet.db",
        lifetime_model=ExponentialModel(rate=1e-4, limit=1000.0))
    ex = SimulatedExecutor(clock)
    told: list[tuple[str, float]] = []
    notice = ex.notice
    ex.notice = lambda job, left: (told.append((job.id, left)), notice(job, left))[1]  # type: ignore[method-assign]
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"V100": 2}),
                     executor=ex, epoch=store.take_controller_lease())
    a, _ = store.create_tenant("a", max_gpus=100)
    b, _ = store.create_tenant("b", max_gpus=100)
    spec = JobSpec(name="real", kind="spot", accelerator="V100", compute_hours=8.0,
                   checkpoint_hours=0.01, entrypoint="python train.py")
    mine = {store.submit_job(b.id, spec, now=0.0).id for _ in range(2)}
    for _ in range(120):
        clock.advance(TICK)
        ctl.tick()
    assert _held(ctl) == {b.id: 2}
    back = store.submit_job(a.id, _spot("back", 1.0), now=clock.now())
    clock.advance(TICK)
    ctl.tick()
    ((victim, left),) = told  # one of b's jobs, told as at a notice: its checkpoint's 0.01 h
    assert victim in mine and left == pytest.approx(36.0)
    assert ctl.state.jobs[victim].state is JobState.RUNNING  # still computing meanwhile
    at_notice = ctl.state.jobs[victim].progress_hours
    ticks = 0
    while store.get_job(back.id).state is JobState.QUEUED and ticks < 5:
        clock.advance(TICK)
        ctl.tick()
        ticks += 1
    assert ticks <= 2 and _held(ctl) == {a.id: 1, b.id: 1}  # its checkpoint time plus a tick
    v = store.get_job(victim)
    assert v.state is JobState.QUEUED
    assert v.checkpointed_hours >= at_notice - TICK / 3600  # the notice's checkpoint kept it
