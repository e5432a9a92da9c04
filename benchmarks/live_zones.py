"""Zones known from evidence vs every zone seen for free, in the live controller (beyond the paper).

    python -m benchmarks.live_zones [--json] [--draws 12] [--ratio 2.0,1.1] [--seed 5]
        [--plot F.png]

The real :class:`~controlplane.reconcile.controller.Controller` and store (no Ray) on the
:class:`~clusters.sim.fleet.SimulatedFleet` replaying the 9 AWS V100 zones' real traces, on a
stepped clock (60 s ticks). One deadline job at a time (one V100, compute ``C`` drawn uniform in
6-20 h, deadline ``R = ratio x C``); draw ``i`` starts the fleet ``trace_offset_hours`` into the
traces (offsets spread evenly over them) with fleet seed ``seed + i``. Each draw runs twice, the
same draw in both modes of ``ControllerSettings.zone_observation``:

* ``free``: the controller reads the provider's every-zone view each tick (no real cloud has one);
* ``evidence``: it knows a zone only from its nodes, its launches (a refusal is free) and the
  probes the deadline policy buys (``spotplane_probing``, each billed a minute of spot).

Per mode and ratio: total cost (the job's bill plus the probes' bill), cost vs ``free``,
deadline misses, preemptions, probes bought and their cost (``zone_probes_total``,
``zone_probe_cost_dollars_total``), refused launches (``launches_refused_total``) and how many
times the provider's every-zone view was read. Target: ``evidence`` at most +5 % over ``free``
with 0 deadline misses, at R/C = 2 and at R/C = 1.1. The draws where ``evidence`` costs most over
``free`` are listed with their decisions' summary (``store.job_decisions``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import entry
from clusters.data.catalog import DataCatalog
from clusters.sim import AWS_COLLECTION, SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.core.config import data_dir
from controlplane.core.errors import InvalidInput
from controlplane.core.models import Job, JobKind, JobSpec, JobState
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from policies.preemption import default_gce_model

TICK_SECONDS = 60.0
MODES = ("free", "evidence")
COMPUTE_HOURS = (6.0, 20.0)
TARGET_PCT = 5.0
TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class WatchedFleet(SimulatedFleet):
    """The simulated fleet, counting reads of its every-zone view and its per-zone probes."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.every_zone_asks = 0
        self.probe_calls = 0

    def spot_availability(self, at: float | None = None) -> dict[str, bool]:
        self.every_zone_asks += 1
        return super().spot_availability(at)

    def spot_available(self, zone: str, instance_type: str) -> bool:
        self.probe_calls += 1
        return super().spot_available(zone, instance_type)


@dataclass(frozen=True)
class Draw:
    """One deadline job: where in the traces it starts, its compute hours, the fleet's seed."""

    index: int
    offset_hours: float
    compute_hours: float
    seed: int


def draws(n: int, seed: int, max_ratio: float, trace_hours: float) -> list[Draw]:
    """``n`` draws, offsets spread evenly over the traces (room left for the longest deadline)."""
    if n < 1:
        raise InvalidInput("draws", f"must be >= 1, got {n}", fix="e.g. --draws 12")
    room = trace_hours - max_ratio * COMPUTE_HOURS[1] - 2.0
    if room <= 0:
        raise InvalidInput("ratio", f"a {max_ratio:g} x {COMPUTE_HOURS[1]:g} h deadline does not "
                           f"fit in the {trace_hours:.0f} h traces", fix="e.g. --ratio 2.0,1.1")
    rng = np.random.default_rng([seed, 18])
    hours = rng.uniform(*COMPUTE_HOURS, n)
    offsets = np.linspace(0.0, room, n)
    return [Draw(i, round(float(offsets[i]), 2), round(float(hours[i]), 2), seed + i)
            for i in range(n)]


def run(draw: Draw, ratio: float, mode: str, state: Path, data: Path) -> dict[str, Any]:
    """One deadline job on a fresh store and fleet, ticked until it ends (or long past due)."""
    clock = SimClock(start=0.0)
    fleet = WatchedFleet.from_options(clock=clock, data_dir=data, seed=draw.seed,
                                      state_path=state / "fleet.db",
                                      trace_offset_hours=draw.offset_hours,
                                      lifetime_model=default_gce_model())
    assert isinstance(fleet, WatchedFleet)
    store = Store(state / "spotplane.db")
    settings = ControllerSettings(pool_nodes={"V100": 4, "H100": 2}, zone_observation=mode)
    ctl = Controller(store, fleet, clock, settings, epoch=store.take_controller_lease())
    tenant = store.create_tenant("t", max_gpus=100)[0].id
    deadline = ratio * draw.compute_hours
    spec = JobSpec(name=f"d{draw.index}", kind=JobKind.DEADLINE, compute_hours=draw.compute_hours,
                   deadline_hours=deadline, accelerator="V100")
    job_id = store.submit_job(tenant, spec, now=0.0).id
    give_up = (deadline + draw.compute_hours + 1.0) * HOUR
    while store.get_job(job_id).state not in TERMINAL and clock.now() < give_up:
        clock.advance(TICK_SECONDS)
        ctl.tick()
    job = store.get_job(job_id)
    out = summarise(job, store.metrics(), fleet)
    out["decisions"] = decisions(store, job_id, job.finished_at)
    out["on_demand_hours"] = out["decisions"]["on_demand_hours"]
    store.close()
    fleet.close()
    return out


