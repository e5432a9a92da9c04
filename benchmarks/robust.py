"""The GFS robustness run: every openb pod list with arrival times and gfs-a100 at its three loads.

    python -m benchmarks.scheduler robust [--variants default,as_released,...] [--traces ...]
        [--seeds 2,3,4] [--a100-days 21] [--warmup-h 192] [--cache DIR] [--workers 1] [--json] [--plot F.png]

Each cell is one (trace, seed, scheduler, options) simulation; its result is cached on disk as
JSON under ``--cache`` (default ``$XDG_CACHE_HOME/spotplane/robust``), keyed by a hash of its
inputs (the pod list's bytes included) and :data:`policies.sim.gpu_sim.SIM_VERSION`, so that a run can
be resumed and GFS variants recomputed alone: the baselines' cells do not change when GFS does.
A cell with a quota runs on one BLAS thread and its key names the BLAS build and CPU kernel
(:mod:`benchmarks.blas`): the forecaster's rounding, and so the quota, depends on both.

openb replays the pods as recorded: the workload has no randomness and no scheduler run here
draws a random number (only the ablations ``gfs_p``/``gfs_sp`` do), so one run per list stands
for every seed (``seed_independent`` in the output). gfs-a100 is generated from the seed.

Per trace, each scheduler's HP JQT, spot JQT and eviction rate (means over the seeds) and the
three figures the targets read: ``hp_jqt_ratio`` (to the best baseline's HP JQT),
``spot_jqt_ratio`` (to the best quota'd baseline's spot JQT) and ``eviction_over_median``
(percentage points above the median baseline's eviction rate); ``worst`` is the largest of each
over the traces. ``spot_jqt_ratio_hp_fair`` (a diagnostic, not a target) is the spot JQT over the
best of the quota'd baselines whose HP JQT is within 1.2x the best baseline's (null: none is). A variant meets the targets on a trace when hp_jqt_ratio <= 1.2,
spot_jqt_ratio <= 2 and eviction_over_median <= 0.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.blas import SIM_BLAS_THREADS, blas_identity, one_blas_thread
from benchmarks.gpucluster import build_workload, check_did_work, scheduler_for
from clusters.data.catalog import DataCatalog
from controlplane.core.config import data_dir
from controlplane.core.errors import InvalidInput
from policies.gfs_options import CHOICES, GFS_VARIANTS, LIVE_DEFAULT_NAME, GfsOptions
from policies.schedulers import make_scheduler
from policies.sim.gpu_sim import SIM_VERSION, SimConfig, simulate

#: The openb pod lists with arrival times that the defaults are picked on (multigpu20 is held out).
OPENB_LISTS = ("default", "gpushare20", "gpushare40", "gpushare80", "gpuspec10", "gpuspec25")
HELD_OUT = ("multigpu20",)
A100_LOADS = ("gfs-a100-low", "gfs-a100-medium", "gfs-a100-high")
#: Every baseline without and behind GFS's spot quota (Chronus as released is shown elsewhere).
FREE_BASELINES = ("yarn_cs", "chronus", "lyra", "fgd")
QUOTA_BASELINES = tuple(b + "+quota" for b in FREE_BASELINES)
BASELINES = FREE_BASELINES + QUOTA_BASELINES
#: The quota options the quota'd baselines run with, whatever GFS variant is measured.
BASELINE_OPTIONS = GFS_VARIANTS["as_released"]
METRICS = ("hp_jqt", "spot_jqt", "eviction_rate")
TARGETS = {"hp_jqt_ratio": 1.2, "spot_jqt_ratio": 2.0, "eviction_over_median": 0.0}
#: Queueing times below one second count as one second in a ratio (no queueing at the
#: simulator's resolution): a ratio to a baseline that never queued stays finite.
JQT_FLOOR_S = 1.0


def openb_trace(name: str) -> str:
    return f"openb/{name}"


def default_traces() -> tuple[str, ...]:
    return tuple(openb_trace(n) for n in OPENB_LISTS) + A100_LOADS


@dataclass(frozen=True)
class Cell:
    """One simulation of the robustness run."""

    trace: str
    seed: int
    label: str  # "gfs:<variant>" or a baseline label (NAME or NAME+quota)
    options: GfsOptions
    a100_days: float = 21.0
    warmup_h: float = 192.0
    pods_file: str | None = None  # openb: the pod list's path (resolved in the data directory)

    @property
    def is_openb(self) -> bool:
        return self.trace.startswith("openb/")

    @property
    def has_quota(self) -> bool:
        """GFS or a quota'd baseline: its run goes through the forecaster's BLAS sums."""
        return self.label.startswith("gfs:") or self.label.endswith("+quota")

    def key_inputs(self) -> dict[str, Any]:
        """Everything the cell's result depends on (the cache key is the hash of this)."""
        d: dict[str, Any] = {"trace": self.trace, "seed": self.seed, "label": self.label.split(":")[0],
                             "options": option_key(self.options), "sim_version": SIM_VERSION}
        if self.is_openb:
            d["pods_sha256"] = file_sha256(self.pods_file) if self.pods_file else None
        else:
            d.update(days=self.a100_days, warmup_h=self.warmup_h)
        if self.has_quota:
            d.update(blas=blas_identity(), blas_threads=SIM_BLAS_THREADS)
        return d

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.key_inputs(), sort_keys=True).encode()).hexdigest()[:24]


