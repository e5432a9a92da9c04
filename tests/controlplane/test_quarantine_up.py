"""`spotplane up` on a state directory whose store holds a row that does not load: it starts,
says which row it quarantined, the API shows that job FAILED, and other jobs run."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from controlplane.client import read_endpoint
from controlplane.core.models import Job, JobSpec
from controlplane.store import Store
from tests.support import free_port, give_admin_token, stop_up, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_up_starts_on_a_poisoned_store_and_names_the_quarantined_row(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = Store(state / "spotplane.db")
    tenant, token = store.create_tenant("t")
    ok = store.submit_job(tenant.id, JobSpec(name="ok", kind="spot", compute_hours=0.5), now=0.0)
    bad = Job(id="job-poison", tenant_id=tenant.id, name="p", kind="deadline",
              spec=JobSpec(name="p", kind="deadline", compute_hours=1, deadline=1e6),
              submitted_at=0.0, deadline_at=1e6)
    body = json.loads(bad.model_dump_json())
    body["spec"]["deadline"] = None  # what `"deadline": Infinity` was stored as
    with sqlite3.connect(state / "spotplane.db") as con:
        con.execute("INSERT INTO jobs (id, tenant_id, kind, state, submitted_at, body) "
                    "VALUES (?, ?, 'deadline', 'PENDING', 0.0, ?)",
                    (bad.id, tenant.id, json.dumps(body)))
    store.close()
    log = tmp_path / "up.log"
    port = free_port()
    give_admin_token(state, "spa_quarantine-test")
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli.main", "up", "--state-dir", str(state),
             "--port", str(port), "--speed", "3600"], stdout=fh, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        wait_until(lambda: read_endpoint(state) is not None or proc.poll() is not None, 240,
              "`spotplane up`")
        text = log.read_text()
        assert proc.poll() is None, text[-3000:]
        assert "spotplane: quarantined 1 stored row(s) that do not load (set aside; the rest " \
               "runs):\n  job job-poison: does not validate (spec: Value error, deadline_hours: " \
               "a deadline job needs deadline_hours (or deadline)" in text, text[-3000:]
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}",
                           headers={"Authorization": f"Bearer {token}"}, timeout=30)
        shown = api.get("/v1/jobs/job-poison")
        assert shown.status_code == 200 and shown.json()["state"] == "FAILED"
        wait_until(lambda: api.get(f"/v1/jobs/{ok.id}").json()["state"] == "SUCCEEDED", 120,
              "the other job to finish")
    finally:
        stop_up(proc, signal.SIGINT, timeout=120)
