"""Deadline policies replayed on the real spot traces (Can't Be Late, NSDI'24: Table 3, Fig. 11-14).

    python -m benchmarks.deadline table3 [--json] [--no-omniscient] [--workers 2] [--plot F.png]
    python -m benchmarks.deadline sweep  [--json] [--windows 50] [--collections 2w,2m] [--plot F.png]
    python -m benchmarks.deadline gang   [--json] [--windows 20]
    python -m benchmarks.deadline pick-guards [--json] [--windows 50]
    python -m benchmarks.deadline window --trace FILE --start-tick I --compute-hours C
        --deadline-hours R --overhead-hours D [--on-demand-price K] [--nodes N] --policy NAME [--json]

Windows start at random ticks drawn from ``numpy.random.default_rng(seed)`` (fixed seed) and last
``ceil(R / gap)`` ticks. Costs: spot 1, on-demand k per instance-hour (changeovers billed).

The split by time: semi_markov_dp's two unlearnt guards are picked (``pick-guards``) on windows of
the 2-week traces that end by ``PICK_CUT_DAYS`` after the traces' first tick; Table 3 reports, beside
all its windows, the held-out ones that start at the cut or later.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import entry
from clusters.data.catalog import DataCatalog
from clusters.data.spot import SpotTrace, load_spot_trace
from controlplane.core.config import data_dir
from controlplane.core.errors import BadDataFile, InvalidInput
from policies.deadline import DeadlinePolicy, DeadlineTask, Kind, Observation, make_policy
from policies.deadline_sim import SimResult, lifetime_oracle, simulate, window_ticks
from policies.omniscient import heterogeneous_plan, omniscient_plan
from policies.semimarkov import IDLE_FLOOR, OD_TO_IDLE, Guards

COLLECTIONS = {
    "2w": "availability/1-node/aws-10-26-2022",
    "2m": "availability/1-node/aws-02-15-2023",
}
GANG_COLLECTIONS = {4: "preemption/4-node", 16: "availability/16-node"}
PAPER_TABLE3 = {
    "on_demand": (48.0, 0.0),
    "greedy": (30.8, 17.2),
    "uniform_progress": (25.1, 22.9),
    "omniscient": (20.7, 27.4),
}
TABLE3_POLICIES = ["on_demand", "greedy", "uniform_progress", "time_sliced", "partial_lookahead", "up_oracle", "omniscient", "semi_markov_dp"]
TS_GRID = (2, 4, 6, 8, 12, 16, 24, 32, 50)
FRACTIONS = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
SEED = 20221026
FUTURE_KNOWLEDGE = {"omniscient", "partial_lookahead", "up_oracle"}
PICK_CUT_DAYS = 9.0  # picking windows end by then (2022-11-04 for the 2-week traces); held-out ones start then or later
PICK_SEED = 1
PICK_WINDOWS = 50
GUARD_FLOORS = (0.0, 0.5, 0.65, 0.8, 0.9)
PICK_MAX_LOSS_PCT = 1.0  # a candidate may lose to UP on no trace by more than this


# ---------------------------------------------------------------------------------------------
# One window
# ---------------------------------------------------------------------------------------------
@dataclass
class Scenario:
    """A trace prepared for replay: spot-up mask for the gang size and the lifetime oracle."""

    trace: SpotTrace
    nodes: int
    up: np.ndarray
    life: np.ndarray

    @classmethod
    def of(cls, trace: SpotTrace, nodes: int = 1) -> Scenario:
        up = trace.spot_up(nodes)
        return cls(trace, nodes, up, lifetime_oracle(up, trace.gap_hours))

    @property
    def g(self) -> float:
        return self.trace.gap_hours


def build_policy(name: str, task: DeadlineTask, sc: Scenario, start: int, n_ticks: int, **kw: Any) -> DeadlinePolicy:
    """The named policy for the window [start, start + n_ticks) of ``sc``."""
    g = sc.g
    if name in ("omniscient", "partial_lookahead"):
        return make_policy(name, task, availability=sc.up[start : start + n_ticks], tick_hours=g, **kw)
    if name == "up_oracle":
        life = sc.life

        def lifetime(obs: Any) -> float:
            return float(life[start + int(round(obs.elapsed_hours / g))])

        return make_policy(name, task, lifetime=lifetime, tick_hours=g)
    if name == "semi_markov_dp":
        return make_policy(name, task, tick_hours=g, history=sc.up[:start], **kw)  # the past only
    return make_policy(name, task, tick_hours=g, **kw)


def run_window(name: str, task: DeadlineTask, sc: Scenario, start: int, *, record: bool = False, **kw: Any) -> SimResult:
    n_ticks = window_ticks(task.deadline_hours, sc.g)
    sc.trace.window(start, n_ticks)  # raises InvalidInput past the end
    window = sc.up[start : start + n_ticks]
    return simulate(build_policy(name, task, sc, start, n_ticks, **kw), window, sc.g, record=record)


def sample_starts(trace: SpotTrace, n_ticks: int, count: int, rng: np.random.Generator) -> np.ndarray:
    if count < 1:
        raise InvalidInput("--windows", f"must be >= 1, got {count}: no window would be replayed", fix="e.g. --windows 50")
    last = trace.n_ticks - n_ticks
    if last < 0:
        raise InvalidInput("deadline_hours", f"a {n_ticks}-tick window does not fit in {trace.name} ({trace.n_ticks} ticks)")
    return rng.integers(0, last + 1, size=count)


def cut_tick(trace: SpotTrace) -> int:
    """The first tick at or after the cut, PICK_CUT_DAYS after the trace's first tick."""
    return int(round(PICK_CUT_DAYS * 24.0 / trace.gap_hours))


