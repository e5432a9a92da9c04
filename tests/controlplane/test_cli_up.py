"""The CLI against a running `spotplane up` (a real subprocess: its own local Ray, the control
plane's actors, the Serve API on a free port): every command is an HTTP client of the API, and
`spotplane down` stops it cleanly with the state kept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from controlplane.cli.main import main
from controlplane.client import read_endpoint
from controlplane.store import Store
from tests.support import free_port, give_admin_token, stop_up, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ADMIN = "spa_cli-test-admin"


@dataclass
class Up:
    proc: subprocess.Popen[bytes]
    state: Path
    url: str
    log: Path

    def cli(self, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main([argv[0], "--state-dir", str(self.state), *argv[1:]])
        out = capsys.readouterr()
        return rc, out.out, out.err


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    state = Path(tmp_path_factory.mktemp("up-state"))
    log = state / "up.log"
    port = free_port()
    env = dict(os.environ)
    give_admin_token(state, ADMIN)
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli.main", "up", "--state-dir", str(state), "--port", str(port),
             "--speed", "600"], stdout=fh, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)  # its own process group, as a terminal's foreground job
    try:
        # two local Rays start: the control plane's and the workload's (docs/security.md)
        wait_until(lambda: read_endpoint(state) is not None or proc.poll() is not None, 300, "`spotplane up`")
        assert proc.poll() is None, log.read_text()
        yield Up(proc, state, f"http://127.0.0.1:{port}", log)
    finally:
        stop_up(proc)


def test_up_prints_url_and_admin_token_file_and_records_them(up: Up) -> None:
    text = up.log.read_text()
    assert f"API          {up.url}" in text and f"{up.url}/docs" in text
    assert f"admin token  in {up.state / 'admin-token'} (mode 0600" in text and ADMIN not in text
    recorded = read_endpoint(up.state)
    assert recorded is not None
    assert {k: recorded[k] for k in ("url", "admin_token_file")} == {
        "url": up.url, "admin_token_file": str(up.state / "admin-token")}
    # the pid `down` signals: the supervised child running Ray, in its own session
    assert recorded["pid"] != up.proc.pid and os.getsid(recorded["pid"]) == recorded["pid"]
    assert oct((up.state / "endpoint.json").stat().st_mode & 0o777) == "0o600"
    assert httpx.get(f"{up.url}/healthz").json()["status"] == "ok"


def test_cli_round_trip_through_the_api(up: Up, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, _ = up.cli(capsys, "tenants", "--create", "acme", "--json")
    assert rc == 0
    acme = json.loads(out)["token"]
    rc, out, _ = up.cli(capsys, "tenants", "--create", "beta", "--json")
    beta = json.loads(out)["token"]
    capsys.readouterr()  # its workload Ray is the cluster `local`
    rc = main(["clusters", "list", "--state-dir", str(up.state), "--json"])
    assert rc == 0 and [c["name"] for c in json.loads(capsys.readouterr().out)] == ["local"]

    jobs_yaml = tmp_path / "jobs.yaml"
    jobs_yaml.write_text(
        "jobs:\n"
        "  - {name: finetune, kind: deadline, accelerator: V100, workers: 2, compute_hours: 3, deadline_hours: 5}\n"
        "  - {name: etl, kind: spot, accelerator: V100, compute_hours: 40}\n"
    )
    rc, out, err = up.cli(capsys, "submit", str(jobs_yaml), "--token", acme, "--json")
    assert rc == 0, err
    submitted = json.loads(out)["jobs"]
    ids = {j["name"]: j["id"] for j in submitted}
    assert set(ids) == {"finetune", "etl"}

    # the controller (in the `up` process's Ray) picks them up: beyond PENDING within seconds
    def moved() -> bool:
        rc, out, _ = up.cli(capsys, "jobs", "--token", acme, "--json")
        return all(j["state"] != "PENDING" for j in json.loads(out))

    wait_until(moved, 60, "the controller to queue the submitted jobs")

    rc, out, _ = up.cli(capsys, "status", ids["finetune"], "--token", acme)
    assert rc == 0
    assert f"{ids['finetune']}  finetune  (deadline" in out
    assert "\nevents (" in out  # the text shows the last 15 events; a busy machine may be past this one
    rc, out, _ = up.cli(capsys, "status", ids["finetune"], "--token", acme, "--json")
    events = json.loads(out)["events"]
    assert any("accepted by the controller" in json.dumps(e) for e in events), events[:3]  # PENDING -> QUEUED

    rc, out, _ = up.cli(capsys, "jobs", "--token", acme)
    assert rc == 0 and "finetune" in out and "etl" in out and "deadline" in out

    # another tenant: not found, exit 2; and its list is empty
    rc, _, err = up.cli(capsys, "status", ids["finetune"], "--token", beta)
    assert rc == 2 and f"job {ids['finetune']} not found" in err
    rc, out, _ = up.cli(capsys, "jobs", "--token", beta, "--json")
    assert json.loads(out) == []

    rc, out, _ = up.cli(capsys, "cancel", ids["etl"], "--token", acme)
    assert rc == 0 and "cancellation requested" in out

    def cancelled() -> bool:
        rc, out, _ = up.cli(capsys, "status", ids["etl"], "--token", acme, "--json")
        return json.loads(out)["job"]["state"] == "CANCELLED"

    wait_until(cancelled, 60, "the controller to cancel the job")

    rc, out, _ = up.cli(capsys, "fleet", "--json")
    fleet = json.loads(out)
    assert rc == 0 and {z["cloud"] for z in fleet["zones"]} == {"aws", "gcp"}
    rc, out, _ = up.cli(capsys, "cost")
    assert rc == 0 and "on-demand only" in out and "acme" in out


def test_invalid_submission_exits_2_naming_the_field(up: Up, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, _ = up.cli(capsys, "tenants", "--create", "gamma", "--json")
    token = json.loads(out)["token"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: rush\nkind: deadline\ncompute_hours: 10\ndeadline_hours: 4\n")
    rc, _, err = up.cli(capsys, "submit", str(bad), "--token", token)
    assert rc == 2
    assert "deadline_hours: 4.0 h is less than compute_hours + overhead_hours" in err
    assert "raise deadline_hours" in err


def test_ctrl_c_stops_everything_and_keeps_the_state(up: Up) -> None:
    db = up.state / "spotplane.db"
    before = {j.id for j in Store(db).list_jobs(None)}
    assert before
    child = read_endpoint(up.state)["pid"]  # type: ignore[index]
    os.killpg(up.proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    try:
        code = up.proc.wait(timeout=240)  # each of its 4 stop steps is cut at 30 s
    except subprocess.TimeoutExpired:
        pytest.fail("`spotplane up` still stopping after 240 s; its log ends:\n" + up.log.read_text()[-3000:])
    assert code == 0, up.log.read_text()[-3000:]
    assert "stopping (state is kept)" in up.log.read_text()
    assert read_endpoint(up.state) is None
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{up.url}/healthz", timeout=5)
    assert {j.id for j in Store(db).list_jobs(None)} == before
