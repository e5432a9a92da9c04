"""Bootstrap for real: boto3 launches through moto's server, and each launched instance's actual
``UserData`` runs in its own network namespace (``tests.clusters.bootemu``) against a fake
metadata server, so its real ``ray start`` joins a local workload Ray as a separate raylet with
the declared resources. The controller, the API (served on the bridge, where the nodes reach it)
and the store are the real ones; EC2 terminating an instance kills its namespace."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from clusters.bootstrap import ClusterJoin
from clusters.providers import make_provider
from controlplane.core.clock import SimClock
from controlplane.core.models import JobKind, JobSpec, JobState, Node, NodeState
from controlplane.core.nodecreds import report_secret
from controlplane.core.tokens import hash_token
from controlplane.reconcile.contracts import ControllerSettings, JobExecutor
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from tests.clusters import test_aws_controller as ctl_world
from tests.clusters.bootemu import (
    Booted,
    BootEmulator,
    Bridge,
    WorkloadHead,
    booted_ok,
    bridged,
    ec2_gone,
    ec2_scripts,
    free_port,
)
from tests.serve.bareapi import ADMIN_TOKEN, BareApi, bare_api

pytestmark = [pytest.mark.ray, pytest.mark.slow]

aws = ctl_world.aws
moto_port, proxy, aws_env = ctl_world.moto_port, ctl_world.proxy, ctl_world.aws_env
GPU = "g5.xlarge"


@dataclass
class Cluster:
    """The bridge and the workload Ray's head every test's nodes join."""

    bridge: Bridge
    head: WorkloadHead
    workdir: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("workload")
    with bridged() as bridge:
        head = WorkloadHead(bridge, workdir, free_port(), dashboard=True)
        try:
            yield Cluster(bridge, head, workdir)
        finally:
            head.stop()


class ApiServer:
    """The API's real FastAPI app (``tests.serve.bareapi``) served by uvicorn on the bridge."""

    def __init__(self, built: BareApi, host: str) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://{host}:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(built.app, host=host, port=self.port,
                                                    log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the API did not start"
            time.sleep(0.1)

    def post(self, path: str, token: str, body: dict[str, Any]) -> int:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@dataclass
class World:
    clock: SimClock
    store: Store
    ctl: Controller
    emu: BootEmulator
    api: ApiServer
    tenant_id: str
    token_file: Path
    finish_boot: Callable[[], None]  # the cloud finishes booting what is pending
    accelerator: str = "A10G"

    def step(self, ticks: int = 1) -> list[Booted]:
        """Ticks of the controller; EC2 boots what is pending; the emulator follows EC2."""
        started: list[Booted] = []
        for _ in range(ticks):
            self.clock.advance(60.0)
            self.ctl.tick()
            self.finish_boot()
            self.emu.reap()
            started += self.emu.boot_new()
        return started

    def submit(self, entrypoint: str | None = None) -> str:
        job = self.store.submit_job(self.tenant_id, JobSpec(
            name="train", kind=JobKind.SPOT, compute_hours=4, workers=1, accelerator=self.accelerator,
            entrypoint=entrypoint), now=self.clock.now())
        return job.id

    def node_of(self, job_id: str) -> Node:
        [node] = [n for n in self.store.list_nodes() if n.job_id == job_id and not n.gone]
        return node


