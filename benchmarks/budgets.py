"""Hourly spend caps on a month of multi-tenant load from the openb trace (FGD, ATC'23).

``python -m benchmarks.budgets [--json] [--tenants 4] [--days 30] [--tick 60] [--cap-fraction 0.5]``

The GPU pods of ``alibaba-openb/openb_pod_list_default.csv`` that arrive in the trace's last
``--days`` days (nearly all of them arrive there) are jobs; each goes to one of ``--tenants`` tenants by a hash of its name. A job costs
``num_gpu x price`` $/h for its run time (deletion - scheduled time): BE pods on spot
($0.918/GPU-h), the others on demand ($3.06/GPU-h). Each tenant's hourly cap is
``--cap-fraction`` of its peak spend rate without a cap (at least its largest job's rate). Every
tick the replay finishes what ended, then admits each tenant's waiting jobs in arrival order
through :func:`policies.budgets.admission`, the rule the reconcile loop applies.

``cap_overshoot_ticks`` is the worst tenant's overshoot of its hourly cap: the most it spent in
any one-hour window above its cap, in ticks of spend at the cap (target: at most 1);
``uncapped_overshoot_ticks`` is the same without the rule, for contrast.
"""

from __future__ import annotations

import argparse
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks import entry, report
from clusters.data.catalog import DataCatalog
from controlplane.core.config import data_dir
from policies.budgets import BudgetLimits, admission, overshoot_ticks

SPOT_GPU_HOUR = 0.918  # p3.2xlarge spot, one V100 (clusters.sim.fleet.AWS_P3_SPOT)
ON_DEMAND_GPU_HOUR = 3.06


@dataclass(frozen=True)
class TraceJob:
    """One GPU pod as a job: when it arrives, how long it runs, what it costs per hour."""

    tenant: str
    arrival: float  # seconds from the trace start
    seconds: float
    rate: float  # $/h while it runs


@dataclass
class TenantRun:
    """One tenant's replay: its queue, what runs, its spend per tick and its waits."""

    cap: float | None
    waiting: list[TraceJob] = field(default_factory=list)
    running: list[tuple[float, float, float]] = field(default_factory=list)  # (start, end, rate)
    spend: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)


def trace_jobs(tenants: int, days: float, root: str | None = None) -> list[TraceJob]:
    """The GPU pods of the openb trace arriving in its last ``days`` days (where nearly all
    arrive), as jobs; times from the window's start."""
    pods = DataCatalog(data_dir(root)).openb_pods()
    scheduled = np.where(np.isnan(pods.scheduled_time), pods.creation_time, pods.scheduled_time)
    seconds = pods.deletion_time - scheduled
    start = float(np.max(pods.creation_time)) - days * 86400.0  # the trace's last month
    out = []
    for i in np.flatnonzero((pods.num_gpu > 0) & (pods.creation_time >= start)
                            & (seconds > 0)):
        name = str(pods.name[i])
        k = int(hashlib.sha256(name.encode()).hexdigest(), 16) % tenants
        price = SPOT_GPU_HOUR if pods.qos[i] == "BE" else ON_DEMAND_GPU_HOUR
        out.append(TraceJob(f"tenant-{k}", float(pods.creation_time[i]) - start, float(seconds[i]),
                            float(pods.num_gpu[i]) * price))
    return sorted(out, key=lambda j: j.arrival)


def replay(jobs: list[TraceJob], caps: dict[str, float | None], tick: float,
           days: float) -> dict[str, TenantRun]:
    """Tick by tick: end what finished, admit waiting jobs the cap lets in (arrival order)."""
    runs = {t: TenantRun(cap) for t, cap in caps.items()}
    ticks = math.ceil(days * 86400.0 / tick)
    nxt = 0
    for k in range(ticks):
        t0, t1 = k * tick, (k + 1) * tick
        while nxt < len(jobs) and jobs[nxt].arrival < t1:
            runs[jobs[nxt].tenant].waiting.append(jobs[nxt])
            nxt += 1
        for run in runs.values():
            run.running = [r for r in run.running if r[1] > t0]
            _admit(run, t0)
            run.spend.append(sum(rate * (min(end, t1) - max(start, t0)) / 3600.0
                                 for start, end, rate in run.running))
    return runs


