"""The trust model (docs/security.md) on real Rays: a tenant's job runs on the workload cluster,
sees only its allow-listed environment, and reaches neither the control plane's actors, store and
secrets nor another tenant's artifacts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors.executor import job_env, runtime_executor
from actors.jobagent import job_logs
from actors.raylocal import REPO, OsUser, WorkloadAddress, WorkloadRay, scrubbed_env
from actors.runtime import RuntimeSettings, start_control_plane, stop_control_plane
from clusters.artifacts import LocalArtifactStore
from controlplane import jobenv
from controlplane.core.errors import InvalidInput
from controlplane.core.models import TERMINAL_STATES, JobSpec, JobState
from controlplane.store import Store
from tests.conftest import WORKLOAD_PARENT_SECRET

HOSTILE = Path(__file__).with_name("hostile_job.py")
ADMIN = "spa_admin-token-of-the-control-plane"


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
        runtime_executor(clock=WallClock(), workload_address=ray_cluster.dashboard_url,
                         artifact_uri="/tmp/x")
    with pytest.raises(InvalidInput, match="executor_options.workload_address: is missing"):
        runtime_executor(clock=WallClock(), artifact_uri="/tmp/x")


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


def _wait_terminal(store: Store, job_id: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and store.get_job(job_id).state not in TERMINAL_STATES:
        time.sleep(0.5)
    return store.get_job(job_id)


@pytest.fixture(scope="module")
def workload_ray_as_nobody() -> Iterator[WorkloadAddress]:
    """The workload Ray run as the OS user ``nobody`` (needs root to switch users; skipped
    elsewhere): its HOME a fresh directory in /tmp handed to ``nobody``."""
    if os.geteuid() != 0:
        pytest.skip("running the workload Ray as another OS user needs root")
    nobody = OsUser.named("nobody")
    try:
        nobody.check_runs(sys.executable)
    except InvalidInput as exc:  # e.g. a pyenv interpreter under /root (0700): see docs/security.md
        pytest.skip(str(exc))
    home = tempfile.mkdtemp(prefix="spotplane-workload-", dir="/tmp")
    workload = WorkloadRay(4, num_cpus=2, home=home, user=nobody)
    try:
        yield workload.address
    finally:
        workload.stop()
        shutil.rmtree(home, ignore_errors=True)


def _hostile_run(ray_cluster: Any, workload: WorkloadAddress, state_dir: Path,
                 artifacts: Path) -> tuple[dict[str, Any], str, str]:
    """A victim's job, then the hostile job, on ``workload`` driven by a control plane whose
    state is in ``state_dir``: what the hostile job found, and both tenants' ids."""
    namespace = f"sec-{uuid.uuid4().hex[:8]}"
    os.environ["SPOTPLANE_ADMIN_TOKEN"] = ADMIN  # in the process that starts the control plane
    settings = RuntimeSettings(
        state_dir=state_dir, namespace=namespace, detached=False, forecaster=False,
        policy_actors=False, speed=60.0, autostart=True, seed=1, fleet_options={"gcp": False},
        executor_factory="actors.executor:runtime_executor",
        executor_options={"workload_address": workload.dashboard,
                          "workload_gcs": workload.gcs,
                          "workload_token_path": workload.token_path,
                          "artifact_uri": str(artifacts)},
    )
    handles = start_control_plane(settings)
    try:
        store = Store(settings.db_path)
        victim_tenant, _ = store.create_tenant("victim")
        hostile_tenant, _ = store.create_tenant("hostile")
        victim = store.submit_job(victim_tenant.id, JobSpec(
            name="numpy", kind="spot", accelerator="V100", compute_hours=0.05,
            entrypoint="python examples/train_numpy.py --steps 40 --seed 3 --step-seconds 0.02"))
        v = _wait_terminal(store, victim.id, 240)
        assert v.state is JobState.SUCCEEDED, (v.state, v.message)
        victim_store = LocalArtifactStore(artifacts / "tenants" / victim_tenant.id)
        assert victim_store.restore_latest(victim.id) is not None  # the victim's own prefix
        control_gcs = ray_cluster.address_info["gcs_address"]
        hostile = store.submit_job(hostile_tenant.id, JobSpec(
            name="hostile", kind="spot", accelerator="V100", compute_hours=0.05,
            env={"MY_SETTING": "42"},
            entrypoint=f"python {HOSTILE} {victim.id} {namespace} {control_gcs} {state_dir.resolve()} "
                       f"{os.getpid()} {Path.home()}"))
        h = _wait_terminal(store, hostile.id, 240)
        logs = job_logs(workload.dashboard, hostile.id, workload.token_path)
        print(logs[-8000:])  # shown when an assertion below fails
        assert h.state is JobState.SUCCEEDED, (h.state, h.message)
    finally:
        stop_control_plane(handles)
        os.environ.pop("SPOTPLANE_ADMIN_TOKEN", None)
    found = json.loads(next(ln for ln in logs.splitlines() if ln.startswith("HOSTILE "))[8:])
    print(json.dumps({k: v for k, v in found.items() if k != "env"}, indent=1))
    return found, victim_tenant.id, hostile_tenant.id


