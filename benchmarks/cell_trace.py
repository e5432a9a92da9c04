"""One cell of the robustness run replayed with a trace: which pods carry the mean JQT, which evictions the guard's raises cause.

    python -m benchmarks.cell_trace --trace openb/gpuspec10 [--label gfs:VARIANT] [--compare fgd+quota,...]
        [--seed 2] [--days 135-150] [--day-bin 5] [--top 6] [--pods-dir DIR] [--cache DIR]
        [--rows-out FILE.csv] [--hours-out FILE.csv] [--json]

The cell is simulated exactly as ``python -m benchmarks.scheduler robust`` simulates it (same
workload, scheduler, options and metrics; the figures are checked against the robust cache where
it holds the cell), in a :class:`TracingSimulator` that only watches:

* **queueing**: per QoS, the pod shapes (GPUs per pod x pods, GPU models) whose queueing times
  give the most of the class's mean JQT (a shape's share = its tasks' summed JQT / the class's
  finished tasks), and for each the ``--day-bin``-day windows of submission that carry it; every
  ``--compare`` label's share on the same shapes beside it;
* **evictions**: spot evictions, and how many of them hit a run that started while its pool's
  quota stood raised by the spot guard (``guard-admitted``: the quota update before the start
  was a guard raise) and how many hit the very task the raise was for;
* **the guard** (GFS with a ``spot_guard``; per GPU pool, in the ``--days`` window): the 300 s
  quota steps it raised, and for every other step on which the oldest spot task for the pool had
  waited the guard's wait, why not: the pool's eviction rate (Eq. 11's e, the figure the calm
  guard reads) at or over its threshold (``rate_high``), a raise less than H / m before (``pace``),
  an HP task queued (``hpq``) or no idle GPUs to give (``no_room``); and the pool's mean e,
  the share of its hours with e at or over the threshold, its HP-held, spot-held, idle GPUs and
  quota; with ``--days``, the same per day over all pools (HP-held and idle GPUs, queued spot
  tasks, the oldest one's wait, steps by status, evictions).

``--rows-out`` writes one CSV row per task and label (the per-task figures), ``--hours-out``
one per label, pool and hour (the guard's figures); ``--json`` prints the summary.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import entry
from benchmarks.gpucluster import build_workload, check_did_work, scheduler_for
from benchmarks.robust import BASELINES, Cell, CellCache, build_cells, default_cache_dir
from controlplane.core.errors import InvalidInput
from policies.gfs_options import GFS_VARIANTS, LIVE_DEFAULT_NAME
from policies.placement import Placement
from policies.quota import spot_guard_gap_s, spot_guard_wait_s
from policies.schedulers import make_scheduler
from policies.sim.gpu_sim import GpuSimulator, SimConfig, SimResult, TaskRecord

DAY_S = 86400.0
#: Why the guard did not raise a pool's quota on a step where its oldest spot task had waited long enough.
GUARD_STATUSES = ("raised", "rate_high", "pace", "hpq", "no_room")


@dataclass
class TaskGuardCounts:
    """One task's runs and evictions that started under a guard raise (any / the raise's own task)."""

    guard_runs: int = 0
    guard_evictions: int = 0
    target_runs: int = 0
    target_evictions: int = 0


@dataclass
class GuardTick:
    """One pool's 300 s quota step as the spot guard saw it."""

    t: float
    pool: int
    rate: float | None
    quota: float | None
    hp_held: float
    spot_held: float
    idle: float
    status: str  # a GUARD_STATUSES entry, "waiting" (no spot task waited long enough) or "none" (no quota yet)
    spot_queued: int = 0  # queued spot tasks that may use the pool
    oldest_wait_s: float = 0.0  # how long the oldest of them has waited


@dataclass
class SpotEviction:
    """One spot eviction: when, the pools the run held, whether its run started under a raise (and was its task)."""

    t: float
    pools: tuple[int, ...]
    guard_admitted: bool
    target: bool


