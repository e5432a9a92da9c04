"""VM reuse by age and hot spares in the live controller (seed 001, Sec. 4.2), on the GCP fleet.

    python -m benchmarks.live_reuse [--json] [--jobs 200] [--days 2] [--seeds 0,1,2]

The real :class:`~controlplane.reconcile.controller.Controller`, store and simulated fleet (the
13 GCP H100 zones replayed from their traces; spot VMs die by seed 001's GCE bathtub fit or at
24 h) on a stepped clock (60 s ticks, as ``benchmarks.replay``). A bag of ``--jobs`` spot jobs
(one a3-highgpu-8g each, 2-8 compute hours, uniform) arrives at uniform random times over
``--days``; three arms run the same jobs on the same fleet seed:

* ``by_age``: the defaults: :class:`policies.reuse.ReuseByAge` decides reuse vs a fresh VM
  and idle nodes past infant mortality are kept up to an hour as hot spares;
* ``by_age_priced``: as ``by_age``, but an idle node is no hot spare while a typical job would
  cost more dollars on it than on the fresh VM a launch would get now (``spare_prices``);
* ``always_reuse``: any idle node is reused and kept the same hour (the memoryless policy);
* ``always_reuse_120s``: any idle node is reused, idle nodes go after 120 s (the live plane
  before reuse by age);
* ``always_fresh``: every job gets a fresh VM; idle nodes are terminated at once.

Per arm: preemptions per job, spot VMs lost by cause (the fleet's: a zone outage, a drawn
lifetime, Google's 24 h stop; idle spares' included), wasted GPU hours (billed minus computed), start latency
(submission to first RUNNING: provisioning avoided) and the total cost, idle nodes included
(hot spares' idle cost apart). Targets: ``by_age`` >= 30 % fewer preemptions per job than
``always_reuse``, total cost <= ``always_fresh``, median start latency >= 50 % below it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import entry
from clusters.sim import SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.core.errors import InvalidInput
from controlplane.core.models import Job, JobKind, JobSpec, JobState, NodeState
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from policies.preemption import default_gce_model

TICK_SECONDS = 60.0
START_HOURS = 7.0  # hours of the fleet's traces before the first job (as benchmarks.replay)
MAX_HOURS = 24 * 8.0
FAST_START_SECONDS = 90.0  # a start this soon took a node already up (a fresh VM takes 150 s +- 20 %)
TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
LIVE = frozenset({NodeState.REQUESTED, NodeState.PROVISIONING, NodeState.READY,
                  NodeState.NOTICED, NodeState.TERMINATING})
ARMS: dict[str, dict[str, Any]] = {
    "by_age": {"reuse": "by_age", "hot_spare_seconds": 3600.0},
    "by_age_priced": {"reuse": "by_age", "hot_spare_seconds": 3600.0, "spare_prices": True},
    "always_reuse": {"reuse": "always", "hot_spare_seconds": 3600.0},
    "always_reuse_120s": {"reuse": "always", "hot_spare_seconds": 0.0},
    "always_fresh": {"reuse": "never", "hot_spare_seconds": 0.0, "idle_node_seconds": 0.0},
}


@dataclass(frozen=True)
class Bag:
    """The jobs: (arrival seconds after the start, compute hours), sorted by arrival."""

    arrivals: tuple[float, ...]
    hours: tuple[float, ...]

    @classmethod
    def draw(cls, n: int, days: float, seed: int) -> Bag:
        if n < 1 or days <= 0:
            raise InvalidInput("jobs", f"need >= 1 job over > 0 days, got {n} over {days}",
                               fix="pass --jobs 200 --days 2")
        rng = np.random.default_rng([seed, 18])
        at = np.sort(rng.uniform(0.0, days * 24 * HOUR, n))
        return cls(tuple(float(a) for a in at), tuple(float(h) for h in rng.uniform(2.0, 8.0, n)))


def run_arm(arm: str, bag: Bag, seed: int, state: Path) -> dict[str, Any]:
    """One arm on a fresh store and fleet; ticks until every job is done and every node gone."""
    clock = SimClock(start=0.0)
    fleet = SimulatedFleet.from_options(clock=clock, seed=seed, state_path=state / "fleet.db",
                                        lifetime_model=default_gce_model())
    store = Store(state / "spotplane.db")
    settings = ControllerSettings(pool_nodes={"H100": 10_000}, **ARMS[arm])
    ctl = Controller(store, fleet, clock, settings, epoch=store.take_controller_lease())
    tenant = store.create_tenant("bag", max_gpus=100_000)[0].id
    while clock.now() < START_HOURS * HOUR:
        clock.advance(600.0)
        ctl.tick()
    t0, ids, nxt, ticks = clock.now(), [], 0, 0
    while True:
        clock.advance(TICK_SECONDS)
        while nxt < len(bag.arrivals) and t0 + bag.arrivals[nxt] <= clock.now():
            spec = JobSpec(name=f"sweep-{nxt}", kind=JobKind.SPOT, accelerator="H100",
                           gpus_per_worker=8, compute_hours=bag.hours[nxt])
            ids.append(store.submit_job(tenant, spec, now=t0 + bag.arrivals[nxt]).id)
            nxt += 1
        ctl.tick()
        ticks += 1
        if nxt == len(bag.arrivals) and not ctl.state.jobs and not any(
                n.state in LIVE for n in ctl.state.nodes.values()):
            break
        if clock.now() - t0 > MAX_HOURS * HOUR:
            raise InvalidInput("live_reuse", f"jobs still running after {MAX_HOURS:.0f} h",
                               fix="fewer jobs, or a larger MAX_HOURS")
    jobs = [store.get_job(i) for i in ids]
    metrics = store.metrics()
    lost = dict(sorted(fleet.preemptions.items()))
    store.close()
    fleet.close()
    return {**summarise(arm, jobs, metrics, ticks), "vms_lost_by_cause": lost}


def summarise(arm: str, jobs: list[Job], metrics: dict[str, float], ticks: int) -> dict[str, Any]:
    """An arm's figures from its stored jobs and counters."""
    latency = [(j.started_at - j.submitted_at) for j in jobs if j.started_at is not None]
    job_cost = sum(j.cost for j in jobs)
    idle = metrics.get("idle_cost_dollars", 0.0)
    wasted = sum(j.gpu_hours - j.spec.compute_hours * j.spec.gpus for j in jobs)
    fast = sum(1 for x in latency if x < FAST_START_SECONDS)
    return {
        "arm": arm, "jobs": len(jobs), "ticks": ticks,
        "fast_starts": fast,
        "succeeded": sum(j.state is JobState.SUCCEEDED for j in jobs),
        "preemptions_per_job": round(sum(j.preemptions for j in jobs) / len(jobs), 4),
        "wasted_gpu_hours": round(wasted, 2),
        "median_start_latency_s": round(statistics.median(latency), 1) if latency else None,
        "mean_start_latency_s": round(statistics.fmean(latency), 1) if latency else None,
        "job_cost": round(job_cost, 2), "idle_cost": round(idle, 2),
        "spare_idle_cost": round(metrics.get("spare_idle_cost_dollars", 0.0), 2),
        "total_cost": round(job_cost + idle, 2),
    }


