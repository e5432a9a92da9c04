"""One spotplane over many workload clusters: a region's loss on real local Rays, and the 13 H100
zones grouped by region as clusters with the egress of every move charged.

    python -m benchmarks.multicluster [--json] [--trials 5] [--windows 100]
        [--checkpoint-gb 100] [--local | --no-local]

Local part (``--local``, the default): two local multi-node workload Rays registered as the
clusters ``aws-east`` (us-east-1) and ``aws-west`` (us-west-2) under one control plane (the Serve
API, the controller, :class:`actors.execution.multicluster.MultiClusterExecutor`, checkpoints in
moto's S3). Each trial submits a checkpointing job through Ray's own ``JobSubmissionClient``,
lets it run in region A, removes region A's node and closes its zones (a regional spot loss),
and times the loss to the job RUNNING in region B (``region_loss_to_running_p50_s``), the
restore inside the job (``restore_s``, p50), whether it ended bit-identical to an undisturbed
run, and the egress of the moved checkpoint (AWS inter-region rate).

Simulated part: the 13 GCP H100 zones, grouped by region into 9 clusters, replayed over
``--windows`` deadline windows (``benchmarks.multiregion``'s task). spotplane's multi-zone policy
across every cluster and the omniscient multi-zone plan are charged ``--checkpoint-gb`` of
egress at every move between regions (GCP's inter-region rates, :mod:`policies.egress`);
``spotplane_egress`` (:mod:`policies.egressaware`) weighs that egress before it moves; against
them, spotplane kept in one region (the one with the lowest spot list price, chosen
ahead of time; also the best region in hindsight).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks import entry
from benchmarks.multiregion import SEED, World
from clusters.data.catalog import DataCatalog
from clusters.data.spot import SpotTrace
from controlplane.core.config import data_dir
from controlplane.core.errors import InvalidInput
from policies.deadline import DeadlineTask
from policies.deadline_sim import SimResult, window_ticks
from policies.egress import GB, egress_usd
from policies.egressaware import EgressAwareSpotplane, places_of
from policies.multizone import MultiZonePlanPolicy, SpotplaneMultiZone, multizone_plan


def region_moves(zones_per_tick: Sequence[int], regions: Sequence[str]) -> list[tuple[str, str]]:
    """The (from, to) regions of every move between two regions a replay made (idle ticks,
    zone -1, keep the region the job last ran in)."""
    moves, last = [], None
    for z in zones_per_tick:
        if z < 0:
            continue
        here = regions[z]
        if last is not None and here != last:
            moves.append((last, here))
        last = here
    return moves


def egress_of(result: SimResult, regions: Sequence[str], checkpoint_gb: float) -> tuple[float, int]:
    """Dollars and count of the replay's moves between regions, ``checkpoint_gb`` each."""
    assert result.zones is not None
    moves = region_moves(result.zones.tolist(), regions)
    nbytes = int(checkpoint_gb * GB)
    return sum(egress_usd(nbytes, "gcp", a, "gcp", b) for a, b in moves), len(moves)


def _spotplane(world: World, task: DeadlineTask, start: int, n: int) -> SimResult:
    hist = world.up[:, :start]
    return world.run(SpotplaneMultiZone(task, tick_hours=world.g, history=hist,
                                        zone_names=world.names), start, n, record=True)


def _egress_aware(world: World, task: DeadlineTask, start: int, n: int,
                  places: dict[str, tuple[str, str]], checkpoint_gb: float) -> SimResult:
    hist = world.up[:, :start]
    return world.run(EgressAwareSpotplane(task, tick_hours=world.g, history=hist,
                                          zone_names=world.names, places=places,
                                          checkpoint_gb=checkpoint_gb), start, n, record=True)


def _omniscient(world: World, task: DeadlineTask, start: int, n: int) -> SimResult:
    plan = multizone_plan(task, world.up[:, start: start + n], world.g, world.spot, world.od)
    return world.run(MultiZonePlanPolicy(task, plan, world.names, world.g), start, n, record=True)


def clusters_of(zones: Sequence[SpotTrace]) -> dict[str, list[SpotTrace]]:
    """The zones grouped by region: one workload cluster per region."""
    out: dict[str, list[SpotTrace]] = {}
    for z in zones:
        out.setdefault(z.region or z.zone.rsplit("-", 1)[0], []).append(z)
    return out