class TracingSimulator(GpuSimulator):
    """:class:`GpuSimulator` that records the guard's steps and which runs started under its raises;
    it reads the simulator's state after each step and never changes it (same results)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard_ticks: list[GuardTick] = []
        self.spot_evictions: list[SpotEviction] = []
        self.guard_counts: dict[str, TaskGuardCounts] = defaultdict(TaskGuardCounts)
        self._run_flags: dict[str, tuple[bool, bool]] = {}
        self._raise_target: dict[int, str] = {}

    def _start(self, rec: TaskRecord, p: Placement) -> None:
        super()._start(rec, p)
        req = rec.task.request
        if req.is_hp:
            return
        pools = {int(self.pool_of[pod.node]) for pod in p.pods}
        raised = [q for q in pools if self._guard_raised[q]]
        target = any(self._raise_target.get(q) == req.id for q in raised)
        self._run_flags[req.id] = (bool(raised), target)
        counts = self.guard_counts[req.id]
        counts.guard_runs += bool(raised)
        counts.target_runs += target

    def _evict(self, tid: str) -> None:
        admitted, target = self._run_flags.pop(tid, (False, False))
        rt = self.running.get(tid)
        pools = tuple(sorted({int(self.pool_of[n]) for n, _, _ in rt.cards})) if rt is not None else ()
        self.spot_evictions.append(SpotEviction(self.now, pools, admitted, target))
        counts = self.guard_counts[tid]
        counts.guard_evictions += admitted
        counts.target_evictions += target
        super()._evict(tid)

    def _finish(self, tid: str) -> None:
        self._run_flags.pop(tid, None)
        super()._finish(tid)

    def _quota_tick(self) -> None:
        super()._quota_tick()
        for i, ql in enumerate(self.quota_loops):
            self.guard_ticks.append(self._guard_tick(i, ql.quota))

    def _oldest_spot(self, pool: int) -> TaskRecord | None:
        """The oldest queued spot task that may use the pool (the one the guard raises the quota for)."""
        oldest: TaskRecord | None = None
        name = self.pool_names[pool]
        for (_, _, _, models), d in self.queues["spot"].items():
            if d and (models is None or len(self.pool_names) == 1 or name in models):
                head = self.records[d[0]]
                if oldest is None or head.queued_since < oldest.queued_since:
                    oldest = head
        return oldest

    def _guard_tick(self, pool: int, quota: float | None) -> GuardTick:
        rate = self._eviction_rate(pool)  # the same e the step read (its window was trimmed at this instant)
        idle = float(self.free[self.pool_of == pool].sum()) if len(self.quota_loops) > 1 else float(self.free.sum())
        oldest = self._oldest_spot(pool)
        if self._guard_at[pool] == self.now and oldest is not None:
            self._raise_target[pool] = oldest.task.id
        return GuardTick(self.now, pool, rate, quota, float(self.hp_running[pool].sum()),
                         float(self.spot_pool[pool]), idle, self._status(pool, quota, rate, oldest),
                         self._spot_queued(pool), self.now - oldest.queued_since if oldest is not None else 0.0)

    def _spot_queued(self, pool: int) -> int:
        name = self.pool_names[pool]
        return sum(len(d) for (_, _, _, models), d in self.queues["spot"].items()
                   if models is None or len(self.pool_names) == 1 or name in models)

    def _status(self, pool: int, quota: float | None, rate: float | None, oldest: TaskRecord | None) -> str:
        """Why the guard did (not) raise the pool's quota on this step (:data:`GUARD_STATUSES`)."""
        mode = self.cfg.spot_guard
        if quota is None or mode == "off":
            return "none"
        if self._guard_at[pool] == self.now:
            return "raised"
        wait_s = spot_guard_wait_s(mode, self.cfg.quota.theta_seconds) * float(self._guard_factor[pool])
        if oldest is None or self.now - oldest.queued_since < wait_s:
            return "waiting"
        if not self._guard_on(rate):
            return "rate_high"
        if self._hp_waits_for(pool):
            return "hpq"
        if self.now - self._guard_at[pool] < spot_guard_gap_s(mode, self.cfg.quota.horizon_hours) - 1e-9:
            return "pace"
        return "no_room"


# ---------------------------------------------------------------------------------------------
# running a cell
# ---------------------------------------------------------------------------------------------
def cell_for(trace: str, label: str, seed: int, pods_dir: Path | None) -> Cell:
    """The robust run's cell of ``label`` (``gfs:VARIANT`` or a baseline) on ``trace``."""
    variant = label.removeprefix("gfs:")
    if label.startswith("gfs:") and variant not in GFS_VARIANTS:
        raise InvalidInput("--label", f"unknown GFS variant {variant!r}", fix=f"use gfs:NAME, NAME in {', '.join(GFS_VARIANTS)}")
    if not label.startswith("gfs:") and label not in BASELINES:
        raise InvalidInput("--label", f"unknown scheduler {label!r}", fix=f"use gfs:NAME or one of {', '.join(BASELINES)}")
    variants = [variant] if label.startswith("gfs:") else []
    cells = build_cells([trace], variants, (seed,), 21.0, 192.0, baselines=not variants, pods_dir=pods_dir)
    return next(c for c in cells if c.label == label)


