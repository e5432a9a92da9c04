"""The trust model (docs/security.md) on real Rays: a tenant's job runs on the workload cluster,
sees only its allow-listed environment, and reaches neither the control plane's actors, store and
secrets nor another tenant's artifacts."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from actors.execution import ExecutorConfig, make_executor
from actors.execution.submission import job_env
from actors.raylocal import REPO, OsUser, scrubbed_env
from actors.sandbox import WORKLOAD_USER, find_bwrap
from clusters.artifacts import LocalArtifactStore
from controlplane import jobenv
from controlplane.cli.demo import real_job
from controlplane.client import SpotplaneClient, admin_token_file, load_admin_token, read_endpoint
from controlplane.core.errors import InvalidInput
from tests.support import free_port, stop_up, wait_until

HOSTILE = Path(__file__).with_name("hostile_job.py")
ADMIN = "spa_admin-token-of-the-control-plane"
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
# what the command lines of the control plane's processes hold (`up`, its actors, the Serve API)
CONTROL_PLANE_PROCESSES = ("controlplane.cli.main", "ControllerActor", "ServeController",
                           "ServeReplica", "ProxyActor", "QuotaAllocator", "spotplane-controller")


def test_the_launcher_keeps_only_the_allow_list() -> None:
    environ = {"PATH": "/bin", "HOME": "/h", "SPOTPLANE_ADMIN_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "y",
               "SPOTPLANE_JOB_ID": "j1", "RAY_ADDRESS": "1.2.3.4:6379", "MY_SETTING": "42",
               "GOOGLE_APPLICATION_CREDENTIALS": "/k.json", "SPOTPLANE_S3_ENDPOINT_URL": "http://s3"}
    assert jobenv.allowed(environ, ["MY_SETTING"]) == {
        "PATH": "/bin", "HOME": "/h", "SPOTPLANE_JOB_ID": "j1", "RAY_ADDRESS": "1.2.3.4:6379",
        "MY_SETTING": "42", "SPOTPLANE_S3_ENDPOINT_URL": "http://s3"}
    assert jobenv.user_keys({"A": "1", "SPOTPLANE_ADMIN_TOKEN": "x", "a,b": "2"}) == ["A"]


def test_job_env_is_the_explicit_list_and_the_users_own() -> None:
    env = job_env({"MY_SETTING": "42", "SPOTPLANE_ADMIN_TOKEN": "x", "SPOTPLANE_JOB_ID": "forged"},
                  job_id="j1", replica_id="r0", tenant_id="t1", artifact_uri="/a/tenants/t1",
                  actor="spotplane-ckpt-j1-r0", namespace="ns", node_id="n1", pythonpath="/repo")
    assert env == {"MY_SETTING": "42", "SPOTPLANE_JOB_ID": "j1", "SPOTPLANE_REPLICA_ID": "r0",
                   "SPOTPLANE_TENANT_ID": "t1", "SPOTPLANE_ARTIFACT_URI": "/a/tenants/t1",
                   "SPOTPLANE_CHECKPOINT_ACTOR": "spotplane-ckpt-j1-r0",
                   "SPOTPLANE_RAY_NAMESPACE": "ns", "SPOTPLANE_NODE_ID": "n1", "PYTHONPATH": "/repo"}


@pytest.mark.ray
def test_the_executor_refuses_the_control_planes_own_ray(ray_cluster: Any) -> None:
    from controlplane.core.clock import WallClock

    with pytest.raises(InvalidInput, match="control plane's own Ray cluster"):
        make_executor(ExecutorConfig(workload_address=ray_cluster.dashboard_url,
                                     artifact_uri="/tmp/x"), clock=WallClock())
    with pytest.raises(InvalidInput, match="executor_options.workload_address: is missing"):
        make_executor(ExecutorConfig(artifact_uri="/tmp/x"), clock=WallClock())


def test_a_workload_user_is_refused_when_it_cannot_be_used(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="no OS user named 'no-such-user-x'"):
        OsUser.named("no-such-user-x")
    me = __import__("pwd").getpwuid(os.geteuid()).pw_name
    with pytest.raises(InvalidInput, match="the control plane's own user|needs root"):
        OsUser.named(me)
    if os.geteuid() == 0:  # an interpreter the account cannot reach is named, with the fix
        with pytest.raises(InvalidInput, match="'nobody' cannot run /nonexistent/python with Ray"):
            OsUser.named("nobody").check_runs("/nonexistent/python")


JOIN = ("import ray; ray.init(address={gcs!r}, log_to_driver=False); "
        "print('JOINED', len(ray.nodes()))")


@pytest.mark.ray
def test_the_workload_ray_refuses_a_client_without_its_token(workload_ray: Any, tmp_path: Path) -> None:
    """The embedded workload Ray runs with Ray token authentication and its own token: its
    dashboard (job submission, logs) and its GCS refuse a client without that token."""
    token = Path(workload_ray.token_path).read_text().strip()
    assert len(token) == 64 and Path(workload_ray.token_path).stat().st_mode & 0o777 == 0o600
    jobs = f"{workload_ray.dashboard}/api/jobs/"
    assert httpx.get(jobs, timeout=30).status_code == 401
    assert httpx.get(jobs, headers={"Authorization": "Bearer " + "0" * 64}, timeout=30).status_code == 403
    assert httpx.get(jobs, headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code == 200
    home = str(tmp_path)  # no ~/.ray/auth_token there: the client has only what it is given

    def join(extra: dict[str, str]) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", JOIN.format(gcs=workload_ray.gcs)],
                                env={**scrubbed_env(home), **extra}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=REPO)

    wrong = tmp_path / "wrong_token"
    wrong.write_text("f" * 64)
    give_up = {"RAY_gcs_server_port_wait_time_s": "3"}  # a refused client retries 3 s, not 20
    tries = {"no token": {"RAY_AUTH_MODE": "disabled", **give_up},
             "wrong token": {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(wrong), **give_up},
             "its token": {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": workload_ray.token_path}}
    procs = {name: join(extra) for name, extra in tries.items()}  # the three clients at once
    said = {name: (p.communicate(timeout=180), p.returncode) for name, p in procs.items()}
    for name in ("no token", "wrong token"):
        (out, err), rc = said[name]
        assert rc != 0 and "JOINED" not in out, (name, out[-500:], err[-2000:])
    (out, err), rc = said["its token"]
    assert rc == 0 and "JOINED 1" in out, err[-2000:]


@pytest.fixture(scope="module")
def default_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``spotplane up`` as a user starts it: no flag but where its state and log go. The
    operator's shell holds an admin token variable, which must reach none of its processes."""
    base = tmp_path_factory.mktemp("default-up")
    state, log, port = base / "state", base / "up.log", free_port()
    env = dict(os.environ, SPOTPLANE_ADMIN_TOKEN=ADMIN)
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli.main", "up", "--state-dir", str(state),
             "--port", str(port)], stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_until(lambda: read_endpoint(state) is not None or proc.poll() is not None, 300,
                   "`spotplane up`", why=log.read_text)
        assert proc.poll() is None, log.read_text()
        yield {"proc": proc, "state": state, "log": log, "url": f"http://127.0.0.1:{port}"}
    finally:
        stop_up(proc)