def pick_starts(trace: SpotTrace, n_ticks: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """Starts of ``count`` windows of ``n_ticks`` that end at or before the cut (the picking span)."""
    if count < 1:
        raise InvalidInput("--windows", f"must be >= 1, got {count}: no window would be replayed", fix="e.g. --windows 50")
    last = cut_tick(trace) - n_ticks
    if last < 0:
        raise InvalidInput("deadline_hours", f"a {n_ticks}-tick window does not fit before the cut of {trace.name}")
    return rng.integers(0, last + 1, size=count)


def table3_task(args: argparse.Namespace) -> DeadlineTask:
    """Table 3's job: C hours, R = C / job fraction, changeover d, on-demand price k."""
    return DeadlineTask(args.compute_hours, args.compute_hours / args.job_fraction, args.overhead_hours, on_demand_price=args.on_demand_price)


def table3_starts(traces: list[SpotTrace], task: DeadlineTask, count: int, seed: int) -> list[np.ndarray]:
    """Table 3's window starts per trace: ``count`` each, from one generator seeded ``seed``."""
    rng = np.random.default_rng(seed)
    return [sample_starts(tr, window_ticks(task.deadline_hours, tr.gap_hours), count, rng) for tr in traces]


def guard_starts(traces: list[SpotTrace], task: DeadlineTask, count: int, seed: int) -> list[np.ndarray]:
    """pick-guards' window starts per trace: ``count`` each, all before the cut."""
    rng = np.random.default_rng(seed)
    return [pick_starts(tr, window_ticks(task.deadline_hours, tr.gap_hours), count, rng) for tr in traces]


# ---------------------------------------------------------------------------------------------
# Batches (run in worker processes)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """Policies x windows of one trace for one task; results come back as arrays of metrics."""

    collection: str
    trace_index: int
    task: DeadlineTask
    starts: tuple[int, ...]
    policies: tuple[str, ...]
    ts_grid: tuple[int, ...] = ()
    guards: tuple[Guards, ...] = ()


_CATALOG: dict[str, DataCatalog] = {}


def _scenario(collection: str, index: int, nodes: int) -> Scenario:
    cat = _CATALOG.setdefault("c", DataCatalog(data_dir()))
    return Scenario.of(cat.spot_traces(collection)[index], nodes)


METRICS = ("cost", "od_hours", "spot_hours", "missed", "changeovers", "seconds")


def run_job(job: Job) -> dict[str, np.ndarray]:
    """Metrics per policy: array (windows, len(METRICS)); time_sliced:n for every n in the grid."""
    sc = _scenario(job.collection, job.trace_index, job.task.nodes)
    out: dict[str, np.ndarray] = {}
    names: list[tuple[str, dict[str, Any]]] = [(p, {}) for p in job.policies]
    names += [(f"time_sliced:{n}", {"n": n}) for n in job.ts_grid]
    names += [(guard_label(gd), {"guards": gd}) for gd in job.guards]
    for label, kw in names:
        base = label.split(":")[0]
        rows = np.zeros((len(job.starts), len(METRICS)))
        for w, s in enumerate(job.starts):
            t0 = time.perf_counter()
            r = run_window(base, job.task, sc, int(s), **kw)
            rows[w] = (r.cost, r.od_hours, r.spot_hours, float(not r.met_deadline), r.changeovers, time.perf_counter() - t0)
        out[label] = rows
    return out


def run_jobs(jobs: list[Job], workers: int) -> list[dict[str, np.ndarray]]:
    if workers <= 1 or len(jobs) <= 1:
        return [run_job(j) for j in jobs]
    with ProcessPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(run_job, jobs))


def _split(jobs: Iterable[Job], parts: int) -> list[Job]:
    """Split each job's windows into ``parts`` pieces so slow policies spread over workers."""
    out = []
    for j in jobs:
        for chunk in np.array_split(np.asarray(j.starts), parts):
            if len(chunk):
                out.append(Job(j.collection, j.trace_index, j.task, tuple(int(x) for x in chunk), j.policies, j.ts_grid, j.guards))
    return out


def _merge(results: list[dict[str, np.ndarray]], keys: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], dict[str, np.ndarray]]:
    merged: dict[tuple[Any, ...], dict[str, list[np.ndarray]]] = {}
    for key, res in zip(keys, results, strict=True):
        slot = merged.setdefault(key, {})
        for name, rows in res.items():
            slot.setdefault(name, []).append(rows)
    return {k: {n: np.vstack(v) for n, v in d.items()} for k, d in merged.items()}


def _best_ts(res: dict[str, np.ndarray]) -> tuple[int, np.ndarray]:
    """Time Sliced with the n (from the grid) of least mean cost, chosen in hindsight as in the paper."""
    cands = [(float(v[:, 0].mean()), int(k.split(":")[1])) for k, v in res.items() if k.startswith("time_sliced:")]
    _, n = min(cands)
    return n, res[f"time_sliced:{n}"]


