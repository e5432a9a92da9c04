"""One controller tick with 1,000 nodes and 500 running jobs, and the memory of a policy actor.

``python -m benchmarks.controller [--json] [--no-ray]``

The fleet is the simulated one (AWS V100 zones replayed from the real traces, so spot nodes
are preempted and relaunched while we measure); 500 jobs of 2 workers each (200 HP on
on-demand, 200 spot, 100 deadline jobs whose Uniform Progress policies are asked every tick)
fill 1,000 nodes. After warm-up (every job placed and running) it times ``--ticks`` ticks of
60 s. The policy actor's RSS is read from /proc of a real DeadlinePolicyActor on a local Ray,
hosting one job and then 100 jobs (the sharded mode).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from actors.deadline import RemoteDeadlinePolicyActor
from actors.raylocal import init_local_ray
from benchmarks import entry
from benchmarks.stores import store_at
from clusters.sim import SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.core.models import JobKind, JobSpec, JobState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.reconcile.policyhost import PolicyRequest
from controlplane.store import Store
from policies.deadline import DeadlineTask, Kind, Observation

TARGET_MS = 200.0
TARGET_EXPONENT = 1.2  # tick time against nodes + jobs
TARGET_GFS_MS = 100.0  # tick p50 at the GFS production cluster's 4,278 nodes
GROWTH_SIZES = "1000x500,4278x2000,10000x5000,20000x10000"  # nodes x jobs


def _jobs(n_hp: int, n_spot: int, n_deadline: int, wide: int = 0) -> list[JobSpec]:
    """Two-worker jobs; the first ``wide`` HP jobs have three (a size of nodes that is not twice
    the jobs, such as GFS's 4,278 nodes for 2,000 jobs)."""
    specs = [JobSpec(name=f"hp{i}", kind=JobKind.HP, compute_hours=500,
                     workers=3 if i < wide else 2, accelerator="V100") for i in range(n_hp)]
    specs += [JobSpec(name=f"sp{i}", kind=JobKind.SPOT, compute_hours=500, workers=2,
                      accelerator="V100") for i in range(n_spot)]
    specs += [JobSpec(name=f"dl{i}", kind=JobKind.DEADLINE, compute_hours=200, deadline_hours=600,
                      workers=2, accelerator="V100") for i in range(n_deadline)]
    return specs


def measure_ticks(ticks: int, seed: int = 0, scale: float = 1.0, *, jobs: int = 500,
                  nodes: int | None = None, db: str | None = None) -> dict[str, Any]:
    """Tick times with ``jobs * scale`` jobs (2/5 HP, 2/5 spot, 1/5 deadline) running on
    ``nodes`` (default twice the jobs: two workers each); ``db`` a store target (None: a fresh
    SQLite file)."""
    tmp = Path(tempfile.mkdtemp(prefix="spotplane-bench-"))
    clock = SimClock(start=0.0)
    fleet = SimulatedFleet.from_options(clock=clock, seed=seed, gcp=False,
                                        spot_capacity=max(100_000, 10 * jobs))
    store = Store(db or tmp / "spotplane.db")
    tenant, _ = store.create_tenant("bench", max_gpus=max(100_000, 10 * jobs))
    n = max(3, round(jobs * scale))
    ctl = Controller(store, fleet, clock, ControllerSettings(
        pool_nodes={"V100": round(2.4 * n)}, max_placements_per_tick=max(600, n)),
        epoch=store.take_controller_lease())
    n_hp, n_spot, n_dl = (max(1, round(n * k)) for k in (0.4, 0.4, 0.2))
    wide = min(n_hp, max(0, (nodes or 2 * n) - 2 * (n_hp + n_spot + n_dl)))
    store.submit_jobs(tenant.id, _jobs(n_hp, n_spot, n_dl, wide), now=0.0)
    total = n_hp + n_spot + n_dl
    for _ in range(60):  # warm-up: place everything, let it come up
        clock.advance(60.0)
        ctl.tick()
        running = sum(1 for j in ctl.jobs.values() if j.state is JobState.RUNNING)
        if running >= 0.96 * total and len(ctl.nodes) >= 0.96 * (2 * total + wide):
            break
    times, cpu, up, live = [], [], [], []
    for _ in range(ticks):
        clock.advance(60.0)
        c0 = time.process_time()
        r = ctl.tick()
        cpu.append((time.process_time() - c0) * 1000)
        times.append(r.ms)
        up.append(sum(1 for node in ctl.nodes.values() if not node.gone))
        live.append(sum(1 for j in ctl.jobs.values()
                        if j.state in (JobState.RUNNING, JobState.CHECKPOINTING)))
    store.close()
    return {"nodes": int(np.median(up)), "jobs": int(np.median(live)),
            "tick_ms_p50": float(np.percentile(times, 50)),
            "tick_ms_p99": float(np.percentile(times, 99)),
            "tick_cpu_ms_p50": float(np.percentile(cpu, 50))}


def growth(sizes: list[tuple[int, int]], ticks: int, db: str) -> dict[str, Any]:
    """Tick time at each size (nodes, jobs) and the growth exponent: the slope of
    log(tick p50) against log(nodes + jobs), fitted by least squares."""
    rows = []
    for nodes, jobs in sizes:
        with store_at(db) as target:
            out = measure_ticks(ticks, jobs=jobs, nodes=nodes,
                                db=target if db != "sqlite" else None)
        out["cpu_ms_p50"] = out.pop("tick_cpu_ms_p50")
        rows.append(out)
        print(f"  {jobs} jobs: {out}", file=sys.stderr, flush=True)
    x = np.log([r["nodes"] + r["jobs"] for r in rows])

    def slope(key: str) -> float | None:  # one size has no slope
        return float(np.polyfit(x, np.log([r[key] for r in rows]), 1)[0]) if len(rows) > 1 else None

    exponent, cpu_exponent = slope("tick_ms_p50"), slope("cpu_ms_p50")
    return {"db": db, "sizes": rows, "exponent": exponent, "cpu_exponent": cpu_exponent,
            "target_exponent": TARGET_EXPONENT, "target_tick_ms_at_4278_nodes": TARGET_GFS_MS}


def measure_policy_actor() -> tuple[float, float]:
    """RSS (MiB) of one DeadlinePolicyActor hosting 1 job, then 100 jobs."""
    import ray


    tmp = Path(tempfile.mkdtemp(prefix="spotplane-bench-"))
    Store(tmp / "spotplane.db").close()
    started = not ray.is_initialized()
    if started:
        init_local_ray(control_plane=True, num_cpus=1, include_dashboard=False,
                       log_to_driver=False, namespace="spotplane-bench", configure_logging=False)
    try:
        actor: Any = RemoteDeadlinePolicyActor.remote(str(tmp / "spotplane.db"))
        task = DeadlineTask(10.0, 14.0, 0.1, 3.06, 0.92, 1)
        obs = Observation(1.0, 0.5, Kind.SPOT, "us-west-2a", True)

        def ask(n: int) -> float:
            reqs = [PolicyRequest(f"job-{i}", "uniform_progress", task, obs, 1 / 60)
                    for i in range(n)]
            ray.get(actor.decide.remote(reqs))
            rss: float = ray.get(actor.rss_mb.remote())
            return rss

        one = ask(1)
        hundred = ask(100)
        ray.kill(actor)
        return one, hundred
    finally:
        if started:
            ray.shutdown()


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.controller", description=__doc__)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--ticks", type=int, default=40)
    ap.add_argument("--no-ray", action="store_true", help="skip the policy actor's RSS")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the 500 jobs (smoke)")
    ap.add_argument("--growth", nargs="?", const=GROWTH_SIZES, metavar="NODESxJOBS,...",
                    help="tick time against size (nodes x jobs) and its fitted "
                         f"growth exponent (default sizes {GROWTH_SIZES})")
    ap.add_argument("--db", default="sqlite", metavar="sqlite|pgserver|URL",
                    help="the store of --growth: a fresh SQLite file or pgserver per size")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.growth:
        sizes = [parse_size(v) for v in args.growth.split(",")]
        return print_growth(growth(sizes, args.ticks, args.db), args.json)
    out = measure_ticks(args.ticks, scale=args.scale)
    cpu_ms = out.pop("tick_cpu_ms_p50")
    rss_one = rss_hundred = None
    if not args.no_ray:
        rss_one, rss_hundred = measure_policy_actor()
    out["policy_actor_rss_mb"] = rss_one
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{'nodes':<28}{out['nodes']:>10}")
    print(f"{'running jobs':<28}{out['jobs']:>10}")
    print(f"{'tick p50 (ms)':<28}{out['tick_ms_p50']:>10.1f}   target < {TARGET_MS:.0f}")
    print(f"{'tick p99 (ms)':<28}{out['tick_ms_p99']:>10.1f}")
    print(f"{'tick CPU p50 (ms)':<28}{cpu_ms:>10.1f}   (this process's CPU time alone)")
    if rss_one is not None and rss_hundred is not None:
        print(f"{'policy actor RSS, 1 job':<28}{rss_one:>10.1f} MiB")
        print(f"{'policy actor RSS, 100 jobs':<28}{rss_hundred:>10.1f} MiB  "
              f"(100 one-job actors ~ {100 * rss_one / 1024:.1f} GiB)")
    print(f"({time.perf_counter() - t0:.0f} s; timings inflated by a shared 2-core machine)",
          file=sys.stderr)
    return 0


