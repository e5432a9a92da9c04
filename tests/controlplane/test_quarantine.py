"""Rows the controller cannot load, and a policy that raises on one job, are quarantined: the job
FAILED with the reason as an event, the tick goes on for every other job, and a fresh controller
on the same store recovers. Poison rows are written straight into the real SQLite store."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest

from clusters.sim import SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.core.models import BagSpec, Job, JobSpec, JobState, NodeState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.reconcile.policyhost import PolicyBook, PolicyRequest
from controlplane.store import Store
from policies.deadline import Action, Observation
from policies.preemption import default_gce_model
from tests.loops import sim_loop

DEADLINE_NEEDS = ("spec: Value error, deadline_hours: a deadline job needs deadline_hours (or "
                  "deadline); give deadline_hours > compute_hours + overhead_hours")


def _world(tmp: Path, data_root: Path, clock: SimClock, policy_host: PolicyBook | None = None,
           db: str | None = None) -> tuple[Store, SimulatedFleet, Controller]:
    loop = sim_loop(tmp, data_root, {"V100": 8, "H100": 4}, clock=clock, db=db,
                    controller={"policy_host": policy_host}, lifetime_model=default_gce_model())
    return loop.store, loop.fleet, loop.ctl


def _run(ctl: Controller, clock: SimClock, hours: float, dt: float = 60.0) -> None:
    for _ in range(int(hours * 3600 / dt)):
        clock.advance(dt)
        ctl.tick()


def _poison_deadline_job(store: Store, tenant_id: str, state: str = "PENDING") -> str:
    """What ``"deadline": Infinity`` became before the API refused it: a deadline job whose
    stored spec has ``"deadline": null`` (it no longer validates)."""
    good = Job(id="job-poison", tenant_id=tenant_id, name="p", kind="deadline",
               spec=JobSpec(name="p", kind="deadline", compute_hours=1, deadline=1e6),
               submitted_at=0.0, deadline_at=1e6, state=state)
    body = json.loads(good.model_dump_json())
    body["spec"]["deadline"] = None
    body["deadline_at"] = None
    with store._tx() as con:  # written past the API, as an older release's bug wrote it
        con.execute("INSERT INTO jobs (id, tenant_id, kind, state, submitted_at, body) "
                    "VALUES (?, ?, 'deadline', ?, 0.0, ?)",
                    (good.id, tenant_id, state, json.dumps(body)))
    return good.id


def _corrupt(store: Store, table: str, row_id: str, body: str) -> None:
    with store._tx() as con:
        con.execute(f"UPDATE {table} SET body = ? WHERE id = ?", (body, row_id))


def test_a_poison_job_row_fails_alone_and_the_clock_goes_on(tmp_path: Path, data_root: Path,
                                                             store_url: str) -> None:
    clock = SimClock(start=0.0)
    store, fleet, ctl = _world(tmp_path, data_root, clock, db=store_url)
    t, _ = store.create_tenant("t", max_gpus=100)
    other, _ = store.create_tenant("u", max_gpus=100)
    ok = store.submit_job(other.id, JobSpec(name="ok", kind="spot", compute_hours=1,
                                            accelerator="V100"), now=0.0)
    dl = store.submit_job(t.id, JobSpec(name="dl", kind="deadline", compute_hours=1,
                                        deadline_hours=6, accelerator="V100"), now=0.0)
    poison = _poison_deadline_job(store, t.id)

    _run(ctl, clock, 8)

    assert store.control_time() == pytest.approx(8 * 3600)
    assert store.get_job(ok.id).state is JobState.SUCCEEDED
    assert store.get_job(dl.id).state is JobState.SUCCEEDED
    shown = store.get_job(poison)  # the API's view: a stand-in, never a 500
    assert shown.state is JobState.FAILED
    assert shown.message == f"the stored job does not validate ({DEADLINE_NEEDS})"
    (ev,) = [e for e in store.events() if e.job_id == poison]
    assert (ev.src, ev.dst) == ("PENDING", "FAILED")
    assert ev.cause == f"quarantined: the stored job does not validate ({DEADLINE_NEEDS})"
    (row,) = store.quarantined()
    assert (row.table, row.id, row.reason) == (
        "jobs", poison, f"does not validate ({DEADLINE_NEEDS})")
    assert json.loads(row.body or "")["spec"]["deadline"] is None  # the evidence is kept
    assert store.metrics()["rows_quarantined_total"] == 1.0
    assert [j.id for j in store.list_jobs(t.id, state="FAILED")] == [poison]


def test_a_fresh_controller_recovers_a_store_with_poison_rows(tmp_path: Path, data_root: Path,
                                                               store_url: str) -> None:
    clock = SimClock(start=0.0)
    store, fleet, ctl = _world(tmp_path, data_root, clock, db=store_url)
    db = Store(store_url)  # another connection: the rows change under the controller
    t, _ = store.create_tenant("t", max_gpus=100)
    victim = store.submit_job(t.id, JobSpec(name="v", kind="hp", compute_hours=5, workers=2,
                                            accelerator="V100"), now=0.0)
    lost_node = store.submit_job(t.id, JobSpec(name="n", kind="hp", compute_hours=1,
                                               accelerator="V100"), now=0.0)
    ok = store.submit_job(t.id, JobSpec(name="ok", kind="spot", compute_hours=1,
                                        accelerator="V100"), now=0.0)
    _run(ctl, clock, 0.3)
    running = store.get_job(victim.id)
    assert running.state is JobState.RUNNING and len(running.node_ids) == 2
    n_job = store.get_job(lost_node.id)
    assert n_job.state is JobState.RUNNING
    victim_instances = sorted(n.instance_id or "" for n in store.list_nodes()
                              if n.id in running.node_ids)
    bad_node = n_job.node_ids[0]
    bad_instance = next(n.instance_id for n in store.list_nodes() if n.id == bad_node)
    # the process dies (kill -9); meanwhile the store gains rows that do not load
    del ctl
    _corrupt(db, "jobs", victim.id, "{not json")
    node_body = json.loads(next(n for n in store.list_nodes() if n.id == bad_node)
                           .model_dump_json())
    node_body["price_per_hour"] = "free"
    _corrupt(db, "nodes", bad_node, json.dumps(node_body))
    poison = _poison_deadline_job(db, t.id, state="QUEUED")

    ctl2 = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"V100": 8, "H100": 4}),
                      epoch=store.take_controller_lease())
    ctl2.recover()  # no exception: the three rows are set aside

    assert sorted((b.table, b.id) for b in store.quarantined()) == sorted(
        [("jobs", victim.id), ("jobs", poison), ("nodes", bad_node)])
    assert store.get_job(victim.id).state is JobState.FAILED
    assert store.get_job(victim.id).message.startswith(
        "the stored job does not validate (body: Invalid JSON")
    # the unloadable job's nodes and the unloadable node's instance are terminated
    gone = {i.instance_id: i.state.value for i in fleet.describe()}
    assert [gone[i] for i in victim_instances] == ["terminated", "terminated"]
    assert gone[bad_instance] == "terminated"
    (node_ev,) = [e for e in store.events() if e.node_id == bad_node and e.kind == "node"
                  and e.cause.startswith("quarantined")]
    assert node_ev.cause == ("quarantined: the stored node does not validate (price_per_hour: "
                             "Input should be a valid number, unable to parse string as a number)")
    assert node_ev.dst == NodeState.FAILED.value
    _run(ctl2, clock, 6)
    assert store.get_job(ok.id).state is JobState.SUCCEEDED
    # the job that lost its unloadable node went back to the queue and finished elsewhere
    assert store.get_job(lost_node.id).state is JobState.SUCCEEDED
    # a third controller finds nothing new to quarantine and keeps ticking
    ctl3 = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"V100": 8, "H100": 4}),
                      epoch=store.take_controller_lease())
    _run(ctl3, clock, 0.1)
    assert len(store.quarantined()) == 3
    assert store.metrics()["rows_quarantined_total"] == 3.0


def test_a_tenant_row_that_does_not_load_stops_only_its_jobs(
        tmp_path: Path, data_root: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = SimClock(start=0.0)
    store, fleet, ctl = _world(tmp_path, data_root, clock)
    bad, token = store.create_tenant("bad", max_gpus=10)
    good, _ = store.create_tenant("good", max_gpus=10)
    held = store.submit_job(bad.id, JobSpec(name="h", kind="spot", compute_hours=1,
                                            accelerator="V100"), now=0.0)
    ok = store.submit_job(good.id, JobSpec(name="ok", kind="spot", compute_hours=1,
                                           accelerator="V100"), now=0.0)
    with sqlite3.connect(tmp_path / "spotplane.db") as con:
        con.execute("UPDATE tenants SET max_gpus = 'lots' WHERE id = ?", (bad.id,))
    with caplog.at_level(logging.ERROR, logger="controlplane.store"):
        assert [t.id for t in store.list_tenants()] == [good.id]
        assert store.tenant_by_token(token) is None  # the API refuses it (401), no 500
    assert f"stored tenant {bad.id}: does not validate (max_gpus:" in caplog.text
    _run(ctl, clock, 3)
    assert store.get_job(ok.id).state is JobState.SUCCEEDED
    h = store.get_job(held.id)
    assert h.state is JobState.QUEUED
    assert h.message == "waiting: its tenant's stored row does not load (quarantined)"
    ((table, tid),) = [(b.table, b.id) for b in store.quarantined()]
    assert (table, tid) == ("tenants", bad.id)


class _OneJobRaises(PolicyBook):
    """The real policies, except that one job's policy raises (a policy bug on one input)."""

    def __init__(self, store: Store, bad_job: str) -> None:
        super().__init__(store)
        self.bad_job = bad_job

    def _policy(self, req: PolicyRequest) -> object:  # type: ignore[override]
        pol = super()._policy(req)
        if req.job_id != self.bad_job:
            return pol

        class Raises:
            def decide(self, obs: Observation) -> Action:
                raise ZeroDivisionError("float division by zero")

        return Raises()


