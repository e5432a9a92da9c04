"""A Ray user's own code on spotplane: upload once, submit to RUNNING, and a lost node to RUNNING again.

``python -m benchmarks.jobs [--json] [--trials 5] [--upload-mb 50]`` starts the control plane's
local Ray with the Serve API, a real multi-node workload Ray (``actors.localcluster``: a head and
worker raylets with one GPU each), and the controller with the Ray executor over the simulated
fleet, all on this machine. Then, through Ray's own ``JobSubmissionClient`` and spotplane's CLI
packaging:

- **upload**: a working directory of ``--upload-mb`` MB (random, incompressible) is uploaded
  once; the same tree again sends 0 bytes (target).
- **submit to RUNNING**: on an idle cluster with the package already uploaded, the wall time
  from ``submit_job`` until Ray's client sees RUNNING; p50 over ``--trials`` (target < 5 s).
- **node lost to RUNNING**: a running job's raylet is removed (``cluster.remove_node``); the
  controller learns it once the workload cluster has dropped the node (Ray's health check)
  and the fleet reports it preempted. Measured from the removal: the cluster dropping it, Ray's
  client seeing RUNNING again, and the job's new attempt restored from its checkpoint; p50 over
  ``--trials`` (target: RUNNING again < 30 s, plus the restore).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
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

from actors.execution import ExecutorConfig, RayJobExecutor
from actors.localcluster import MultiNodeWorkload
from actors.raylocal import init_local_ray
from benchmarks import entry
from benchmarks.api import free_port
from clusters.sim import SimulatedFleet
from controlplane.cli.packaging import upload_working_dir
from controlplane.client import SpotplaneClient
from controlplane.core.clock import SimClock
from controlplane.core.errors import SpotplaneError
from controlplane.core.models import JobState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.reconcile.pacer import PacedLoop
from controlplane.store import Store
from policies.preemption import ExponentialModel
from serve.app import start_api, stop_api
from serve.auth import new_admin_token

SPEED = 900.0  # simulated seconds per wall second
TARGET_SUBMIT_S = 5.0
TARGET_RESTART_S = 30.0

HOLD = "import sys, time\nprint('holding', flush=True)\ntime.sleep(float(sys.argv[1]))\n"
TRAIN = '''
import time
from controlplane import sdk
with sdk.session() as s:
    state = s.restore() or {"step": 0}
    print("starting at step", state["step"], flush=True)
    while state["step"] < 100000:
        state["step"] += 1
        time.sleep(0.05)
        s.progress(state["step"] / 100000)
        if s.should_checkpoint():
            s.save(state)
'''


@dataclass
class Bench:
    url: str
    token: str
    store: Store
    fleet: SimulatedFleet
    executor: RayJobExecutor
    workload: MultiNodeWorkload
    paused: threading.Event = field(default_factory=threading.Event)


def wait_for(cond: Callable[[], bool], timeout: float, what: str,
             why: Callable[[], str] = lambda: "") -> float:
    """Seconds until ``cond()`` holds (polled every 50 ms); a SpotplaneError after ``timeout``
    (with ``why()``: what the job's attempts say)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.05)
    raise SpotplaneError(f"timed out after {timeout:g} s waiting for {what}\n{why()}")


def attempts(b: Bench, sid: str) -> Callable[[], str]:
    """The job's state and its attempts (Ray status, node, slot) and the end of their logs."""
    def describe() -> str:
        reps = b.executor.replicas.get(sid, [])
        slots = b.executor.pinning.slots.bound if b.executor.pinning.slots is not None else {}
        lines = [f"job {b.store.get_job(sid).state}; cluster {sorted(k for k in b.executor.actors.resources() if 'slot' in k)}"]
        lines += [f"  {r.submission_id} {r.state} node {r.node_id} {slots.get(r.node_id)} "
                  f"{r.last_status}" for r in reps]
        return "\n".join(lines) + "\n" + b.executor.logs(sid)[-3000:]
    return describe


@contextlib.contextmanager
def world(tmp: Path, workers: int) -> Iterator[Bench]:
    """Control-plane Ray + Serve API, the multi-node workload Ray, the controller ticking."""
    import ray

    init_local_ray(control_plane=True, num_cpus=2, namespace="bench-jobs", log_to_driver=False,
                   configure_logging=False)
    workload = MultiNodeWorkload(workers=workers, gpus_per_node=1)
    db, packages, logs = tmp / "spotplane.db", tmp / "packages", tmp / "logs"
    store = Store(db)
    tenant, token = store.create_tenant("bench", max_gpus=8)
    admin = new_admin_token()
    url = start_api(db, admin, free_port(), package_dir=packages,
                    workload_address=workload.dashboard, log_dir=logs)
    clock = SimClock(start=0.0)
    fleet = SimulatedFleet.from_options(
        clock=clock, seed=3, state_path=tmp / "simfleet.db", gcp=False,
        lifetime_model=ExponentialModel(rate=0.01, limit=24.0))
    executor = RayJobExecutor(ExecutorConfig(
        workload_address=workload.dashboard, artifact_uri=str(tmp / "artifacts"),
        namespace="bench", hours_per_second=SPEED / 3600, gpus="always",
        workload_gcs=workload.gcs, package_dir=str(packages), log_dir=str(logs),
        stop_timeout_s=60, submit_timeout_s=300), clock=clock)
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"V100": workers + 8}),
                     executor=executor, epoch=store.take_controller_lease())
    bench = Bench(url, token, store, fleet, executor, workload)
    loop = PacedLoop(ctl.tick, clock, SPEED, period_s=0.1, paused=bench.paused).start()
    try:
        yield bench
    finally:
        loop.stop()
        executor.close()
        stop_api()
        store.close()
        workload.stop()
        ray.shutdown()