def parse_size(text: str) -> tuple[int, int]:
    """``NODESxJOBS`` (nodes between two and three times the jobs)."""
    nodes, _, jobs = text.partition("x")
    try:
        n, j = int(nodes), int(jobs)
    except ValueError:
        raise SystemExit(f"--growth: {text!r} is not NODESxJOBS (e.g. 4278x2000)") from None
    if not 2 * j <= n <= 3 * j:
        raise SystemExit(f"--growth: {text!r} needs 2 x jobs <= nodes <= 3 x jobs "
                         "(jobs of two or three workers)")
    return n, j


def print_growth(out: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print(json.dumps(out))
        return 0
    print(f"{'nodes':>8}{'jobs':>8}{'tick p50 ms':>14}{'tick p99 ms':>14}{'CPU p50 ms':>12}   ({out['db']})")
    for r in out["sizes"]:
        print(f"{r['nodes']:>8}{r['jobs']:>8}{r['tick_ms_p50']:>14.1f}{r['tick_ms_p99']:>14.1f}"
              f"{r['cpu_ms_p50']:>12.1f}")
    if out["exponent"] is not None:
        print(f"growth exponent (tick p50 ~ (nodes+jobs)^k): k = {out['exponent']:.2f} "
              f"(CPU {out['cpu_exponent']:.2f}); target <= {TARGET_EXPONENT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
