"""A Ray user's own code on spotplane, with real parts: Ray's own CLI (``ray job submit``) and
``JobSubmissionClient`` against the real Serve API, the controller and the Ray executor driving
a real multi-node workload Ray (head + 3 worker raylets with one GPU each), the user's script
in a folder outside the repository importing its own helper module. The node the job runs on is
removed mid-run: the job restores elsewhere from its checkpoint, from the same package, and
ends bit-identical to an undisturbed run, while ``ray job status`` said PENDING, RUNNING,
PENDING, RUNNING, SUCCEEDED.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors.controller import record_tick_failure
from actors.execution import ExecutorConfig, RayJobExecutor
from actors.localcluster import MultiNodeWorkload
from clusters.artifacts import LocalArtifactStore
from clusters.sim import SimulatedFleet
from controlplane import sdk
from controlplane.core.clock import SimClock
from controlplane.core.models import JobState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.reconcile.pacer import PacedLoop
from controlplane.store import Store
from policies.preemption import ExponentialModel
from tests.support import free_port, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ADMIN = "spa_byo-admin-token"
SPEED = 900.0  # simulated seconds per wall second: a wall second is a quarter hour
RAY = str(Path(sys.executable).with_name("ray"))
STEPS, SEED, STEP_S = 240, 5, 0.05

HELPER = '''
import hashlib
import numpy as np

def fresh(seed):
    rng = np.random.default_rng([seed, 1])
    return {"step": 0, "w": rng.normal(0, 1, (8, 8)), "acc": np.zeros((8, 8))}

def step(state, seed):
    rng = np.random.default_rng([seed, int(state["step"]) + 1])
    x = rng.normal(0, 1, (8, 8))
    state["w"] = np.tanh(state["w"] @ x) * 0.9 + 0.1 * x
    state["acc"] = state["acc"] + state["w"]
    state["step"] = int(state["step"]) + 1

def digest(state):
    h = hashlib.sha256()
    for k in ("w", "acc"):
        h.update(np.ascontiguousarray(state[k]).tobytes())
    return h.hexdigest()
'''

HOLD = '''
def hold(step, a):
    """Wait at step ``a.hold_at`` until the file ``a.gate`` exists (the test removes a node
    meanwhile, so the loss always lands mid-run, however slow the machine)."""
    if a.gate and step == a.hold_at and not os.path.exists(a.gate):
        print("holding at step", step, flush=True)
        while not os.path.exists(a.gate):
            time.sleep(0.1)
'''

TRAIN = '''
import argparse, os, time
import helper
from controlplane import sdk
''' + HOLD + '''

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int)
p.add_argument("--seed", type=int)
p.add_argument("--step-seconds", type=float, default=0.0)
p.add_argument("--hold-at", type=int, default=-1)
p.add_argument("--gate", default="")
a = p.parse_args()
print("cuda_visible_devices", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
print("cwd_has_helper", os.path.exists("helper.py"), flush=True)
with sdk.session() as s:
    state = s.restore() or helper.fresh(a.seed)
    print("starting at step", state["step"], flush=True)
    while state["step"] < a.steps:
        hold(state["step"], a)
        helper.step(state, a.seed)
        time.sleep(a.step_seconds)
        s.progress(state["step"] / a.steps)
        if s.should_checkpoint():
            s.save(state)
    s.save(state, meta={"final": True})
print("result", helper.digest(state), flush=True)
'''


GANG = '''
import argparse, os, time
import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from controlplane import sdk
''' + HOLD + '''

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int)
p.add_argument("--workers", type=int)
p.add_argument("--hold-at", type=int, default=-1)
p.add_argument("--gate", default="")
a = p.parse_args()
pg = sdk.placement_group()

@ray.remote(num_cpus=0, num_gpus=1)
def worker(i):
    return ray.get_runtime_context().get_node_id(), os.environ.get("CUDA_VISIBLE_DEVICES")

with sdk.session() as s:
    state = s.restore() or {"step": 0}
    print("gang starting at step", state["step"], flush=True)
    where = ray.get([worker.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=i)).remote(i) for i in range(a.workers)])
    print("gang nodes", len({n for n, _ in where}), "gpus", sorted(g for _, g in where), flush=True)
    while state["step"] < a.steps:
        hold(state["step"], a)
        state["step"] += 1
        time.sleep(0.05)
        s.progress(state["step"] / a.steps)
        if s.should_checkpoint():
            s.save(state)
    s.save(state, meta={"final": True})
print("gang done", flush=True)
'''


def user_folder(root: Path) -> Path:
    """The user's own project: a script, its helper module, data left out by .gitignore."""
    root.mkdir(parents=True)
    (root / "train.py").write_text(TRAIN)
    (root / "helper.py").write_text(HELPER)
    (root / "gang.py").write_text(GANG)
    (root / ".gitignore").write_text("data/\n")
    # a tree of its own per test: the raylets of this one-machine cluster share one disk, and two
    # jobs of one package on two raylets share (and one raylet's agent may replace) its directory
    (root / "PROJECT").write_text(root.name)
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(os.urandom(1 << 20))
    return root