# ---------------------------------------------------------------------------------------------
# table3
# ---------------------------------------------------------------------------------------------
def table3(args: argparse.Namespace) -> dict[str, Any]:
    t_start = time.perf_counter()
    cat = DataCatalog(data_dir())
    traces = cat.spot_traces(COLLECTIONS["2w"])
    task = table3_task(args)
    wanted = args.policies.split(",") if args.policies else TABLE3_POLICIES
    bad = set(wanted) - set(TABLE3_POLICIES)
    if bad:
        raise InvalidInput("policies", f"unknown {sorted(bad)}", fix=f"choose from {','.join(TABLE3_POLICIES)}")
    policies = [p for p in wanted if p != "time_sliced" and not (args.no_omniscient and p == "omniscient")]
    grid = TS_GRID if "time_sliced" in wanted else ()
    jobs = []
    for i, starts in enumerate(table3_starts(traces, task, args.windows, args.seed)):
        jobs.append(Job(COLLECTIONS["2w"], i, task, tuple(int(s) for s in starts), tuple(policies), grid))
    jobs = _split(jobs, max(1, args.workers))
    results = run_jobs(jobs, args.workers)
    merged = _merge(results, [("all",)] * len(results))[("all",)]
    by_trace = _merge(results, [(traces[j.trace_index].name,) for j in jobs])
    ts_n = 0
    if grid:
        ts_n, merged["time_sliced"] = _best_ts(merged)
    omni_spot = float(merged["omniscient"][:, 2].mean()) if "omniscient" in merged else float("nan")
    table: dict[str, dict[str, float | None]] = {}
    for name in TABLE3_POLICIES:
        if name not in merged:
            continue
        rows = merged[name]
        spot = float(rows[:, 2].mean())
        table[name] = {
            "od_hours": round(float(rows[:, 1].mean()), 3),
            "spot_hours": round(spot, 3),
            "od_std": round(float(rows[:, 1].std()), 2),
            "spot_util": round(spot / omni_spot, 4) if omni_spot == omni_spot and omni_spot > 0 else None,
            "cost": round(float(rows[:, 0].mean()), 3),
            "missed": int(rows[:, 3].sum()),
            "changeovers": round(float(rows[:, 4].mean()), 2),
            "policy_seconds": round(float(rows[:, 5].sum()), 2),
        }
    core = sum(float(table[p]["policy_seconds"] or 0.0) for p in ("greedy", "uniform_progress", "on_demand") if p in table)
    out: dict[str, Any] = {
        "windows": int(next(iter(merged.values())).shape[0]),
        "task": {"compute_hours": task.compute_hours, "deadline_hours": task.deadline_hours, "overhead_hours": task.overhead_hours, "k": task.k},
        "seed": args.seed,
        "policies": table,
        "time_sliced_n": ts_n,
        "paper": {k: {"od_hours": v[0], "spot_hours": v[1]} for k, v in PAPER_TABLE3.items()},
        "core_policy_seconds": round(core, 2),
        "decide_us": decide_microseconds(task),
        "workers": args.workers,
        "seconds": round(time.perf_counter() - t_start, 2),
    }
    if all(p in merged for p in GAP_POLICIES):
        out["gap_closed"] = gap_closed(merged, {k[0]: v for k, v in by_trace.items()})
        out["held_out"] = held_out_gap(jobs, results, traces)
    if args.plot:
        sc = Scenario.of(traces[2])
        start = int(sample_starts(traces[2], window_ticks(task.deadline_hours, sc.g), 1, np.random.default_rng(args.seed))[0])
        shown = [p for p in GAP_POLICIES if p in merged] or ["greedy", "uniform_progress", "omniscient"]
        plot_decisions(args.plot, task, sc, start, shown)
    return out


GAP_POLICIES = ("uniform_progress", "semi_markov_dp", "omniscient")


def _gap_row(res: dict[str, np.ndarray]) -> dict[str, float]:
    """Mean costs as fractions of on-demand's, and the share of UP's gap to the omniscient
    cost that semi_markov_dp closes: (UP - ours) / (UP - omniscient)."""
    od = float(res["on_demand"][:, 0].mean())
    up, ours, omni = (float(res[p][:, 0].mean()) for p in GAP_POLICIES)
    row = {"windows": int(res["uniform_progress"].shape[0]), "uniform_progress": round(up / od, 4),
           "semi_markov_dp": round(ours / od, 4), "omniscient": round(omni / od, 4),
           "vs_up_pct": round((ours / up - 1) * 100, 2), "missed": int(res["semi_markov_dp"][:, 3].sum())}
    row["gap_closed"] = round((up - ours) / (up - omni), 4) if up - omni > 1e-9 else 0.0
    return row