def test_a_policy_that_raises_on_one_job_fails_only_that_job(tmp_path: Path,
                                                             data_root: Path) -> None:
    clock = SimClock(start=0.0)
    store = Store(tmp_path / "spotplane.db")
    t, _ = store.create_tenant("t", max_gpus=100)
    bad = store.submit_job(t.id, JobSpec(name="bad", kind="deadline", policy="uniform_progress", compute_hours=1,
                                         deadline_hours=6, accelerator="V100"), now=0.0)
    good = store.submit_job(t.id, JobSpec(name="good", kind="deadline", policy="uniform_progress", compute_hours=1,
                                          deadline_hours=6, accelerator="V100"), now=0.0)
    store, fleet, ctl = _world(tmp_path, data_root, clock, _OneJobRaises(store, bad.id))
    _run(ctl, clock, 8)
    b = store.get_job(bad.id)
    assert b.state is JobState.FAILED
    assert b.message == ("quarantined: policy uniform_progress raised "
                         "ZeroDivisionError('float division by zero')")
    assert store.get_job(good.id).state is JobState.SUCCEEDED
    assert [(q.table, q.id) for q in store.quarantined()] == [("jobs", bad.id)]


class _HostDown:
    """A policy host whose every call fails (its actors are being restarted)."""

    def __init__(self) -> None:
        self.calls = 0

    def decide(self, requests: object) -> dict[str, Action]:
        self.calls += 1
        raise ConnectionError("policy actor died")

    def forget(self, job_ids: object) -> None:
        pass