def _descendants(pid: int) -> list[Any]:
    return [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]


def _gcs_addresses(pid: int) -> list[str]:
    """The GCS of every Ray ``up`` started (its own and the workload's): where their
    ``gcs_server`` processes listen (Ray picks the port: the command line says 0)."""
    out = set()
    for p in _descendants(pid):
        with contextlib.suppress(psutil.Error):
            if p.name() == "gcs_server":
                args = dict(a.lstrip("-").split("=", 1) for a in p.cmdline() if a.startswith("--") and "=" in a)
                host = args.get("node-ip-address") or args.get("node_ip_address") or "127.0.0.1"
                out |= {f"{host}:{c.laddr.port}" for c in p.net_connections(kind="tcp")
                        if c.status == psutil.CONN_LISTEN}
    return sorted(out)


def _hostile_run(up: dict[str, Any]) -> tuple[dict[str, Any], str, str, str]:
    """A victim's real job, then the hostile job, both through the API of ``up``: what the
    hostile job found, both tenants' ids and the admin token."""
    state: Path = up["state"]
    admin_token = load_admin_token(state)
    assert admin_token is not None
    gcs = _gcs_addresses(read_endpoint(state)["pid"])  # type: ignore[index]
    assert len(gcs) == 2, gcs  # the control plane's and the workload's
    with SpotplaneClient(up["url"], admin_token) as admin:
        victim, hostile = admin.create_tenant("victim"), admin.create_tenant("hostile")
    with SpotplaneClient(up["url"], victim["token"]) as v:
        victim_job = v.submit(real_job("numpy", steps=40, step_seconds=0.02, seed=3, speed=60.0))["id"]
        done = wait_until(lambda: v.job(victim_job)["state"] in TERMINAL, 240, "the victim's job",
                          poll=0.5, why=lambda: v.logs(victim_job)[-3000:])
        assert done and v.job(victim_job)["state"] == "SUCCEEDED", v.logs(victim_job)[-3000:]
    assert LocalArtifactStore(state / "artifacts" / "tenants" / victim["tenant"]["id"]).restore_latest(victim_job)
    entry = shlex.join(["python", str(HOSTILE), up["url"], victim_job, str(state), str(up["log"]),
                        json.dumps(gcs)])
    with SpotplaneClient(up["url"], hostile["token"]) as h:
        job = h.submit({"name": "hostile", "kind": "hp", "accelerator": "V100", "compute_hours": 0.05,
                        "env": {"MY_SETTING": "42"}, "entrypoint": entry})["id"]
        wait_until(lambda: h.job(job)["state"] in TERMINAL, 300, "the hostile job", poll=0.5,
                   why=lambda: h.logs(job)[-3000:])
        logs = h.logs(job)
        assert h.job(job)["state"] == "SUCCEEDED", logs[-5000:]
    found = json.loads(next(ln for ln in logs.splitlines() if ln.startswith("HOSTILE "))[8:])
    print(json.dumps({k: v for k, v in found.items() if k != "env"}, indent=1)[:20000])
    return found, victim["tenant"]["id"], hostile["tenant"]["id"], admin_token