@contextlib.contextmanager
def aws_world(cluster: Cluster, url: str, tmp_path: Path,
              executor: JobExecutor | None = None) -> Iterator[World]:
    """moto's EC2 behind AwsFleet with the bootstrap, the API on the bridge, the controller."""
    import boto3

    token_file = tmp_path / "east-ray-token"  # where the operator put the cluster's token
    token_file.write_text(cluster.head.token_file.read_text())
    with bare_api(tmp_path) as built:
        api = ApiServer(built, cluster.bridge.host)
        clock = SimClock(start=1_700_000_000.0)
        fleet = make_provider(
            "aws", endpoint_url=url, zones=["us-east-1a"], instance_types=[GPU], clock=clock,
            seed=11, image_id="ami-12c6146b",
            cluster_joins={"us-east-1": ClusterJoin("east", cluster.head.address, f"file:{token_file}")},
            api_url=api.url, node_report_secret=report_secret(hash_token(ADMIN_TOKEN)))
        store = Store(tmp_path / "spotplane.db")
        ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"A10G": 4}),
                         epoch=store.take_controller_lease(), executor=executor)
        ec2 = boto3.client("ec2", endpoint_url=url, region_name="us-east-1")
        emu = BootEmulator(cluster.bridge, tmp_path, ec2_scripts(ec2), ec2_gone(ec2),
                           extra_env={"RAY_gcs_server_port_wait_time_s": "5"})
        try:
            yield World(clock, store, ctl, emu, api, built.tenant_id, token_file, ctl_world.boot_pending)
        finally:
            emu.close()
            api.stop()
            store.close()


@pytest.fixture
def world(cluster: Cluster, proxy: tuple[Any, str], aws_env: None, tmp_path: Path) -> Iterator[World]:
    with aws_world(cluster, proxy[1], tmp_path) as made:
        yield made


def wait_for_report(world: World, instance_id: str, timeout_s: float = 60.0) -> None:
    """Until the node's watcher has reported its notice through the API."""
    deadline = time.monotonic() + timeout_s
    while world.store.get_meta(f"node_report:notice:{instance_id}") is None:
        booted = world.emu.booted[instance_id]
        assert time.monotonic() < deadline, booted.file("nodewatch.log")
        time.sleep(0.5)


def boot_job(world: World, entrypoint: str | None = None) -> tuple[str, Node, Booted]:
    """A job placed on a launched node whose bootstrap joined the workload cluster."""
    job_id = world.submit(entrypoint)
    started: list[Booted] = []
    for _ in range(6):
        started += world.step()
        if started:
            break
    [booted] = started
    booted_ok(booted)
    world.step()
    assert world.store.get_job(job_id).state is JobState.RUNNING
    node = world.node_of(job_id)
    assert node.instance_id == booted.instance_id
    return job_id, node, booted


def test_a_job_runs_on_its_booted_node_and_survives_its_preemption(world: World, cluster: Cluster) -> None:
    job_id, node, booted = boot_job(world)
    have = cluster.head.resources()
    assert have[f"spotplane_node:{node.instance_id}"] == 1.0 and have["spot"] >= 1.0
    assert have["A10G"] >= 1.0 and have["GPU"] >= 1.0
    assert cluster.head.run_pinned(f"spotplane_node:{node.instance_id}") == booted.ip

    raw = aws.moto_backend().get_instance(node.instance_id)  # EC2 interrupts the spot instance
    raw.terminate()
    raw.state_reason.code = "Server.SpotInstanceTermination"
    started: list[Booted] = []
    for _ in range(8):
        started += world.step()
        if started:
            break
    assert node.instance_id not in world.emu.booted  # its namespace is gone
    assert world.store.get_job(job_id).preemptions == 1
    [again] = started
    booted_ok(again)
    world.step()
    assert world.store.get_job(job_id).state is JobState.RUNNING
    assert world.node_of(job_id).instance_id == again.instance_id != node.instance_id
    assert cluster.head.run_pinned(f"spotplane_node:{again.instance_id}") == again.ip


def test_a_wrong_token_fails_the_node_terminates_it_and_the_job_goes_elsewhere(
        world: World, cluster: Cluster) -> None:
    world.token_file.write_text("f" * 64)  # not the workload cluster's token
    job_id = world.submit()
    started: list[Booted] = []
    for _ in range(6):
        started += world.step()
        if started:
            break
    [bad] = started
    assert bad.finished(240) != 0
    assert "bootstrap failed" in bad.output()
    world.token_file.write_text(cluster.head.token_file.read_text())  # the operator fixes it
    started = world.step()
    failed = next(n for n in world.store.list_nodes() if n.instance_id == bad.instance_id)
    assert failed.state is NodeState.FAILED
    [event] = [e for e in world.store.job_events(job_id) if e.node_id == failed.id and e.dst == "FAILED"]
    assert event.cause.startswith(f"bootstrap failed on {bad.instance_id}:"), event.cause
    assert aws.moto_backend().get_instance(bad.instance_id).state == "terminated"
    assert bad.instance_id not in world.emu.booted or not started  # its namespace goes too
    for _ in range(6):
        if started:
            break
        started += world.step()
    [good] = [b for b in started if b.instance_id != bad.instance_id]
    booted_ok(good)
    world.step()
    assert bad.instance_id not in world.emu.booted
    assert world.store.get_job(job_id).state is JobState.RUNNING
    assert world.node_of(job_id).instance_id == good.instance_id


