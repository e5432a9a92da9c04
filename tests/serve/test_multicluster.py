"""One spotplane over two workload Ray clusters of two regions, with real parts: two local
multi-node Rays (``ray.cluster_utils.Cluster``) registered as ``aws-east`` (us-east-1) and
``aws-west`` (us-west-2), Ray's own ``ray job submit`` against the real Serve API, the
controller and the multi-cluster executor, checkpoints in S3 (moto's server). The job runs in
region A; every node of region A is removed (a regional spot loss: its zones refuse new
capacity); the job resumes in region B from its checkpoint, ends bit-identical to an undisturbed
run, ``ray job status`` never leaves PENDING/RUNNING before SUCCEEDED, ``ray job logs`` shows
both clusters' attempts, and the job's bill carries the moved checkpoint's egress.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from actors.controller import record_tick_failure
from actors.execution import ExecutorConfig
from actors.execution.multicluster import MultiClusterExecutor, closed_zones
from actors.localcluster import MultiNodeWorkload
from clusters.artifacts import open_store
from clusters.clusterfleet import ClusterGatedFleet
from clusters.data.catalog import DataCatalog
from clusters.sim import SimulatedFleet
from clusters.sim.fleet import AWS_COLLECTION, AWS_P3_ON_DEMAND, AWS_P3_SPOT, SimZone
from controlplane import sdk
from controlplane.core.clock import SimClock
from controlplane.core.models import JobState
from controlplane.core.workloadclusters import WorkloadClusterSpec
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.reconcile.pacer import PacedLoop
from controlplane.store import Store
from policies.egress import AWS_INTER_REGION_USD_PER_GB, GB
from policies.preemption import ExponentialModel
from tests.serve.test_byo import RAY, reference, submitted_id, user_folder
from tests.support import free_port, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ADMIN = "spa_multi-admin-token"
SPEED = 900.0
STEPS, SEED, STEP_S = 200, 7, 0.05
EAST = ("us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f")
WEST = ("us-west-2a", "us-west-2b", "us-west-2c")
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass
class World:
    url: str
    store: Store
    fleet: SimulatedFleet
    gated: ClusterGatedFleet  # what the controller launches through
    executor: MultiClusterExecutor
    regions: dict[str, MultiNodeWorkload]
    outage: set[str]  # zones with no capacity now (a regional spot loss)
    token: str
    artifact_uri: str
    s3: str
    tmp: Path
    paused: threading.Event = field(default_factory=threading.Event)

    def ray_cli(self, *args: str, timeout: float = 300) -> Any:
        import subprocess

        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        cmd = [RAY, "job", args[0], "--address", self.url, "--headers",
               json.dumps({"Authorization": f"Bearer {self.token}"})]
        return subprocess.run(cmd + list(args[1:]), capture_output=True, text=True, env=env,
                              timeout=timeout, cwd=self.tmp)


def wait_for(cond: Callable[[], bool], timeout: float, what: str,
             why: Callable[[], str] | None = None) -> None:
    wait_until(cond, timeout, what, poll=0.2, why=why)


def always_up_fleet(clock: SimClock, data_root: Path, state_path: Path) -> SimulatedFleet:
    """The AWS p3 zones of both regions with spot always up: where capacity is, the test says
    (:class:`ClusterGatedFleet` and the outage), not the trace's hour."""
    catalog = DataCatalog(data_root)
    zones = [SimZone(dataclasses.replace(t, available=np.ones_like(t.available)), AWS_P3_SPOT,
                     AWS_P3_ON_DEMAND, 4)
             for t in catalog.spot_traces(AWS_COLLECTION) if t.zone in EAST + WEST]
    return SimulatedFleet(zones, clock, seed=3, state_path=state_path,
                          lifetime_model=ExponentialModel(rate=0.001, limit=10_000.0))