@pytest.mark.ray
@pytest.mark.slow
def test_a_hostile_job_of_the_default_up_gets_nothing(default_up: dict[str, Any]) -> None:
    """The default ``spotplane up``: the job scans /proc, walks the file system for the control
    plane's secrets, opens the state directory, its store and ``up``'s log by path, joins every
    GCS on the machine with every token it found, and uses every token against the admin API.
    It gets nothing, runs as an unprivileged user of its own (here as root), and its own Ray with
    its own token still works, so every refusal below is the sandbox's, not a broken probe's."""
    found, victim, hostile, admin_token = _hostile_run(default_up)
    state: Path = default_up["state"]
    # (a) no control-plane process in its /proc, no token in any environment or file it sees
    processes = found["processes"] = found["proc"]["processes"]
    assert processes["1"].startswith(find_bwrap() or "bwrap")  # its own PID namespace
    for pid, cmd in processes.items():
        assert not any(cp in cmd for cp in CONTROL_PLANE_PROCESSES), (pid, cmd)
    assert found["proc"]["tokens"] == [] and found["fs"]["tokens"] == [] and found["tokens"] == []
    assert found["api"] == {}
    assert found["fs"]["walked"] > 1000  # it did walk the file system it sees
    names = {Path(p).name for p in found["fs"]["files"]}
    assert not names & {"admin-token", "endpoint.json", "spotplane.db", "up.log"}, found["fs"]["files"]
    # (b) by path: the state directory holds its artifacts only, the log and Ray token are not there
    by_path = found["by_path"]
    assert by_path["listing"] in ("GOT ['artifacts']", "GOT []"), by_path["listing"]
    for what in ("store", "endpoint", "admin_token", "log", "ray_token"):
        assert by_path[what].startswith("FAILED"), (what, by_path[what])
    # (c) the control plane's GCS refuses every token it has; its own GCS takes its own token
    own_gcs = found["env"]["RAY_ADDRESS"]
    tries = found["gcs"]
    assert any(k.startswith(own_gcs + " /") and v.startswith("GOT ACTORS") for k, v in tries.items()), tries
    control = {k: v for k, v in tries.items() if not k.startswith(own_gcs + " ")}
    assert control and all(v.startswith("FAILED") for v in control.values()), tries
    # (d) an unprivileged account of its own when spotplane runs as root
    if os.geteuid() == 0:
        assert found["uid"] == pwd.getpwnam(WORKLOAD_USER).pw_uid != 0
    # (e) its environment is the allow-list and its own; its artifact store its tenant's prefix
    env = found["env"]
    assert not any(ADMIN in v or admin_token in v for v in env.values())
    assert {k for k in env if k.startswith("SPOTPLANE_")} == {
        "SPOTPLANE_JOB_ID", "SPOTPLANE_REPLICA_ID", "SPOTPLANE_TENANT_ID", "SPOTPLANE_ARTIFACT_URI",
        "SPOTPLANE_CHECKPOINT_ACTOR", "SPOTPLANE_RAY_NAMESPACE", "SPOTPLANE_NODE_ID"}
    assert env["MY_SETTING"] == "42" and env["SPOTPLANE_TENANT_ID"] == hostile
    assert set(env) - {"MY_SETTING"} <= jobenv.SYSTEM_KEYS | jobenv.SPOTPLANE_KEYS | {
        k for k in env if k.startswith(("RAY_", *jobenv.NUMERIC_PREFIXES))}
    assert found["artifact_uri"] == str((state / "artifacts" / "tenants" / hostile).resolve())
    assert found["other_list"] == "GOT []" and found["other_restore"] == "GOT None"
    assert found["other_traversal"].startswith("FAILED InvalidInput"), found["other_traversal"]
    assert victim != hostile