def _reaches_nothing_through_ray_env_or_api(found: dict[str, Any], workload: WorkloadAddress,
                                            artifacts: Path, hostile_tenant: str) -> None:
    env = found["env"]
    # (a) no control-plane secret in its environment; only the allow-list and its own env
    assert "SPOTPLANE_ADMIN_TOKEN" not in env
    assert not any(ADMIN in v or WORKLOAD_PARENT_SECRET in v for v in env.values())
    assert {k for k in env if k.startswith("SPOTPLANE_")} == {
        "SPOTPLANE_JOB_ID", "SPOTPLANE_REPLICA_ID", "SPOTPLANE_TENANT_ID", "SPOTPLANE_ARTIFACT_URI",
        "SPOTPLANE_CHECKPOINT_ACTOR", "SPOTPLANE_RAY_NAMESPACE", "SPOTPLANE_NODE_ID"}
    assert env["MY_SETTING"] == "42" and env["SPOTPLANE_TENANT_ID"] == hostile_tenant
    assert set(env) - {"MY_SETTING"} <= jobenv.SYSTEM_KEYS | jobenv.SPOTPLANE_KEYS | {
        k for k in env if k.startswith(("RAY_", *jobenv.NUMERIC_PREFIXES))}
    # ... nor in the files it finds from its HOME (the default state dir)
    assert found["files"] and all(r.startswith("FAILED") for r in found["files"].values()), found["files"]
    # the Ray token in its HOME is the workload cluster's own, not the control plane's
    own = Path(workload.token_path or "").read_text().strip()
    assert found["own_ray_token"] == f"GOT {own!r}", found["own_ray_token"]
    control_token = Path.home() / ".ray" / "auth_token"  # Ray's default for ray_cluster
    assert not control_token.is_file() or control_token.read_text().strip() != own
    # (b) its Ray is the workload cluster: no controller, only checkpoint actors
    assert found["gcs"] == f"GOT {workload.gcs!r}"
    assert found["controller"].startswith("FAILED ValueError"), found["controller"]
    names = [a["name"] for a in found["named_actors"] if not a["name"].startswith("_ray_internal_")]
    assert names and all(n.startswith("spotplane-ckpt-") for n in names), found["named_actors"]
    # ... and the control plane's Ray refuses it (not its Ray auth token)
    assert found["control_ray"].startswith("FAILED"), found["control_ray"]
    # (c) the store's SQLite file is nowhere it can find from its HOME or working directory
    assert all(r.startswith("FAILED") for r in found["store"].values()), found["store"]
    # (d) its artifact store is its tenant's prefix: the victim's job is not there
    assert found["artifact_uri"] == str(artifacts / "tenants" / hostile_tenant)
    assert found["other_list"] == "GOT []"
    assert found["other_restore"] == "GOT None"
    assert found["other_traversal"].startswith("FAILED InvalidInput"), found["other_traversal"]


@pytest.mark.ray
@pytest.mark.slow
def test_a_hostile_job_reaches_no_secret_actor_store_or_other_tenants_artifacts(
    ray_cluster: Any, workload_ray: Any, tmp_path: Path
) -> None:
    """Same-user mode (the workload Ray runs as the control plane's OS user): everything but
    the files it opens by path, which that user can read (docs/security.md, known limits)."""
    artifacts = tmp_path / "artifacts"
    found, _, hostile = _hostile_run(ray_cluster, workload_ray, tmp_path / "state", artifacts)
    _reaches_nothing_through_ray_env_or_api(found, workload_ray, artifacts, hostile)
    # the residual risk, pinned: same uid, so the 0600 files open by their path
    assert found["uid"] == os.getuid()
    assert found["by_path"]["store"].startswith("GOT"), found["by_path"]
    assert found["by_path"]["environ"].startswith("GOT"), found["by_path"]


@pytest.mark.ray
@pytest.mark.slow
def test_a_hostile_job_of_a_workload_run_as_another_user_cannot_open_the_store_by_path(
    ray_cluster: Any, workload_ray_as_nobody: WorkloadAddress, tmp_path: Path
) -> None:
    """The workload Ray run as ``nobody``: the job knows every path (state dir, the control
    plane's pid and HOME) and still opens none of them: the state dir is 0700, its files 0600,
    /proc/<pid>/environ and the real HOME belong to root."""
    artifacts = Path(tempfile.mkdtemp(prefix="spotplane-artifacts-", dir="/tmp"))
    os.chown(artifacts, *_ids("nobody"))  # the only directory the jobs write
    try:
        found, _, hostile = _hostile_run(ray_cluster, workload_ray_as_nobody, tmp_path / "state",
                                         artifacts)
    finally:
        shutil.rmtree(artifacts, ignore_errors=True)
    _reaches_nothing_through_ray_env_or_api(found, workload_ray_as_nobody, artifacts, hostile)
    assert found["uid"] == _ids("nobody")[0] != os.getuid()
    by_path = found["by_path"]
    assert set(by_path) == {"store", "store_bytes", "listing", "endpoint", "environ", "ray_token"}
    for what in ("store_bytes", "listing", "endpoint", "environ", "ray_token"):
        assert by_path[what].startswith("FAILED PermissionError"), (what, by_path[what])
    assert by_path["store"].startswith("FAILED OperationalError"), by_path["store"]  # sqlite's word


def _ids(name: str) -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid
