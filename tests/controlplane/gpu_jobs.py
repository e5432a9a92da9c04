"""Run a one-GPU job and a two-worker gang through RayJobExecutor on a workload Ray of two nodes
with two GPUs each, and print what each saw.

A child process of ``test_executor_gpu.py``: the workload Ray is
:class:`actors.localcluster.MultiNodeWorkload` (a head and two worker raylets, each declaring 2
GPUs, which Ray hands out exactly as real ones: it sets ``CUDA_VISIBLE_DEVICES`` for what holds
them). Simulated node ``n0`` is pinned to worker 0 and ``n1`` to worker 1 (``spotplane_slot``):

- ``single`` (1 worker, 1 GPU) on ``n0``;
- ``gang`` (2 workers, 1 GPU each) on ``n1`` and ``n0``: its placement group holds one GPU of
  each worker, and its driver runs one task per bundle.

So ``n0``'s two GPUs go one to ``single`` and one to the gang. The jobs wait (bounded) until both
have started, so both hold their GPUs at once. Prints one JSON object: the cluster's GPU count
and, per job, its Ray status, its pin and its driver's Ray node, what its driver saw
(``CUDA_VISIBLE_DEVICES``) and, for the gang, what each of its tasks saw (their Ray node and
``ray.get_gpu_ids()`` too).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from actors.execution import ExecutorConfig, RayJobExecutor
from actors.localcluster import MultiNodeWorkload
from controlplane.core.models import Job, JobKind, JobSpec, Market, Node

WAIT = """
import json, os, pathlib, time
import ray
from controlplane import sdk

# both jobs hold their GPUs at once: each waits (bounded) until the other has started too
here = pathlib.Path(STARTED)
(here / JOB).touch()
until = time.monotonic() + 180
while len(list(here.iterdir())) < 2 and time.monotonic() < until:
    time.sleep(0.2)
# the executor's namespace, where the gang's placement group is named
ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False,
         configure_logging=False, namespace=os.environ.get(sdk.ENV_RAY_NAMESPACE))
seen = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "overlapped": len(list(here.iterdir())) >= 2}
"""

SINGLE = WAIT + """
print("GPU-PROBE " + json.dumps(seen), flush=True)
"""

GANG = WAIT + """
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

@ray.remote(num_cpus=0, num_gpus=1)
def worker(i):
    return {"bundle": i, "node": ray.get_runtime_context().get_node_id(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}

pg = sdk.placement_group()
seen["workers"] = ray.get([worker.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
    pg, placement_group_bundle_index=i)).remote(i) for i in range(2)])
print("GPU-PROBE " + json.dumps(seen), flush=True)
"""


def node(i: int) -> Node:
    return Node(id=f"n{i}", provider="local", cloud="local", zone="local",
                instance_type="gpu2", accelerator="H100", accelerator_count=2,
                market=Market.SPOT, price_per_hour=1.0, on_demand_price_per_hour=3.0,
                intent_id=f"i{i}", requested_at=0.0)


def job(name: str, script: Path, workers: int) -> Job:
    spec = JobSpec(name=name, kind=JobKind.SPOT, compute_hours=0.01, workers=workers,
                   gpus_per_worker=1, entrypoint=f"python {script}")
    return Job(id=name, tenant_id="t", name=name, kind=spec.kind, spec=spec, submitted_at=0.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timeout", type=float, default=300.0)
    a = ap.parse_args()
    work = a.out.parent
    started = work / "started"
    started.mkdir(exist_ok=True)
    scripts = {}
    for name, body in (("single", SINGLE), ("gang", GANG)):
        scripts[name] = work / f"{name}.py"
        scripts[name].write_text(f"STARTED = {str(started)!r}\nJOB = {name!r}\n" + body)
    workload = MultiNodeWorkload(workers=2, gpus_per_node=2)
    try:
        ex = RayJobExecutor(ExecutorConfig(
            workload_address=workload.dashboard, artifact_uri=str(work / "artifacts"),
            namespace="gpu-probe", workload_gcs=workload.gcs, stop_timeout_s=30,
            submit_timeout_s=180))
        single, gang = job("single", scripts["single"], 1), job("gang", scripts["gang"], 2)
        n0, n1 = node(0), node(1)
        ex.start(single, [n0])  # n0 binds the first free slot: worker 0
        ex.start(gang, [n1, n0])  # n1 binds worker 1; the gang's second bundle shares n0
        jobs = [single, gang]
        deadline = time.monotonic() + a.timeout
        result: dict[str, object] = {"gpus": ex.actors.resources().get("GPU", 0.0),
                                     "slots": dict(ex.pinning.slots.bound) if ex.pinning.slots else {},
                                     "jobs": {}}
        while time.monotonic() < deadline:
            states = {j.id: ex.replica_status(ex.replicas[j.id][-1])["state"] for j in jobs}
            if all(s in ("SUCCEEDED", "FAILED") for s in states.values()):
                break
            time.sleep(0.5)
        for j in jobs:
            rep = ex.replicas[j.id][-1]
            logs = ex.logs(j.id)
            seen = [json.loads(line.split(" ", 1)[1]) for line in logs.splitlines()
                    if line.startswith("GPU-PROBE ")]
            # the Ray node its driver ran on (on one machine a driver's own runtime context
            # may name another raylet of the same address)
            driver = ex.client.get_job_info(rep.submission_id).driver_node_id
            result["jobs"][j.id] = {"state": rep.state.value,  # type: ignore[index]
                                    "driver_node": driver, "pin": rep.resource,
                                    "seen": seen[-1] if seen else None, "log_tail": logs[-1500:]}
        ex.close()
    finally:
        workload.stop()
    a.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