def simulated(windows: int, checkpoint_gb: float, seed: int, compute_hours: float = 48.0,
              deadline_hours: float = 60.0, overhead_hours: float = 0.2) -> dict[str, Any]:
    """Cost over the omniscient plan, egress charged, across clusters vs kept in one region."""
    zones = DataCatalog(data_dir()).h100_zones()
    world = World(zones)
    regions = [z.region or z.zone.rsplit("-", 1)[0] for z in zones]
    by_region = clusters_of(zones)
    worlds = {r: World(zs) for r, zs in by_region.items()}
    listed = min(by_region, key=lambda r: min(float(z.spot_price_per_hour or 0) for z in by_region[r]))
    task = DeadlineTask(compute_hours, deadline_hours, overhead_hours,
                        on_demand_price=min(world.od), spot_price=min(world.spot))
    n = window_ticks(task.deadline_hours, world.g)
    if windows < 1:
        raise InvalidInput("--windows", f"must be >= 1, got {windows}", fix="e.g. --windows 100")
    starts = np.random.default_rng(seed).integers(0, world.n_ticks - n + 1, size=windows)
    places = places_of(world.names, [z.cloud for z in zones], regions)
    rows: dict[str, list[tuple[float, float, bool, int]]] = {
        "spotplane": [], "spotplane_egress": [], "omniscient": [], "one_region": []}
    per_region: dict[str, list[float]] = {r: [] for r in by_region}
    for s in (int(x) for x in starts):
        for name, result in (("spotplane", _spotplane(world, task, s, n)),
                             ("spotplane_egress",
                              _egress_aware(world, task, s, n, places, checkpoint_gb)),
                             ("omniscient", _omniscient(world, task, s, n))):
            usd, moves = egress_of(result, regions, checkpoint_gb)
            rows[name].append((result.cost, usd, result.met_deadline, moves))
        for r, w in worlds.items():
            rt = DeadlineTask(compute_hours, deadline_hours, overhead_hours,
                              on_demand_price=min(w.od), spot_price=min(w.spot))
            res = _spotplane(w, rt, s, n)
            per_region[r].append(res.cost + (0.0 if res.met_deadline else np.nan))
            if r == listed:
                rows["one_region"].append((res.cost, 0.0, res.met_deadline, 0))
    omni = np.array([c + e for c, e, _, _ in rows["omniscient"]])
    table = {}
    for name, rs in rows.items():
        total = np.array([c + e for c, e, _, _ in rs])
        table[name] = {"cost": round(float(total.mean()), 2),
                       "egress_usd": round(float(np.mean([e for _, e, _, _ in rs])), 2),
                       "moves_between_regions": round(float(np.mean([m for *_, m in rs])), 2),
                       "missed": int(sum(not ok for _, _, ok, _ in rs)),
                       "vs_omniscient_pct": round(float((total.mean() / omni.mean() - 1) * 100), 2)}
    region_mean = {r: float(np.nanmean(c)) for r, c in per_region.items()}
    best = min(region_mean, key=lambda r: region_mean[r])
    return {"clusters": len(by_region), "zones": len(zones), "windows": int(windows),
            "checkpoint_gb": checkpoint_gb, "one_region": listed, "policies": table,
            "best_region_in_hindsight": {"region": best, "cost": round(region_mean[best], 2),
                                         "vs_omniscient_pct": round(
                                             float(region_mean[best] / omni.mean() - 1) * 100, 2)}}


def bench(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    if args.local:
        from benchmarks.multicluster_local import local_trials  # Ray and its clusters: on use

        with contextlib.redirect_stdout(sys.stderr):  # Ray's own lines: stdout is the JSON's
            out.update(local_trials(args.trials))
    else:
        out.update({"clusters": 2, "region_loss_to_running_p50_s": None, "restore_s": None,
                    "bit_identical": None, "egress_usd": None})
    sim = simulated(args.windows, args.checkpoint_gb, args.seed)
    out["h100_regions"] = sim
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def print_table(out: dict[str, Any]) -> None:
    if out.get("region_loss_to_running_p50_s") is not None:
        print(f"local: {out['clusters']} clusters, {out['trials']} region losses: loss to RUNNING "
              f"in the other region p50 {out['region_loss_to_running_p50_s']} s (all "
              f"{out['region_loss_to_running_s']}), restore p50 {out['restore_s']} s, "
              f"bit-identical {out['bit_identical']}, egress ${out['egress_usd']} "
              f"({out['egress_bytes']} B per move)")
    sim = out["h100_regions"]
    print(f"{sim['zones']} H100 zones as {sim['clusters']} regional clusters, {sim['windows']} "
          f"windows, {sim['checkpoint_gb']} GB per move; one region = {sim['one_region']}")
    print(f"{'policy':<14}{'cost $':>10}{'egress $':>10}{'moves':>8}{'vs omni':>10}{'missed':>8}")
    for p, r in sim["policies"].items():
        print(f"{p:<14}{r['cost']:>10.2f}{r['egress_usd']:>10.2f}{r['moves_between_regions']:>8.2f}"
              f"{r['vs_omniscient_pct']:>9.2f}%{r['missed']:>8d}")
    print(f"best region in hindsight: {sim['best_region_in_hindsight']}; {out['seconds']} s")


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.multicluster", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--trials", type=int, default=5, help="region losses on the local clusters")
    ap.add_argument("--windows", type=int, default=100)
    ap.add_argument("--checkpoint-gb", type=float, default=100.0,
                    help="bytes moved per move between regions (an 8xH100 job's checkpoint)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--local", action=argparse.BooleanOptionalAction, default=True,
                    help="run the local clusters' region losses (Ray; minutes)")
    args = ap.parse_args(argv)
    out = bench(args)
    print(json.dumps(out) if args.json else "", end="\n" if args.json else "")
    if not args.json:
        print_table(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