def targets(arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The three targets of the benchmark, from the arms' figures (summed over seeds)."""
    a, r, f = arms["by_age"], arms["always_reuse"], arms["always_fresh"]
    fewer = _fewer(a, r)
    lat = 1.0 - a["median_start_latency_s"] / f["median_start_latency_s"]
    p = arms["by_age_priced"]
    p_lat = 1.0 - p["median_start_latency_s"] / f["median_start_latency_s"]
    return {
        "by_age_priced": {
            "preemptions_fewer_than_always_reuse_pct": round(100 * _fewer(p, r), 1),
            "cost_vs_always_fresh_pct": round(100 * (p["total_cost"] / f["total_cost"] - 1), 2),
            "median_latency_below_always_fresh_pct": round(100 * p_lat, 1)},
        "preemptions_fewer_than_always_reuse_pct": round(100 * fewer, 1),
        "preemptions_fewer_than_always_reuse_120s_pct": round(
            100 * _fewer(a, arms["always_reuse_120s"]), 1),
        "cost_vs_always_fresh_pct": round(100 * (a["total_cost"] / f["total_cost"] - 1), 2),
        "median_latency_below_always_fresh_pct": round(100 * lat, 1),
        "met": {"preemptions": fewer >= 0.30, "cost": a["total_cost"] <= f["total_cost"],
                "latency": lat >= 0.50},
    }


def _fewer(a: dict[str, Any], b: dict[str, Any]) -> float:
    return 1.0 - a["preemptions_per_job"] / b["preemptions_per_job"] if b["preemptions_per_job"] else 0.0


def pooled(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm's figures over several seeds: per-job means, sums of costs and hours."""
    n = sum(r["jobs"] for r in rows)
    return {
        "arm": rows[0]["arm"], "jobs": n, "succeeded": sum(r["succeeded"] for r in rows),
        "fast_start_share": round(sum(r["fast_starts"] for r in rows) / n, 3),
        "preemptions_per_job": round(sum(r["preemptions_per_job"] * r["jobs"] for r in rows) / n, 4),
        "wasted_gpu_hours": round(sum(r["wasted_gpu_hours"] for r in rows), 2),
        "median_start_latency_s": round(statistics.median(r["median_start_latency_s"] for r in rows), 1),
        **{k: round(sum(r[k] for r in rows), 2)
           for k in ("job_cost", "idle_cost", "spare_idle_cost", "total_cost")},
        "vms_lost_by_cause": dict(sorted(sum(
            (Counter(r["vms_lost_by_cause"]) for r in rows), Counter()).items())),
    }


def bench(n_jobs: int, days: float, seeds: list[int]) -> dict[str, Any]:
    t0 = time.perf_counter()
    per_seed: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for seed in seeds:
        bag = Bag.draw(n_jobs, days, seed)
        for arm in ARMS:
            with tempfile.TemporaryDirectory(prefix="spotplane-live-reuse-") as tmp:
                per_seed[arm].append({"seed": seed, **run_arm(arm, bag, seed, Path(tmp))})
    arms = {arm: pooled(rows) for arm, rows in per_seed.items()}
    return {"jobs": n_jobs, "days": days, "seeds": seeds, "arms": arms,
            "targets": targets(arms), "per_seed": per_seed,
            "seconds": round(time.perf_counter() - t0, 1)}


def render(out: dict[str, Any]) -> str:
    cols = ("preemptions_per_job", "wasted_gpu_hours", "median_start_latency_s",
            "fast_start_share", "job_cost",
            "spare_idle_cost", "idle_cost", "total_cost")
    lines = [f"{out['jobs']} jobs of 2-8 h over {out['days']} days, seeds {out['seeds']}",
             f"{'arm':<14}" + "".join(f"{c:>24}" for c in cols)]
    for arm, r in out["arms"].items():
        lines.append(f"{arm:<14}" + "".join(f"{r[c]:>24}" for c in cols))
    for arm, r in out["arms"].items():
        lines.append(f"{arm:<14} VMs lost: " + ", ".join(
            f"{c} {k}" for c, k in r["vms_lost_by_cause"].items()))
    t = out["targets"]
    lines.append(f"by_age: {t['preemptions_fewer_than_always_reuse_pct']}% fewer preemptions per "
                 f"job than always_reuse (target >= 30; "
                 f"{t['preemptions_fewer_than_always_reuse_120s_pct']}% than always_reuse_120s), cost {t['cost_vs_always_fresh_pct']:+}% "
                 f"vs always_fresh (target <= 0), median start latency "
                 f"{t['median_latency_below_always_fresh_pct']}% below always_fresh (target >= 50)")
    q = t["by_age_priced"]
    lines.append(f"by_age_priced: {q['preemptions_fewer_than_always_reuse_pct']}% fewer "
                 f"preemptions per job than always_reuse, cost {q['cost_vs_always_fresh_pct']:+}% "
                 f"vs always_fresh, median start latency "
                 f"{q['median_latency_below_always_fresh_pct']}% below always_fresh")
    return "\n".join(lines)


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.live_reuse", description=__doc__)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--seeds", default="0,1,2", help="fleet and bag seeds, comma-separated")
    args = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise InvalidInput("seeds", f"not integers: {args.seeds!r}", fix="e.g. --seeds 0,1,2") from None
    if not seeds:
        raise InvalidInput("seeds", "no seed given", fix="e.g. --seeds 0,1,2")
    out = bench(args.jobs, args.days, seeds)
    print(json.dumps(out) if args.json else render(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