def _admit(run: TenantRun, now: float) -> None:
    """Each waiting job that arrived by ``now`` and fits under the cap starts now."""
    limits = BudgetLimits(hourly_cap=run.cap)
    rate = sum(r[2] for r in run.running)
    left = []
    for job in run.waiting:
        if job.arrival > now or admission(limits, rate, 0.0, job.rate, 0.0) is not None:
            left.append(job)
            continue
        run.running.append((now, now + job.seconds, job.rate))
        run.waits.append(now - job.arrival)
        rate += job.rate
    run.waiting = left


def peak_rate(jobs: list[TraceJob], tenant: str) -> float:
    """The tenant's highest spend rate with every job running from its arrival."""
    edges = sorted([(j.arrival, j.rate) for j in jobs if j.tenant == tenant]
                   + [(j.arrival + j.seconds, -j.rate) for j in jobs if j.tenant == tenant])
    rate = peak = 0.0
    for _, d in edges:
        rate += d
        peak = max(peak, rate)
    return peak


def run(tenants: int = 4, days: float = 30.0, tick: float = 60.0, cap_fraction: float = 0.5,
        root: str | None = None) -> dict[str, Any]:
    """The replay with and without the caps; per tenant and the worst overshoot."""
    jobs = trace_jobs(tenants, days, root)
    names = [f"tenant-{k}" for k in range(tenants)]
    caps: dict[str, float | None] = {
        t: max(cap_fraction * peak_rate(jobs, t),
               max((j.rate for j in jobs if j.tenant == t), default=0.0)) for t in names}
    capped = replay(jobs, caps, tick, days)
    free = replay(jobs, dict.fromkeys(names), tick, days)
    hours = tick / 3600.0
    per: list[dict[str, Any]] = []
    for t in names:
        cap = caps[t] or 0.0
        per.append({
            "tenant": t, "jobs": sum(1 for j in jobs if j.tenant == t),
            "hourly_cap": round(cap, 2), "peak_rate_uncapped": round(peak_rate(jobs, t), 2),
            "spend_capped": round(sum(capped[t].spend), 2),
            "spend_uncapped": round(sum(free[t].spend), 2),
            "overshoot_ticks": round(overshoot_ticks(capped[t].spend, cap, hours), 6),
            "uncapped_overshoot_ticks": round(overshoot_ticks(free[t].spend, cap, hours), 2),
            "mean_wait_minutes": round(float(np.mean(capped[t].waits or [0.0])) / 60.0, 2),
            "left_waiting": len(capped[t].waiting)})
    return {"tenants": tenants, "days": days, "tick_seconds": tick,
            "cap_fraction": cap_fraction, "jobs": len(jobs),
            "cap_overshoot_ticks": max(float(p["overshoot_ticks"]) for p in per),
            "uncapped_overshoot_ticks": max(float(p["uncapped_overshoot_ticks"]) for p in per),
            "per_tenant": per}


def table(res: dict[str, Any]) -> str:
    cols = ("tenant", "jobs", "hourly_cap", "peak_rate_uncapped", "spend_capped",
            "overshoot_ticks", "uncapped_overshoot_ticks", "mean_wait_minutes")
    lines = ["  ".join(cols)]
    lines += ["  ".join(str(p[c]) for c in cols) for p in res["per_tenant"]]
    lines.append(f"cap_overshoot_ticks {res['cap_overshoot_ticks']} (target <= 1); without "
                 f"the rule {res['uncapped_overshoot_ticks']}")
    return "\n".join(lines)


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.budgets", description=__doc__)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tenants", type=int, default=4)
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--tick", type=float, default=60.0, help="seconds per tick")
    ap.add_argument("--cap-fraction", type=float, default=0.5,
                    help="each tenant's hourly cap, as a fraction of its uncapped peak rate")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args(argv)
    res = run(args.tenants, args.days, args.tick, args.cap_fraction, args.data_dir)
    return report(res, as_json=args.json, table=table)


if __name__ == "__main__":
    raise SystemExit(main())