def run_traced(cell: Cell) -> tuple[SimResult, TracingSimulator]:
    """Simulate ``cell`` as ``benchmarks.robust.run_cell`` does, in a :class:`TracingSimulator`."""
    if cell.is_openb:
        w = build_workload("openb", None, cell.pods_file, cell.seed)
        cfg = SimConfig.for_options(cell.options)
    else:
        w = build_workload(cell.trace, cell.a100_days, None, cell.seed)
        cfg = SimConfig.for_options(cell.options, measure_from_s=cell.warmup_h * 3600.0)
    if cell.label.startswith("gfs:"):
        sched = make_scheduler("gfs", seed=cell.seed, gfs_queue=cell.options.queue, spot_score=cell.options.spot_score,
                               hp_score=cell.options.hp_score)
    else:
        sched = scheduler_for(cell.label, cell.seed)
    sim = TracingSimulator(w, sched, cfg)
    r = sim.run()
    check_did_work(cell.trace, cell.label, w, r)
    return r, sim


# ---------------------------------------------------------------------------------------------
# what the trace says
# ---------------------------------------------------------------------------------------------
ShapeKey = tuple[str, float, int, str]


def shape_of(rec: TaskRecord) -> ShapeKey:
    """(QoS, GPUs per pod, pods, GPU models or 'any') of a task."""
    req = rec.task.request
    return req.priority, round(req.gpus, 3), req.pods, "|".join(req.gpu_model) if req.gpu_model else "any"


def measured(r: SimResult, sim: GpuSimulator, hp: bool) -> list[TaskRecord]:
    """The finished tasks of a class that the metrics count (JQT means are over these)."""
    return [rec for rec in r.records.values() if rec.task.request.is_hp == hp and rec.finished
            and rec.task.submit_s >= sim.cfg.measure_from_s]


def shape_shares(recs: list[TaskRecord]) -> dict[ShapeKey, tuple[int, float]]:
    """Per shape: its tasks and its share of the class's mean JQT (summed JQT / the class's tasks)."""
    n = max(len(recs), 1)
    out: dict[ShapeKey, list[float]] = defaultdict(lambda: [0, 0.0])
    for rec in recs:
        row = out[shape_of(rec)]
        row[0] += 1
        row[1] += rec.jqt_s / n
    return {k: (int(v[0]), float(v[1])) for k, v in out.items()}