def reference(folder: Path, steps: int, seed: int) -> str:
    spec = importlib.util.spec_from_file_location("byo_helper", folder / "helper.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    state = mod.fresh(seed)
    while state["step"] < steps:
        mod.step(state, seed)
    return str(mod.digest(state))


def wait_for(cond: Callable[[], bool], timeout: float, what: str,
             why: Callable[[], str] | None = None) -> None:
    """:func:`tests.support.wait_until` at the pace of these jobs' logs and statuses."""
    wait_until(cond, timeout, what, poll=0.2, why=why)


@dataclass
class World:
    url: str
    store: Store
    fleet: SimulatedFleet
    executor: RayJobExecutor
    workload: MultiNodeWorkload
    tokens: dict[str, str]
    packages: Path
    tmp: Path
    paused: threading.Event = field(default_factory=threading.Event)

    def headers(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[tenant]}"}

    def ray_cli(self, tenant: str | None, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        cmd = [RAY, "job", args[0], "--address", self.url]
        if tenant is not None:
            cmd += ["--headers", json.dumps(self.headers(tenant))]
        return subprocess.run(cmd + list(args[1:]), capture_output=True, text=True, env=env,
                              timeout=timeout, cwd=self.tmp)

    def logs(self, job_id: str) -> str:
        return self.executor.logs(job_id)[-4000:]


@pytest.fixture(scope="module")
def world(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory,
          data_root: Path) -> Iterator[World]:
    from serve.app import start_api, stop_api

    tmp = tmp_path_factory.mktemp("byo")
    workload = MultiNodeWorkload(workers=4, gpus_per_node=1)
    db, packages = tmp / "spotplane.db", tmp / "packages"
    store = Store(db)
    url = start_api(db, ADMIN, free_port(), package_dir=packages,
                    workload_address=workload.dashboard, log_dir=tmp / "logs")
    tokens = {}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as admin:
        for name in ("acme", "beta"):
            r = admin.post("/v1/tenants", json={"name": name, "max_gpus": 8})
            assert r.status_code == 201, r.text
            tokens[name] = r.json()["token"]
    clock = SimClock(start=0.0)
    fleet = SimulatedFleet.from_options(
        clock=clock, data_dir=data_root, seed=3, state_path=tmp / "simfleet.db", gcp=False,
        lifetime_model=ExponentialModel(rate=0.01, limit=24.0))
    executor = RayJobExecutor(ExecutorConfig(
        workload_address=workload.dashboard, artifact_uri=str(tmp / "artifacts"), namespace="byo",
        hours_per_second=SPEED / 3600, gpus="always", workload_gcs=workload.gcs,
        package_dir=str(packages), log_dir=str(tmp / "logs"), stop_timeout_s=60,
        submit_timeout_s=300), clock=clock)  # a loaded machine: agents answer late
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"V100": 4}),
                     executor=executor, epoch=store.take_controller_lease())
    w = World(url, store, fleet, executor, workload, tokens, packages, tmp)
    # a failed tick fails the running test (tests/tickwatch.py)
    loop = PacedLoop(ctl.tick, clock, SPEED, paused=w.paused,
                     on_error=lambda n, e: record_tick_failure("byo-ticker", ctl.epoch or 0, n, e))
    try:
        loop.start()
        yield w
    finally:
        loop.stop()
        executor.close()
        stop_api()
        store.close()
        workload.stop()