@pytest.fixture(scope="module")
def world(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory,
          data_root: Path) -> Iterator[World]:
    from moto.server import ThreadedMotoServer

    from serve.app import start_api, stop_api

    saved = {k: os.environ.get(k) for k in AWS_ENV}
    os.environ.update(AWS_ENV)
    tmp = tmp_path_factory.mktemp("multicluster")
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    moto.start()
    s3 = f"http://127.0.0.1:{moto._port}"
    import boto3

    boto3.client("s3", endpoint_url=s3).create_bucket(Bucket="spotplane-ckpt")
    regions = {"aws-east": MultiNodeWorkload(workers=1, gpus_per_node=1),
               "aws-west": MultiNodeWorkload(workers=1, gpus_per_node=1)}
    db, packages, logs = tmp / "spotplane.db", tmp / "packages", tmp / "logs"
    store = Store(db)
    for (name, workload), (region, zones) in zip(
            regions.items(), (("us-east-1", EAST), ("us-west-2", WEST)), strict=True):
        store.add_cluster(WorkloadClusterSpec(
            name=name, cloud="aws", region=region, gcs_address=workload.gcs,
            dashboard_url=workload.dashboard, zones=list(zones), node_types=["p3.2xlarge"]))
    url = start_api(db, ADMIN, free_port(), package_dir=packages,
                    workload_address=regions["aws-east"].dashboard, log_dir=logs)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as admin:
        r = admin.post("/v1/tenants", json={"name": "acme", "max_gpus": 8})
        assert r.status_code == 201, r.text
        token = r.json()["token"]
        assert {c["name"] for c in admin.get("/v1/clusters").json()} == set(regions)
    clock = SimClock(start=0.0)
    sim = always_up_fleet(clock, data_root, tmp / "simfleet.db")
    outage = set(WEST)  # region B has no capacity until region A is lost: the job starts in A
    gated_by_registry = closed_zones(store)
    fleet = ClusterGatedFleet(sim, lambda: gated_by_registry() | outage)
    artifact_uri = "s3://spotplane-ckpt/artifacts"
    executor = MultiClusterExecutor(ExecutorConfig(
        artifact_uri=artifact_uri, s3_endpoint_url=s3, namespace="multi",
        hours_per_second=SPEED / 3600, gpus="always", package_dir=str(packages),
        log_dir=str(logs), stop_timeout_s=60, submit_timeout_s=300, env=AWS_ENV),
        store, clock=clock, check_every_s=2.0)
    executor.start_health_checks()
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"V100": 4}),
                     executor=executor, epoch=store.take_controller_lease())
    w = World(url, store, sim, fleet, executor, regions, outage, token, artifact_uri, s3, tmp)
    # a failed tick fails the running test (tests/tickwatch.py)
    loop = PacedLoop(ctl.tick, clock, SPEED, paused=w.paused,
                     on_error=lambda n, e: record_tick_failure("multicluster-ticker", ctl.epoch or 0, n, e))
    try:
        loop.start()
        yield w
    finally:
        loop.stop()
        executor.close()
        stop_api()
        store.close()
        for workload in regions.values():
            workload.stop()
        moto.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def lose_region(world: World, name: str, zones: tuple[str, ...]) -> None:
    """Every node of region ``name`` gone and its zones out of capacity (a regional spot loss),
    reported to the controller the way a provider reports it (paused meanwhile)."""
    world.paused.set()
    try:
        world.outage.clear()
        world.outage.update(zones)
        workload = world.regions[name]
        workload.remove(0)
        for node in world.store.list_nodes():
            if node.zone in zones and not node.gone and node.instance_id is not None:
                world.fleet.preempt_now(node.instance_id, "region lost")
    finally:
        world.paused.clear()


