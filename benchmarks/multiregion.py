"""Deadline jobs across the 13 GCP H100 zones with real per-zone prices (beyond the paper).

    python -m benchmarks.multiregion [--json] [--windows 100] [--compute-hours 48]
        [--deadline-hours 60] [--overhead-hours 0.2] [--seed S] [--plot F.png]
        [--observe free|paid] [--zones K]

Policies: up_best_zone (Uniform Progress pinned to the zone that was cheapest for that window, in
hindsight), up_zone_mean (UP pinned to each zone, mean over zones), up_eager_failover,
spotplane (ours: policies.multizone.SpotplaneMultiZone) and omniscient (multi-zone DP). Costs are
dollars for one a3-highgpu-8g; windows start at random ticks (fixed seed). spotplane learns zone
run lengths from the trace *before* the window (the past, which a live system has observed).

``--semi-markov`` adds spotplane_semi_markov (spotplane with ``semi_markov_dp`` of
``policies.semimarkov`` deciding idle / spot / on-demand, learnt from the same past).
``--observe paid`` adds spotplane_paid: spotplane when a zone's availability is known only
where the job runs, where a launch was tried or where a probe was bought (one minute of spot in
that zone, in the cost), the policy choosing what to probe
(``policies.paid_observation``). ``--zones K`` replays each window on K zones drawn at random.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from benchmarks import entry
from clusters.data.catalog import DataCatalog
from clusters.data.spot import SpotTrace
from controlplane.core.config import data_dir
from controlplane.core.errors import InvalidInput, SpotplaneError
from policies.deadline import DeadlineTask, UniformProgress
from policies.deadline_sim import SimResult, simulate_zones, window_ticks
from policies.multizone import (
    EagerFailover,
    MultiZonePlanPolicy,
    SemiMarkovSpotplane,
    SpotplaneMultiZone,
    ZonePinned,
    multizone_plan,
)
from policies.paid_observation import ProbingSpotplane, simulate_zones_paid

SEED = 20251004
POLICIES = ("up_best_zone", "up_zone_mean", "up_eager_failover", "spotplane", "omniscient")


class World:
    """The aligned zones as arrays."""

    def __init__(self, zones: list[SpotTrace]) -> None:
        if not zones:
            raise SpotplaneError("no H100 zones found")
        self.zones = zones
        self.names = [z.zone for z in zones]
        self.up = np.vstack([z.spot_up() for z in zones])
        self.spot = [float(z.spot_price_per_hour or 0.0) for z in zones]
        self.od = [float(z.on_demand_price_per_hour or 0.0) for z in zones]
        self.g = zones[0].gap_hours
        self.n_ticks = self.up.shape[1]

    def run(self, policy: Any, start: int, n: int, record: bool = False) -> SimResult:
        for z in self.zones:
            z.window(start, n)  # refuses windows past the end
        return simulate_zones(policy, self.up[:, start : start + n], self.g, self.names, self.spot, self.od, record=record)


def run_window(world: World, task: DeadlineTask, start: int, paid: bool = False,
               probes: list[tuple[int, float, int]] | None = None,
               semi_markov: bool = False) -> dict[str, SimResult | list[SimResult]]:
    n = window_ticks(task.deadline_hours, world.g)
    out: dict[str, SimResult | list[SimResult]] = {}
    pinned = []
    for j, z in enumerate(world.names):
        zt = DeadlineTask(task.compute_hours, task.deadline_hours, task.overhead_hours,
                          on_demand_price=world.od[j], spot_price=world.spot[j], nodes=task.nodes)
        pinned.append(world.run(ZonePinned(UniformProgress(zt, tick_hours=world.g), z), start, n))
    out["pinned"] = pinned
    out["up_eager_failover"] = world.run(EagerFailover(task, tick_hours=world.g), start, n)
    hist = world.up[:, :start]
    out["spotplane"] = world.run(SpotplaneMultiZone(task, tick_hours=world.g, history=hist, zone_names=world.names), start, n)
    if semi_markov:
        out["spotplane_semi_markov"] = world.run(SemiMarkovSpotplane(task, tick_hours=world.g, history=hist, zone_names=world.names), start, n)
    if paid:
        pol = ProbingSpotplane(task, tick_hours=world.g, history=hist, zone_names=world.names)
        r = simulate_zones_paid(pol, world.up[:, start : start + n], world.g, world.names, world.spot, world.od)
        out["spotplane_paid"] = r.result
        if probes is not None:
            probes.append((r.probes, r.probe_cost, r.refused_launches))
    plan = multizone_plan(task, world.up[:, start : start + n], world.g, world.spot, world.od)
    out["omniscient"] = world.run(MultiZonePlanPolicy(task, plan, world.names, world.g), start, n)
    return out


def bench(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    world = full = World(DataCatalog(data_dir()).h100_zones())
    if not 1 <= args.zones <= len(full.names):
        raise InvalidInput("--zones", f"must be 1..{len(full.names)}, got {args.zones}", fix="e.g. --zones 6")
    paid = args.observe == "paid"
    extra = (("spotplane_paid",) if paid else ()) + (("spotplane_semi_markov",) if args.semi_markov else ())
    policies = POLICIES + extra
    probes: list[tuple[int, float, int]] = []
    task = DeadlineTask(args.compute_hours, args.deadline_hours, args.overhead_hours,
                        on_demand_price=min(world.od), spot_price=min(world.spot))
    n = window_ticks(task.deadline_hours, world.g)
    if args.windows < 1:
        raise InvalidInput("--windows", f"must be >= 1, got {args.windows}: no window would be replayed",
                           fix="e.g. --windows 100")
    if n > world.n_ticks:
        raise InvalidInput("--deadline-hours", f"a {n}-tick window does not fit in the {world.n_ticks}-tick H100 zones",
                           fix=f"use at most {world.n_ticks * world.g:g} hours")
    rng = np.random.default_rng(args.seed)
    starts = rng.integers(0, world.n_ticks - n + 1, size=args.windows)
    acc: dict[str, list[tuple[float, bool, int]]] = {p: [] for p in policies}
    subsets = [np.sort(rng.choice(len(full.names), args.zones, replace=False)) for _ in starts]
    per_zone = np.zeros((len(starts), len(full.names)))
    for w, s in enumerate(starts):
        if args.zones < len(full.names):
            world = World([full.zones[j] for j in subsets[w]])
        res = run_window(world, task, int(s), paid, probes, args.semi_markov)
        pinned = res["pinned"]
        assert isinstance(pinned, list)
        costs = [r.cost for r in pinned]
        per_zone[w] = np.nan
        per_zone[w, [full.names.index(z) for z in world.names]] = costs
        b = int(np.argmin(costs))
        acc["up_best_zone"].append((pinned[b].cost, pinned[b].met_deadline, pinned[b].changeovers))
        acc["up_zone_mean"].append((float(np.mean(costs)), all(r.met_deadline for r in pinned), int(np.mean([r.changeovers for r in pinned]))))
        for p in ("up_eager_failover", "spotplane", "omniscient") + extra:
            r = res[p]
            assert isinstance(r, SimResult)
            acc[p].append((r.cost, r.met_deadline, r.changeovers))
    table = {}
    omni = np.array([c for c, _, _ in acc["omniscient"]])
    for p, rows in acc.items():
        c = np.array([x[0] for x in rows])
        table[p] = {
            "cost": round(float(c.mean()), 2),
            "missed": int(sum(not x[1] for x in rows)),
            "changeovers": round(float(np.mean([x[2] for x in rows])), 2),
            "vs_omniscient_pct": round(float((c.mean() / omni.mean() - 1) * 100), 2),
            "p75_vs_omniscient_pct": round(float(np.percentile(c / omni - 1, 75) * 100), 2),
        }
    zone_mean = np.nanmean(per_zone, axis=0)
    best_fixed = int(np.nanargmin(zone_mean))
    out = {
        "windows": int(len(starts)),
        "task": {"compute_hours": task.compute_hours, "deadline_hours": task.deadline_hours, "overhead_hours": task.overhead_hours},
        "policies": table,
        "zones": args.zones, "observe": args.observe,
        "zone_mean_cost": {z: round(float(c), 2) for z, c in zip(full.names, zone_mean, strict=True)
                           if np.isfinite(c)},
        "best_fixed_zone": {"zone": full.names[best_fixed], "cost": round(float(zone_mean[best_fixed]), 2)},
        "on_demand_cost": round(min(world.od) * (task.compute_hours + task.overhead_hours), 2),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if paid:
        out["paid_observation"] = {
            "probes_per_window": round(float(np.mean([p[0] for p in probes])), 2),
            "probe_cost_per_window": round(float(np.mean([p[1] for p in probes])), 2),
            "refused_launches_per_window": round(float(np.mean([p[2] for p in probes])), 2)}
    if args.plot:
        plot(args.plot, world, task, int(starts[0]))
    return out


def plot(path: str, world: World, task: DeadlineTask, start: int) -> None:
    """Zones' availability and where each policy ran, one window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = window_ticks(task.deadline_hours, world.g)
    pols = {
        "eager": EagerFailover(task, tick_hours=world.g),
        "spotplane": SpotplaneMultiZone(task, tick_hours=world.g, history=world.up[:, :start], zone_names=world.names),
        "omniscient": MultiZonePlanPolicy(task, multizone_plan(task, world.up[:, start : start + n], world.g, world.spot, world.od), world.names, world.g),
    }
    fig, ax = plt.subplots(figsize=(11, 5))
    t = np.arange(n) * world.g
    for j in range(len(world.names)):
        ax.fill_between(t, j - 0.4, j + 0.4, where=world.up[j, start : start + n], step="post", color="tab:green", alpha=0.25)
    for k, (name, pol) in enumerate(pols.items()):
        r = world.run(pol, start, n, record=True)
        assert r.zones is not None and r.decisions is not None
        live = r.decisions > 0
        ax.scatter(t[live], r.zones[live] + (k - 1) * 0.25, s=3, label=f"{name} (${r.cost:.0f})")
    ax.set_yticks(range(len(world.names)), [f"{z} ${p:.1f}" for z, p in zip(world.names, world.spot, strict=True)], fontsize=7)
    ax.set_xlabel("hours")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_table(out: dict[str, Any]) -> None:
    t = out["task"]
    print(f"{out['zones']} H100 zones ({out['observe']} observation), {out['windows']} windows, C={t['compute_hours']} h, R={t['deadline_hours']} h, d={t['overhead_hours']} h; "
          f"all on-demand in the cheapest zone: ${out['on_demand_cost']}")
    print(f"{'policy':<20}{'cost $':>10}{'vs omni':>10}{'p75':>9}{'missed':>8}{'changeovers':>13}")
    for p, r in out["policies"].items():
        print(f"{p:<20}{r['cost']:>10.2f}{r['vs_omniscient_pct']:>9.1f}%{r['p75_vs_omniscient_pct']:>8.1f}%{r['missed']:>8d}{r['changeovers']:>13.1f}")
    print(f"best fixed zone overall: {out['best_fixed_zone']}; {out['seconds']} s")
    if "paid_observation" in out:
        print(f"paid observation per window: {out['paid_observation']}")


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.multiregion", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot", default=None)
    ap.add_argument("--windows", type=int, default=100)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--compute-hours", type=float, default=48.0)
    ap.add_argument("--deadline-hours", type=float, default=60.0)
    ap.add_argument("--overhead-hours", type=float, default=0.2)
    ap.add_argument("--observe", choices=("free", "paid"), default="free",
                    help="paid: add spotplane learning zones by running, launching and probing")
    ap.add_argument("--zones", type=int, default=13, help="zones per window, drawn at random")
    ap.add_argument("--semi-markov", action="store_true",
                    help="add spotplane_semi_markov: spotplane with semi_markov_dp deciding idle / spot / on-demand")
    args = ap.parse_args(argv)
    out = bench(args)
    if args.json:
        print(json.dumps(out))
    else:
        print_table(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


