"""A backlog larger than the loop admits: bounded ingestion, fairness between tenants,
head-of-line blocking in a crowded tick, and a restart that re-reads queued jobs in batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clusters.sim import SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.core.models import Job, JobKind, JobSpec, JobState, Tenant
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from policies.preemption import default_gce_model


class World:
    def __init__(self, tmp: Path, data_root: Path, **settings: object) -> None:
        self.clock = SimClock(start=0.0)
        self.store = Store(tmp / "spotplane.db")
        self.fleet = SimulatedFleet.from_options(clock=self.clock, data_dir=data_root, seed=5,
                                                 state_path=tmp / "simfleet.db",
                                                 lifetime_model=default_gce_model())
        self.settings = ControllerSettings(**settings)  # type: ignore[arg-type]
        self.ctl = self.restart()

    def restart(self) -> Controller:
        self.ctl = Controller(self.store, self.fleet, self.clock, self.settings,
                              epoch=self.store.take_controller_lease())
        return self.ctl

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            self.clock.advance(60.0)
            self.ctl.tick()

    def submit(self, tenant: Tenant, n: int, name: str, **spec: object) -> list[Job]:
        specs = [JobSpec(name=f"{name}{i}", kind=spec.get("kind", "spot"),  # type: ignore[arg-type]
                         compute_hours=spec.get("compute_hours", 50.0),  # type: ignore[arg-type]
                         workers=spec.get("workers", 1), accelerator="V100")  # type: ignore[arg-type]
                 for i in range(n)]
        return self.store.submit_jobs(tenant.id, specs, now=self.clock.now())

    def in_memory(self, state: JobState, tenant: Tenant | None = None) -> list[str]:
        return [j.id for j in self.ctl.jobs.values() if j.state is state
                and (tenant is None or j.tenant_id == tenant.id)]

    def with_nodes(self) -> set[str]:
        return {j.id for j in self.ctl.jobs.values()
                if j.state in (JobState.STARTING, JobState.RUNNING, JobState.CHECKPOINTING)}


def test_ingestion_is_bounded_per_tick_and_per_tenant_oldest_first(tmp_path: Path,
                                                                   data_root: Path) -> None:
    w = World(tmp_path, data_root, pool_nodes={"V100": 0}, default_pool_nodes=0,
              ingest_batch=10, queued_per_tenant=15)
    big, _ = w.store.create_tenant("big", max_gpus=1000)
    small, _ = w.store.create_tenant("small", max_gpus=8)
    bag = w.submit(big, 40, "sweep")
    one, = w.submit(small, 1, "one")
    w.tick()
    # the batch of 10 is shared: 5 for each tenant with room; small has only one, so the
    # second round gives big what small left
    assert w.in_memory(JobState.QUEUED, small) == [one.id]
    assert w.in_memory(JobState.QUEUED, big) == [j.id for j in bag[:9]]
    assert w.store.job_counts(big.id)["PENDING"] == 31
    w.tick()
    assert w.in_memory(JobState.QUEUED, big) == [j.id for j in bag[:15]]  # 6 more, oldest first
    w.tick(3)
    assert w.in_memory(JobState.QUEUED, big) == [j.id for j in bag[:15]]  # its cap: no more
    counts = w.store.job_counts(big.id)
    assert counts["QUEUED"] == 15 and counts["PENDING"] == 25
    assert {j.state for j in w.store.list_jobs(big.id, limit=100)[15:]} == {JobState.PENDING}


def test_a_small_tenants_job_is_placed_in_the_first_tick_with_room(tmp_path: Path,
                                                                   data_root: Path) -> None:
    w = World(tmp_path, data_root, pool_nodes={"V100": 4}, max_placements_per_tick=8)
    big, _ = w.store.create_tenant("big", max_gpus=1000)
    small, _ = w.store.create_tenant("small", max_gpus=8)
    bag = w.submit(big, 300, "sweep")
    w.tick(10)
    running = [j for j in bag if j.id in w.with_nodes()]
    assert len(running) == 4  # the pool is full of the bag; the rest waits
    assert len(w.in_memory(JobState.QUEUED, big)) == 296
    one, = w.submit(small, 1, "one")
    w.store.request_cancel(running[0].id)  # room, once its node is gone
    for k in range(10):
        before = w.with_nodes()
        w.tick()
        placed = w.with_nodes() - before
        if placed:
            assert placed == {one.id}, f"tick {k}: the bag took the room first"
            break
    else:
        raise AssertionError("nobody was placed in 10 ticks after the cancel")
    assert w.store.get_job(one.id).state in (JobState.STARTING, JobState.RUNNING)


def test_a_crowded_tick_stops_trying_a_shape_that_did_not_fit(tmp_path: Path,
                                                              data_root: Path) -> None:
    w = World(tmp_path, data_root, pool_nodes={"V100": 1}, max_placements_per_tick=3)
    t, _ = w.store.create_tenant("t", max_gpus=100)
    singles = w.submit(t, 5, "one", kind="hp")
    pair, = w.submit(t, 1, "two", kind="hp", workers=2)
    w.tick()
    assert w.store.get_job(singles[0].id).state is JobState.STARTING
    waits = [d.job_id for d in w.store.decisions() if d.action == "wait"]
    # the second single did not fit: singles 3-5 are not tried; the pair is a shape of its own
    assert waits == [singles[1].id, pair.id]
    for j in singles[2:]:
        assert w.store.get_job(j.id).message == "accepted by the controller"
    assert w.store.get_job(singles[1].id).message.startswith("waiting: no room in the V100 pool")


def test_an_uncrowded_tick_tries_every_queued_job(tmp_path: Path, data_root: Path) -> None:
    w = World(tmp_path, data_root, pool_nodes={"V100": 1}, max_placements_per_tick=64)
    t, _ = w.store.create_tenant("t", max_gpus=100)
    singles = w.submit(t, 5, "one", kind="hp")
    w.tick()
    waits = [d.job_id for d in w.store.decisions() if d.action == "wait"]
    assert waits == [j.id for j in singles[1:]]


def test_a_restart_rereads_queued_jobs_in_batches_and_loses_none(tmp_path: Path,
                                                                 data_root: Path) -> None:
    w = World(tmp_path, data_root, pool_nodes={"V100": 3}, ingest_batch=4, queued_per_tenant=8)
    a, _ = w.store.create_tenant("a", max_gpus=100)
    b, _ = w.store.create_tenant("b", max_gpus=100)
    jobs = w.submit(a, 20, "a", kind="hp", compute_hours=0.1) + w.submit(
        b, 6, "b", kind="hp", compute_hours=0.1)
    w.tick(4)
    queued_before = set(w.in_memory(JobState.QUEUED))
    assert len(queued_before) >= 8 and len(w.with_nodes()) == 3
    w.restart()
    w.ctl.recover()
    placed = {j.id for j in w.store.list_jobs(
        state=[JobState.STARTING, JobState.RUNNING, JobState.CHECKPOINTING])}
    back = set(w.in_memory(JobState.QUEUED))
    assert set(w.ctl.jobs) == placed | back
    assert len(back) == 4 and back <= queued_before  # one batch of the queued, shared
    w.tick()
    assert len(set(w.in_memory(JobState.QUEUED)) | (w.with_nodes() - placed)) <= 8
    for _ in range(200):
        w.tick()
        if all(w.store.get_job(j.id).terminal for j in jobs):
            break
    states = {w.store.get_job(j.id).state for j in jobs}
    assert states == {JobState.SUCCEEDED}
    for j in jobs:  # accepted once: no job was queued twice or skipped
        events = w.store.job_events(j.id)
        assert [e.src for e in events if e.dst == "QUEUED"].count("PENDING") == 1
    assert all(j.kind is JobKind.HP for j in jobs)


def test_a_backlog_not_yet_admitted_counts_as_spot_queueing_time(tmp_path: Path,
                                                                  data_root: Path) -> None:
    w = World(tmp_path, data_root, pool_nodes={"V100": 0}, default_pool_nodes=0,
              ingest_batch=2, queued_per_tenant=2)
    t, _ = w.store.create_tenant("t", max_gpus=100)
    w.submit(t, 6, "sweep")
    w.tick(10)  # two admitted and waiting; four still PENDING since t=0
    assert w.store.job_counts(t.id)["PENDING"] == 4
    now = w.clock.now()
    assert w.store.max_spot_queue_seconds(now, 3600) == now  # the oldest PENDING: since 0
    plan = w.store._q("EXPLAIN QUERY PLAN SELECT MIN(submitted_at) FROM jobs "
                      "WHERE state = 'PENDING' AND kind = 'spot'")
    assert "jobs_waiting" in str(plan)  # one index probe, not a scan of the backlog


def test_the_backlogs_reads_are_index_ranges_never_scans_or_sorts(tmp_path: Path) -> None:
    """Every query a tick, a restart or a cursor page runs, as SQLite plans it."""
    store = Store(tmp_path / "spotplane.db")
    t, _ = store.create_tenant("t", max_gpus=8)
    jobs = store.submit_jobs(t.id, [JobSpec(name=f"j{i}", compute_hours=1.0) for i in range(20)])
    seen: list[str] = []
    store._backend.db.set_trace_callback(seen.append)  # the statements with their values bound
    store.list_jobs(t.id, limit=5, after=jobs[9].id)
    store.list_jobs(None, limit=5, after=jobs[9].id)
    store.job_page(t.id, limit=5, after=jobs[9].id, descending=True)
    store.tenant_jobs_after(t.id, JobState.PENDING, 0, 5)
    store.tenant_jobs_after(t.id, JobState.QUEUED, 3, 5)
    placed = len(seen)
    store.load_placed_jobs()  # sorts what it finds: the placed jobs, bounded by the fleet
    store._backend.db.set_trace_callback(None)
    for i, sql in enumerate(seen):
        if not sql.startswith("SELECT") or "COUNT(*)" in sql:
            continue
        plan = " | ".join(str(r[-1]) for r in store._q("EXPLAIN QUERY PLAN " + sql))
        assert plan.startswith("SEARCH"), (sql, plan)
        assert i >= placed or "TEMP B-TREE" not in plan, (sql, plan)
    assert len(seen) >= 9


def test_the_backlogs_reads_use_an_index_on_postgresql(pg_url: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The same reads on PostgreSQL, planned with sequential scans priced out: each is a range
    of an index (a scan, or an index read whole, means no index has the read's condition)."""
    store = Store(pg_url)
    t, _ = store.create_tenant("t", max_gpus=8)
    jobs = store.submit_jobs(t.id, [JobSpec(name=f"j{i}", compute_hours=1.0) for i in range(20)])
    seen: list[tuple[str, tuple[Any, ...]]] = []
    query = store._backend.query
    monkeypatch.setattr(store._backend, "query",
                        lambda sql, args=(): seen.append((sql, tuple(args))) or query(sql, args))
    store.list_jobs(t.id, limit=5, after=jobs[9].id)
    store.list_jobs(None, limit=5, after=jobs[9].id)
    store.job_page(t.id, limit=5, after=jobs[9].id, descending=True)
    store.tenant_jobs_after(t.id, JobState.PENDING, 0, 5)
    store.get_job(jobs[3].id)
    store.has_pending()
    monkeypatch.undo()
    with store._tx() as db:
        db.execute("SET LOCAL enable_seqscan = off")
        for sql, args in seen:
            if sql.startswith("SELECT") and "COUNT(*)" not in sql:
                plan = " | ".join(r[0] for r in db.execute("EXPLAIN " + sql, args).fetchall())
                assert "Seq Scan" not in plan and "Index Cond" in plan, (sql, plan)
    assert len(seen) >= 8