def summarise(job: Job, metrics: dict[str, float], fleet: WatchedFleet) -> dict[str, Any]:
    """One run's figures from its stored job, its counters and the fleet's own count."""
    probes = sum(v for k, v in metrics.items() if k.startswith("zone_probes_total"))
    probe_cost = sum(v for k, v in metrics.items() if k.startswith("zone_probe_cost_dollars"))
    missed = job.state is not JobState.SUCCEEDED or job.finished_at is None or (
        job.deadline_at is not None and job.finished_at > job.deadline_at)
    return {
        "state": job.state.value, "missed": bool(missed),
        "job_cost": round(job.cost, 4), "probe_cost": round(probe_cost, 4),
        "total_cost": round(job.cost + probe_cost, 4), "preemptions": job.preemptions,
        "probes": int(probes), "probe_calls": fleet.probe_calls,
        "refused_launches": int(metrics.get("launches_refused_total", 0)),
        "every_zone_reads": fleet.every_zone_asks,
        "slack_hours": round((job.deadline_at - job.finished_at) / HOUR, 2)
        if job.deadline_at is not None and job.finished_at is not None else None,
    }


def decisions(store: Store, job_id: str, job_end: float | None) -> dict[str, Any]:
    """The job's deadline decisions in short: policy, actions and zones counted, the hours from
    each on-demand decision to the next decision (or the job's end), the last one."""
    ds = [d for d in store.job_decisions(job_id) if d.action in ("idle", "spot", "on_demand")]
    last = ds[-1] if ds else None
    od = sum(b.at - a.at for a, b in pairwise(ds) if a.action == "on_demand")
    if last is not None and last.action == "on_demand" and job_end is not None:
        od += job_end - last.at
    return {
        "policies": sorted({d.policy for d in ds}),
        "actions": dict(Counter(d.action for d in ds)),
        "on_demand_hours": round(od / HOUR, 2),
        "spot_zones": len({d.zone for d in ds if d.action == "spot"}),
        "first_on_demand_h": next((round(d.at / HOUR, 2) for d in ds if d.action == "on_demand"),
                                  None),
        "last": f"{last.action} {last.zone or ''} at {last.at / HOUR:.2f} h: {last.reason}"
        if last else "",
    }


def pooled(rows: list[dict[str, Any]], free: list[dict[str, Any]] | None) -> dict[str, Any]:
    """One mode's figures over the draws: sums, and the cost against ``free`` on the same draws."""
    total = sum(r["total_cost"] for r in rows)
    out = {
        "runs": len(rows), "missed": sum(r["missed"] for r in rows),
        "total_cost": round(total, 2),
        "job_cost": round(sum(r["job_cost"] for r in rows), 2),
        "on_demand_hours": round(sum(r["on_demand_hours"] for r in rows), 2),
        "probe_cost": round(sum(r["probe_cost"] for r in rows), 2),
        **{k: sum(r[k] for r in rows) for k in ("preemptions", "probes", "probe_calls",
                                                "refused_launches", "every_zone_reads")},
    }
    if free is not None:
        base = sum(r["total_cost"] for r in free)
        out["vs_free_pct"] = round(100 * (total / base - 1), 2)
        worst = max(100 * (r["total_cost"] / f["total_cost"] - 1)
                    for r, f in zip(rows, free, strict=True))
        out["worst_draw_vs_free_pct"] = round(worst, 2)
    return out


def trace_hours(data: Path) -> float:
    """How many hours the V100 traces cover (the shortest zone)."""
    traces = DataCatalog(data).spot_traces(AWS_COLLECTION)
    if not traces:
        raise InvalidInput("data_dir", f"no V100 spot traces under {data}",
                           fix="run `spotplane data fetch`")
    return min(len(t.spot_up()) * t.gap_hours for t in traces)