def submitted_id(out: str) -> str:
    m = re.search(r"Job '([^']+)' submitted successfully", out)
    assert m, out
    return m.group(1)


# --------------------------------------------------------------------------------------------
def test_tokens_tenants_and_bad_metadata(world: World) -> None:
    from ray.job_submission import JobSubmissionClient

    with pytest.raises(Exception, match="401|[Aa]uthenticat|Unauthorized"):
        JobSubmissionClient(world.url)
    acme = JobSubmissionClient(world.url, headers=world.headers("acme"))
    beta = JobSubmissionClient(world.url, headers=world.headers("beta"))
    sid = acme.submit_job(entrypoint="python -c 'print(1)'",
                          metadata={"spotplane.kind": "spot", "spotplane.accelerator": "V100"})
    with pytest.raises(RuntimeError, match="404"):
        beta.get_job_info(sid)
    assert sid not in {j.submission_id for j in beta.list_jobs()}
    assert sid in {j.submission_id for j in acme.list_jobs()}
    assert acme.stop_job(sid) is True
    wait_for(lambda: str(acme.get_job_status(sid).value) == "STOPPED", 120, "the stop")
    # bad metadata: a 4xx whose message Ray's CLI prints
    bad = world.ray_cli("acme", "submit", "--no-wait", "--metadata-json",
                        json.dumps({"spotplane.workers": "two"}), "--", "python", "x.py")
    assert bad.returncode != 0
    assert "422" in bad.stderr + bad.stdout and "metadata.spotplane.workers" in bad.stderr + bad.stdout
    unknown = world.ray_cli("acme", "submit", "--no-wait", "--metadata-json",
                            json.dumps({"spotplane.colour": "red"}), "--", "python", "x.py")
    assert "metadata.spotplane.colour" in unknown.stderr + unknown.stdout
    gpus = world.ray_cli("acme", "submit", "--no-wait", "--entrypoint-num-gpus", "0.5", "--",
                         "python", "x.py")
    assert "entrypoint_num_gpus" in gpus.stderr + gpus.stdout