def test_the_watcher_reports_the_notice_and_only_for_its_own_node(world: World) -> None:
    job_a, node_a, booted_a = boot_job(world)
    job_b, node_b, _ = boot_job(world)
    credential = booted_a.file("credential").strip()
    notice = {"action": "terminate", "seconds_left": 100.0}
    assert world.api.post(f"/v1/nodes/{node_b.instance_id}/notice", credential, notice) == 403
    assert world.store.take_node_reports() == []

    when = datetime.fromtimestamp(time.time() + 120, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    booted_a.notice(json.dumps({"action": "terminate", "time": when}))
    wait_for_report(world, node_a.instance_id)
    world.step()
    states = {n.id: n.state for n in world.store.list_nodes()}
    assert states[node_a.id] is NodeState.NOTICED and states[node_b.id] is NodeState.READY
    assert any("preemption notice" in e.cause for e in world.store.job_events(job_a))


def _driver_ip(cluster: Cluster, job_id: str, timeout_s: float = 180.0) -> str:
    """Where the job's running Ray job has its driver: the address of that Ray node."""
    from ray.job_submission import JobStatus

    from clusters.rayjobs import submission_client

    client = submission_client(cluster.head.dashboard_url, str(cluster.head.token_file))
    deadline = time.monotonic() + timeout_s
    seen: list[Any] = []
    while time.monotonic() < deadline:
        seen = [j for j in client.list_jobs() if (j.metadata or {}).get("spotplane_job_id") == job_id
                and j.status == JobStatus.RUNNING and j.driver_node_id]
        if seen:
            return cluster.head.node_ip_of(str(seen[-1].driver_node_id))
        time.sleep(1)
    raise AssertionError(f"no running Ray job of {job_id}: {client.list_jobs()}")


def test_the_executor_runs_the_job_on_its_booted_node_and_again_after_its_preemption(
        cluster: Cluster, proxy: tuple[Any, str], aws_env: None, tmp_path: Path) -> None:
    """The real Ray job executor: the job's Ray job is pinned to spotplane_node:<instance id>,
    so its driver runs in that instance's namespace; preempted, it runs on the next one."""
    from actors.execution import ExecutorConfig, RayJobExecutor

    executor = RayJobExecutor(ExecutorConfig(
        workload_address=cluster.head.dashboard_url, workload_gcs=cluster.head.address,
        workload_token_path=str(cluster.head.token_file), artifact_uri=str(tmp_path / "artifacts"),
        namespace="spotplane-boot", stop_timeout_s=20, gpus="never"))
    try:
        with aws_world(cluster, proxy[1], tmp_path, executor) as world:
            job_id, node, booted = boot_job(world, "python -c 'import time; time.sleep(900)'")
            assert _driver_ip(cluster, job_id) == booted.ip

            raw = aws.moto_backend().get_instance(node.instance_id)
            raw.terminate()
            raw.state_reason.code = "Server.SpotInstanceTermination"
            started: list[Booted] = []
            for _ in range(8):
                started += world.step()
                if started:
                    break
            [again] = started
            booted_ok(again)
            for _ in range(3):
                world.step()
                if world.store.get_job(job_id).state is JobState.RUNNING:
                    break
            assert world.store.get_job(job_id).preemptions == 1
            assert world.node_of(job_id).instance_id == again.instance_id
            assert _driver_ip(cluster, job_id) == again.ip
    finally:
        executor.close()