def bench(n: int, ratios: list[float], seed: int, worst: int = 3) -> dict[str, Any]:
    t0, c0 = time.perf_counter(), time.process_time()
    data = data_dir()
    ds = draws(n, seed, max(ratios), trace_hours(data))
    per_ratio: dict[str, Any] = {}
    for ratio in ratios:
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        for d in ds:
            for mode in MODES:
                with tempfile.TemporaryDirectory(prefix="spotplane-live-zones-") as tmp:
                    runs[mode].append({"draw": d.index, "offset_hours": d.offset_hours,
                                       "compute_hours": d.compute_hours, "seed": d.seed,
                                       **run(d, ratio, mode, Path(tmp), data)})
        modes = {"free": pooled(runs["free"], None),
                 "evidence": pooled(runs["evidence"], runs["free"])}
        ev = modes["evidence"]
        over = sorted(zip(runs["evidence"], runs["free"], strict=True),
                      key=lambda p: p[1]["total_cost"] - p[0]["total_cost"])
        per_ratio[f"{ratio:g}"] = {
            "modes": modes,
            "met": {"cost": ev["vs_free_pct"] <= TARGET_PCT, "misses": ev["missed"] == 0},
            "worst_draws": [{"draw": e["draw"], "evidence": _brief(e), "free": _brief(f)}
                            for e, f in over[:worst]],
            "runs": runs,
        }
    return {"draws": n, "ratios": ratios, "seed": seed, "zones": 9, "accelerator": "V100",
            "tick_seconds": TICK_SECONDS, "target_vs_free_pct": TARGET_PCT,
            "per_ratio": per_ratio, "seconds": round(time.perf_counter() - t0, 1),
            "cpu_seconds": round(time.process_time() - c0, 1)}


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    keys = ("offset_hours", "compute_hours", "total_cost", "missed", "preemptions",
            "on_demand_hours", "probes", "refused_launches", "slack_hours", "decisions")
    return {k: r[k] for k in keys}


def render(out: dict[str, Any]) -> str:
    cols = ("total_cost", "vs_free_pct", "missed", "preemptions", "on_demand_hours", "probes",
            "probe_cost", "refused_launches", "every_zone_reads")
    lines = [f"{out['draws']} deadline jobs (1 V100, C 6-20 h) on 9 replayed AWS V100 zones, "
             f"seed {out['seed']}; {out['seconds']} s ({out['cpu_seconds']} s CPU)",
             f"{'R/C':<5}{'mode':<10}" + "".join(f"{c:>{len(c) + 2}}" for c in cols)]
    for ratio, r in out["per_ratio"].items():
        for mode, m in r["modes"].items():
            lines.append(f"{ratio:<5}{mode:<10}" + "".join(
                f"{m.get(c, ''):>{len(c) + 2}}" for c in cols))
        ev = r["modes"]["evidence"]
        lines.append(f"R/C {ratio}: evidence {ev['vs_free_pct']:+}% vs free (target <= "
                     f"+{out['target_vs_free_pct']:g} %), {ev['missed']} misses (target 0), "
                     f"worst draw {ev['worst_draw_vs_free_pct']:+}%")
        for w in r["worst_draws"]:
            e, f = w["evidence"], w["free"]
            lines.append(f"  draw {w['draw']} (offset {e['offset_hours']} h, C {e['compute_hours']}"
                         f" h): evidence ${e['total_cost']:.2f} vs free ${f['total_cost']:.2f}, "
                         f"on demand {e['on_demand_hours']} h vs {f['on_demand_hours']} h, "
                         f"{e['probes']} probes, {e['refused_launches']} refused, first on "
                         f"demand at {e['decisions']['first_on_demand_h']} h vs "
                         f"{f['decisions']['first_on_demand_h']} h")
    return "\n".join(lines)


def plot(path: str, out: dict[str, Any]) -> None:
    """Each draw's evidence cost against its free cost, one panel per ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = list(out["per_ratio"])
    fig, axes = plt.subplots(1, len(ratios), figsize=(5 * len(ratios), 4.5), squeeze=False)
    for ax, ratio in zip(axes[0], ratios, strict=True):
        runs = out["per_ratio"][ratio]["runs"]
        f = np.array([r["total_cost"] for r in runs["free"]])
        e = np.array([r["total_cost"] for r in runs["evidence"]])
        ax.scatter(f, e, s=14)
        hi = float(max(f.max(), e.max())) * 1.05
        ax.plot([0, hi], [0, hi], color="grey", lw=0.8, label="same cost")
        ax.plot([0, hi], [0, hi * (1 + TARGET_PCT / 100)], color="tab:red", lw=0.8, ls="--",
                label=f"+{TARGET_PCT:g} %")
        ax.set_xlabel("free observation, $ per job")
        ax.set_ylabel("zones from evidence, $ per job")
        ax.set_title(f"R/C = {ratio}: {out['per_ratio'][ratio]['modes']['evidence']['vs_free_pct']:+}%")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ratios(text: str) -> list[float]:
    try:
        ratios = [float(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise InvalidInput("ratio", f"not numbers: {text!r}", fix="e.g. --ratio 2.0,1.1") from None
    if not ratios or any(not r > 1.0 for r in ratios):
        raise InvalidInput("ratio", f"need deadline ratios R/C > 1, got {text!r}",
                           fix="e.g. --ratio 2.0,1.1")
    return ratios


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.live_zones", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--plot", default=None, help="write a PNG of each draw's costs")
    ap.add_argument("--draws", type=int, default=12, help="deadline jobs per ratio")
    ap.add_argument("--ratio", default="2.0,1.1", help="deadline ratios R/C, comma-separated")
    ap.add_argument("--seed", type=int, default=5, help="draws' and first fleet seed")
    args = ap.parse_args(argv)
    out = bench(args.draws, _ratios(args.ratio), args.seed)
    if args.plot:
        plot(args.plot, out)
    print(json.dumps(out) if args.json else render(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