def day_shares(recs: list[TaskRecord], shape: ShapeKey, n_class: int, day_bin: float) -> list[tuple[str, int, float]]:
    """The shape's share of the class's mean JQT per ``day_bin``-day window of submission, largest first."""
    got: dict[int, list[float]] = defaultdict(lambda: [0, 0.0])
    for rec in recs:
        if shape_of(rec) == shape:
            row = got[int(rec.task.submit_s // (day_bin * DAY_S))]
            row[0] += 1
            row[1] += rec.jqt_s / max(n_class, 1)
    rows = [(f"{b * day_bin:g}-{(b + 1) * day_bin:g}", int(v[0]), float(v[1])) for b, v in got.items()]
    return sorted(rows, key=lambda x: -x[2])


def in_days(t: float, days: tuple[float, float] | None) -> bool:
    return days is None or days[0] * DAY_S <= t < days[1] * DAY_S


def eviction_summary(sim: TracingSimulator, days: tuple[float, float] | None) -> dict[str, int]:
    """Spot evictions (in the window), those of guard-admitted runs, those of the raise's own task."""
    ev = [e for e in sim.spot_evictions if in_days(e.t, days)]
    return {"evictions": len(ev), "guard_admitted": sum(e.guard_admitted for e in ev),
            "guard_target": sum(e.target for e in ev)}


def guard_summary(sim: TracingSimulator, days: tuple[float, float] | None) -> dict[str, dict[str, Any]]:
    """Per pool, over the window: the guard's steps by status, the eviction rate it reads (mean, and the
    share of hours whose mean is at or over the calm threshold), mean HP / spot / idle GPUs and quota."""
    threshold = 0.5 * sim.cfg.quota.tolerated_eviction_rate
    out: dict[str, dict[str, Any]] = {}
    for pool, name in enumerate(sim.pool_names):
        ticks = [g for g in sim.guard_ticks if g.pool == pool and in_days(g.t, days) and g.quota is not None]
        if not ticks:
            continue
        hourly = _hourly_rates(ticks)
        ev = [e for e in sim.spot_evictions if pool in e.pools and in_days(e.t, days)]
        out[name] = {"steps": len(ticks), **{s: sum(g.status == s for g in ticks) for s in (*GUARD_STATUSES, "waiting")},
                     "rate_mean": float(np.mean([g.rate or 0.0 for g in ticks])),
                     "hours": len(hourly), "hours_over_threshold": sum(r >= threshold for r in hourly.values()),
                     "hp_held": float(np.mean([g.hp_held for g in ticks])),
                     "spot_held": float(np.mean([g.spot_held for g in ticks])),
                     "idle": float(np.mean([g.idle for g in ticks])),
                     "quota": float(np.mean([g.quota for g in ticks if g.quota is not None])),
                     "spot_queued": float(np.mean([g.spot_queued for g in ticks])),
                     "evictions": len(ev), "guard_admitted_evictions": sum(e.guard_admitted for e in ev)}
    return out


def _hourly_rates(ticks: list[GuardTick]) -> dict[int, float]:
    got: dict[int, list[float]] = defaultdict(list)
    for g in ticks:
        got[int(g.t // 3600)].append(g.rate or 0.0)
    return {h: float(np.mean(v)) for h, v in got.items()}


def hours_rows(label: str, sim: TracingSimulator) -> list[dict[str, Any]]:
    """One row per pool and hour: mean e the guard reads, steps by status, mean GPUs and queued
    spot tasks, the oldest one's wait at the hour's end, evictions."""
    by: dict[tuple[int, int], list[GuardTick]] = defaultdict(list)
    for g in sim.guard_ticks:
        by[(g.pool, int(g.t // 3600))].append(g)
    evs: Counter[tuple[int, int]] = Counter()
    adm: Counter[tuple[int, int]] = Counter()
    for e in sim.spot_evictions:
        for p in e.pools:
            evs[(p, int(e.t // 3600))] += 1
            adm[(p, int(e.t // 3600))] += e.guard_admitted
    rows = []
    for (pool, hour), ticks in sorted(by.items()):
        statuses = Counter(g.status for g in ticks)
        quotas = [g.quota for g in ticks if g.quota is not None]
        rows.append({"label": label, "pool": sim.pool_names[pool], "hour": hour, "day": round(hour / 24.0, 3),
                     "eviction_rate": float(np.mean([g.rate or 0.0 for g in ticks])),
                     **{s: statuses.get(s, 0) for s in (*GUARD_STATUSES, "waiting")},
                     "quota": float(np.mean(quotas)) if quotas else math.nan,
                     "hp_held": float(np.mean([g.hp_held for g in ticks])),
                     "spot_held": float(np.mean([g.spot_held for g in ticks])),
                     "idle": float(np.mean([g.idle for g in ticks])),
                     "spot_queued": float(np.mean([g.spot_queued for g in ticks])),
                     "oldest_wait_s": ticks[-1].oldest_wait_s,
                     "evictions": evs[(pool, hour)], "guard_admitted_evictions": adm[(pool, hour)]})
    return rows


def daily_rows(label: str, sim: TracingSimulator, days: tuple[float, float] | None) -> list[dict[str, Any]]:
    """One row per day of the window: GPUs HP holds and idle GPUs over all pools (daily means), queued
    spot tasks per pool (mean), the oldest one's longest wait (h), guard steps by status, evictions."""
    by: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in hours_rows(label, sim):
        if in_days(row["hour"] * 3600.0, days):
            by[int(row["hour"] // 24)].append(row)
    out = []
    for day, rows in sorted(by.items()):
        hours = max(len({r["hour"] for r in rows}), 1)
        pools = max(len({r["pool"] for r in rows}), 1)
        out.append({"label": label, "day": day,
                    "hp_held": sum(r["hp_held"] for r in rows) / hours, "idle": sum(r["idle"] for r in rows) / hours,
                    "spot_queued": sum(r["spot_queued"] for r in rows) / hours / pools,
                    "oldest_wait_h": max(r["oldest_wait_s"] for r in rows) / 3600.0,
                    **{st: sum(r[st] for r in rows) for st in GUARD_STATUSES},
                    "evictions": sum(r["evictions"] for r in rows),
                    "guard_admitted_evictions": sum(r["guard_admitted_evictions"] for r in rows)})
    return out


def task_rows(label: str, r: SimResult, sim: TracingSimulator) -> list[dict[str, Any]]:
    """One row per task: its shape, submission day, JQT, runs, evictions and guard-admitted runs."""
    rows = []
    for rec in r.records.values():
        qos, gpus, pods, models = shape_of(rec)
        g = sim.guard_counts.get(rec.task.id, TaskGuardCounts())
        rows.append({"label": label, "task": rec.task.id, "qos": qos, "gpus": gpus, "pods": pods, "models": models,
                     "submit_day": round(rec.task.submit_s / DAY_S, 4), "measured": int(
                         bool(rec.finished) and rec.task.submit_s >= sim.cfg.measure_from_s),
                     "jqt_s": round(rec.jqt_s, 1), "runs": rec.runs, "evictions": rec.evictions,
                     "guard_runs": g.guard_runs, "guard_evictions": g.guard_evictions,
                     "target_runs": g.target_runs, "target_evictions": g.target_evictions})
    return rows


@dataclass
class Traced:
    """One label's traced run."""

    label: str
    result: SimResult
    sim: TracingSimulator
    cached: dict[str, float] | None = None
    classes: dict[str, list[TaskRecord]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.classes = {q: measured(self.result, self.sim, q == "hp") for q in ("hp", "spot")}


def summary(main: Traced, others: list[Traced], top: int, day_bin: float,
            days: tuple[float, float] | None) -> dict[str, Any]:
    """The ``--json`` object: per label its figures (and the cache's), evictions and guard steps; per
    QoS the ``top`` shapes of the traced label by share of the mean JQT, with every label's share."""
    labels = [main, *others]
    out: dict[str, Any] = {"labels": {}, "shapes": {}, "days": list(days) if days else None}
    for t in labels:
        out["labels"][t.label] = {"metrics": t.result.summary(), "cached": t.cached,
                                  "matches_cache": _matches(t.result.summary(), t.cached),
                                  "evictions": eviction_summary(t.sim, days), "guard": guard_summary(t.sim, days),
                                  "daily": daily_rows(t.label, t.sim, days) if days else []}
    for qos, recs in main.classes.items():
        shares = shape_shares(recs)
        others_shares = {t.label: shape_shares(t.classes[qos]) for t in others}
        rows = []
        for shape, (n, share) in sorted(shares.items(), key=lambda kv: -kv[1][1])[:top]:
            rows.append({"shape": list(shape), "tasks": n, "share_s": share,
                         "days": day_shares(recs, shape, len(recs), day_bin)[:3],
                         "others": {lab: s.get(shape, (0, 0.0))[1] for lab, s in others_shares.items()}})
        out["shapes"][qos] = {"mean_s": {t.label: float(np.mean([r.jqt_s for r in t.classes[qos]]) if t.classes[qos]
                                                        else 0.0) for t in labels}, "top": rows}
    return out


def _matches(got: dict[str, float], cached: dict[str, float] | None) -> bool | None:
    if cached is None:
        return None
    return all(math.isclose(got[k], cached[k], rel_tol=1e-9, abs_tol=1e-9) for k in ("hp_jqt", "spot_jqt", "eviction_rate"))


def text(s: dict[str, Any]) -> str:
    """The readable form of :func:`summary`."""
    lines = []
    for lab, d in s["labels"].items():
        m = d["metrics"]
        match = {None: "not in the cache", True: "= the robust cell", False: "DIFFERS from the robust cell"}
        lines.append(f"{lab}: HP JQT {m['hp_jqt']:,.0f} s, spot JQT {m['spot_jqt']:,.0f} s, eviction "
                     f"{100 * m['eviction_rate']:.2f}% ({match[d['matches_cache']]})")
        e = d["evictions"]
        lines.append(f"  spot evictions{_window(s)}: {e['evictions']}, of guard-admitted runs {e['guard_admitted']}, "
                     f"of the raise's own task {e['guard_target']}")
        for pool, g in d["guard"].items():
            lines.append(f"  pool {pool}: {g['steps']} quota steps: raised {g['raised']}, held by rate {g['rate_high']}, "
                         f"pace {g['pace']}, hpq {g['hpq']}, no room {g['no_room']}, nobody waited long enough "
                         f"{g['waiting']}; e mean {100 * g['rate_mean']:.1f}%, {g['hours_over_threshold']}/{g['hours']} "
                         f"hours at or over the calm threshold; HP {g['hp_held']:.1f}, spot {g['spot_held']:.1f}, "
                         f"idle {g['idle']:.1f} GPUs, quota {g['quota']:.1f}, {g['spot_queued']:.1f} spot tasks "
                         f"queued; evictions {g['evictions']} "
                         f"({g['guard_admitted_evictions']} guard-admitted)")
        for r in d["daily"]:
            lines.append(f"  day {r['day']}: HP {r['hp_held']:.1f}, idle {r['idle']:.1f} GPUs, {r['spot_queued']:.1f} "
                         f"spot tasks queued per pool, oldest {r['oldest_wait_h']:.1f} h; raised {r['raised']}, "
                         f"pace {r['pace']}, rate {r['rate_high']}, no room {r['no_room']}; evictions {r['evictions']} "
                         f"({r['guard_admitted_evictions']} guard-admitted)")
    for qos, d in s["shapes"].items():
        means = ", ".join(f"{lab} {v:,.0f} s" for lab, v in d["mean_s"].items())
        lines.append(f"\n{qos} mean JQT: {means}; shapes by share of the mean (s):")
        for row in d["top"]:
            qos_, gpus, pods, models = row["shape"]
            others = "".join(f", {lab} {v:,.0f}" for lab, v in row["others"].items())
            days = "; ".join(f"days {b}: {n} tasks {v:,.0f}" for b, n, v in row["days"])
            lines.append(f"  {gpus:g} GPU x {pods} ({models}), {row['tasks']} tasks: {row['share_s']:,.0f}{others}"
                         f"  [{days}]")
    return "\n".join(lines)


def _window(s: dict[str, Any]) -> str:
    return f" (days {s['days'][0]:g}-{s['days'][1]:g})" if s["days"] else ""


def write_csv(path: str, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        if rows:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


def parse_days(text_: str | None) -> tuple[float, float] | None:
    """``A-B`` (days since the trace's start, B excluded) or None."""
    if not text_:
        return None
    try:
        lo, hi = (float(x) for x in text_.split("-"))
    except ValueError:
        raise InvalidInput("--days", f"not A-B: {text_!r}", fix="e.g. --days 135-150") from None
    if hi <= lo:
        raise InvalidInput("--days", f"empty window {text_!r}", fix="the end after the start, e.g. 135-150")
    return lo, hi


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cell_trace", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", required=True, help="openb/NAME or gfs-a100-LEVEL, as in the robust run")
    ap.add_argument("--label", default=f"gfs:{LIVE_DEFAULT_NAME}", help="gfs:VARIANT or a baseline (NAME[+quota])")
    ap.add_argument("--compare", default="", help="labels to replay beside it, comma-separated")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--days", help="window A-B (days) for the eviction and guard figures")
    ap.add_argument("--day-bin", type=float, default=5.0)
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--pods-dir")
    ap.add_argument("--cache", default=str(default_cache_dir()), help="the robust cache, to check the figures ('' none)")
    ap.add_argument("--rows-out")
    ap.add_argument("--hours-out")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    pods_dir = Path(a.pods_dir) if a.pods_dir else None
    cache = CellCache(Path(a.cache) if a.cache else None)
    days = parse_days(a.days)
    traced = []
    for label in [a.label, *[x.strip() for x in a.compare.split(",") if x.strip()]]:
        cell = cell_for(a.trace, label, a.seed, pods_dir)
        print(f"cell_trace: {a.trace} {label} ...", file=sys.stderr, flush=True)
        r, sim = run_traced(cell)
        traced.append(Traced(label, r, sim, cache.get(cell)))
    s = summary(traced[0], traced[1:], a.top, a.day_bin, days)
    if a.rows_out:
        write_csv(a.rows_out, [row for t in traced for row in task_rows(t.label, t.result, t.sim)])
    if a.hours_out:
        write_csv(a.hours_out, [row for t in traced for row in hours_rows(t.label, t.sim)])
    print(json.dumps(s) if a.json else text(s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
