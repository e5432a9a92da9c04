"""The store: tenants (hashed tokens), submissions, tenant scoping, cancel flags, bags, cost,
and concurrent writers in several processes; every test runs on both backends (``store_url``:
a SQLite file and a database on a real PostgreSQL server)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from controlplane.core.errors import (
    Conflict,
    NotFound,
    SpotplaneError,
    UnknownReference,
)
from controlplane.core.models import BagSpec, Decision, Job, JobSpec, JobState
from controlplane.core.readmodels import CapacityPoint
from controlplane.core.tokens import hash_token
from controlplane.store import IdempotentCall, Store

REPO = Path(__file__).resolve().parents[2]


def test_tenant_token_is_stored_hashed(store_url: str) -> None:
    st = Store(store_url)
    tenant, token = st.create_tenant("acme", max_gpus=16)
    if st.backend == "sqlite":
        raw = st.path.read_bytes() + Path(f"{st.path}-wal").read_bytes()
    else:
        raw = repr(st._q("SELECT * FROM tenants")).encode()
    assert token.encode() not in raw
    assert hash_token(token).encode() in raw
    assert st.tenant_by_token(token) == tenant
    assert st.tenant_by_token(token + "x") is None
    with pytest.raises(Conflict, match="already exists"):
        st.create_tenant("acme")


def test_jobs_are_tenant_scoped(store_url: str) -> None:
    st = Store(store_url)
    a, _ = st.create_tenant("a")
    b, _ = st.create_tenant("b")
    job = st.submit_job(a.id, JobSpec(name="train", compute_hours=2), now=100.0)
    st.submit_job(b.id, JobSpec(name="dl", kind="deadline", compute_hours=2, deadline_hours=4),
                  now=100.0)
    assert st.get_job(job.id, a.id).spec.compute_hours == 2
    with pytest.raises(NotFound):
        st.get_job(job.id, b.id)
    with pytest.raises(NotFound):
        st.request_cancel(job.id, b.id)
    assert [j.id for j in st.list_jobs(a.id)] == [job.id]
    dl = st.list_jobs(b.id, kind="deadline")[0]
    assert dl.deadline_at == pytest.approx(100.0 + 4 * 3600)
    assert st.list_jobs(None, state=JobState.PENDING)[0].id == job.id
    assert st.list_jobs(a.id, state=["RUNNING"]) == []
    st.request_cancel(job.id, a.id)
    assert st.cancel_requests() == {job.id}
    assert st.get_job(job.id).cancel_requested


def test_spec_validation_names_field_and_fix() -> None:
    with pytest.raises(ValidationError, match="deadline_hours"):
        JobSpec(name="x", kind="deadline", compute_hours=10, deadline_hours=5)
    with pytest.raises(ValidationError, match="deadline_hours"):
        JobSpec(name="x", kind="spot", compute_hours=1, deadline_hours=5)
    with pytest.raises(ValidationError, match="compute_hours"):
        JobSpec(name="x", compute_hours=-1)
    with pytest.raises(ValidationError, match="extra"):
        JobSpec(name="x", compute_hours=1, gpus=3)  # type: ignore[call-arg]


def test_bag_and_cost_counterfactual(store_url: str) -> None:
    st = Store(store_url)
    t, _ = st.create_tenant("bagger")
    bag, jobs = st.create_bag(t.id, BagSpec(name="sweep", template=JobSpec(name="s", compute_hours=1),
                                            params=[{"lr": 0.1}, {"lr": 0.01}, {"lr": 0.001}],
                                            compute_hours=[1.0, 2.0, 3.0]))
    assert bag.jobs == 3 and [j.spec.params["lr"] for j in jobs] == [0.1, 0.01, 0.001]
    done: list[Job] = []
    for j, hours in zip(jobs[:2], (1.5, 2.5), strict=True):
        j.state, j.progress_hours, j.cost, j.on_demand_cost = JobState.SUCCEEDED, hours, 3.0, 10.0
        done.append(j)
    st.commit(jobs=done)
    assert st.get_bag(bag.id, t.id).estimate_hours == pytest.approx(2.0)
    stored = st.update_bag_estimate(bag.id)
    assert (stored.finished, stored.estimate_hours) == (2, pytest.approx(2.0))
    (body,) = st._q("SELECT body FROM bags WHERE id = ?", (bag.id,))
    assert '"estimate_hours":2.0' in body[0] and '"finished":2' in body[0]  # written, not only computed
    with pytest.raises(NotFound, match="bag"):
        st.update_bag_estimate("bag-none")
    with pytest.raises(NotFound):
        st.get_bag(bag.id, "ten-other")
    (cost,) = st.cost_by_tenant(t.id)
    assert cost.cost == 6.0 and cost.on_demand_cost == 20.0 and cost.savings_pct == pytest.approx(70.0)
    m = st.metrics()
    assert m["jobs_submitted_total"] == 3 and m['jobs{state="SUCCEEDED"}'] == 2


SUBMITTER = """
import sys
from controlplane.core.models import JobSpec
from controlplane.store import Store
st = Store(sys.argv[1])
for i in range(int(sys.argv[3])):
    st.submit_job(sys.argv[2], JobSpec(name=f"p{i}", compute_hours=1))