def test_a_policy_host_outage_fails_no_job(tmp_path: Path, data_root: Path) -> None:
    clock = SimClock(start=0.0)
    host = _HostDown()
    store, fleet, ctl = _world(tmp_path, data_root, clock, host)  # type: ignore[arg-type]
    t, _ = store.create_tenant("t", max_gpus=100)
    dl = store.submit_job(t.id, JobSpec(name="dl", kind="deadline", compute_hours=1,
                                        deadline_hours=6, accelerator="V100"), now=0.0)
    sp = store.submit_job(t.id, JobSpec(name="sp", kind="spot", compute_hours=0.5,
                                        accelerator="V100"), now=0.0)
    _run(ctl, clock, 2)
    assert host.calls == 120
    assert store.get_job(dl.id).state is JobState.QUEUED  # waits for its policy, not FAILED
    assert store.get_job(sp.id).state is JobState.SUCCEEDED
    assert store.metrics()["policy_host_errors_total"] == 120.0
    assert store.quarantined() == []


def test_a_bad_tenant_row_names_its_tenant_and_a_bad_job_row_shows_its_columns(tmp_path: Path) -> None:
    store = Store(tmp_path / "spotplane.db")
    bad, _ = store.create_tenant("bad", max_gpus=10)
    good, _ = store.create_tenant("good", max_gpus=10)
    job = store.submit_job(good.id, JobSpec(name="h", kind="hp", compute_hours=1, accelerator="V100"),
                           now=7.0)
    with sqlite3.connect(tmp_path / "spotplane.db") as con:
        con.execute("UPDATE tenants SET max_gpus = 'lots' WHERE id = ?", (bad.id,))
        con.execute("UPDATE jobs SET body = '{}' WHERE id = ?", (job.id,))
    tenants, (row,) = store.load_tenants()
    assert [t.id for t in tenants] == [good.id]
    assert (row.table, row.id, row.tenant_id) == ("tenants", bad.id, bad.id)
    shown = store.get_job(job.id)  # the stand-in built from the row's columns
    assert (shown.id, shown.tenant_id, shown.kind, shown.state) == (job.id, good.id, "hp", JobState.PENDING)
    assert shown.submitted_at == 7.0 and shown.spec.kind == "hp"
    assert shown.message is not None and shown.message.startswith("the stored job does not validate")


def test_the_stand_in_of_a_bad_bag_job_row_keeps_its_bag(tmp_path: Path) -> None:
    """The read views' stand-in carries the row's bag column, so the broken job stays in its
    bag's listing."""
    store = Store(tmp_path / "spotplane.db")
    t, _ = store.create_tenant("acme", max_gpus=10)
    bag, (job,) = store.create_bag(t.id, BagSpec(name="sweep", template=JobSpec(name="s", compute_hours=1),
                                                 params=[{"lr": 0.1}]), now=7.0)
    with sqlite3.connect(tmp_path / "spotplane.db") as con:
        con.execute("UPDATE jobs SET body = '{}' WHERE id = ?", (job.id,))
    shown = store.get_job(job.id)
    assert shown.message is not None and shown.message.startswith("the stored job does not validate")
    assert shown.bag_id == bag.id
    assert [j.id for j in store.list_jobs(t.id, bag_id=bag.id)] == [job.id]
