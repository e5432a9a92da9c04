"""The region-loss trials of ``benchmarks.multicluster`` on two real local workload Rays.

Two ``actors.localcluster.MultiNodeWorkload`` clusters (a head and one GPU raylet each) are
registered as ``aws-east`` (us-east-1) and ``aws-west`` (us-west-2) under one control plane:
the Serve API, the controller over a simulated fleet whose spot is always up (where capacity
is, the trial says: :class:`clusters.clusterfleet.ClusterGatedFleet`), the
:class:`actors.execution.multicluster.MultiClusterExecutor`, checkpoints in moto's S3. Each
trial runs a checkpointing job in region A, removes A's node and closes A's zones, and times
the job to RUNNING in region B; trials alternate A and B.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from actors.execution import ExecutorConfig
from actors.execution.multicluster import MultiClusterExecutor, closed_zones
from actors.localcluster import MultiNodeWorkload
from actors.raylocal import free_port, init_local_ray
from clusters.clusterfleet import ClusterGatedFleet
from clusters.data.catalog import DataCatalog
from clusters.sim import SimulatedFleet
from clusters.sim.fleet import AWS_COLLECTION, AWS_P3_ON_DEMAND, AWS_P3_SPOT, SimZone
from controlplane.core.clock import SimClock
from controlplane.core.config import data_dir
from controlplane.core.errors import SpotplaneError
from controlplane.core.models import JobState
from controlplane.core.workloadclusters import WorkloadClusterSpec
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.reconcile.pacer import PacedLoop
from controlplane.store import Store
from policies.preemption import ExponentialModel
from serve.app import start_api, stop_api

SPEED = 900.0  # simulated seconds per wall second
STEPS, SEED, STEP_S = 160, 11, 0.05
REGIONS = {"aws-east": ("us-east-1", ("us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f")),
           "aws-west": ("us-west-2", ("us-west-2a", "us-west-2b", "us-west-2c"))}
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}
STATE_BYTES = 1 << 20  # the job's state: 1 MiB of float64, so a move carries a real checkpoint

TRAIN = '''
import argparse, hashlib, os, time
import numpy as np
from controlplane import sdk

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int)
p.add_argument("--seed", type=int)
p.add_argument("--hold-at", type=int)
p.add_argument("--gate")
a = p.parse_args()
with sdk.session() as s:
    t0 = time.monotonic()
    state = s.restore()
    print("restored in", round(time.monotonic() - t0, 3), flush=True)
    if state is None:
        state = {"step": 0, "w": np.random.default_rng(a.seed).normal(0, 1, STATE_LEN)}
    print("starting at step", state["step"], flush=True)
    while state["step"] < a.steps:
        if state["step"] == a.hold_at and not os.path.exists(a.gate):
            print("holding at step", state["step"], flush=True)
            while not os.path.exists(a.gate):
                time.sleep(0.1)
        rng = np.random.default_rng([a.seed, state["step"]])
        state["w"] = np.tanh(state["w"] + rng.normal(0, 0.1, state["w"].shape))
        state["step"] += 1
        time.sleep(STEP_S)
        s.progress(state["step"] / a.steps)
        if s.should_checkpoint():
            s.save(state)
    s.save(state, meta={"final": True})
print("result", hashlib.sha256(state["w"].tobytes()).hexdigest(), flush=True)
'''.replace("STATE_LEN", str(STATE_BYTES // 8)).replace("STEP_S", str(STEP_S))


def reference(steps: int, seed: int) -> str:
    """The digest an undisturbed run ends with."""
    w = np.random.default_rng(seed).normal(0, 1, STATE_BYTES // 8)
    for step in range(steps):
        w = np.tanh(w + np.random.default_rng([seed, step]).normal(0, 0.1, w.shape))
    return hashlib.sha256(w.tobytes()).hexdigest()


@dataclass
class Plane:
    url: str
    token: str
    store: Store
    fleet: SimulatedFleet
    executor: MultiClusterExecutor
    regions: dict[str, MultiNodeWorkload]
    outage: set[str]
    workers: dict[str, int]  # the index of each cluster's live worker
    paused: threading.Event = field(default_factory=threading.Event)


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SpotplaneError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def always_up_fleet(clock: SimClock, state_path: Path) -> SimulatedFleet:
    zones = {z for _, zs in REGIONS.values() for z in zs}
    sims = [SimZone(dataclasses.replace(t, available=np.ones_like(t.available)), AWS_P3_SPOT,
                    AWS_P3_ON_DEMAND, 4)
            for t in DataCatalog(data_dir()).spot_traces(AWS_COLLECTION) if t.zone in zones]
    return SimulatedFleet(sims, clock, seed=3, state_path=state_path,
                          lifetime_model=ExponentialModel(rate=0.001, limit=10_000.0))


@contextlib.contextmanager
def plane(tmp: Path) -> Iterator[Plane]:
    """The control plane over two regional workload clusters, the controller ticking."""
    import boto3
    import ray
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in AWS_ENV}
    os.environ.update(AWS_ENV)
    init_local_ray(control_plane=True, num_cpus=2, namespace="bench-multi", log_to_driver=False,
                   configure_logging=False)
    port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    s3 = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=s3).create_bucket(Bucket="spotplane-ckpt")
    regions = {name: MultiNodeWorkload(workers=1, gpus_per_node=1) for name in REGIONS}
    db, packages, logs = tmp / "spotplane.db", tmp / "packages", tmp / "logs"
    store = Store(db)
    for name, (region, zones) in REGIONS.items():
        store.add_cluster(WorkloadClusterSpec(
            name=name, cloud="aws", region=region, gcs_address=regions[name].gcs,
            dashboard_url=regions[name].dashboard, zones=list(zones)))
    _, token = store.create_tenant("bench", max_gpus=8)
    url = start_api(db, "spa_bench-multi-admin", free_port(), package_dir=packages,
                    workload_address=regions["aws-east"].dashboard, log_dir=logs)
    clock = SimClock(start=0.0)
    sim = always_up_fleet(clock, tmp / "simfleet.db")
    outage: set[str] = set()
    registry = closed_zones(store)
    executor = MultiClusterExecutor(ExecutorConfig(
        artifact_uri="s3://spotplane-ckpt/artifacts", s3_endpoint_url=s3, namespace="bench-multi",
        hours_per_second=SPEED / 3600, gpus="always", package_dir=str(packages),
        log_dir=str(logs), stop_timeout_s=60, submit_timeout_s=300, env=AWS_ENV),
        store, clock=clock, check_every_s=2.0)
    executor.start_health_checks()
    ctl = Controller(store, ClusterGatedFleet(sim, lambda: registry() | outage), clock,
                     ControllerSettings(pool_nodes={"V100": 8}), executor=executor,
                     epoch=store.take_controller_lease())
    p = Plane(url, token, store, sim, executor, regions, outage, dict.fromkeys(regions, 0))
    loop = PacedLoop(ctl.tick, clock, SPEED, paused=p.paused,
                     on_error=lambda n, exc: print(f"tick failed: {exc}", file=sys.stderr)).start()
    try:
        yield p
    finally:
        loop.stop()
        executor.close()
        stop_api()
        store.close()
        for workload in regions.values():
            workload.stop()
        moto.stop()
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def lose(p: Plane, name: str) -> None:
    """Region ``name`` lost: its node removed, its zones closed, its nodes reported preempted."""
    zones = REGIONS[name][1]
    p.paused.set()
    try:
        p.outage.clear()
        p.outage.update(zones)
        p.regions[name].remove(p.workers[name])
        for node in p.store.list_nodes():
            if node.zone in zones and not node.gone and node.instance_id is not None:
                p.fleet.preempt_now(node.instance_id, "region lost")
    finally:
        p.paused.clear()


def trial(p: Plane, folder: Path, src: str, dst: str, k: int) -> dict[str, Any]:
    """One job run in ``src`` until ``src`` is lost, then to its end in ``dst``."""
    from ray.job_submission import JobSubmissionClient

    p.outage.clear()
    p.outage.update(REGIONS[dst][1])  # the job starts in src
    gate = folder / f"gate-{k}"
    client = JobSubmissionClient(p.url, headers={"Authorization": f"Bearer {p.token}"})
    sid = client.submit_job(
        entrypoint=f"python train.py --steps {STEPS} --seed {SEED} --hold-at {STEPS // 2} "
                   f"--gate {gate}", entrypoint_num_gpus=1, runtime_env={"working_dir": str(folder)},
        metadata={"spotplane.kind": "spot", "spotplane.accelerator": "V100",
                  "spotplane.compute_hours": str(STEPS * STEP_S * SPEED / 3600),
                  "spotplane.checkpoint_hours": "0.02"})
    wait_for(lambda: p.store.get_job(sid).state is JobState.RUNNING
             and p.store.get_job(sid).cluster == src and p.store.get_job(sid).checkpoints >= 1
             and "holding at step" in p.executor.logs(sid), 600, f"the job running in {src}")
    t0 = time.monotonic()
    lose(p, src)
    gate.touch()
    wait_for(lambda: p.store.get_job(sid).cluster == dst
             and p.store.get_job(sid).state is JobState.RUNNING, 600, f"the job running in {dst}")
    running_s = time.monotonic() - t0
    wait_for(lambda: p.store.get_job(sid).terminal, 600, "the job to finish")
    job = p.store.get_job(sid)
    logs = client.get_job_logs(sid)
    restores = [float(x) for x in re.findall(r"restored in ([0-9.]+)", logs)]
    starts = [int(x) for x in re.findall(r"starting at step (\d+)", logs)]
    identical = (job.state is JobState.SUCCEEDED and f"result {reference(STEPS, SEED)}" in logs
                 and bool(starts) and starts[-1] > 0)
    p.regions[src].add()  # the region comes back for the next trial
    p.workers[src] += 1
    out = {"from": src, "to": dst, "loss_to_running_s": round(running_s, 2),
           "restore_s": restores[-1] if restores else None, "bit_identical": identical,
           "egress_bytes": job.egress_bytes, "egress_usd": job.egress_cost,
           "attempts": p.executor.attempts_by_cluster(sid)}
    print(json.dumps(out), file=sys.stderr)
    return out


def local_trials(trials: int) -> dict[str, Any]:
    """``trials`` region losses, alternating the two clusters; the benchmark's local keys."""
    tmp = Path(tempfile.mkdtemp(prefix="spotplane-bench-multi-"))
    folder = tmp / "project"
    folder.mkdir()
    (folder / "train.py").write_text(TRAIN)
    names = list(REGIONS)
    rows = []
    with plane(tmp) as p:
        for k in range(trials):
            src, dst = names[k % 2], names[(k + 1) % 2]
            rows.append(trial(p, folder, src, dst, k))
    running = [r["loss_to_running_s"] for r in rows]
    restores = [r["restore_s"] for r in rows if r["restore_s"] is not None]
    return {"clusters": len(REGIONS), "trials": len(rows),
            "region_loss_to_running_p50_s": round(statistics.median(running), 2) if running else None,
            "region_loss_to_running_s": running,
            "restore_s": round(statistics.median(restores), 3) if restores else None,
            "bit_identical": all(r["bit_identical"] for r in rows),
            "egress_usd": round(sum(r["egress_usd"] for r in rows) / max(len(rows), 1), 8),
            "egress_bytes": int(statistics.median([r["egress_bytes"] for r in rows])) if rows else 0,
            "trials_detail": rows}