def test_a_job_cancelled_deep_in_the_backlog_is_cancelled_in_the_next_tick(
        tmp_path: Path, data_root: Path) -> None:
    w = World(tmp_path, data_root, pool_nodes={"V100": 0}, default_pool_nodes=0,
              ingest_batch=3, queued_per_tenant=3)
    t, _ = w.store.create_tenant("t", max_gpus=100)
    bag = w.submit(t, 30, "sweep")
    w.tick(2)
    deep = bag[-1]
    assert w.store.get_job(deep.id).state is JobState.PENDING
    w.store.request_cancel(deep.id, t.id)
    w.tick()
    job = w.store.get_job(deep.id)
    assert job.state is JobState.CANCELLED and job.message == "cancelled by the tenant"
    assert [(e.src, e.dst) for e in w.store.job_events(deep.id)] == [("PENDING", "CANCELLED")]
    assert deep.id not in w.ctl.jobs  # forgotten once cancelled
    assert w.store.job_counts(t.id)["PENDING"] == 26  # nothing else admitted past the cap


def test_the_total_in_memory_is_bounded_yet_a_new_tenant_always_gets_in(tmp_path: Path,
                                                                        data_root: Path) -> None:
    w = World(tmp_path, data_root, pool_nodes={"V100": 0}, default_pool_nodes=0,
              ingest_batch=100, queued_per_tenant=10, queued_total=5)
    a, _ = w.store.create_tenant("a", max_gpus=100)
    b, _ = w.store.create_tenant("b", max_gpus=100)
    c, _ = w.store.create_tenant("c", max_gpus=100)
    bag_a, bag_b = w.submit(a, 20, "a"), w.submit(b, 20, "b")
    w.tick(3)
    assert len(w.in_memory(JobState.QUEUED)) == 5  # queued_total, not 2 x queued_per_tenant
    in_a, in_b = w.in_memory(JobState.QUEUED, a), w.in_memory(JobState.QUEUED, b)
    assert sorted([len(in_a), len(in_b)]) == [2, 3]  # shared evenly (tenants in id order)
    assert in_a == [j.id for j in bag_a[:len(in_a)]] and in_b == [j.id for j in bag_b[:len(in_b)]]
    one, = w.submit(c, 1, "c")
    w.tick()
    assert w.in_memory(JobState.QUEUED, c) == [one.id]  # the slots are full: its first one all the same
    # ... and the total holds: the tenant over its share (3 of 5) handed its newest back
    assert len(w.in_memory(JobState.QUEUED)) == 5
    bigger = in_a if len(in_a) == 3 else in_b
    assert w.store.get_job(bigger[-1]).state is JobState.QUEUED and bigger[-1] not in w.ctl.jobs