def option_key(options: GfsOptions) -> dict[str, str]:
    """The options that are not their first choice (the behaviour from before the option
    existed), so that adding an option keeps the cached cells of the others."""
    return {k: v for k, v in asdict(options).items() if v != CHOICES[k][0]}


_SHA: dict[str, str] = {}


def file_sha256(path: str) -> str:
    if path not in _SHA:
        _SHA[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return _SHA[path]


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/spotplane/robust`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spotplane" / "robust"


class CellCache:
    """One JSON file per cell, named by its key; a damaged file is a miss."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)

    def get(self, cell: Cell) -> dict[str, float] | None:
        if self.root is None:
            return None
        p = self.root / f"{cell.key()}.json"
        try:
            got = json.loads(p.read_text())
            return {k: float(v) for k, v in got["metrics"].items()}
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, cell: Cell, metrics: dict[str, float], seconds: float) -> None:
        if self.root is None:
            return
        p = self.root / f"{cell.key()}.json"
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps({"inputs": cell.key_inputs(), "metrics": metrics, "seconds": seconds}))
        tmp.replace(p)


def run_cell(cell: Cell) -> tuple[Cell, dict[str, float], float]:
    """Simulate one cell (GFS with the cell's options, or a baseline behind the baselines' quota)."""
    if cell.is_openb:
        w = build_workload("openb", None, cell.pods_file, cell.seed)
        cfg = SimConfig.for_options(cell.options)
    else:
        w = build_workload(cell.trace, cell.a100_days, None, cell.seed)
        cfg = SimConfig.for_options(cell.options, measure_from_s=cell.warmup_h * 3600.0)
    t0 = time.perf_counter()
    if cell.label.startswith("gfs:"):
        sched = make_scheduler("gfs", seed=cell.seed, gfs_queue=cell.options.queue, spot_score=cell.options.spot_score,
                               hp_score=cell.options.hp_score, preempt_reach=cell.options.preempt_reach,
                               hp_pack=cell.options.hp_pack)
    else:
        sched = scheduler_for(cell.label, cell.seed, preempt_reach=cell.options.preempt_reach)
    with one_blas_thread():
        r = simulate(w, sched, cfg)
    check_did_work(cell.trace, cell.label, w, r)
    return cell, r.summary(), time.perf_counter() - t0


def run_cells(cells: list[Cell], cache: CellCache, workers: int = 1,
              progress: Callable[[str], None] | None = None) -> dict[Cell, dict[str, float]]:
    """Every cell, from the cache where it is there; the rest simulated (in ``workers`` processes)."""
    say = progress or (lambda s: print(s, file=sys.stderr, flush=True))
    out: dict[Cell, dict[str, float]] = {}
    todo = []
    for c in cells:
        got = cache.get(c)
        if got is None:
            todo.append(c)
        else:
            out[c] = got
    say(f"robust: {len(cells)} cells, {len(out)} from the cache, {len(todo)} to simulate")
    t0 = time.perf_counter()

    def done(i: int, cell: Cell, m: dict[str, float], sec: float) -> None:
        cache.put(cell, m, sec)
        out[cell] = m
        say(f"[{i}/{len(todo)}] {cell.trace} {cell.label} seed {cell.seed}: HP JQT {m['hp_jqt']:.0f} s, "
            f"spot JQT {m['spot_jqt']:.0f} s, eviction {100 * m['eviction_rate']:.2f} %, {sec:.0f} s "
            f"({time.perf_counter() - t0:.0f} s in all)")

    if workers > 1 and len(todo) > 1:
        with ProcessPoolExecutor(max_workers=workers) as ex:
            for i, (cell, m, sec) in enumerate(ex.map(run_cell, todo), 1):
                done(i, cell, m, sec)
    else:
        for i, c in enumerate(todo, 1):
            cell, m, sec = run_cell(c)
            done(i, cell, m, sec)
    return out


# ---------------------------------------------------------------------------------------------
# the targets' arithmetic
# ---------------------------------------------------------------------------------------------
def jqt_ratio(x: float, best: float) -> float:
    """x / best with both floored at :data:`JQT_FLOOR_S`."""
    return max(x, JQT_FLOOR_S) / max(best, JQT_FLOOR_S)


def trace_ratios(m: dict[str, float], baselines: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The three target figures of one scheduler on one trace: HP JQT / the best baseline's,
    spot JQT / the best quota'd baseline's, eviction rate minus the median baseline's (points)."""
    hp_best = min(v["hp_jqt"] for v in baselines.values())
    quotad = [v["spot_jqt"] for k, v in baselines.items() if k.endswith("+quota")]
    spot_best = min(quotad) if quotad else min(v["spot_jqt"] for v in baselines.values())
    median_ev = float(np.median([v["eviction_rate"] for v in baselines.values()]))
    # a diagnostic, not a target: against the quota'd baselines that do not buy their spot JQT
    # with HP queueing (HP JQT within the HP target of the best baseline's)
    fair = [v["spot_jqt"] for k, v in baselines.items()
            if k.endswith("+quota") and jqt_ratio(v["hp_jqt"], hp_best) <= TARGETS["hp_jqt_ratio"]]
    return {"hp_jqt_ratio": jqt_ratio(m["hp_jqt"], hp_best),
            "spot_jqt_ratio": jqt_ratio(m["spot_jqt"], spot_best),
            "eviction_over_median": 100.0 * (m["eviction_rate"] - median_ev),
            "spot_jqt_ratio_hp_fair": jqt_ratio(m["spot_jqt"], min(fair)) if fair else None}


def worst(per_trace: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The largest of each target figure over the traces, and the trace where it is."""
    out: dict[str, Any] = {}
    for k in TARGETS:
        trace = max(per_trace, key=lambda t: per_trace[t][k])
        out[k] = per_trace[trace][k]
        out[k + "_trace"] = trace
    return out


def meets(r: dict[str, float]) -> bool:
    """All three targets met by one trace's (or the worst case's) figures."""
    return all(r[k] <= lim + 1e-12 for k, lim in TARGETS.items())


def pick_key(per_trace: dict[str, dict[str, float]]) -> tuple[int, float, float]:
    """The picking rule: fewest traces that miss a target, then the smallest worst-case excess
    over the JQT targets (max of hp_jqt_ratio / 1.2 and spot_jqt_ratio / 2), then the smallest
    worst-case eviction excess over the median baseline."""
    misses = sum(not meets(r) for r in per_trace.values())
    w = worst(per_trace)
    jqt = max(w["hp_jqt_ratio"] / TARGETS["hp_jqt_ratio"], w["spot_jqt_ratio"] / TARGETS["spot_jqt_ratio"])
    return misses, round(jqt, 6), round(w["eviction_over_median"], 6)


#: The picking rules of ``--pick`` (docs/gfs.md, "Robustness run"); the first is the default:
#: ``neighbours`` since the fourth round (before it: ``misses``).
PICK_RULES = ("neighbours", "misses", "hp_fair", "hp_fair_neighbours")
#: The spot guard grid: ``oldest_calm[_<n>h][_<m>ph][_bk]``; n theta of wait, one raised step per H / m
#: (none: every step), ``_bk``/``_bkall``: the backing-off guards (each its own family, not a neighbour setting).
GUARD_GRID = re.compile(r"^oldest_calm(?:_(\d+)h)?(?:_(\d+)ph)?(_bk|_bkall)?$")
#: The pace axis of the grid, from the most to the least raised steps per H (0 = every step).
GUARD_PACES = (0, 3, 2, 1)


def guard_point(options: GfsOptions) -> tuple[tuple[str, ...], int, int] | None:
    """A variant's place on the guard grid: (its other options and the ``_bk`` flag, wait in theta,
    pace), or None when its spot guard is not an ``oldest_calm`` guard of the grid."""
    got = GUARD_GRID.match(options.spot_guard)
    if got is None:
        return None
    rest = tuple(f"{k}={v}" for k, v in sorted(asdict(options).items()) if k != "spot_guard")
    return rest + (got.group(3) or "",), int(got.group(1) or 1), int(got.group(2) or 0)


def guard_neighbours(name: str, names: Iterable[str]) -> list[str]:
    """The variants among ``names`` one grid step from ``name``: the wait one theta longer or shorter,
    or the pace one step faster or slower, everything else the same."""
    me = guard_point(GFS_VARIANTS[name])
    if me is None:
        return []
    out = []
    for other in names:
        pt = guard_point(GFS_VARIANTS[other]) if other != name else None
        if pt is None or pt[0] != me[0]:
            continue
        step_wait = abs(pt[1] - me[1]) == 1 and pt[2] == me[2]
        step_pace = pt[1] == me[1] and abs(GUARD_PACES.index(pt[2]) - GUARD_PACES.index(me[2])) == 1
        if step_wait or step_pace:
            out.append(other)
    return out


def neighbour_points(point: tuple[tuple[str, ...], int, int]) -> list[tuple[tuple[str, ...], int, int]]:
    """Every grid point one step from ``point`` (:func:`guard_point`), run or not: the wait one theta
    longer or shorter (at least theta), the pace one step along :data:`GUARD_PACES`."""
    rest, wait, pace = point
    at = GUARD_PACES.index(pace)
    out = [(rest, w, pace) for w in (wait - 1, wait + 1) if w >= 1]
    return out + [(rest, wait, GUARD_PACES[i]) for i in (at - 1, at + 1) if 0 <= i < len(GUARD_PACES)]


def hp_fair_figures(r: dict[str, Any]) -> dict[str, Any]:
    """One trace's figures with the spot ratio taken to the best HP-fair quota'd baseline where the
    raw one's best quota'd baseline starves HP (an HP-fair one exists and differs from it)."""
    fair = r.get("spot_jqt_ratio_hp_fair")
    if fair is None or fair >= r["spot_jqt_ratio"] - 1e-12:
        return r
    return {**r, "spot_jqt_ratio": fair}


def misses_of(per_trace: dict[str, dict[str, Any]], hp_fair: bool) -> int:
    """The traces where a target is missed (``hp_fair``: spot to the HP-fair quota'd baselines)."""
    return sum(not meets(hp_fair_figures(r) if hp_fair else r) for r in per_trace.values())


def neighbour_misses(name: str, verdicts: dict[str, dict[str, Any]], hp_fair: bool) -> list[int]:
    """Traces missed by each guard-grid neighbour of ``name`` (:func:`neighbour_points`); a neighbour
    that did not run on every trace of ``name`` counts as missing all of them (not measured is not
    robust); none for a variant off the grid."""
    me = guard_point(GFS_VARIANTS[name])
    if me is None:
        return []
    n_traces = len(verdicts[f"gfs:{name}"]["per_trace"])
    ran = {}
    for lab in verdicts:
        v = lab.removeprefix("gfs:")
        if lab.startswith("gfs:") and v in GFS_VARIANTS and len(verdicts[lab]["per_trace"]) >= n_traces:
            pt = guard_point(GFS_VARIANTS[v])
            if pt is not None:
                ran[pt] = misses_of(verdicts[lab]["per_trace"], hp_fair)
    return [ran.get(pt, n_traces) for pt in neighbour_points(me)]


def rule_key(name: str, verdicts: dict[str, dict[str, Any]], rule: str) -> tuple[float, ...]:
    """The sort key of variant ``name`` under picking rule ``rule`` (:data:`PICK_RULES`).

    ``misses``: :func:`pick_key`. ``hp_fair``: the same with each trace's spot ratio taken by
    :func:`hp_fair_figures`. ``*neighbours``: first the most traces missed by the variant or any of
    its guard-grid neighbours (:func:`neighbour_misses`; a variant off the grid counts its own),
    then the rule's own key."""
    hp_fair = rule.startswith("hp_fair")
    per = verdicts[f"gfs:{name}"]["per_trace"]
    per_f = {t: hp_fair_figures(r) for t, r in per.items()} if hp_fair else per
    own = pick_key(per_f)
    if not rule.endswith("neighbours"):
        return own
    return (max([own[0], *neighbour_misses(name, verdicts, hp_fair)]),) + own


def picks(verdicts: dict[str, dict[str, Any]], variants: list[str], n_traces: int) -> dict[str, Any]:
    """Per picking rule: the variant it picks among those that ran on every trace, and its key."""
    full = [v for v in variants if f"gfs:{v}" in verdicts and len(verdicts[f"gfs:{v}"]["per_trace"]) == n_traces]
    out: dict[str, Any] = {}
    for rule in PICK_RULES:
        if not full:
            out[rule] = None
            continue
        best = min(full, key=lambda v: rule_key(v, verdicts, rule))
        out[rule] = {"variant": best, "key": list(rule_key(best, verdicts, rule)),
                     "neighbours": guard_neighbours(best, [v.removeprefix("gfs:") for v in verdicts
                                                          if v.removeprefix("gfs:") in GFS_VARIANTS]),
                     "neighbour_misses": neighbour_misses(best, verdicts, rule.startswith("hp_fair"))}
    return out


def summarise(results: dict[Cell, dict[str, float]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per trace, per label: the mean and the spread (sd) of each metric over the seeds."""
    by: dict[str, dict[str, list[dict[str, float]]]] = {}
    for cell, m in results.items():
        by.setdefault(cell.trace, {}).setdefault(cell.label, []).append(m)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for trace, labels in by.items():
        out[trace] = {}
        for label, ms in labels.items():
            row = {f: float(np.mean([m[f] for m in ms])) for f in METRICS}
            row.update({f + "_sd": float(np.std([m[f] for m in ms])) for f in METRICS})
            row["seeds"] = float(len(ms))
            out[trace][label] = row
    return out


def assess(table: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, Any]]:
    """Per label: its per-trace target figures and their worst case."""
    labels = sorted({lab for rows in table.values() for lab in rows})
    out: dict[str, dict[str, Any]] = {}
    for lab in labels:
        per = {t: trace_ratios(rows[lab], {b: rows[b] for b in BASELINES if b in rows})
               for t, rows in table.items() if lab in rows and any(b in rows for b in BASELINES)}
        if per:
            out[lab] = {"per_trace": per, "worst": worst(per), "meets": all(meets(r) for r in per.values()),
                        "traces_missed": [t for t, r in per.items() if not meets(r)]}
    return out


def met_by(verdicts: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Per trace, every scheduler run there (GFS variant or baseline) that meets the three targets:
    an empty list says the targets cannot all hold there with anything this run measured."""
    traces = sorted({t for v in verdicts.values() for t in v["per_trace"]})
    return {t: [lab for lab, v in verdicts.items() if t in v["per_trace"] and meets(v["per_trace"][t])]
            for t in traces}


def overall(table: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per label: each metric's mean over the traces (only labels that ran on every trace)."""
    labels = set.intersection(*(set(rows) for rows in table.values())) if table else set()
    return {lab: {f: float(np.mean([rows[lab][f] for rows in table.values()])) for f in METRICS}
            for lab in sorted(labels)}


# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------
def build_cells(traces: Iterable[str], variants: Iterable[str], seeds: tuple[int, ...], a100_days: float,
                warmup_h: float, baselines: bool = True, pods_dir: Path | None = None) -> list[Cell]:
    """The cells of a run: GFS per variant and (``baselines``) every baseline, per trace and seed."""
    root = pods_dir
    if root is None:
        root = DataCatalog(data_dir()).require("alibaba-openb").parent
    cells = []
    for trace in traces:
        if trace.startswith("openb/"):
            pods = root / f"openb_pod_list_{trace.removeprefix('openb/')}.csv"
            if not pods.exists():
                raise InvalidInput("--traces", f"no pod list {pods}", fix=f"use openb/NAME with NAME in {OPENB_LISTS}")
            tseeds, pods_file = seeds[:1], str(pods)
        elif trace in A100_LOADS:
            tseeds, pods_file = seeds, None
        else:
            raise InvalidInput("--traces", f"unknown trace {trace!r}", fix="openb/NAME or gfs-a100-LEVEL")
        for seed in tseeds:
            for v in variants:
                cells.append(Cell(trace, seed, f"gfs:{v}", GFS_VARIANTS[v], a100_days, warmup_h, pods_file))
            if baselines:
                for b in BASELINES:
                    cells.append(Cell(trace, seed, b, BASELINE_OPTIONS, a100_days, warmup_h, pods_file))
    return cells


def report(results: dict[Cell, dict[str, float]], variants: list[str], seeds: tuple[int, ...],
           a100_days: float, warmup_h: float, pick: str = PICK_RULES[0]) -> dict[str, Any]:
    """The ``--json`` object (see the module doc); ``picked`` by the rule ``pick``."""
    table = summarise(results)
    verdicts = assess(table)
    # a variant is picked only among those that ran on every trace of the run
    by_rule = picks(verdicts, variants, len(table))
    picked = by_rule[pick]["variant"] if by_rule[pick] else None
    live = f"gfs:{LIVE_DEFAULT_NAME}"
    d = verdicts.get(live, {})
    return {
        "sim_version": SIM_VERSION,
        "blas": blas_identity(), "blas_threads": SIM_BLAS_THREADS,
        "traces": list(table),
        "seeds": {t: sorted({c.seed for c in results if c.trace == t}) for t in table},
        "seed_independent": {t: t.startswith("openb/") for t in table},
        "seed_note": "openb replays recorded pods and none of these schedulers draws a random number: "
                     "one run per list stands for every seed",
        "a100_days": a100_days, "warmup_h": warmup_h, "requested_seeds": list(seeds),
        "baselines": list(BASELINES), "quota_baselines": list(QUOTA_BASELINES),
        "targets": TARGETS,
        "variants": {v: asdict(GFS_VARIANTS[v]) for v in variants},
        "live_default": LIVE_DEFAULT_NAME,
        "worst": d.get("worst"), "per_trace": d.get("per_trace"), "meets": d.get("meets"),
        "traces_missed": d.get("traces_missed"),
        "picked": picked,
        "pick_rule": pick, "picks": by_rule,
        "table": table, "overall": overall(table),
        "schedulers": {lab: {"worst": v["worst"], "meets": v["meets"], "traces_missed": v["traces_missed"]}
                       for lab, v in verdicts.items()},
        "per_trace_all": {lab: v["per_trace"] for lab, v in verdicts.items()},
        "met_by": met_by(verdicts),
    }


def text(rep: dict[str, Any]) -> str:
    """The readable table: per trace, every label's figures and target ratios; then the worst cases."""
    lines = []
    ratios = rep["per_trace_all"]
    for trace, rows in rep["table"].items():
        lines.append(f"\n{trace} (seeds {','.join(map(str, rep['seeds'][trace]))})")
        lines.append(f"{'scheduler':22s} {'HP JQT s':>10s} {'spot JQT s':>11s} {'evict %':>8s} "
                     f"{'HP/best':>8s} {'spot/bestQ':>10s} {'ev-med pp':>9s}")
        for lab, m in rows.items():
            r = ratios.get(lab, {}).get(trace, {})
            lines.append(f"{lab:22s} {m['hp_jqt']:10,.0f} {m['spot_jqt']:11,.0f} {100 * m['eviction_rate']:8.2f} "
                         f"{r.get('hp_jqt_ratio', math.nan):8.2f} {r.get('spot_jqt_ratio', math.nan):10.2f} "
                         f"{r.get('eviction_over_median', math.nan):9.2f}")
    lines.append("\nworst case over the traces (targets: HP <= 1.2x best baseline, spot <= 2x best quota'd, "
                 "eviction <= median baseline)")
    for lab, v in rep["schedulers"].items():
        w = v["worst"]
        lines.append(f"{lab:22s} HP {w['hp_jqt_ratio']:7.2f}x ({w['hp_jqt_ratio_trace']}), spot "
                     f"{w['spot_jqt_ratio']:7.2f}x ({w['spot_jqt_ratio_trace']}), eviction "
                     f"{w['eviction_over_median']:+6.2f} pp ({w['eviction_over_median_trace']})"
                     f"{'  MEETS' if v['meets'] else '  misses on ' + ', '.join(v['traces_missed'])}")
    lines.append("\nper trace, the schedulers that meet all three targets there:")
    for trace, labs in rep["met_by"].items():
        lines.append(f"  {trace}: {len(labs)} of {len(rep['table'][trace])}"
                     f"{' (none: the targets conflict with every scheduler measured)' if not labs else ''}")
    lines.append(f"\nlive default: {rep['live_default']}; picked by this run: {rep['picked']} "
                 f"(rule {rep['pick_rule']})")
    for rule, got in rep["picks"].items():
        if got:
            lines.append(f"  rule {rule}: {got['variant']} key {got['key']} guard neighbours {got['neighbours']} "
                         f"(misses of every grid neighbour, unmeasured = all: {got['neighbour_misses']})")
    lines.append(rep["seed_note"])
    return "\n".join(lines)


def markdown(rep: dict[str, Any]) -> str:
    """docs/gfs.md's robustness tables: per trace every label's figures; then the worst cases."""
    ratios = rep["per_trace_all"]
    lines = ["| trace | scheduler | HP JQT s | spot JQT s | eviction % | HP / best | spot / best quota'd | "
             "eviction - median, pp |", "|---|---|---|---|---|---|---|---|"]
    for trace, rows in rep["table"].items():
        for lab, m in rows.items():
            r = ratios.get(lab, {}).get(trace, {})
            lines.append(f"| {trace} | {lab} | {m['hp_jqt']:,.0f} | {m['spot_jqt']:,.0f} | "
                         f"{100 * m['eviction_rate']:.2f} | {r.get('hp_jqt_ratio', math.nan):.2f} | "
                         f"{r.get('spot_jqt_ratio', math.nan):.2f} | {r.get('eviction_over_median', math.nan):+.2f} |")
    lines += ["", "| scheduler | worst HP / best | worst spot / best quota'd | worst eviction - median, pp | "
              "traces missed |", "|---|---|---|---|---|"]
    for lab, v in rep["schedulers"].items():
        w = v["worst"]
        lines.append(f"| {lab} | {w['hp_jqt_ratio']:.2f} ({w['hp_jqt_ratio_trace']}) | {w['spot_jqt_ratio']:.2f} "
                     f"({w['spot_jqt_ratio_trace']}) | {w['eviction_over_median']:+.2f} "
                     f"({w['eviction_over_median_trace']}) | {', '.join(v['traces_missed']) or 'none'} |")
    lines += ["", "| trace | schedulers that meet the three targets |", "|---|---|"]
    lines += [f"| {t} | {len(labs)} of {len(rep['table'][t])}: {', '.join(labs) or 'none'} |"
              for t, labs in rep["met_by"].items()]
    return "\n".join(lines)


def plot(path: str, rep: dict[str, Any]) -> None:
    """The three target figures per trace: the live default, each picking rule's variant and the
    baselines named; every other GFS variant a grey line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per = rep["per_trace_all"]
    traces = rep["traces"]
    live = f"gfs:{rep['live_default']}"
    picked: dict[str, list[str]] = {}
    for rule, p in rep.get("picks", {}).items():
        picked.setdefault(f"gfs:{p['variant']}", []).append(rule)
    fig, axes = plt.subplots(1, 3, figsize=(20, 5.5))
    for ax, key in zip(axes, TARGETS, strict=True):
        others = False
        for lab, rows in per.items():
            ys = [rows.get(t, {}).get(key, math.nan) for t in traces]
            rules = ", ".join(picked.get(lab, []))
            if lab == live:
                ax.plot(range(len(traces)), ys, color="k", lw=3, marker="s", zorder=5,
                        label=f"{lab} (live default" + (f"; picked by {rules})" if rules else ")"))
            elif lab in picked:
                ax.plot(range(len(traces)), ys, label=f"{lab} (picked by {rules})", marker="o", lw=1.6, zorder=4)
            elif lab.startswith("gfs"):
                ax.plot(range(len(traces)), ys, color="0.75", lw=0.8, zorder=1,
                        label=None if others else "other GFS variants")
                others = True
            else:
                ax.plot(range(len(traces)), ys, label=lab, marker=".", lw=0.8, ls=":", zorder=2)
        ax.axhline(TARGETS[key], color="r", ls="--", lw=1)
        ax.set_xticks(range(len(traces)), traces, rotation=60, fontsize=7)
        ax.set_title(key)
        if key != "eviction_over_median":
            ax.set_yscale("log")
    axes[-1].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the legend sits outside the axes
    plt.close(fig)


def main(argv: list[str]) -> int:
    """``python -m benchmarks.scheduler robust ...`` (the arguments after ``robust``)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks.scheduler robust", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=LIVE_DEFAULT_NAME,
                    help=f"GFS variants, comma-separated, of: {', '.join(GFS_VARIANTS)}")
    ap.add_argument("--traces", default=",".join(default_traces()),
                    help="openb/NAME (a pod list in the data directory) or gfs-a100-LEVEL")
    ap.add_argument("--seeds", default="2,3,4")
    ap.add_argument("--a100-days", type=float, default=21.0, help="gfs-a100 days simulated")
    ap.add_argument("--warmup-h", type=float, default=192.0, help="gfs-a100: count tasks submitted after this")
    ap.add_argument("--no-baselines", action="store_true", help="GFS variants only (their ratios need cached baselines)")
    ap.add_argument("--cached-only", action="store_true", help="report the cells the cache holds; simulate none")
    ap.add_argument("--cache", default=str(default_cache_dir()), help="cell cache directory ('' for none)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--pods-dir", help="where the openb pod lists are (default: the data directory's)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="the tables of docs/gfs.md")
    ap.add_argument("--plot")
    ap.add_argument("--pick", choices=PICK_RULES, default=PICK_RULES[0],
                    help="the picking rule behind 'picked' (every rule's pick is in 'picks')")
    a = ap.parse_args(argv)
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    for v in variants:
        if v not in GFS_VARIANTS:
            raise InvalidInput("--variants", f"unknown GFS variant {v!r}", fix=f"use {', '.join(GFS_VARIANTS)}")
    if LIVE_DEFAULT_NAME not in variants:
        variants.insert(0, LIVE_DEFAULT_NAME)
    try:
        seeds = tuple(int(s) for s in a.seeds.split(",") if s.strip())
    except ValueError:
        raise InvalidInput("--seeds", f"not integers: {a.seeds!r}", fix="e.g. 2,3,4") from None
    if not seeds or a.workers < 1:
        raise InvalidInput("--seeds/--workers", "need at least one seed and one worker", fix="e.g. --seeds 2,3,4")
    traces = [t.strip() for t in a.traces.split(",") if t.strip()]
    cache = CellCache(Path(a.cache) if a.cache else None)
    pods_dir = Path(a.pods_dir) if a.pods_dir else None
    cells = build_cells(traces, variants, seeds, a.a100_days, a.warmup_h, True, pods_dir)
    if a.no_baselines:  # use what the cache holds for the baselines; simulate only GFS
        cells = [c for c in cells if c.label.startswith("gfs:") or cache.get(c) is not None]
    if a.cached_only:
        cells = [c for c in cells if cache.get(c) is not None]
    results = run_cells(cells, cache, a.workers)
    rep = report(results, variants, seeds, a.a100_days, a.warmup_h, a.pick)
    print(json.dumps(rep) if a.json else markdown(rep) if a.markdown else text(rep))
    if a.plot:
        plot(a.plot, rep)
    return 0