"""


def test_concurrent_writers_in_processes_lose_nothing(store_url: str) -> None:
    st = Store(store_url)
    t, _ = st.create_tenant("busy")
    procs = [subprocess.Popen([sys.executable, "-c", SUBMITTER, store_url,
                               t.id, "40"], cwd=REPO) for _ in range(3)]
    for i in range(40):  # the controller writes at the same time
        st.commit(control_time=float(i))
    for p in procs:
        assert p.wait(60) == 0
    jobs = st.list_jobs(t.id)
    assert len(jobs) == 120 and len({j.id for j in jobs}) == 120


def test_list_jobs_stops_reading_once_the_bodies_pass_max_bytes(store_url: str) -> None:
    st = Store(store_url)
    tenant, _ = st.create_tenant("big")
    jobs = st.submit_jobs(tenant.id, [JobSpec(name=f"b{i}", compute_hours=1.0, params={"pad": "p" * 1000})
                                      for i in range(20)])
    one = len(jobs[0].model_dump_json())
    got = st.list_jobs(tenant.id, max_bytes=3 * one + 10)
    assert [j.name for j in got] == ["b0", "b1", "b2", "b3"]  # the fourth passes the cap: read, last
    assert [j.name for j in st.list_jobs(tenant.id, offset=18, max_bytes=10 * one)] == ["b18", "b19"]
    assert len(st.list_jobs(tenant.id)) == 20


def test_idempotent_submission_is_written_once_with_its_answer(store_url: str) -> None:
    st = Store(store_url)
    tenant, _ = st.create_tenant("idem")
    call = IdempotentCall("k1", "digest-1", lambda bag, jobs: f'{{"id":"{jobs[0].id}"}}')
    first = st.submit_jobs_once(tenant.id, [JobSpec(name="a", compute_hours=1.0)], call)
    again = st.submit_jobs_once(tenant.id, [JobSpec(name="a", compute_hours=1.0)], call)
    assert not first.replayed and again.replayed and again.body == first.body and again.status == 201
    assert [j.name for j in st.list_jobs(tenant.id)] == ["a"]
    assert st.idempotent_answer(tenant.id, "k1") == again
    assert st.idempotent_answer(tenant.id, "k2") is None


RACER = """
import sys
from controlplane.core.models import JobSpec
from controlplane.store import IdempotentCall, Store
st = Store(sys.argv[1])
for k in range(int(sys.argv[3])):
    call = IdempotentCall(f"key-{k}", "digest", lambda bag, jobs: jobs[0].id)
    print(st.submit_jobs_once(sys.argv[2], [JobSpec(name=f"k{k}", compute_hours=1)], call).body)