def test_a_tenant_filling_every_queue_slot_cannot_keep_another_out(tmp_path: Path,
                                                                   data_root: Path) -> None:
    w = World(tmp_path, data_root, pool_nodes={"V100": 0}, default_pool_nodes=0,
              ingest_batch=100, queued_per_tenant=10, queued_total=10)
    a, _ = w.store.create_tenant("a", max_gpus=100)
    b, _ = w.store.create_tenant("b", max_gpus=100)
    bag_a = w.submit(a, 50, "a")
    w.tick()
    assert w.in_memory(JobState.QUEUED, a) == [j.id for j in bag_a[:10]]  # every slot
    mine = w.submit(b, 3, "b")
    w.tick()  # one tick: all three of b's are in, a hands its newest three back
    assert [w.store.get_job(j.id).state for j in mine] == [JobState.QUEUED] * 3
    assert w.in_memory(JobState.QUEUED, b) == [j.id for j in mine]
    assert w.in_memory(JobState.QUEUED, a) == [j.id for j in bag_a[:7]]
    assert [w.store.get_job(j.id).state for j in bag_a[7:10]] == [JobState.QUEUED] * 3
    assert w.store.metrics()["jobs_handed_back_total"] == 3
    assert w.ctl.state.admission.held_back == {a.id: (
        f"queued_total: tenant {a.id} holds 7 of the 10 queue slots, its fair share with 2 "
        "tenants waiting; the rest wait PENDING until its queued jobs are placed or fewer tenants "
        "wait (the operator raises ControllerSettings.queued_total)")}
    for job in mine:  # b's leave: a gets its handed-back jobs again first, oldest first
        w.store.request_cancel(job.id, b.id)
    w.tick(2)
    assert w.in_memory(JobState.QUEUED, a) == [j.id for j in bag_a[:10]]
    assert w.store.job_counts(a.id)["PENDING"] == 40 and w.ctl.state.admission.held_back[a.id].startswith(
        f"queued_per_tenant: tenant {a.id} holds 10 queued jobs, the cap of 10")
