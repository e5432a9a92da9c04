"""The store's versioned schema on both backends: a store the previous release wrote (version 1,
no version row) opens and is upgraded with its data intact; one from a newer release is refused,
untouched, with a message naming both versions."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.core.models import JobSpec, JobState
from controlplane.store import SCHEMA_VERSION, SchemaTooNew, Store, is_postgres, sqlite_path
from controlplane.store.schema import MIGRATIONS, PG_SCHEMA, SCHEMA

REPO = Path(__file__).resolve().parents[2]
V1_TENANT = ("ten-old", "old", "hash-of-old", 8, 10.0)
V1_JOB = ('{"id": "job-old", "tenant_id": "ten-old", "name": "kept", "kind": "spot", '
          '"spec": {"name": "kept", "kind": "spot", "compute_hours": 2.0}, "state": "QUEUED", '
          '"submitted_at": 10.0}')


def _run_raw(url: str, script: str, rows: list[tuple[str, tuple[object, ...]]]) -> None:
    """Write ``script`` and ``rows`` with the engine's own driver, as an older release did."""
    if is_postgres(url):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(script)
            for sql, args in rows:
                conn.execute(sql.replace("?", "%s"), args)
        return
    with sqlite3.connect(sqlite_path(url), isolation_level=None) as db:
        db.executescript(f"BEGIN IMMEDIATE;{script}COMMIT;")
        for sql, args in rows:
            db.execute(sql, args)
    db.close()


def _previous_release(url: str) -> None:
    """A version-1 store: the baseline schema, a tenant and a queued job, no version row."""
    _run_raw(url, PG_SCHEMA if is_postgres(url) else SCHEMA, [
        ("INSERT INTO tenants VALUES (?, ?, ?, ?, ?)", V1_TENANT),
        ("INSERT INTO jobs (id, tenant_id, kind, state, submitted_at, body) "
         "VALUES (?, ?, ?, ?, ?, ?)", ("job-old", "ten-old", "spot", "QUEUED", 10.0, V1_JOB)),
        ("INSERT INTO meta VALUES (?, ?)", ("controller_epoch", "4")),
    ])


