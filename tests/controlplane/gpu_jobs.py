"""Run two one-GPU jobs through RayJobExecutor on a private local Ray and print what each saw.

A child process of ``test_executor_gpu.py`` (one Ray per process): on a machine without GPUs the
Ray declares ``--fake-gpus`` GPUs, which Ray hands out exactly as real ones (it sets
``CUDA_VISIBLE_DEVICES`` for the job); on a GPU machine Ray finds the real ones. Prints one JSON
object: the Ray's GPU count and, per job, its Ray status and the devices it saw.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import ray

from actors.executor import RayJobExecutor
from actors.jobagent import job_agent_ready
from actors.raylocal import init_local_ray
from controlplane.core.models import Job, JobKind, JobSpec, Market, Node

PROBE = """
import json, os, pathlib, time
# both jobs hold their GPU at once: each waits (bounded) until the other has started too, so a
# loaded machine that runs them one after the other cannot hand both the same device
here = pathlib.Path(__file__).parent / "started"
here.mkdir(exist_ok=True)
(here / str(os.getpid())).touch()
until = time.monotonic() + 180
while len(list(here.iterdir())) < AT_ONCE and time.monotonic() < until:
    time.sleep(0.2)
seen = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "overlapped": len(list(here.iterdir())) >= 2}
try:
    import torch
    seen["torch_devices"] = torch.cuda.device_count()
    seen["torch_names"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
except ImportError:
    pass
print("GPU-PROBE " + json.dumps(seen), flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fake-gpus", type=int, default=0, help="declare this many GPUs (0: detect)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timeout", type=float, default=300.0)
    a = ap.parse_args()
    extra = {"num_gpus": a.fake_gpus} if a.fake_gpus else {}
    ctx = init_local_ray(num_cpus=2, include_dashboard=True, namespace="gpu-probe",
                         log_to_driver=False, configure_logging=False, **extra)
    if not job_agent_ready(ctx.dashboard_url, timeout_s=120):
        sys.exit("the Ray job agent did not take a job in 120 s")
    probe = a.out.parent / "probe.py"
    at_once = int(min(2.0, ray.cluster_resources().get("GPU", 0.0)))  # a 1-GPU machine runs them in turn
    probe.write_text(f"AT_ONCE = {at_once}\n" + PROBE)
    ex = RayJobExecutor(ctx.dashboard_url, str(a.out.parent / "artifacts"),
                        namespace="gpu-probe", pin="never", stop_timeout_s=30)
    jobs = []
    for i in range(2):
        spec = JobSpec(name=f"gpu-{i}", kind=JobKind.SPOT, compute_hours=0.01, gpus_per_worker=1,
                       entrypoint=f"python {probe}")
        job = Job(id=f"gpu-{i}", tenant_id="t", name=spec.name, kind=spec.kind, spec=spec,
                  submitted_at=0.0)
        node = Node(id=f"n{i}", provider="local", cloud="local", zone="local",
                    instance_type="gpu", accelerator="H100", accelerator_count=1,
                    market=Market.SPOT, price_per_hour=1.0, on_demand_price_per_hour=3.0,
                    intent_id=f"i{i}", requested_at=0.0)
        ex.start(job, [node])
        jobs.append(job)
    deadline = time.monotonic() + a.timeout
    result: dict[str, object] = {"ray_gpus": ray.cluster_resources().get("GPU", 0.0), "jobs": {}}
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
        result["jobs"][j.id] = {"state": rep.state.value, "seen": seen[-1] if seen else None,  # type: ignore[index]
                                "log_tail": logs[-800:]}
    ex.close()
    a.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    ray.shutdown()


if __name__ == "__main__":
    main()