def measure_upload(b: Bench, tmp: Path, megabytes: int) -> dict[str, Any]:
    """The same ``megabytes`` tree uploaded twice: bytes sent and seconds of each."""
    tree = tmp / "big-project"
    (tree / "weights").mkdir(parents=True)
    (tree / "hold.py").write_text(HOLD)
    for i in range(megabytes):
        (tree / "weights" / f"w{i}.bin").write_bytes(os.urandom(1 << 20))
    out: dict[str, Any] = {"upload_mb": megabytes}
    with SpotplaneClient(b.url, b.token, timeout=600) as client:
        for label in ("first", "second"):
            t0 = time.monotonic()
            up = upload_working_dir(client, tree)
            out[f"upload_{label}_bytes"] = up.sent_bytes
            out[f"upload_{label}_s"] = round(time.monotonic() - t0, 2)
            print(f"upload {label}: {up.sent_bytes} bytes in {out[f'upload_{label}_s']} s",
                  file=sys.stderr)
    out["package_uri"] = up.uri
    return out


def ray_client(b: Bench) -> Any:
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(b.url, headers={"Authorization": f"Bearer {b.token}"})


META = {"spotplane.kind": "hp", "spotplane.accelerator": "V100", "spotplane.compute_hours": "2"}


def status_is(client: Any, sid: str, want: str) -> Callable[[], bool]:
    return lambda: str(client.get_job_status(sid).value) == want


def finished(b: Bench, sid: str) -> Callable[[], bool]:
    return lambda: b.store.get_job(sid).terminal


def dropped(b: Bench, slot: str) -> Callable[[], bool]:
    return lambda: slot not in b.executor.actors.resources()


def restored(b: Bench, sid: str, before: int) -> bool:
    """Whether an attempt after the first ``before`` started from a checkpoint (``starting at
    step K > 0`` in its own logs: a lost node's copy may miss its last seconds)."""
    reps = b.executor.replicas.get(sid, [])[before:]
    return any(int(k) > 0 for r in reps
               for k in re.findall(r"starting at step (\d+)", b.executor.log_copies.text(r)))


def measure_submit(b: Bench, package_uri: str, trials: int) -> list[float]:
    """Submit-to-RUNNING (as Ray's client sees it) of short jobs on an idle cluster."""
    client = ray_client(b)
    out = []
    for _ in range(trials):
        t0 = time.monotonic()
        sid = client.submit_job(entrypoint="python hold.py 1", entrypoint_num_gpus=1,
                                runtime_env={"working_dir": package_uri}, metadata=META)
        wait_for(status_is(client, sid, "RUNNING"), 300, "RUNNING")
        out.append(time.monotonic() - t0)
        print(f"submit -> RUNNING {out[-1]:.2f} s", file=sys.stderr)
        wait_for(finished(b, sid), 300, "the job to finish")
    return out