def _has_index(st: Store, name: str) -> bool:
    if st.backend == "postgresql":
        return st._q("SELECT to_regclass(?)", (name,))[0][0] is not None
    return bool(st._q("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (name,)))


def test_a_fresh_store_is_written_at_the_current_version(store_url: str) -> None:
    st = Store(store_url)
    assert st.get_meta("schema_version") == str(SCHEMA_VERSION) and SCHEMA_VERSION >= 2
    assert _has_index(st, "events_kind_dst")


def test_a_store_of_the_previous_release_opens_upgraded_with_its_data(store_url: str) -> None:
    _previous_release(store_url)
    st = Store(store_url)
    assert st.get_meta("schema_version") == str(SCHEMA_VERSION)
    assert all(_has_index(st, "events_kind_dst") for m in MIGRATIONS if m.version == 2)
    (job,) = st.list_jobs(None)
    assert (job.id, job.name, job.state) == ("job-old", "kept", JobState.QUEUED)
    assert st.get_tenant("old").max_gpus == 8
    assert st.metrics()['jobs{state="QUEUED"}'] == 1.0  # job_totals backfilled once
    assert st.take_controller_lease() == 5  # the lease's epoch goes on from the old store's
    st.close()
    again = Store(store_url)  # opening an upgraded store changes nothing
    assert again.metrics()['jobs{state="QUEUED"}'] == 1.0
    assert again.get_meta("schema_version") == str(SCHEMA_VERSION)


def test_a_version_2_store_gains_the_shared_blobs_and_rate_buckets(store_url: str) -> None:
    _previous_release(store_url)
    v2 = next(m for m in MIGRATIONS if m.version == 2)
    _run_raw(store_url, v2.sql + ";", [("INSERT INTO meta VALUES (?, ?)", ("schema_version", "2"))])
    st = Store(store_url)
    assert st.get_meta("schema_version") == str(SCHEMA_VERSION) and SCHEMA_VERSION >= 3
    assert st.put_blob("packages", "ten-old/_ray_pkg_ab.zip", b"PK") and st.blob_size(
        "packages", "ten-old/_ray_pkg_ab.zip") == 2
    assert st.take_token("tenant:ten-old", 1.0, 1.0, 0.0) == 0.0
    assert st.take_token("tenant:ten-old", 1.0, 1.0, 0.0) == pytest.approx(1.0)
    assert st.list_jobs(None)[0].id == "job-old"


def test_a_store_from_a_newer_release_is_refused_untouched(store_url: str) -> None:
    st = Store(store_url)
    t, _ = st.create_tenant("t")
    st.submit_job(t.id, JobSpec(name="j", compute_hours=1))
    st.set_meta("schema_version", str(SCHEMA_VERSION + 3))
    st.close()
    with pytest.raises(SchemaTooNew) as err:
        Store(store_url)
    msg = str(err.value)
    assert f"schema version {SCHEMA_VERSION + 3}" in msg and f"version {SCHEMA_VERSION} " in msg
    assert "never downgraded" in msg and "--db" in msg
    assert (err.value.found, err.value.known) == (SCHEMA_VERSION + 3, SCHEMA_VERSION)
    assert _raw_version(store_url) == str(SCHEMA_VERSION + 3)  # nothing was migrated


def _raw_version(url: str) -> str:
    sql = "SELECT value FROM meta WHERE key = 'schema_version'"
    if is_postgres(url):
        import psycopg

        with psycopg.connect(url) as conn:
            row = conn.execute(sql).fetchone()
    else:
        db = sqlite3.connect(sqlite_path(url))
        row = db.execute(sql).fetchone()
        db.close()
    assert row is not None
    return str(row[0])


OPENER = """
import sys
from controlplane.store import Store
Store(sys.argv[1]).close()
"""


def test_processes_opening_an_old_store_at_once_upgrade_it_once(store_url: str) -> None:
    _previous_release(store_url)
    procs = [subprocess.Popen([sys.executable, "-c", OPENER, store_url], cwd=REPO,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for p in procs:
        assert p.wait(120) == 0, p.stderr.read() if p.stderr else ""
    st = Store(store_url)
    assert st.get_meta("schema_version") == str(SCHEMA_VERSION)
    assert st.metrics()['jobs{state="QUEUED"}'] == 1.0  # backfilled once, not once a process


V1_NODE = ('{"id": "node-old", "provider": "aws", "cloud": "aws", "zone": "us-east-1a", '
           '"instance_type": "g5.xlarge", "accelerator": "A10G", "accelerator_count": 1, '
           '"market": "spot", "price_per_hour": 0.4, "on_demand_price_per_hour": 1.0, '
           '"state": "READY", "intent_id": "launch-old", "instance_id": "i-0old", '
           '"requested_at": 1.0}')


def test_an_older_stores_nodes_are_found_by_instance_once_upgraded(store_url: str) -> None:
    _previous_release(store_url)
    _run_raw(store_url, "", [("INSERT INTO nodes (id, state, job_id, intent_id, body) "
                              "VALUES (?, ?, ?, ?, ?)", ("node-old", "READY", None, "launch-old",
                                                         V1_NODE))])
    st = Store(store_url)
    assert _has_index(st, "nodes_instance")
    found = st.node_by_instance("i-0old")
    assert found is not None and found.id == "node-old"
    assert st.node_by_instance("i-0new") is None


CRASHER = """
import os, sys
from controlplane.core.models import Market, Node, NodeState
from controlplane.store import Store
st = Store(sys.argv[1])
st.commit(nodes=[Node(id=f"node-{i}", provider="aws", cloud="aws", zone="us-east-1a",
                      instance_type="g5.xlarge", accelerator="A10G", accelerator_count=1,
                      market=Market.SPOT, price_per_hour=0.4, on_demand_price_per_hour=1.0,
                      state=NodeState.READY, intent_id=f"launch-{i}", instance_id=f"i-{i:04d}",
                      requested_at=0.0) for i in range(50)])
os._exit(9)
"""


def test_a_store_reopened_after_a_crash_finds_a_node_by_instance(store_url: str) -> None:
    Store(store_url).close()
    crashed = subprocess.run([sys.executable, "-c", CRASHER, store_url], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert crashed.returncode == 9, crashed.stderr
    found = Store(store_url).node_by_instance("i-0042")
    assert found is not None and (found.id, found.intent_id) == ("node-42", "launch-42")
