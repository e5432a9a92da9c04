"""`spotplane up --db postgresql://...` (a real subprocess, its own Rays, the Serve API) on a
database of the suite's PostgreSQL server: the API and the controller share the store there,
the state directory holds no SQLite store, and the URL's password shows nowhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.cli.main import main
from controlplane.client import read_endpoint
from controlplane.core.models import JobState
from controlplane.store import Store
from tests.support import free_port, give_admin_token, stop_up, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ADMIN = "spa_cli-pg-admin"


def test_up_on_postgresql_runs_jobs_from_the_database(pg_url: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    state, log = tmp_path / "state", tmp_path / "up.log"
    env = dict(os.environ)
    give_admin_token(state, ADMIN)
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli.main", "up", "--state-dir", str(state),
             "--port", str(free_port()), "--speed", "600", "--db", pg_url],
            stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_until(lambda: read_endpoint(state) is not None or proc.poll() is not None, 300, "up")
        assert proc.poll() is None, log.read_text()
        capsys.readouterr()
        assert main(["tenants", "--state-dir", str(state), "--create", "acme", "--json"]) == 0
        token = json.loads(capsys.readouterr().out)["token"]
        job = tmp_path / "job.yaml"
        job.write_text("name: etl\nkind: spot\naccelerator: V100\ncompute_hours: 40\n")
        assert main(["submit", str(job), "--state-dir", str(state), "--token", token]) == 0
        store = Store(pg_url)
        wait_until(lambda: [j.state for j in store.list_jobs(None)] not in ([], [JobState.PENDING]),
              60, "the controller to take the job from PostgreSQL")
        (etl,) = store.list_jobs(None)
        assert etl.name == "etl" and store.get_tenant("acme").id == etl.tenant_id
        assert int(store.get_meta("controller_epoch") or 0) >= 1
        assert not (state / "spotplane.db").exists()
        assert "(store: postgresql://" in log.read_text()
        store.close()
    finally:
        stop_up(proc)