def test_a_job_survives_the_loss_of_its_region_bit_identical(world: World) -> None:
    from ray.job_submission import JobSubmissionClient

    folder = user_folder(world.tmp / "project")
    gate = world.tmp / "gate"
    meta = {"spotplane.kind": "spot", "spotplane.accelerator": "V100",
            "spotplane.compute_hours": str(STEPS * STEP_S * SPEED / 3600),
            "spotplane.checkpoint_hours": "0.02"}
    out = world.ray_cli("submit", "--no-wait", "--working-dir", str(folder),
                        "--entrypoint-num-gpus", "1", "--metadata-json", json.dumps(meta), "--",
                        "python", "train.py", "--steps", str(STEPS), "--seed", str(SEED),
                        "--step-seconds", str(STEP_S), "--hold-at", str(STEPS // 2),
                        "--gate", str(gate))
    assert out.returncode == 0, out.stderr + out.stdout
    sid = submitted_id(out.stdout + out.stderr)
    client = JobSubmissionClient(world.url, headers={"Authorization": f"Bearer {world.token}"})
    seen: list[str] = []

    def watch() -> None:
        while True:
            status = str(client.get_job_status(sid).value)
            if not seen or seen[-1] != status:
                seen.append(status)
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    wait_for(lambda: world.store.get_job(sid).state is JobState.RUNNING
             and world.store.get_job(sid).checkpoints >= 1
             and "holding at step" in world.executor.logs(sid), 400,
             "a running, checkpointed job in region A", lambda: world.executor.logs(sid)[-3000:])
    assert world.store.get_job(sid).cluster == "aws-east"
    t_loss = time.monotonic()
    lose_region(world, "aws-east", EAST)
    gate.touch()
    wait_for(lambda: world.store.get_job(sid).cluster == "aws-west"
             and world.store.get_job(sid).state is JobState.RUNNING, 400,
             "the job running in region B", lambda: world.executor.logs(sid)[-3000:])
    loss_to_running = time.monotonic() - t_loss
    wait_for(lambda: world.store.get_job(sid).terminal, 400, "the job to finish",
             lambda: world.executor.logs(sid)[-3000:])
    watcher.join(timeout=60)
    job = world.store.get_job(sid)
    assert job.state is JobState.SUCCEEDED, (job.state, job.message, world.executor.logs(sid))
    assert world.executor.attempts_by_cluster(sid).keys() == {"aws-east", "aws-west"}
    # Ray's client never saw it leave PENDING/RUNNING before SUCCEEDED
    assert seen[-1] == "SUCCEEDED" and set(seen[:-1]) <= {"PENDING", "RUNNING"}, seen
    # both clusters' attempts through `ray job logs`, restored (not restarted), bit-identical
    logs = world.ray_cli("logs", sid).stdout
    assert logs.count("=== attempt") >= 2, logs
    starts = [int(s) for s in re.findall(r"starting at step (\d+)", logs)]
    assert starts[0] == 0 and starts[-1] > 0, starts
    ref = reference(folder, STEPS, SEED)
    assert f"result {ref}" in logs, logs
    final = open_store(f"{world.artifact_uri}/tenants/{job.tenant_id}",
                       endpoint_url=world.s3).restore_latest(sid)
    assert final is not None and int(sdk.loads(final.data)["step"]) == STEPS
    # the bill: the moved checkpoint at AWS's inter-region rate
    assert job.egress_bytes > 0
    assert job.egress_cost == pytest.approx(job.egress_bytes / GB * AWS_INTER_REGION_USD_PER_GB)
    print(f"region loss to RUNNING in region B: {loss_to_running:.1f} s; egress "
          f"{job.egress_bytes} B ${job.egress_cost:.8f}")


def submit_held(world: World, folder: Path, gate: Path, steps: int = 120) -> str:
    """A checkpointing job of ``folder`` that holds half-way until ``gate`` exists."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(world.url, headers={"Authorization": f"Bearer {world.token}"})
    return str(client.submit_job(
        entrypoint=f"python train.py --steps {steps} --seed {SEED} --step-seconds {STEP_S} "
                   f"--hold-at {steps // 2} --gate {gate}",
        entrypoint_num_gpus=1, runtime_env={"working_dir": str(folder)},
        metadata={"spotplane.kind": "spot", "spotplane.accelerator": "V100",
                  "spotplane.compute_hours": str(steps * STEP_S * SPEED / 3600),
                  "spotplane.checkpoint_hours": "0.02"}))


def running_in(world: World, sid: str, cluster: str) -> Callable[[], bool]:
    def check() -> bool:
        job = world.store.get_job(sid)
        return (job.state is JobState.RUNNING and job.cluster == cluster
                and "holding at step" in world.executor.logs(sid))
    return check


def admin(world: World) -> httpx.Client:
    return httpx.Client(base_url=world.url, headers={"Authorization": f"Bearer {ADMIN}"},
                        timeout=60)


def test_a_drained_cluster_finishes_what_runs_and_takes_nothing_new(world: World) -> None:
    folder = user_folder(world.tmp / "drain-project")
    world.regions["aws-east"].add()  # region A is back, with one node
    world.outage.clear()
    world.outage.update(WEST)  # the first job lands in region A
    first = submit_held(world, folder, world.tmp / "drain-gate-1")
    wait_for(running_in(world, first, "aws-east"), 400, "the first job running in region A",
             lambda: world.executor.logs(first)[-3000:])
    with admin(world) as http:
        assert http.post("/v1/clusters/aws-east/drain").json()["state"] == "draining"
    world.outage.clear()  # both regions have capacity: only the drain keeps region A off
    wait_for(lambda: not any(world.gated.spot_available(z, "p3.2xlarge") for z in EAST), 30,
             "the fleet to close the drained cluster's zones")
    second = submit_held(world, folder, world.tmp / "drain-gate-2")
    wait_for(running_in(world, second, "aws-west"), 400, "the second job running in region B",
             lambda: world.executor.logs(second)[-3000:])
    (world.tmp / "drain-gate-1").touch()
    wait_for(lambda: world.store.get_job(first).terminal, 400, "the first job to finish")
    assert world.store.get_job(first).state is JobState.SUCCEEDED
    assert world.executor.attempts_by_cluster(first) == {"aws-east": 1}  # finished where it ran
    assert world.store.get_job(second).cluster == "aws-west"


def kill_head(workload: MultiNodeWorkload) -> None:
    """SIGKILL the cluster's head: the processes listening on its dashboard and GCS ports."""
    import signal

    import psutil

    ports = {int(workload.dashboard.rsplit(":", 1)[1]), int(workload.gcs.rsplit(":", 1)[1])}
    pids = {c.pid for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in ports and c.pid}
    assert pids, f"nothing listens on {ports}"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def test_an_unhealthy_cluster_takes_nothing_and_its_jobs_restore_elsewhere(world: World) -> None:
    second = next(j.id for j in world.store.list_jobs()
                  if j.cluster == "aws-west" and not j.terminal)
    with admin(world) as http:  # region A registered again: active
        east = http.get("/v1/clusters/aws-east").json()
        assert http.delete("/v1/clusters/aws-east").status_code == 204
        body = {k: east[k] for k in ("name", "cloud", "region", "gcs_address", "dashboard_url",
                                     "zones", "node_types")}
        assert http.post("/v1/clusters", json=body).status_code == 201
    kill_head(world.regions["aws-west"])
    wait_for(lambda: world.store.get_cluster("aws-west").state.value == "unhealthy", 120,
             "region B marked unhealthy")
    # its nodes declared lost: the job restores in region A, and new work goes there too
    world.paused.set()
    try:
        for node in world.store.list_nodes():
            if node.zone in WEST and not node.gone and node.instance_id is not None:
                world.fleet.preempt_now(node.instance_id, "cluster head lost")
    finally:
        world.paused.clear()
    (world.tmp / "drain-gate-2").touch()
    wait_for(lambda: world.store.get_job(second).terminal, 400, "the job to finish in region A",
             lambda: world.executor.logs(second)[-3000:])
    job = world.store.get_job(second)
    assert job.state is JobState.SUCCEEDED and job.cluster == "aws-east", (job.state, job.cluster)
    assert job.egress_bytes > 0
    third = submit_held(world, user_folder(world.tmp / "after-project"),
                        world.tmp / "after-gate", steps=20)
    (world.tmp / "after-gate").touch()
    wait_for(lambda: world.store.get_job(third).terminal, 400, "a new job to finish")
    assert world.store.get_job(third).cluster == "aws-east"
    assert world.executor.attempts_by_cluster(third) == {"aws-east": 1}