"""


def test_racing_processes_with_one_idempotency_key_create_once(store_url: str) -> None:
    """Four processes send the same 30 keys at once: each key makes one job, and every process
    gets that job's answer back (the key is checked and written in one serialized write)."""
    st = Store(store_url)
    t, _ = st.create_tenant("racer")
    procs = [subprocess.Popen([sys.executable, "-c", RACER, store_url, t.id, "30"], cwd=REPO,
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    answers = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    jobs = st.list_jobs(t.id)
    assert len(jobs) == 30 and all(a == [j.id for j in jobs] for a in answers)
    assert st.metrics()["jobs_submitted_total"] == 30


def test_a_postgresql_server_that_does_not_answer_is_one_clear_error() -> None:
    with pytest.raises(SpotplaneError, match=r"cannot connect to PostgreSQL at "
                       r"postgresql://spot:\*\*\*@127.0.0.1:9/nowhere .*SPOTPLANE_DB") as err:
        Store("postgresql://spot:hunter2@127.0.0.1:9/nowhere", timeout_s=2.0)
    assert "hunter2" not in str(err.value)


def test_bag_counts_cost_views_and_counters_exactly(store_url: str) -> None:
    st = Store(store_url)
    t, _ = st.create_tenant("b-bagger")
    bag, jobs = st.create_bag(t.id, BagSpec(name="sweep", template=JobSpec(name="s", compute_hours=1),
                                            params=[{"i": 0}, {"i": 1}, {"i": 2}],
                                            compute_hours=[1.0, 2.0, 3.0]), now=5.0)
    assert bag.created_at == 5.0 and {j.submitted_at for j in jobs} == {5.0}
    assert [j.spec.compute_hours for j in jobs] == [1.0, 2.0, 3.0]
    assert st.get_bag(bag.id).job_ids == [j.id for j in jobs]
    jobs[0].state = JobState.SUCCEEDED
    st.commit(jobs=[jobs[0]])
    assert st.get_bag(bag.id).finished == 1
    # tenants by name; one whose on-demand counterfactual is below $1 (savings 50 %); one with
    # no jobs at all (no counterfactual: 0 % savings, not a division by zero)
    small, _ = st.create_tenant("a-small")
    idle, _ = st.create_tenant("c-idle")
    (j,) = st.submit_jobs(small.id, [JobSpec(name="x", compute_hours=1)])
    j.cost, j.on_demand_cost = 0.25, 0.5
    st.commit(jobs=[j])
    rows = st.cost_by_tenant()
    assert [r.tenant_name for r in rows] == ["a-small", "b-bagger", "c-idle"]
    assert (rows[0].cost, rows[0].on_demand_cost, rows[0].savings_pct, rows[0].jobs) == (
        0.25, 0.5, 50.0, 1)
    assert (rows[2].cost, rows[2].on_demand_cost, rows[2].savings_pct, rows[2].jobs) == (
        0.0, 0.0, 0.0, 0)
    assert [r.tenant_name for r in st.cost_by_tenant(idle.id)] == ["c-idle"]
    st.submit_jobs(small.id, [JobSpec(name="h", kind="hp", compute_hours=1)])
    st.incr("probe_total")
    st.incr("probe_total")
    m = st.metrics()
    assert m["probe_total"] == 2.0  # one per call by default
    # per state over every kind (2 spot bag jobs + 1 spot + 1 hp pending), and per kind
    assert (m['jobs{state="PENDING"}'], m['jobs{state="SUCCEEDED"}']) == (4.0, 1.0)
    assert m['jobs_by_kind{kind="spot",state="PENDING"}'] == 3.0
    assert m['jobs_by_kind{kind="hp",state="PENDING"}'] == 1.0


def _point(at: float, acc: str = "V100", quota: int = 4) -> CapacityPoint:
    return CapacityPoint(at=at, pool="default", accelerator=acc, capacity_gpus=10, spot_quota_gpus=quota,
                         hp_demand_gpus=3.0, hp_demand_upper_gpus=5.0, guarantee_hours=1, eta=1.0)


def test_capacity_history_is_pruned_by_age_and_rows_and_paged_by_cursor(store_url: str) -> None:
    store = Store(store_url)
    for i in range(10):  # one refresh every 300 s, two pools
        pruned = store.add_capacity([_point(300.0 * i, "V100", i), _point(300.0 * i, "H100", i)],
                                    max_age_s=1200.0, max_rows=100)
        assert pruned == (2 if i >= 5 else 0)  # points more than 1200 s before the newest go
    assert sorted({p.at for p in store.capacity_history()}) == [1500.0, 1800.0, 2100.0, 2400.0, 2700.0]
    store.add_capacity([_point(3000.0 + i) for i in range(8)], max_age_s=1e9, max_rows=6)
    kept = store.capacity_history(limit=1000)
    assert len(kept) == 6 and [p.at for p in kept] == [3002.0 + i for i in range(6)]
    # without a cursor: the newest `limit`, oldest first; with one: the points after it
    newest = store.capacity_history(limit=2)
    assert [p.at for p in newest] == [3006.0, 3007.0] and newest[0].id < newest[1].id
    after = store.capacity_history(after=kept[1].id, limit=3)
    assert [p.id for p in after] == [p.id for p in kept[2:5]]
    assert store.capacity_history(after=kept[-1].id) == []
    store.add_capacity([_point(4000.0, "H100", 7)], max_age_s=1e9, max_rows=100)
    h100 = store.capacity_history(accelerator="H100")
    assert [(p.accelerator, p.spot_quota_gpus) for p in h100] == [("H100", 7)]
    assert store.add_capacity([]) == 0


def _totals_by_scan(st: Store) -> dict[tuple[str, str], tuple[int, float, float]]:
    return {(s, k): (n, c, o) for s, k, n, c, o in st._q(
        "SELECT state, kind, COUNT(*), SUM(cost), SUM(on_demand_cost) FROM jobs GROUP BY state, kind")}


def _totals_kept(st: Store) -> dict[tuple[str, str], tuple[int, float, float]]:
    return {(s, k): (n, c, o) for s, k, n, c, o in st._q(
        "SELECT state, kind, n, cost, on_demand_cost FROM job_totals WHERE n > 0")}


def test_job_totals_follow_every_write_and_metrics_read_them(store_url: str) -> None:
    """The per-(state, kind) counts and bills /metrics reads are kept by triggers: after
    submissions, moves, bills and a deletion they equal a scan of the jobs table."""
    st = Store(store_url)
    t, _ = st.create_tenant("acme")
    jobs = st.submit_jobs(t.id, [JobSpec(name=f"j{i}", kind="hp" if i % 3 == 0 else "spot",
                                         compute_hours=1) for i in range(9)])
    for i, j in enumerate(jobs[:6]):
        j.state = [JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED][i % 3]
        j.cost, j.on_demand_cost = 0.5 * i, 1.25 * i
    st.commit(jobs=jobs[:6])
    jobs[1].cost = 7.0  # billed again without a move
    st.commit(jobs=[jobs[1]])
    with st._tx() as db:
        db.execute("DELETE FROM jobs WHERE id = ?", (jobs[2].id,))
    kept, scanned = _totals_kept(st), _totals_by_scan(st)
    assert kept == {k: (n, pytest.approx(c), pytest.approx(o)) for k, (n, c, o) in scanned.items()}
    with st._tx() as db:  # one statement over many rows, there and back
        db.execute("UPDATE jobs SET state = 'CANCELLED', cost = cost + 1 WHERE state = 'PENDING'")
        db.execute("UPDATE jobs SET state = 'PENDING', cost = cost - 1 WHERE state = 'CANCELLED'")
    kept, scanned = _totals_kept(st), _totals_by_scan(st)
    assert kept.keys() == scanned.keys()
    for key, (n, cost, od) in scanned.items():
        assert kept[key] == (n, pytest.approx(cost), pytest.approx(od)), key
    assert kept[("RUNNING", "spot")] == (2, 7.0 + 2.0, 1.25 + 5.0)  # jobs 1 and 4
    m = st.metrics()
    assert m['jobs{state="PENDING"}'] == 3.0 and m['jobs{state="RUNNING"}'] == 2.0
    assert m['jobs_by_kind{kind="hp",state="QUEUED"}'] == 2.0  # jobs 0 and 3
    assert m["cost_dollars"] == pytest.approx(7.0 + 0.5 * (3 + 4 + 5))  # job 2 deleted
    assert m["on_demand_cost_dollars"] == pytest.approx(1.25 * (1 + 3 + 4 + 5))


def test_a_store_from_before_job_totals_is_counted_when_opened(store_url: str) -> None:
    db = store_url
    st = Store(db)
    t, _ = st.create_tenant("acme")
    st.submit_jobs(t.id, [JobSpec(name=f"j{i}", compute_hours=1) for i in range(5)])
    with st._tx() as conn:  # what an older release left: jobs and no totals
        conn.execute("DROP TABLE job_totals")
    st.close()
    reopened = Store(db)
    assert _totals_kept(reopened) == {("PENDING", "spot"): (5, 0.0, 0.0)}
    assert reopened.metrics()['jobs{state="PENDING"}'] == 5.0


def test_job_page_filters_by_kind_and_by_name_and_sorts_by_state(store_url: str) -> None:
    """The dashboard's kind filter, name search (a name the id does not contain) and state
    sort, read from the store itself."""
    st = Store(store_url)
    t, _ = st.create_tenant("acme")
    spot, dl, hp = st.submit_jobs(t.id, [
        JobSpec(name="train", kind="spot", compute_hours=1),
        JobSpec(name="fine-tune", kind="deadline", compute_hours=1, deadline_hours=4),
        JobSpec(name="eval", kind="hp", compute_hours=1)])
    spot.state, dl.state, hp.state = JobState.SUCCEEDED, JobState.RUNNING, JobState.QUEUED
    st.commit(jobs=[spot, dl, hp])
    total, page = st.job_page(t.id, kind="deadline")
    assert total == 1 and [j.id for j in page] == [dl.id]
    total, page = st.job_page(t.id, text="tune")
    assert total == 1 and [j.id for j in page] == [dl.id]
    # QUEUED < RUNNING < SUCCEEDED as text; descending reverses it
    assert [j.name for j in st.job_page(t.id, order_by="state")[1]] == ["eval", "fine-tune",
                                                                         "train"]
    assert [j.name for j in st.job_page(t.id, order_by="state", descending=True)[1]] == [
        "train", "fine-tune", "eval"]


def test_decisions_are_read_back_field_by_field(store_url: str) -> None:
    st = Store(store_url)
    t, _ = st.create_tenant("acme")
    job = st.submit_job(t.id, JobSpec(name="dl", kind="deadline", compute_hours=1,
                                      deadline_hours=4), now=0.0)
    st.commit(decisions=[Decision(at=60.0, job_id=job.id, tenant_id=t.id, policy="greedy",
                                  action="spot", zone="us-east-1a", reason="spot is up",
                                  observation={"progress_hours": 0.5})])
    (d,) = st.decisions(job.id)
    assert (d.at, d.job_id, d.tenant_id, d.policy, d.action, d.zone, d.reason, d.observation) == (
        60.0, job.id, t.id, "greedy", "spot", "us-east-1a", "spot is up", {"progress_hours": 0.5})


def test_a_page_cursor_of_another_tenants_job_names_after(store_url: str) -> None:
    st = Store(store_url)
    a, _ = st.create_tenant("a")
    b, _ = st.create_tenant("b")
    theirs = st.submit_job(b.id, JobSpec(name="x", compute_hours=1), now=0.0)
    with pytest.raises(UnknownReference, match="is not a job of this list") as err:
        st.list_jobs(a.id, after=theirs.id)
    assert err.value.field == "after"


def test_demand_history_is_the_mean_gpus_per_whole_hour_before_until(store_url: str) -> None:
    st = Store(store_url)
    t, _ = st.create_tenant("acme")
    st.add_demand(t.id, 3600.0 + 10, 2.0, 0.5)  # hour 1
    st.add_demand(t.id, 3600.0 + 20, 1.0, 0.0)  # hour 1 again: accumulates
    st.add_demand(t.id, 3 * 3600.0, 4.0, 1.5)  # hour 3
    # until 4.5 h: the 3 whole hours before hour 4 are 1, 2, 3
    assert st.demand_history(t.id, 3, 4.5 * 3600) == [3.0, 0.0, 4.0]
    assert st.demand_history(t.id, 3, 4.5 * 3600, kind="spot") == [0.5, 0.0, 1.5]
    assert st.demand_history("nobody", 2, 4.5 * 3600) == [0.0, 0.0]


def test_new_jobs_are_the_pending_ones_not_yet_known(store_url: str) -> None:
    st = Store(store_url)
    t, _ = st.create_tenant("acme")
    a, b, c = st.submit_jobs(t.id, [JobSpec(name=n, compute_hours=1) for n in "abc"])
    c.state = JobState.QUEUED
    st.commit(jobs=[c])
    assert [j.id for j in st.new_jobs()] == [a.id, b.id]
    assert [j.id for j in st.new_jobs({a.id})] == [b.id]


def test_policy_state_round_trips_and_is_replaced(store_url: str) -> None:
    st = Store(store_url)
    assert st.policy_state("job-a") is None
    st.put_policy_state("job-a", {"name": "uniform_progress", "t": 1.5})
    st.put_policy_state("job-b", {"name": "greedy"})
    assert st.policy_state("job-a") == {"name": "uniform_progress", "t": 1.5}
    st.put_policy_state("job-a", {"name": "uniform_progress", "t": 2.0})
    assert st.policy_state("job-a") == {"name": "uniform_progress", "t": 2.0}
    assert st.policy_state("job-b") == {"name": "greedy"}


def test_a_sqlite_store_two_missing_directories_deep_is_created_private(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "spotplane.db"
    st = Store(path)
    t, _ = st.create_tenant("deep")
    assert [x.id for x in Store(path).list_tenants()] == [t.id]
    assert (tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o700


def test_pruning_idempotency_keys_forgets_the_old_answers_and_keeps_the_new(store_url: str) -> None:
    """Five keys answered at 100..500 s (wall clock): pruning at 300 s forgets the three
    answered at or before it; the two later ones still replay; a second prune finds none."""
    st = Store(store_url)
    t, _ = st.create_tenant("keys")
    for k in range(5):
        call = IdempotentCall(f"key-{k}", "digest", lambda bag, jobs: jobs[0].id, at=100.0 * (k + 1))
        st.submit_jobs_once(t.id, [JobSpec(name=f"k{k}", compute_hours=1)], call, now=0.0)
    assert st.prune_idempotency(300.0) == 3
    assert [st.idempotent_answer(t.id, f"key-{k}") is not None for k in range(5)] == [
        False, False, False, True, True]
    assert st._q("SELECT COUNT(*) FROM idempotency")[0][0] == 2
    assert st.prune_idempotency(300.0) == 0 and len(st.list_jobs(t.id)) == 5


def test_waiting_jobs_are_read_in_chunks_of_500_each_once(store_url: str) -> None:
    """More ids than one chunk: every waiting job comes back exactly once, in submission order."""
    st = Store(store_url)
    t, _ = st.create_tenant("acme")
    jobs = st.submit_jobs(t.id, [JobSpec(name=f"j{i}", compute_hours=1) for i in range(1002)])
    ids = [j.id for j in jobs]
    waiting, bad = st.load_waiting_jobs(ids)
    assert bad == []
    assert [j.id for j in waiting] == ids


def test_job_page_sorts_numeric_columns_as_numbers(store_url: str) -> None:
    """Preemptions 9 before 10 (not as text), and progress as a fraction of the compute hours."""
    st = Store(store_url)
    t, _ = st.create_tenant("acme")
    a, b, c = st.submit_jobs(t.id, [JobSpec(name=n, compute_hours=h)
                                    for n, h in (("a", 10.0), ("b", 2.0), ("c", 4.0))])
    a.preemptions, b.preemptions, c.preemptions = 10, 9, 2
    a.progress_hours, b.progress_hours, c.progress_hours = 5.0, 0.5, 3.0  # 0.5, 0.25, 0.75
    st.commit(jobs=[a, b, c])
    assert [j.name for j in st.job_page(t.id, order_by="preemptions")[1]] == ["c", "b", "a"]
    assert [j.name for j in st.job_page(t.id, order_by="progress")[1]] == ["b", "a", "c"]