@pytest.mark.ray
@pytest.mark.slow
def test_the_default_up_keeps_its_secrets_out_of_environments_logs_and_open_files(
    default_up: dict[str, Any]
) -> None:
    """The admin token is in one 0600 file: in no process's environment or command line (the
    operator's shell variable is not passed on), not in the log (which names the file), not in
    ``endpoint.json``; the state directory is 0700 and the control plane's Ray token 0600."""
    state: Path = default_up["state"]
    token = load_admin_token(state)
    assert token is not None and token != ADMIN and token.startswith("spa_")
    assert oct(admin_token_file(state).stat().st_mode & 0o777) == "0o600"
    assert oct(state.stat().st_mode & 0o777) == "0o700"
    for name in ("endpoint.json", "spotplane.db"):
        assert oct((state / name).stat().st_mode & 0o077) == "0o0", name
    ray_token = Path.home() / ".ray" / "auth_token"
    assert oct(ray_token.stat().st_mode & 0o777) == "0o600"
    assert oct(ray_token.parent.stat().st_mode & 0o777) == "0o700"
    record = read_endpoint(state)
    assert record is not None and token not in json.dumps(record)
    assert record["admin_token_file"] == str(admin_token_file(state))
    log = default_up["log"].read_text()
    assert token not in log and str(admin_token_file(state)) in log
    seen = 0
    for p in _descendants(default_up["proc"].pid):
        try:
            environ, cmdline = Path(f"/proc/{p.pid}/environ").read_bytes(), " ".join(p.cmdline())
        except (OSError, psutil.Error):
            continue
        seen += 1
        assert token.encode() not in environ and token not in cmdline, p.cmdline()
        if p.pid != default_up["proc"].pid:  # the operator's own process keeps what it was given
            assert ADMIN.encode() not in environ and ADMIN not in cmdline, p.cmdline()
    assert "SPOTPLANE_ADMIN_TOKEN is ignored" in log
    assert seen >= 10  # the supervisor, its child, two Rays' processes, the workers


def test_up_refuses_to_run_tenants_code_without_its_sandbox(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """No bubblewrap: ``up`` names the fix (install it, or run jobs on a cluster of your own)
    instead of running tenants' jobs with its own view of the machine; ``--unsafe-no-sandbox``
    is the only way past, and says so loudly."""
    import argparse

    from controlplane.cli import up

    monkeypatch.setattr("actors.sandbox.find_bwrap", lambda: None)
    args = argparse.Namespace(workload_address=None, workload_gcs=None, workload_token=None,
                              workload_user=None, unsafe_no_sandbox=False, artifacts=None,
                              s3_endpoint=None, db=None)
    with pytest.raises(InvalidInput) as refused:
        up.workload_sandbox(args, tmp_path / "state")
    assert refused.value.field == "sandbox" and "bubblewrap (bwrap) is not installed" in str(refused.value)
    assert "apt-get install bubblewrap" in refused.value.fix and "--workload-address" in refused.value.fix
    args.unsafe_no_sandbox = True
    assert up.workload_sandbox(args, tmp_path / "state") is None