def gap_closed(merged: dict[str, np.ndarray], by_trace: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
    """UP, ours and the omniscient plan per trace and overall (costs over on-demand's)."""
    return {"overall": _gap_row(merged), "traces": {name: _gap_row(res) for name, res in sorted(by_trace.items())}}


def _after_cut(job: Job, res: dict[str, np.ndarray], trace: SpotTrace) -> dict[str, np.ndarray]:
    """The rows of ``res`` whose windows start at the cut or later."""
    keep = np.asarray(job.starts) >= cut_tick(trace)
    return {name: rows[keep] for name, rows in res.items()}


def held_out_gap(jobs: list[Job], results: list[dict[str, np.ndarray]], traces: list[SpotTrace]) -> dict[str, Any]:
    """gap_closed over the held-out windows only: those that start at or after the cut, which no
    pick-guards window reaches."""
    kept = [(_after_cut(j, r, traces[j.trace_index]), traces[j.trace_index].name) for j, r in zip(jobs, results, strict=True)]
    kept = [(r, name) for r, name in kept if next(iter(r.values())).shape[0]]
    if not kept:
        return {"cut_days": PICK_CUT_DAYS, "windows": 0}
    merged = _merge([r for r, _ in kept], [("all",)] * len(kept))[("all",)]
    by_trace = _merge([r for r, _ in kept], [(name,) for _, name in kept])
    return {"cut_days": PICK_CUT_DAYS, "windows": int(merged["uniform_progress"].shape[0]),
            **gap_closed(merged, {k[0]: v for k, v in by_trace.items()})}


def decide_microseconds(task: DeadlineTask, reps: int = 20000) -> dict[str, float]:
    """Mean wall time of one decide() call (hysteresis-relevant state: on-demand, spot up)."""

    out = {}
    obs = [Observation(10.0 + i * 1e-4, 7.0, Kind.ON_DEMAND, None, bool(i % 2)) for i in range(64)]
    for name in ("greedy", "uniform_progress"):
        pol = make_policy(name, task, tick_hours=1 / 6)
        t0 = time.perf_counter()
        for i in range(reps):
            pol.decide(obs[i & 63])
        out[name] = round((time.perf_counter() - t0) / reps * 1e6, 3)
    return out


def print_table3(out: dict[str, Any]) -> None:
    print(f"Table 3: {out['windows']} windows (8 traces x {out['windows'] // 8}), C={out['task']['compute_hours']} h, "
          f"R={out['task']['deadline_hours']:.1f} h, d={out['task']['overhead_hours']} h, k={out['task']['k']}")
    print(f"{'policy':<20}{'od h':>8}{'spot h':>8}{'util':>7}{'cost':>9}{'missed':>7}{'chg':>6}{'sec':>8}   paper od/spot")
    for name, r in out["policies"].items():
        paper = out["paper"].get(name)
        ptxt = f"{paper['od_hours']:.1f} / {paper['spot_hours']:.1f}" if paper else ""
        label = f"{name}(n={out['time_sliced_n']})" if name == "time_sliced" else name
        util = f"{r['spot_util']:>7.0%}" if r["spot_util"] is not None else f"{'-':>7}"
        print(f"{label:<20}{r['od_hours']:>8.2f}{r['spot_hours']:>8.2f}{util}{r['cost']:>9.2f}{r['missed']:>7d}"
              f"{r['changeovers']:>6.1f}{r['policy_seconds']:>8.1f}   {ptxt}")
    if "gap_closed" in out:
        print_gap(out["gap_closed"])
    if out.get("held_out", {}).get("windows"):
        print(f"held out: the {out['held_out']['windows']} windows that start {out['held_out']['cut_days']:g} days "
              "or more after the traces' first tick (after every pick-guards window)")
        print_gap(out["held_out"])
    print(f"greedy+UP+on-demand replay time {out['core_policy_seconds']} s; decide() us {out['decide_us']}; "
          f"total {out['seconds']} s on {out['workers']} worker(s)")


def print_gap(gap: dict[str, Any]) -> None:
    print("cost / on-demand cost: UP, semi_markov_dp, omniscient; share of UP's gap to omniscient closed")
    print(f"{'trace':<30}{'UP':>8}{'semiMkv':>9}{'omni':>8}{'closed':>8}{'vs UP':>8}{'missed':>7}")
    for name, r in [*gap["traces"].items(), ("overall", gap["overall"])]:
        print(f"{name[4:] if name.startswith('aws/') else name:<30}{r['uniform_progress']:>8.4f}{r['semi_markov_dp']:>9.4f}"
              f"{r['omniscient']:>8.4f}{r['gap_closed']:>8.1%}{r['vs_up_pct']:>7.2f}%{r['missed']:>7d}")


# ---------------------------------------------------------------------------------------------
# pick-guards: semi_markov_dp's two unlearnt constants, picked before the cut
# ---------------------------------------------------------------------------------------------
def guard_label(guards: Guards) -> str:
    """``semi_markov_dp:<idle floor>:<od_to_idle 0/1>``, the result key of one candidate."""
    return f"semi_markov_dp:{guards.idle_floor:g}:{int(guards.od_to_idle)}"


def guard_candidates() -> tuple[Guards, ...]:
    """Every idle floor of GUARD_FLOORS, with and without leaving on-demand to wait."""
    return tuple(Guards(f, o) for o in (False, True) for f in GUARD_FLOORS)


def _candidate_row(guards: Guards, merged: dict[str, np.ndarray], by_trace: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
    """One candidate's mean cost over on-demand's, its change vs UP overall and on its worst trace, misses."""
    key = guard_label(guards)
    od = float(merged["on_demand"][:, 0].mean())
    up, ours = float(merged["uniform_progress"][:, 0].mean()), float(merged[key][:, 0].mean())
    per = {t: round((float(r[key][:, 0].mean()) / float(r["uniform_progress"][:, 0].mean()) - 1) * 100, 2) for t, r in sorted(by_trace.items())}
    worst = max(per, key=lambda t: per[t])
    return {"idle_floor": guards.idle_floor, "od_to_idle": guards.od_to_idle, "cost": round(ours / od, 4),
            "vs_up_pct": round((ours / up - 1) * 100, 2), "worst_trace": worst, "worst_vs_up_pct": per[worst],
            "missed": int(merged[key][:, 3].sum()), "traces_vs_up_pct": per}


def pick_winner(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Least mean cost among the candidates with no miss and no trace worse than UP by more than
    PICK_MAX_LOSS_PCT (ties: the earlier, safer candidate); if none qualifies, the least worst trace."""
    ok = [r for r in rows if r["missed"] == 0 and r["worst_vs_up_pct"] <= PICK_MAX_LOSS_PCT]
    if ok:
        return min(ok, key=lambda r: r["cost"])
    return min(rows, key=lambda r: (r["missed"], r["worst_vs_up_pct"]))


def pick_guards(args: argparse.Namespace) -> dict[str, Any]:
    """Replay UP and every guard candidate on the picking windows (before the cut) and name the winner."""
    t_start = time.perf_counter()
    traces = DataCatalog(data_dir()).spot_traces(COLLECTIONS["2w"])
    task = table3_task(args)
    cands = guard_candidates()
    jobs = [Job(COLLECTIONS["2w"], i, task, tuple(int(s) for s in starts), ("on_demand", "uniform_progress"), (), cands)
            for i, starts in enumerate(guard_starts(traces, task, args.windows, args.seed))]
    jobs = _split(jobs, max(1, args.workers))
    results = run_jobs(jobs, args.workers)
    merged = _merge(results, [("all",)] * len(results))[("all",)]
    by_trace = {k[0]: v for k, v in _merge(results, [(traces[j.trace_index].name,) for j in jobs]).items()}
    rows = [_candidate_row(g, merged, by_trace) for g in cands]
    winner = pick_winner(rows)
    ends = [s + window_ticks(task.deadline_hours, traces[j.trace_index].gap_hours) for j in jobs for s in j.starts]
    return {"cut_days": PICK_CUT_DAYS, "cut_tick": cut_tick(traces[0]), "last_window_end_tick": int(max(ends)),
            "windows": int(merged["uniform_progress"].shape[0]), "windows_per_trace": args.windows, "seed": args.seed,
            "uniform_progress": round(float(merged["uniform_progress"][:, 0].mean()) / float(merged["on_demand"][:, 0].mean()), 4),
            "candidates": rows, "winner": {"idle_floor": winner["idle_floor"], "od_to_idle": winner["od_to_idle"]},
            "in_code": {"idle_floor": IDLE_FLOOR, "od_to_idle": OD_TO_IDLE},
            "workers": args.workers, "seconds": round(time.perf_counter() - t_start, 2)}


def print_pick_guards(out: dict[str, Any]) -> None:
    print(f"semi_markov_dp guards on {out['windows']} windows ({out['windows_per_trace']} per trace, seed {out['seed']}) "
          f"that end by tick {out['last_window_end_tick']} <= cut {out['cut_tick']} ({out['cut_days']:g} days); UP {out['uniform_progress']:.4f}")
    print(f"{'idle floor':>10}{'od->idle':>9}{'cost':>9}{'vs UP':>8}{'worst vs UP':>13}  {'worst trace':<28}{'missed':>7}")
    for r in out["candidates"]:
        print(f"{r['idle_floor']:>10g}{'yes' if r['od_to_idle'] else 'no':>9}{r['cost']:>9.4f}{r['vs_up_pct']:>7.2f}%"
              f"{r['worst_vs_up_pct']:>12.2f}%  {r['worst_trace'][4:]:<28}{r['missed']:>7d}")
    w, c = out["winner"], out["in_code"]
    same = "the same as" if w == c else "DIFFERENT from"
    print(f"winner: idle floor {w['idle_floor']:g}, leave on-demand to wait: {w['od_to_idle']} ({same} the code's "
          f"IDLE_FLOOR {c['idle_floor']:g}, OD_TO_IDLE {c['od_to_idle']}); {out['seconds']} s on {out['workers']} worker(s)")


# ---------------------------------------------------------------------------------------------
# sweep (Fig. 11-12)
# ---------------------------------------------------------------------------------------------
SWEEP_POLICIES = ("on_demand", "greedy", "uniform_progress", "uniform_progress_loose", "partial_lookahead", "up_oracle", "omniscient",
                  "semi_markov_dp")


def sweep(args: argparse.Namespace) -> dict[str, Any]:
    t_start = time.perf_counter()
    cat = DataCatalog(data_dir())
    rng = np.random.default_rng(args.seed)
    fractions = [float(f) for f in args.fractions.split(",")]
    policies = tuple(p for p in SWEEP_POLICIES if not (args.no_omniscient and p in ("omniscient",)))
    jobs, keys = [], []
    for coll_key in args.collections.split(","):
        coll = COLLECTIONS[coll_key]
        for i, tr in enumerate(cat.spot_traces(coll)):
            # the same windows for every job fraction of a trace (paired: curves are less noisy)
            longest = window_ticks(args.compute_hours / min(fractions), tr.gap_hours)
            starts = sample_starts(tr, longest, args.windows, rng)
            for f in fractions:
                task = DeadlineTask(args.compute_hours, args.compute_hours / f, args.overhead_hours, on_demand_price=args.on_demand_price)
                job = Job(coll, i, task, tuple(int(s) for s in starts), policies, TS_GRID)
                for part in _split([job], max(1, args.workers)):
                    jobs.append(part)
                    keys.append((coll_key, tr.name, f))
    results = run_jobs(jobs, args.workers)
    merged = _merge(results, keys)
    rows = []
    for (coll_key, name, f), res in merged.items():
        ts_n, res["time_sliced"] = _best_ts(res)
        od = res["on_demand"][:, 0]
        omni = res.get("omniscient")
        for pol in (*policies, "time_sliced"):
            if pol == "on_demand":
                continue
            c = res[pol][:, 0]
            sav = 1 - c / od
            row = {
                "collection": coll_key, "trace": name, "job_fraction": f, "policy": pol,
                "saving_mean": round(float(sav.mean()), 4), "saving_p25": round(float(np.percentile(sav, 25)), 4),
                "saving_p75": round(float(np.percentile(sav, 75)), 4), "missed": int(res[pol][:, 3].sum()),
                "windows": int(len(c)),
            }
            if omni is not None:
                gap = (c - omni[:, 0]) / od
                row["gap_mean"] = round(float(gap.mean()), 4)
                row["gap_p75"] = round(float(np.percentile(gap, 75)), 4)
            if pol == "time_sliced":
                row["n"] = ts_n
            rows.append(row)
    out = {"rows": rows, "summary": sweep_summary(rows, merged), "seconds": round(time.perf_counter() - t_start, 2), "workers": args.workers}
    if args.plot:
        plot_savings(args.plot, rows)
    return out


def sweep_summary(rows: list[dict[str, Any]], merged: dict[tuple[Any, ...], dict[str, np.ndarray]]) -> dict[str, Any]:
    """The Fig. 11-12 claims, checked over every (trace, job fraction)."""
    by = {(r["collection"], r["trace"], r["job_fraction"], r["policy"]): r for r in rows}
    cells = {(c, t, f) for c, t, f, _ in by}
    up_ge_greedy = sum(by[(*k, "uniform_progress")]["saving_mean"] >= by[(*k, "greedy")]["saving_mean"] - 1e-9 for k in cells)
    out: dict[str, Any] = {"cells": len(cells), "up_at_least_greedy_cells": int(up_ge_greedy)}
    if all((*k, "uniform_progress_loose") in by for k in cells):
        out["up_loose_at_least_greedy_cells"] = int(sum(
            by[(*k, "uniform_progress_loose")]["saving_mean"] >= by[(*k, "greedy")]["saving_mean"] - 1e-9 for k in cells))
    worst = min(cells, key=lambda k: by[(*k, "uniform_progress")]["saving_mean"] - by[(*k, "greedy")]["saving_mean"])
    out["up_minus_greedy_worst_cell"] = {"cell": list(worst), "points": round(
        100 * (by[(*worst, "uniform_progress")]["saving_mean"] - by[(*worst, "greedy")]["saving_mean"]), 2)}
    missed = {p: sum(r["missed"] for r in rows if r["policy"] == p) for p in {r["policy"] for r in rows}}
    out["missed"] = missed
    for coll in sorted({c for c, _, _ in cells}):
        per: dict[str, Any] = {}
        for pol in ("greedy", "uniform_progress", "uniform_progress_loose", "time_sliced", "partial_lookahead", "up_oracle", "semi_markov_dp"):
            gaps = []
            for (c, _t, _f), res in merged.items():
                if c == coll and "omniscient" in res and pol in res:
                    gaps.append((res[pol][:, 0] - res["omniscient"][:, 0]) / res["on_demand"][:, 0])
            if gaps:
                allg = np.concatenate(gaps)
                per[pol] = {"gap_mean": round(float(allg.mean()), 4), "gap_p75": round(float(np.percentile(allg, 75)), 4)}
        if "greedy" in per and "uniform_progress" in per:
            g, u = per["greedy"], per["uniform_progress"]
            per["up_closes_greedy_gap_mean"] = round(1 - u["gap_mean"] / g["gap_mean"], 3) if g["gap_mean"] > 0 else None
            per["up_closes_greedy_gap_p75"] = round(1 - u["gap_p75"] / g["gap_p75"], 3) if g["gap_p75"] > 0 else None
        out[coll] = per
        gap_cells = {k: res for k, res in merged.items() if k[0] == coll and all(p in res for p in (*GAP_POLICIES, "on_demand"))}
        if gap_cells:
            out[coll]["semi_markov_dp_gap"] = _sweep_gap(gap_cells)
    return out


def _sweep_gap(cells: dict[tuple[Any, ...], dict[str, np.ndarray]]) -> dict[str, Any]:
    """Share of UP's gap to omniscient that semi_markov_dp closes: per trace, per job fraction, overall."""
    def pooled(keys: list[tuple[Any, ...]]) -> dict[str, float]:
        return _gap_row({p: np.vstack([cells[k][p] for k in keys]) for p in (*GAP_POLICIES, "on_demand")})

    keys = sorted(cells)
    return {"overall": pooled(keys),
            "traces": {t: pooled([k for k in keys if k[1] == t]) for t in sorted({k[1] for k in keys})},
            "fractions": {str(f): pooled([k for k in keys if k[2] == f]) for f in sorted({k[2] for k in keys})}}


def print_sweep(out: dict[str, Any]) -> None:
    rows = out["rows"]
    pols = ["greedy", "time_sliced", "uniform_progress", "uniform_progress_loose", "partial_lookahead", "up_oracle", "omniscient", "semi_markov_dp"]
    pols = [p for p in pols if any(r["policy"] == p for r in rows)]
    print("Mean cost savings vs on-demand per (trace, job fraction)")
    print(f"{'coll':<5}{'trace':<28}{'frac':>6}" + "".join(f"{p[:12]:>13}" for p in pols))
    keys = sorted({(r["collection"], r["trace"], r["job_fraction"]) for r in rows})
    by = {(r["collection"], r["trace"], r["job_fraction"], r["policy"]): r for r in rows}
    for k in keys:
        print(f"{k[0]:<5}{k[1][4:]:<28}{k[2]:>6.2f}" + "".join(f"{by[(*k, p)]['saving_mean']:>13.1%}" if (*k, p) in by else f"{'':>13}" for p in pols))
    print(json.dumps(out["summary"], indent=1))
    print(f"total {out['seconds']} s on {out['workers']} worker(s)")


# ---------------------------------------------------------------------------------------------
# gang (Fig. 14, A.7.4)
# ---------------------------------------------------------------------------------------------
def gang(args: argparse.Namespace) -> dict[str, Any]:

    t_start = time.perf_counter()
    cat = DataCatalog(data_dir())
    rng = np.random.default_rng(args.seed)
    fractions = [float(f) for f in args.fractions.split(",")]
    rows = []
    for nodes, coll in GANG_COLLECTIONS.items():
        for tr in cat.spot_traces(coll):
            sc = Scenario.of(tr, nodes)
            for f in fractions:
                task = DeadlineTask(args.compute_hours, args.compute_hours / f, args.overhead_hours, on_demand_price=args.on_demand_price, nodes=nodes)
                n_ticks = window_ticks(task.deadline_hours, sc.g)
                starts = sample_starts(tr, n_ticks, args.windows, rng)
                acc: dict[str, list[float]] = {"greedy": [], "uniform_progress": [], "uniform_progress_loose": [], "on_demand": [],
                                               "omniscient_homogeneous": [], "omniscient_heterogeneous": []}
                missed = {"greedy": 0, "uniform_progress": 0, "uniform_progress_loose": 0}
                for s in starts:
                    s = int(s)
                    for pol in ("greedy", "uniform_progress", "uniform_progress_loose", "on_demand"):
                        r = run_window(pol, task, sc, s)
                        acc[pol].append(r.cost)
                        if pol in missed:
                            missed[pol] += int(not r.met_deadline)
                    acc["omniscient_homogeneous"].append(omniscient_plan(task, sc.up[s : s + n_ticks], sc.g).cost)
                    acc["omniscient_heterogeneous"].append(heterogeneous_plan(task, tr.available[s : s + n_ticks], sc.g).cost)
                od = np.asarray(acc["on_demand"])
                row: dict[str, Any] = {"nodes": nodes, "trace": tr.name, "job_fraction": f, "windows": len(starts), "missed": missed}
                for pol, costs in acc.items():
                    if pol != "on_demand":
                        row[pol] = round(float((1 - np.asarray(costs) / od).mean()), 4)
                homo, het = np.asarray(acc["omniscient_homogeneous"]), np.asarray(acc["omniscient_heterogeneous"])
                row["homo_vs_hetero_cost_pct"] = round(float((homo.mean() / het.mean() - 1) * 100), 3)
                rows.append(row)
    return {"rows": rows, "seconds": round(time.perf_counter() - t_start, 2)}


def print_gang(out: dict[str, Any]) -> None:
    print("Gang-scheduled jobs: mean savings vs on-demand (homogeneous clusters; Omniscient homo / hetero)")
    print(f"{'N':>3} {'trace':<30}{'frac':>6}{'greedy':>9}{'UP':>9}{'UP-A.8':>9}{'omni-ho':>9}{'omni-he':>9}{'ho/he-1':>9}  missed")
    for r in out["rows"]:
        print(f"{r['nodes']:>3} {r['trace'][4:]:<30}{r['job_fraction']:>6.2f}{r['greedy']:>9.1%}{r['uniform_progress']:>9.1%}"
              f"{r['uniform_progress_loose']:>9.1%}"
              f"{r['omniscient_homogeneous']:>9.1%}{r['omniscient_heterogeneous']:>9.1%}{r['homo_vs_hetero_cost_pct']:>8.2f}%  {r['missed']}")
    print(f"total {out['seconds']} s")


# ---------------------------------------------------------------------------------------------
# window
# ---------------------------------------------------------------------------------------------
def resolve_trace(path: str) -> SpotTrace:
    p = Path(path)
    if not p.is_file():
        for base in (data_dir() / "spot-traces", data_dir() / "multiregion-h100", data_dir()):
            if (base / path).is_file():
                p = base / path
                break
    try:
        return load_spot_trace(p)
    except BadDataFile as exc:
        raise exc.given_as("--trace") from None


def window(args: argparse.Namespace) -> dict[str, Any]:
    trace = resolve_trace(args.trace)
    task = DeadlineTask(args.compute_hours, args.deadline_hours, args.overhead_hours, on_demand_price=args.on_demand_price, nodes=args.nodes)
    sc = Scenario.of(trace, args.nodes)
    kw = {"n": args.slices} if args.policy in ("time_sliced", "partial_lookahead") and args.slices else {}
    r = run_window(args.policy, task, sc, args.start_tick, record=True, **kw)
    out = {
        "trace": trace.name, "policy": args.policy, "start_tick": args.start_tick, "tick_hours": sc.g,
        "cost": round(r.cost, 6), "spot_hours": round(r.spot_hours, 6), "od_hours": round(r.od_hours, 6),
        "changeovers": r.changeovers, "finish_hours": round(r.finish_hours, 6) if math.isfinite(r.finish_hours) else None,
        "met_deadline": r.met_deadline, "decisions": r.decision_list(),
    }
    if args.plot:
        plot_decisions(args.plot, task, sc, args.start_tick, [args.policy])
    return out


def print_window(out: dict[str, Any]) -> None:
    print(f"{out['policy']} on {out['trace']} from tick {out['start_tick']}: cost {out['cost']:.2f}, spot {out['spot_hours']:.2f} h, "
          f"on-demand {out['od_hours']:.2f} h, changeovers {out['changeovers']}, finish {out['finish_hours']} h, met deadline {out['met_deadline']}")
    states = "".join({"idle": ".", "spot": "s", "on_demand": "D"}[s] for _, s in out["decisions"])
    print(states)


# ---------------------------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------------------------
def plot_decisions(path: str, task: DeadlineTask, sc: Scenario, start: int, policies: list[str]) -> None:
    """Fig. 4 / 9: spot availability band, instance state per policy, progress vs the ep(t) line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_ticks = window_ticks(task.deadline_hours, sc.g)
    t = np.arange(n_ticks) * sc.g
    fig, axes = plt.subplots(len(policies) + 1, 1, figsize=(10, 1.8 * (len(policies) + 1) + 1), sharex=True)
    up = sc.up[start : start + n_ticks]
    axes[0].fill_between(t, 0, up.astype(float), step="post", color="tab:green", alpha=0.5)
    axes[0].set_ylabel("spot\navailable")
    axes[0].set_yticks([])
    for ax, name in zip(axes[1:], policies, strict=True):
        r = run_window(name, task, sc, start, record=True)
        dec = r.decisions if r.decisions is not None else np.zeros(n_ticks, dtype=np.int8)
        for code, color in ((1, "tab:blue"), (2, "tab:red")):
            ax.fill_between(t, 0, (dec == code).astype(float) * 0.3, step="post", color=color, alpha=0.7,
                            label="spot" if code == 1 else "on-demand")
        work = np.where(dec > 0, sc.g, 0.0)
        prog = np.minimum(np.cumsum(work) - r.changeovers * 0, task.compute_hours)
        ax2 = ax.twinx()
        ax2.plot(t, _progress_curve(r, dec, task, sc.g), color="black", lw=1, label="progress")
        ax2.plot(t, t * task.compute_hours / task.deadline_hours, color="gray", ls="--", lw=1, label="ep(t)")
        ax2.set_ylim(0, task.compute_hours * 1.05)
        ax.set_yticks([])
        ax.set_ylabel(name.replace("_", "\n"))
        ax.set_title(f"{name}: cost {r.cost:.1f}, spot {r.spot_hours:.1f} h, od {r.od_hours:.1f} h, changeovers {r.changeovers}", fontsize=8)
        del prog
    axes[1].legend(loc="upper left", fontsize=7)
    axes[-1].set_xlabel("hours")
    fig.suptitle(f"{sc.trace.name} from tick {start}: C={task.compute_hours} h, R={task.deadline_hours:.1f} h, d={task.overhead_hours} h")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _progress_curve(r: SimResult, dec: np.ndarray, task: DeadlineTask, g: float) -> np.ndarray:
    """Progress at each tick start, rebuilt from the decision trace (changeover d after each switch)."""
    out = np.zeros(len(dec))
    p, oh, prev = 0.0, 0.0, 0
    for i, s in enumerate(dec.tolist()):
        out[i] = p
        if s == 0:
            prev = 0
            continue
        if s != prev:
            oh = task.overhead_hours
        use = min(oh, g)
        oh -= use
        p = min(task.compute_hours, p + g - use)
        prev = s
    return out


def plot_savings(path: str, rows: list[dict[str, Any]]) -> None:
    """Fig. 11: mean cost savings vs job fraction, one panel per trace."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = sorted({(r["collection"], r["trace"]) for r in rows})
    cols = 4
    nrows = math.ceil(len(traces) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False)
    for ax, (coll, tr) in zip(axes.flat, traces, strict=False):
        for pol in ("greedy", "time_sliced", "uniform_progress", "uniform_progress_loose", "partial_lookahead", "up_oracle", "omniscient",
                    "semi_markov_dp"):
            pts = sorted((r["job_fraction"], r["saving_mean"]) for r in rows if r["trace"] == tr and r["collection"] == coll and r["policy"] == pol)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] * 100 for p in pts], marker="o", ms=3, label=pol)
        ax.set_title(f"{coll} {tr[4:]}", fontsize=8)
        ax.set_xlabel("job fraction C/R")
        ax.set_ylabel("savings vs on-demand (%)")
    for ax in list(axes.flat)[len(traces):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.deadline", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p: argparse.ArgumentParser, windows: int, workers: int = min(2, os.cpu_count() or 1)) -> None:
        p.add_argument("--json", action="store_true", help="print one JSON object")
        p.add_argument("--plot", default=None, help="write a PNG")
        p.add_argument("--seed", type=int, default=SEED)
        p.add_argument("--windows", type=int, default=windows, help="random windows per trace (and job fraction)")
        p.add_argument("--workers", type=int, default=workers)
        p.add_argument("--compute-hours", type=float, default=48.0)
        p.add_argument("--overhead-hours", type=float, default=0.2)
        p.add_argument("--on-demand-price", type=float, default=3.0)
        p.add_argument("--no-omniscient", action="store_true", help="skip the (slower) Omniscient DP")

    t3 = sub.add_parser("table3", help="Table 3: hours on on-demand / spot, 8 traces x 300 windows")
    common(t3, 300)
    t3.add_argument("--job-fraction", type=float, default=0.8)
    t3.add_argument("--policies", default="", help="comma list (default: all seven), e.g. greedy,uniform_progress,on_demand")
    sw = sub.add_parser("sweep", help="Fig. 11-12: savings per (trace, job fraction, policy)")
    common(sw, 50)
    sw.add_argument("--collections", default="2w,2m")
    sw.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS))
    gg = sub.add_parser("gang", help="Fig. 14 / A.7.4: gangs of 4 and 16")
    common(gg, 20)
    gg.add_argument("--fractions", default="0.6,0.8,0.9")
    pg = sub.add_parser("pick-guards", help="semi_markov_dp's idle floor and on-demand rule, picked on windows before the cut")
    pg.add_argument("--json", action="store_true", help="print one JSON object")
    pg.add_argument("--seed", type=int, default=PICK_SEED)
    pg.add_argument("--windows", type=int, default=PICK_WINDOWS, help="picking windows per trace")
    pg.add_argument("--workers", type=int, default=1)
    pg.add_argument("--compute-hours", type=float, default=48.0)
    pg.add_argument("--overhead-hours", type=float, default=0.2)
    pg.add_argument("--on-demand-price", type=float, default=3.0)
    pg.add_argument("--job-fraction", type=float, default=0.8)
    w = sub.add_parser("window", help="one window, with its decision trace")
    w.add_argument("--trace", required=True, help="trace file (path, or relative to the data directory)")
    w.add_argument("--start-tick", type=int, required=True)
    w.add_argument("--compute-hours", type=float, required=True)
    w.add_argument("--deadline-hours", type=float, required=True)
    w.add_argument("--overhead-hours", type=float, required=True)
    w.add_argument("--on-demand-price", type=float, default=3.0)
    w.add_argument("--nodes", type=int, default=1)
    w.add_argument("--policy", required=True)
    w.add_argument("--slices", type=int, default=0, help="n for time_sliced / partial_lookahead")
    w.add_argument("--json", action="store_true")
    w.add_argument("--plot", default=None)
    return ap.parse_args(argv)


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], dict[str, Any]], Callable[[dict[str, Any]], None]]] = {
    "table3": (table3, print_table3),
    "sweep": (sweep, print_sweep),
    "gang": (gang, print_gang),
    "pick-guards": (pick_guards, print_pick_guards),
    "window": (window, print_window),
}


@entry
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run, show = COMMANDS[args.cmd]
    out = run(args)
    if args.json:
        print(json.dumps(out, default=float))
    else:
        show(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