def test_spotplane_submit_uploads_a_tree_once(world: World) -> None:
    folder = user_folder(world.tmp / "cli-project")
    job = world.tmp / "job.yaml"
    job.write_text(textwrap.dedent("""\
        name: byo-cli
        kind: spot
        accelerator: V100
        compute_hours: 1.0
        entrypoint: python train.py --steps 5 --seed 1
    """))
    cmd = [sys.executable, "-m", "controlplane.cli.main", "submit", str(job), "--url", world.url,
           "--token", world.tokens["beta"], "--working-dir", str(folder), "--json"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "uploaded" in first.stderr and "already" not in first.stderr, first.stderr
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "already uploaded" in second.stderr, second.stderr
    uris = {j["spec"]["runtime_env"]["working_dir"]
            for j in (json.loads(first.stdout)["jobs"] + json.loads(second.stdout)["jobs"])}
    assert len(uris) == 1
    stored = list((world.packages).rglob("_ray_pkg_*.zip"))
    names = zipfile.ZipFile(stored[0]).namelist()
    assert "train.py" in names and "helper.py" in names
    assert not any(n.startswith("data/") for n in names)  # .gitignore'd
    # another tenant cannot run beta's package by naming its URI
    with httpx.Client(base_url=world.url, headers=world.headers("acme"), timeout=60) as acme:
        r = acme.post("/v1/jobs", json={"name": "steal", "compute_hours": 1.0,
                                        "entrypoint": "python train.py",
                                        "runtime_env": {"working_dir": uris.pop()}})
        assert r.status_code == 404 and "runtime_env.working_dir" in r.text, r.text
        r = acme.post("/v1/jobs", json={"name": "local", "compute_hours": 1.0,
                                        "entrypoint": "python train.py",
                                        "runtime_env": {"working_dir": "./src"}})
        assert r.status_code == 422 and "local path" in r.text, r.text
        r = acme.post("/v1/jobs", json={"name": "typo", "compute_hours": 1.0,
                                        "entrypoint": "python train.py",
                                        "runtime_env": {"workdir": "gcs://x"}})
        assert r.status_code == 422 and "runtime_env.workdir" in r.text, r.text


def remove_node_of(world: World, job_id: str, node_id: str) -> None:
    """Remove the raylet a simulated node is pinned to, then tell the fleet it is gone (the
    controller is paused meanwhile, so it sees the loss the way a provider reports it)."""
    slots = world.executor.pinning.slots
    assert slots is not None
    assert node_id in slots.bound, (node_id, slots.bound, slots.free,
                                    world.executor.actors.resources())
    slot = slots.bound[node_id]
    node = next(n for n in world.store.list_nodes() if n.id == node_id)
    assert node.instance_id is not None
    world.paused.set()
    try:
        world.workload.remove(int(slot.rsplit(":", 1)[1]))
        wait_for(lambda: slot not in world.executor.actors.resources(), 120,
                 f"the workload cluster to drop {slot}")
        world.fleet.preempt_now(node.instance_id, "Ray node removed")
    finally:
        world.paused.clear()


def test_a_gang_starts_in_its_placement_group_and_restarts_together(world: World) -> None:
    from ray.job_submission import JobSubmissionClient

    folder = user_folder(world.tmp / "gang-project")
    client = JobSubmissionClient(world.url, headers=world.headers("beta"))
    steps = 200
    gate = world.tmp / "gang-gate"
    sid = client.submit_job(  # Ray's client zips and uploads the folder through /api/packages
        entrypoint=f"python gang.py --steps {steps} --workers 2 --hold-at 100 --gate {gate}",
        runtime_env={"working_dir": str(folder)}, entrypoint_num_gpus=1,
        metadata={"spotplane.kind": "hp", "spotplane.accelerator": "V100",
                  "spotplane.workers": "2", "spotplane.checkpoint_hours": "0.02",
                  "spotplane.compute_hours": str(steps * 0.05 * SPEED / 3600)})
    wait_for(lambda: world.store.get_job(sid).state is JobState.RUNNING
             and world.store.get_job(sid).checkpoints >= 1
             and "holding at step" in world.executor.logs(sid), 300,
             "a running, checkpointed gang", lambda: world.logs(sid))
    first = world.executor.replicas[sid][-1]
    assert first.group is not None and len(first.group_nodes) == 1
    remove_node_of(world, sid, first.group_nodes[0])  # the gang's second node
    gate.touch()
    wait_for(lambda: world.store.get_job(sid).terminal, 400, "the gang to finish",
             lambda: world.logs(sid))
    job = world.store.get_job(sid)
    assert job.state is JobState.SUCCEEDED, (job.state, job.message, world.logs(sid))
    logs = client.get_job_logs(sid)
    assert logs.count("gang nodes 2 gpus ['0', '0']") >= 2, logs  # each attempt: 2 nodes, 1 GPU each
    starts = [int(x) for x in re.findall(r"gang starting at step (\d+)", logs)]
    assert len(starts) >= 2 and starts[0] == 0 and starts[-1] > 0, starts
    attempts = world.executor.replicas[sid]
    assert attempts[-1].group != first.group
    assert {attempts[-1].node_id, *attempts[-1].group_nodes}.isdisjoint({first.group_nodes[0]})


def test_ray_job_submit_runs_the_users_folder_through_a_node_loss(world: World) -> None:
    from ray.job_submission import JobSubmissionClient

    folder = user_folder(world.tmp / "project")
    gate = world.tmp / "gate"
    compute_hours = STEPS * STEP_S * SPEED / 3600
    meta = {"spotplane.kind": "hp", "spotplane.accelerator": "V100",
            "spotplane.compute_hours": str(compute_hours), "spotplane.checkpoint_hours": "0.02"}
    out = world.ray_cli("acme", "submit", "--no-wait", "--working-dir", str(folder),
                        "--entrypoint-num-gpus", "1", "--metadata-json", json.dumps(meta), "--",
                        "python", "train.py", "--steps", str(STEPS), "--seed", str(SEED),
                        "--step-seconds", str(STEP_S), "--hold-at", str(STEPS // 2),
                        "--gate", str(gate))
    assert out.returncode == 0, out.stderr + out.stdout
    sid = submitted_id(out.stdout + out.stderr)
    client = JobSubmissionClient(world.url, headers=world.headers("acme"))
    seen: list[str] = []
    watching = threading.Event()

    def watch() -> None:  # the status Ray's client sees, throughout
        while not watching.is_set():
            status = str(client.get_job_status(sid).value)
            if not seen or seen[-1] != status:
                seen.append(status)
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    follower = subprocess.Popen(
        [RAY, "job", "logs", "--address", world.url, "--headers", json.dumps(world.headers("acme")),
         "--follow", sid], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # running, with at least one checkpoint taken
        wait_for(lambda: world.store.get_job(sid).state is JobState.RUNNING
                 and world.store.get_job(sid).checkpoints >= 1
                 and "holding at step" in world.executor.logs(sid), 300,
                 "a running, checkpointed job", lambda: world.logs(sid))
        first = world.executor.replicas[sid][-1]
        remove_node_of(world, sid, first.node_id)
        gate.touch()
        wait_for(lambda: world.store.get_job(sid).terminal, 400, "the job to finish",
                 lambda: world.logs(sid))
    finally:
        world.paused.clear()
    watcher.join(timeout=60)  # it stops at the terminal status it saw
    watching.set()
    job = world.store.get_job(sid)
    assert job.state is JobState.SUCCEEDED, (job.state, job.message, world.logs(sid))
    attempts = world.executor.replicas[sid]
    assert len(attempts) >= 2 and attempts[-1].node_id != first.node_id
    # Ray's client saw the job run, wait again after the loss, run and succeed (its first wait
    # may be over before the watcher's first look, on a loaded machine)
    assert seen[0] in ("PENDING", "RUNNING") and seen[-1] == "SUCCEEDED", seen
    assert seen.count("RUNNING") >= 2 and "PENDING" in seen[seen.index("RUNNING"):], seen
    # the same package ran each time, from the user's folder, with exactly one GPU
    logs = world.ray_cli("acme", "logs", sid).stdout
    assert logs.count("=== attempt") >= 2, logs
    assert logs.count("cwd_has_helper True") >= 2, logs
    assert set(re.findall(r"cuda_visible_devices (\S+)", logs)) == {"0"}, logs
    starts = [int(s) for s in re.findall(r"starting at step (\d+)", logs)]
    assert starts[0] == 0 and starts[-1] > 0, starts  # restored, not restarted
    # bit-identical to an undisturbed run
    ref = reference(folder, STEPS, SEED)
    assert f"result {ref}" in logs, logs
    artifacts = LocalArtifactStore(str(world.tmp / "artifacts" / "tenants" / job.tenant_id))
    final = artifacts.restore_latest(sid)
    assert final is not None and final.ref.progress == 1.0
    state = sdk.loads(final.data)
    assert int(state["step"]) == STEPS
    # `ray job logs --follow` (the tail websocket) ended with the job and saw both attempts
    tail, _ = follower.communicate(timeout=120)
    assert tail.count("=== attempt") >= 2 and f"result {ref}" in tail, tail
    status = world.ray_cli("acme", "status", sid)
    assert "succeeded" in (status.stdout + status.stderr).lower()
    # another tenant: not found
    other = world.ray_cli("beta", "status", sid)
    assert other.returncode != 0 and "404" in other.stdout + other.stderr
    # `spotplane logs JOB [-f]`: the same attempts; -f on a finished job ends at once, exit 0
    cli = [sys.executable, "-m", "controlplane.cli.main", "logs", sid, "--url", world.url,
           "--token", world.tokens["acme"]]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for extra in ([], ["-f"]):
        mine = subprocess.run(cli + extra, capture_output=True, text=True, env=env, timeout=120)
        assert mine.returncode == 0, mine.stderr
        assert mine.stdout.count("=== attempt") == logs.count("=== attempt")
        assert f"result {ref}" in mine.stdout
    theirs = subprocess.run(cli[:-1] + [world.tokens["beta"]], capture_output=True, text=True,
                            env=env, timeout=120)
    assert theirs.returncode != 0 and "not found" in theirs.stderr.lower(), theirs.stderr