def measure_node_loss(b: Bench, tmp: Path, trials: int) -> dict[str, list[float]]:
    """One long job; ``trials`` times: remove its raylet, time detection, RUNNING, restored."""
    proj = tmp / "train-project"
    proj.mkdir()
    (proj / "train.py").write_text(TRAIN)
    client = ray_client(b)
    sid = client.submit_job(entrypoint="python train.py", entrypoint_num_gpus=1,
                            runtime_env={"working_dir": str(proj)},
                            metadata={**META, "spotplane.checkpoint_hours": "0.02",
                                      "spotplane.compute_hours": str(100000 * 0.05 * SPEED / 3600)})
    res: dict[str, list[float]] = {"detect": [], "running": [], "restored": []}

    for _ in range(trials):
        wait_for(lambda: b.store.get_job(sid).state is JobState.RUNNING
                 and b.store.get_job(sid).checkpoints > 0
                 and "starting at step" in b.executor.log_copies.text(b.executor.replicas[sid][-1]),
                 300, "a running, checkpointed attempt", attempts(b, sid))
        before = len(b.executor.replicas[sid])
        rep = b.executor.replicas[sid][-1]
        assert b.executor.pinning.slots is not None
        slot = b.executor.pinning.slots.bound[rep.node_id]
        node = next(n for n in b.store.list_nodes() if n.id == rep.node_id)
        b.paused.set()
        t0 = time.monotonic()
        b.workload.remove(int(slot.rsplit(":", 1)[1]))
        wait_for(dropped(b, slot), 180, "the node's loss")
        res["detect"].append(time.monotonic() - t0)
        assert node.instance_id is not None
        b.fleet.preempt_now(node.instance_id, "Ray node removed")
        b.paused.clear()
        wait_for(lambda: b.store.get_job(sid).state is not JobState.RUNNING, 60, "the preemption")
        wait_for(lambda: str(client.get_job_status(sid).value) == "RUNNING", 300, "RUNNING again", attempts(b, sid))
        res["running"].append(time.monotonic() - t0)
        wait_for(functools.partial(restored, b, sid, before), 300, "the restore", attempts(b, sid))
        res["restored"].append(time.monotonic() - t0)
        print(f"trial {len(res['running'])}: detected {res['detect'][-1]:.1f} s, RUNNING "
              f"{res['running'][-1]:.1f} s, restored {res['restored'][-1]:.1f} s", file=sys.stderr)
        b.workload.add()  # keep the cluster's size for the next trial
    client.stop_job(sid)
    wait_for(lambda: b.store.get_job(sid).terminal, 120, "the stop")
    return res


def p50(xs: list[float]) -> float:
    return round(statistics.median(xs), 2) if xs else float("nan")


def run(trials: int = 5, upload_mb: int = 50, workers: int = 3) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="spotplane-bench-jobs-"))
    with world(tmp, workers) as b:
        result = measure_upload(b, tmp, upload_mb)
        submit = measure_submit(b, result.pop("package_uri"), trials)
        loss = measure_node_loss(b, tmp, trials)
    result.update({
        "trials": trials,
        "submit_to_running_p50_s": p50(submit),
        "submit_to_running_s": [round(x, 2) for x in submit],
        "node_lost_detected_p50_s": p50(loss["detect"]),
        "node_lost_to_running_p50_s": p50(loss["running"]),
        "node_lost_to_restored_p50_s": p50(loss["restored"]),
        "node_lost_to_running_s": [round(x, 2) for x in loss["running"]],
        "restore_after_running_p50_s": p50([r - g for r, g in zip(loss["restored"], loss["running"], strict=True)]),
    })
    return result


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.jobs", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--trials", type=int, default=5, help="submissions and node losses")
    ap.add_argument("--upload-mb", type=int, default=50, help="size of the uploaded working_dir")
    args = ap.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the one JSON object
        r = run(args.trials, args.upload_mb)
    if args.json:
        print(json.dumps(r))
        return 0
    ok = {
        "upload": r["upload_first_bytes"] > 0 and r["upload_second_bytes"] == 0,
        "submit": r["submit_to_running_p50_s"] < TARGET_SUBMIT_S,
        "loss": r["node_lost_to_running_p50_s"] < TARGET_RESTART_S,
    }
    rows = [
        ("upload 1st (bytes / s)", f"{r['upload_first_bytes']} / {r['upload_first_s']}", "> 0"),
        ("upload 2nd (bytes / s)", f"{r['upload_second_bytes']} / {r['upload_second_s']}",
         f"0 {'ok' if ok['upload'] else 'MISSED'}"),
        ("submit -> RUNNING p50 s", r["submit_to_running_p50_s"],
         f"< {TARGET_SUBMIT_S:g} {'ok' if ok['submit'] else 'MISSED'}"),
        ("node lost -> detected p50 s", r["node_lost_detected_p50_s"], "(Ray's health check)"),
        ("node lost -> RUNNING p50 s", r["node_lost_to_running_p50_s"],
         f"< {TARGET_RESTART_S:g} {'ok' if ok['loss'] else 'MISSED'}"),
        ("node lost -> restored p50 s", r["node_lost_to_restored_p50_s"], "(RUNNING + restore)"),
    ]
    print(f"{'metric':<30} {'value':>16}  target")
    for name, value, target in rows:
        print(f"{name:<30} {value!s:>16}  {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
