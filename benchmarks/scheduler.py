"""GFS vs YARN-CS, Chronus, Lyra, FGD and the GFS ablations in the GPU cluster simulator.

    python -m benchmarks.scheduler --workload gfs-a100-medium [--seeds 2,3,4] [--json] [--plot FILE.png]
    python -m benchmarks.scheduler --workload openb [--pods FILE] [--json]
    python -m benchmarks.scheduler scale [--json]
    python -m benchmarks.scheduler why --workload gfs-a100-medium --schedulers gfs,yarn_cs [--seeds 2,3,4]
    python -m benchmarks.scheduler robust [--variants ...] [--cache DIR] [--workers N] [--json]  (benchmarks/robust.py)

Two tables: **quota-free** (every baseline as published, no spot quota) and **release setup**
(YARN-CS, Lyra and FGD behind GFS's forecast-driven spot quota and eta, and Chronus as its
authors' simulator runs it, as in the authors' code release); GFS's run is the same in both.
With several ``--seeds`` each figure is the mean over the seeds, with its spread (standard
deviation) beside it. The options where the paper's text and the release differ are flags
(``--hp-demand``, ``--hourly``, ``--aggregation``, ``--eta-rate``, ``--pools``, ``--gfs-queue``;
docs/gfs.md says which default is whose); ``--hp-peak`` and ``--gang-widths`` vary the gfs-a100 generator (robustness).
Progress goes to stderr.

``--json`` prints exactly one object: ``{"workload", "seeds", "options", "tables": {"quota_free":
[NAME...], "release": [NAME...]}, "schedulers": {NAME: {"hp_jct", "hp_jct_p99", "hp_jqt",
"spot_jct", "spot_jqt", "eviction_rate", "eviction_per_gh", "allocation_rate"}}, "spread":
{NAME: {...}}}`` (means over the seeds; times in seconds, rates in [0, 1]; a quota'd baseline is
named ``NAME+quota``); ``scale --json`` prints ``{"nodes", "p50_ms", "p99_ms"}``: the latency of
one ``schedule`` call on the full 4,278-node ``alibaba-spot-gpu`` cluster filled by a replay.
``why`` runs the release setup and a control, GFS with YARN-CS's strict FCFS queue
(``gfs/strict-fcfs``), and prints where the spot evictions come from: spot runs and evictions,
runs per task, HP placements that preempted, victims and victim GPUs per such placement, and
the share of victims evicted less than 600 s after their run started, and the share of the
quota loop's steps with eta at its upper clamp and with Eq. 10's forecast term setting the quota
(``--json``: the same per label, means and ``spread``).
``--days``, ``--schedulers`` and ``--jobs`` shrink or parallelise a run.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import entry, robust
from benchmarks.blas import one_blas_thread
from benchmarks.gpucluster import (
    QUOTA,
    STRICT_CONTROL,
    WORKLOADS,
    build_workload,
    check_did_work,
    scheduler_for,
)
from clusters.data.catalog import DataCatalog
from controlplane.core.config import data_dir
from controlplane.core.errors import InvalidInput
from policies.gfs_options import CHOICES, GFS_VARIANTS, LIVE_DEFAULT, LIVE_DEFAULT_NAME
from policies.placement import TaskRequest
from policies.quota import AGGREGATIONS, QuotaParams
from policies.schedulers import GFS_QUEUES, QUOTA_BASELINES, SCHEDULERS, make_scheduler
from policies.sim.gpu_sim import OPTIONS, GpuSimulator, SimConfig, SimResult, simulate
from policies.sim.workloads import (
    GfsA100Config,
    NodeSpec,
    SimTask,
    Workload,
    gfs_a100,
)

log = logging.getLogger(__name__)

FIELDS = ("hp_jct", "hp_jct_p99", "hp_jqt", "spot_jct", "spot_jqt", "eviction_rate", "eviction_per_gh",
          "allocation_rate")
#: ``why`` mode: the fields of :func:`why_fields` beside spot JQT and the eviction rate.
WHY_FIELDS = ("spot_jqt", "eviction_rate", "spot_runs", "spot_evictions", "spot_runs_per_task", "preemptions",
              "victims_per_preemption", "victim_gpus_per_preemption", "young_victims", "eta_at_max",
              "forecast_binds")
YOUNG_S = 600.0
#: The baselines as the paper describes them (the openb targets compare GFS with these).
PUBLISHED = ("yarn_cs", "chronus", "lyra", "fgd")
TABLES = ("quota-free", "release")
#: Paper Table 5 (seconds; eviction %), for the readable table.
PAPER_GFS = {"low": (29304.5, 17777.1, 28.4, 10438.7, 323.0, 0.74),
             "medium": (29304.5, 17776.7, 27.7, 10715.3, 575.4, 1.21),
             "high": (29304.5, 17780.3, 30.3, 13117.1, 2901.0, 1.24)}


@dataclass(frozen=True)
class Run:
    """One simulation of the benchmark: a scheduler (``NAME`` or ``NAME+quota``) on a seed."""

    label: str
    workload: str
    seed: int
    days: float | None = None
    pods_file: str | None = None
    nodes: int | None = None
    hp_peak: float = 1.0
    gang_widths: tuple[int, ...] | None = None
    options: tuple[tuple[str, Any], ...] = ()


def sim_config(options: dict[str, Any]) -> SimConfig:
    """The simulator config of the named options (``aggregation`` goes to the quota params;
    ``gfs_queue``, the scheduler's, is left out), e.g. the ``options`` of a ``--json`` output."""
    opts = dict(options)
    opts.pop("gfs_queue", None)  # the scheduler's options (make_scheduler), not the simulator's
    opts.pop("spot_score", None)
    opts.pop("hp_score", None)
    opts.pop("preempt_reach", None)
    agg = opts.pop("aggregation", None)
    eta_max = opts.pop("eta_max", None)
    base = QuotaParams.for_options(LIVE_DEFAULT)
    quota = replace(base, aggregation=agg or base.aggregation, eta_max=float(eta_max) if eta_max else base.eta_max)
    return SimConfig(quota=quota, **opts)


def _run_one(run: Run) -> tuple[Run, dict[str, float], float]:
    w = build_workload(run.workload, run.days, run.pods_file, run.seed, run.nodes, run.hp_peak, run.gang_widths)
    opts = dict(run.options)
    queue = opts.pop("gfs_queue", LIVE_DEFAULT.queue)
    spot_score = opts.pop("spot_score", LIVE_DEFAULT.spot_score)
    hp_score = opts.pop("hp_score", LIVE_DEFAULT.hp_score)
    reach = opts.pop("preempt_reach", LIVE_DEFAULT.preempt_reach)
    t0 = time.perf_counter()
    with one_blas_thread():
        r = simulate(w, scheduler_for(run.label, run.seed, queue, spot_score, hp_score, reach), sim_config(opts))
    check_did_work(run.workload, run.label, w, r)
    return run, {**r.summary(), **why_fields(r)}, time.perf_counter() - t0


def why_fields(r: SimResult) -> dict[str, float]:
    """Where the spot evictions come from: runs per task, HP placements that preempted, their
    victims and victim GPUs, the share of victims evicted within 10 minutes of their start, and
    how often eta sat at its upper clamp and the forecast term set the quota (Eq. 10)."""
    st = r.preemption
    n = max(st.preemptions, 1)
    return {"spot_runs_per_task": r.spot.runs / max(r.spot.tasks, 1), "preemptions": float(st.preemptions),
            "victims_per_preemption": st.victims / n, "victim_gpus_per_preemption": st.victim_gpus / n,
            "young_victims": st.share_younger_than(YOUNG_S), "spot_runs": float(r.spot.runs),
            "spot_evictions": float(r.spot.evictions),
            "eta_at_max": r.quota_stats.eta_at_max / max(r.quota_stats.pool_ticks, 1),
            "forecast_binds": r.quota_stats.forecast_binds / max(r.quota_stats.pool_ticks, 1)}


def release_labels(names: list[str]) -> list[str]:
    """The release-setup table: GFS, the quota'd baselines of ``names``, Chronus as released."""
    out = [n for n in names if n == "gfs"]
    out += [n + QUOTA for n in names if n in QUOTA_BASELINES]
    out += [n for n in names if n == "chronus_rel"]
    return out


def run_all(runs: list[Run], jobs: int) -> list[tuple[Run, dict[str, float], float]]:
    """Every run (in ``jobs`` processes), one progress line per finished run on stderr."""
    out = []
    t0 = time.perf_counter()
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as ex:
            for i, got in enumerate(ex.map(_run_one, runs), 1):
                out.append(_progress(i, len(runs), got, t0))
    else:
        for i, run in enumerate(runs, 1):
            out.append(_progress(i, len(runs), _run_one(run), t0))
    return out


def _progress(i: int, n: int, got: tuple[Run, dict[str, float], float], t0: float
              ) -> tuple[Run, dict[str, float], float]:
    run, m, sec = got
    print(f"[{i}/{n}] {run.workload} {run.label} seed {run.seed}: spot JQT {m['spot_jqt']:.0f} s, eviction "
          f"{100 * m['eviction_rate']:.2f} %, {sec:.0f} s ({time.perf_counter() - t0:.0f} s in all)",
          file=sys.stderr, flush=True)
    return got


def summarise(results: list[tuple[Run, dict[str, float], float]], fields: tuple[str, ...] = FIELDS
              ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]], dict[str, float]]:
    """Per scheduler label: mean and standard deviation of each field over the seeds; mean seconds."""
    by: dict[str, list[dict[str, float]]] = {}
    secs: dict[str, list[float]] = {}
    for run, m, sec in results:
        by.setdefault(run.label, []).append(m)
        secs.setdefault(run.label, []).append(sec)
    mean = {k: {f: float(np.mean([m[f] for m in v])) for f in fields} for k, v in by.items()}
    sd = {k: {f: float(np.std([m[f] for m in v])) for f in fields} for k, v in by.items()}
    return mean, sd, {k: float(np.mean(v)) for k, v in secs.items()}


def run_workload(workload: str, schedulers: list[str], days: float | None, pods_file: str | None,
                 seed: int, jobs: int, nodes: int | None = None) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """One seed, the schedulers as named (``NAME+quota`` for a quota'd baseline)."""
    runs = [Run(s, workload, seed, days, pods_file, nodes) for s in schedulers]
    mean, _, secs = summarise(run_all(runs, jobs))
    return mean, secs


# ---------------------------------------------------------------------------------------------
# scale
# ---------------------------------------------------------------------------------------------
def run_scale(samples: int = 400, seed: int = 2) -> dict[str, Any]:
    """p50/p99 latency of one ``schedule`` call on the 4,278-node cluster, loaded by a replay."""
    cat = DataCatalog(data_dir())
    nodes = NodeSpec.from_nodelist(cat.spot_gpu_nodes())
    rng = np.random.default_rng(seed)
    cfg = GfsA100Config(days=2.0, nodes=1, hp_tasks=6000, spot_tasks=2500, spot_scale=1.0, seed=seed)
    gen = gfs_a100(cfg)
    # spread the tasks over the real cluster's models (A10 nodes have 1 GPU: 1-GPU pods only)
    models = np.unique(nodes.gpu_model)
    tasks = []
    for st in gen.tasks:
        r = st.request
        model = str(rng.choice(models))
        g = 1.0 if model == "A10" and r.gpus > 1 else r.gpus
        tasks.append(SimTask(TaskRequest(r.id, r.priority, g, r.pods, (model,), r.tenant), st.submit_s * 0.5,
                             st.duration_s))
    w = Workload("scale", nodes, tasks, gen.tenants)
    sim = GpuSimulator(w, make_scheduler("gfs", seed=seed), SimConfig())
    lat: list[float] = []
    orig = sim.s.schedule

    def timed(snap: Any, task: TaskRequest) -> Any:
        t0 = time.perf_counter()
        out = orig(snap, task)
        lat.append((time.perf_counter() - t0) * 1e3)
        return out

    sim.s.schedule = timed  # type: ignore[method-assign]
    sim.run()
    arr = np.array(lat[-samples * 10:]) if lat else np.zeros(1)
    return {"nodes": len(nodes), "p50_ms": float(np.percentile(arr, 50)), "p99_ms": float(np.percentile(arr, 99)),
            "calls": len(lat)}


# ---------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------
def _table(workload: str, res: dict[str, dict[str, float]], secs: dict[str, float],
           spread: dict[str, dict[str, float]] | None = None, labels: list[str] | None = None,
           title: str = "") -> str:
    head = f"{'scheduler':14s} {'HP JCT-p99':>11s} {'HP JCT':>9s} {'HP JQT':>8s} {'spot JCT':>9s} " \
           f"{'spot JQT':>9s} {'±':>7s} {'evict %':>8s} {'±':>5s} {'ev/gh %':>8s} {'alloc %':>8s} {'sim s':>6s}"
    lines = [f"workload {workload}{(' — ' + title) if title else ''}", head, "-" * len(head)]
    for s in labels or list(res):
        if s not in res:
            continue
        m, sd = res[s], (spread or {}).get(s, {})
        lines.append(f"{s:14s} {m['hp_jct_p99']:11.1f} {m['hp_jct']:9.1f} {m['hp_jqt']:8.1f} {m['spot_jct']:9.1f} "
                     f"{m['spot_jqt']:9.1f} {sd.get('spot_jqt', 0.0):7.1f} {100 * m['eviction_rate']:8.2f} "
                     f"{100 * sd.get('eviction_rate', 0.0):5.2f} {100 * m['eviction_per_gh']:8.2f} "
                     f"{100 * m['allocation_rate']:8.2f} {secs.get(s, math.nan):6.1f}")
    level = workload.removeprefix("gfs-a100-")
    if level in PAPER_GFS:
        p = PAPER_GFS[level]
        lines.append(f"{'paper GFS':14s} {p[0]:11.1f} {p[1]:9.1f} {p[2]:8.1f} {p[3]:9.1f} {p[4]:9.1f} {'':7s} {p[5]:8.2f}")
    return "\n".join(lines)


def targets(res: dict[str, dict[str, float]], workload: str = "") -> dict[str, bool]:
    """The targets, each checked on this run (means over the seeds)."""
    if "gfs" not in res:
        return {}
    g = res["gfs"]
    base = {k: v for k, v in res.items() if not k.startswith("gfs") and not k.endswith(QUOTA)}
    quotad = {k: v for k, v in res.items() if k.endswith(QUOTA)}
    abl = {k: v for k, v in res.items() if k.startswith("gfs_")}
    out: dict[str, bool] = {}
    if base:
        out["lowest spot JQT"] = all(g["spot_jqt"] <= v["spot_jqt"] for v in base.values())
        out["lowest eviction rate"] = all(g["eviction_rate"] <= v["eviction_rate"] for k, v in base.items()
                                          if not k.startswith("chronus"))
        out["HP p99 JCT not worse than any baseline"] = all(g["hp_jct_p99"] <= v["hp_jct_p99"] * 1.0001
                                                            for v in base.values())
    published = {k: v for k, v in base.items() if k in PUBLISHED}  # Chronus as released apart
    if published and workload == "openb":
        out["openb: spot JQT within 2x of the best baseline's"] = g["spot_jqt"] <= 2 * min(
            v["spot_jqt"] for v in published.values())
        out["openb: eviction rate at or below the median baseline's"] = g["eviction_rate"] <= float(
            np.median([v["eviction_rate"] for v in published.values()]))
        out["openb: HP JQT at most 1.2x the best baseline's"] = g["hp_jqt"] <= 1.2 * min(
            v["hp_jqt"] for v in published.values())
    if quotad:
        out["release setup: lower spot JQT than every quota'd baseline"] = all(
            g["spot_jqt"] < v["spot_jqt"] for v in quotad.values())
        out["release setup: lower eviction rate than every quota'd baseline"] = all(
            g["eviction_rate"] < v["eviction_rate"] for v in quotad.values())
    if "yarn_cs" in res:
        y = res["yarn_cs"]
        out["HP JQT >= 50% below YARN-CS"] = g["hp_jqt"] <= 0.5 * y["hp_jqt"] or (g["hp_jqt"] == 0 == y["hp_jqt"])
        out["allocation rate >= YARN-CS"] = g["allocation_rate"] >= y["allocation_rate"] - 1e-4
    for k, v in abl.items():
        out[f"{k} loses on spot JCT"] = v["spot_jct"] > g["spot_jct"]
    return out


def _plot(path: str, workload: str, res: dict[str, dict[str, float]]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(res)
    fig, axes = plt.subplots(1, 4, figsize=(16, 4))
    for ax, key, label in zip(axes, ("spot_jqt", "spot_jct", "eviction_rate", "hp_jqt"),
                              ("spot JQT (s)", "spot JCT (s)", "eviction rate", "HP JQT (s)"), strict=True):
        vals = [res[n][key] for n in names]
        ax.bar(names, vals, color=["tab:red" if n == "gfs" else "tab:gray" for n in names])
        positive = [v for v in vals if v > 0]
        if key != "eviction_rate" and positive and max(positive) > 100 * min(positive):
            ax.set_yscale("log")  # GFS-e's starved spot tasks wait 10^6 s: keep the rest readable
            label += ", log"
        ax.set_title(label)
        ax.tick_params(axis="x", rotation=60)
    fig.suptitle(f"GFS vs baselines and ablations — {workload}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return fig


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scheduler", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="compare", choices=("compare", "scale", "why", "robust"))
    ap.add_argument("--workload", default="gfs-a100-medium", choices=WORKLOADS)
    ap.add_argument("--pods", help="replay this pod list (openb CSV format) on the openb nodes")
    ap.add_argument("--schedulers", default=",".join(SCHEDULERS))
    ap.add_argument("--days", type=float, help="simulate only the first DAYS days (default: all)")
    ap.add_argument("--nodes", type=int, help="node count (gfs-a100: default 287; openb: default sized for 40%% load)")
    ap.add_argument("--seed", type=int, default=2, help="one seed (see --seeds)")
    ap.add_argument("--seeds", help="comma-separated seeds: figures are means with their spread")
    ap.add_argument("--tables", default=",".join(TABLES), help="quota-free, release or both")
    ap.add_argument("--preset", default=LIVE_DEFAULT_NAME, choices=list(GFS_VARIANTS),
                    help="GFS options preset (as_released: the reproduction tables'); the flags below override it")
    ap.add_argument("--hp-demand", choices=OPTIONS["hp_demand"])
    ap.add_argument("--hourly", choices=OPTIONS["hourly"])
    ap.add_argument("--aggregation", choices=AGGREGATIONS)
    ap.add_argument("--eta-rate", choices=OPTIONS["eta_rate"])
    ap.add_argument("--pools", choices=OPTIONS["pools"])
    ap.add_argument("--eta-max", choices=CHOICES["eta_max"], help="eta's upper clamp (Eq. 11)")
    ap.add_argument("--hp-react", choices=CHOICES["hp_react"], help="queued HP GPUs cap the pool's quota at once")
    ap.add_argument("--spot-score", choices=CHOICES["spot_score"], help="GFS's first node key for spot tasks")
    ap.add_argument("--hp-score", choices=CHOICES["hp_score"], help="GFS's first node key for HP tasks")
    ap.add_argument("--preempt-reach", choices=CHOICES["preempt_reach"],
                    help="Alg. 2 of every scheduler that preempts: which nodes it tries (cards: every node "
                         "whose cards HP does not hold, as released; spot_share: idle + spot GPUs enough)")
    ap.add_argument("--spot-guard", choices=CHOICES["spot_guard"],
                    help="the quota admits the oldest waiting spot task after theta (Eq. 11)")
    ap.add_argument("--hp-reserve", choices=CHOICES["hp_reserve"],
                    help="the oldest waiting HP task of whole GPUs holds the nodes of least HP")
    ap.add_argument("--gfs-queue", choices=GFS_QUEUES,
                    help="GFS's queue order: size (ascending GPUs per pod), size_release (the authors' release) "
                         "or fcfs (submission order, backfilled)")
    ap.add_argument("--warmup-h", type=float, default=0.0,
                    help="count only tasks submitted after this many hours (default 0: all)")
    ap.add_argument("--hp-peak", type=float, default=1.0, help="gfs-a100: scale the HP diurnal peak (1.5, 2)")
    ap.add_argument("--gang-widths", help="gfs-a100: comma-separated gang widths, equally likely (e.g. 2,4)")
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel processes")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot")
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["robust"]:
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        return robust.main(args[1:])
    a = ap.parse_args(args)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if a.mode == "scale":
        out = run_scale(seed=a.seed)
        if a.json:
            print(json.dumps({"nodes": out["nodes"], "p50_ms": out["p50_ms"], "p99_ms": out["p99_ms"]}))
        else:
            print(f"{out['nodes']} nodes, {out['calls']} schedule calls: p50 {out['p50_ms']:.3f} ms, "
                  f"p99 {out['p99_ms']:.3f} ms (target p99 < 5 ms)")
        return 0
    names = [s.strip() for s in a.schedulers.split(",") if s.strip()]
    for s in names:
        make_scheduler(s)
    tables = [t.strip() for t in a.tables.split(",") if t.strip()]
    if not tables or any(t not in TABLES for t in tables):
        raise InvalidInput("--tables", f"unknown table in {a.tables!r}", fix="use quota-free, release or both")
    seeds = _ints("--seeds", a.seeds) if a.seeds else (a.seed,)
    widths = _ints("--gang-widths", a.gang_widths) if a.gang_widths else None
    preset = GFS_VARIANTS[a.preset]

    def pick(flag: str | None, field: str) -> str:
        return flag if flag is not None else str(getattr(preset, field))

    options: dict[str, Any] = {
        "hp_demand": pick(a.hp_demand, "hp_demand"), "hourly": pick(a.hourly, "hourly"),
        "aggregation": pick(a.aggregation, "aggregation"), "eta_rate": pick(a.eta_rate, "eta_rate"),
        "pools": pick(a.pools, "pools"), "hp_react": pick(a.hp_react, "hp_react"),
        "eta_max": pick(a.eta_max, "eta_max"), "spot_guard": pick(a.spot_guard, "spot_guard"),
        "hp_reserve": pick(a.hp_reserve, "hp_reserve"),
        "measure_from_s": a.warmup_h * 3600.0}
    sim_config(options)  # bad values fail before any run
    # the scheduler's: _run_one passes them to make_scheduler
    options["gfs_queue"] = pick(a.gfs_queue, "queue")
    options["spot_score"] = pick(a.spot_score, "spot_score")
    options["hp_score"] = pick(a.hp_score, "hp_score")
    options["preempt_reach"] = pick(a.preempt_reach, "preempt_reach")
    workload = "openb" if a.pods else a.workload
    free = names if "quota-free" in tables else [n for n in names if n == "gfs"]
    rel = release_labels(names) if "release" in tables else []
    labels = list(dict.fromkeys(free + rel))
    if a.mode == "why":
        labels = rel + ([STRICT_CONTROL] if "gfs" in names else [])
    runs = [Run(lab, workload, seed, a.days, a.pods, a.nodes, a.hp_peak, widths, tuple(options.items()))
            for seed in seeds for lab in labels]
    if a.mode == "why":
        res, spread, _ = summarise(run_all(runs, a.jobs), WHY_FIELDS)
        _print_why(workload, seeds, options, res, spread, a.json)
        return 0
    res, spread, secs = summarise(run_all(runs, a.jobs))
    label = workload + (f" hp-peak x{a.hp_peak:g}" if a.hp_peak != 1.0 else "") + (
        f" gangs {a.gang_widths}" if widths else "")
    if a.json:
        print(json.dumps({"workload": label, "seeds": list(seeds), "options": options,
                          "tables": {"quota_free": [x for x in free], "release": rel},
                          "schedulers": res, "spread": spread}))
    else:
        parts = []
        if "quota-free" in tables:
            parts.append(_table(label, res, secs, spread, free, "quota-free baselines"))
            parts.append(_targets_text(targets({k: res[k] for k in free}, workload)))
        if rel:
            parts.append(_table(label, res, secs, spread, rel,
                                "release setup: YARN-CS, Lyra, FGD behind GFS's spot quota; Chronus as released"))
            parts.append(_targets_text(targets({k: res[k] for k in rel if k == "gfs" or k.endswith(QUOTA)},
                                               workload)))
        opts = ", ".join(f"{k}={v}" for k, v in options.items())
        print(f"seeds {','.join(map(str, seeds))}; options: {opts}\n\n" + "\n\n".join(p for p in parts if p))
    if a.plot:
        _plot(a.plot, label, res)
    return 0


def _targets_text(t: dict[str, bool]) -> str:
    return "\n".join(["targets:"] + [f"  {k}: {'PASS' if ok else 'MISS'}" for k, ok in t.items()]) if t else ""


def _print_why(workload: str, seeds: tuple[int, ...], options: dict[str, Any], res: dict[str, dict[str, float]],
               spread: dict[str, dict[str, float]], as_json: bool) -> None:
    """The ``why`` table: release-setup labels and the strict-FCFS control, means over the seeds."""
    if as_json:
        print(json.dumps({"workload": workload, "seeds": list(seeds), "options": options, "schedulers": res,
                          "spread": spread}))
        return
    head = ("scheduler", "spot JQT s", "eviction %", "runs", "evictions", "runs/task", "preemptions",
            "victims/preemption", "victim GPUs/preemption", f"victims < {YOUNG_S:.0f} s %", "eta at max %",
            "forecast binds %")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k, m in res.items():
        lines.append(f"| {k} | {m['spot_jqt']:,.0f} | {100 * m['eviction_rate']:.2f} ± "
                     f"{100 * spread[k]['eviction_rate']:.2f} | {m['spot_runs']:,.0f} | {m['spot_evictions']:,.0f} | "
                     f"{m['spot_runs_per_task']:.3f} | {m['preemptions']:,.0f} | {m['victims_per_preemption']:.2f} | "
                     f"{m['victim_gpus_per_preemption']:.1f} | {100 * m['young_victims']:.1f} | "
                     f"{100 * m['eta_at_max']:.1f} | {100 * m['forecast_binds']:.1f} |")
    print(f"{workload}, seeds {','.join(map(str, seeds))}\n" + "\n".join(lines))


def _ints(flag: str, text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InvalidInput(flag, f"not a comma-separated list of integers: {text!r}", fix="e.g. 2,3,4") from None
    if not out:
        raise InvalidInput(flag, "is empty", fix="e.g. 2,3,4")
    return out


def replay_seconds(workload: str = "gfs-a100-medium", scheduler: str = "gfs") -> tuple[float, SimResult]:
    """Wall time of one full replay (the 2-minute target)."""
    w = build_workload(workload)
    t0 = time.perf_counter()
    r = simulate(w, make_scheduler(scheduler))
    return time.perf_counter() - t0, r


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["FIELDS", "Path", "build_workload", "main", "run_scale", "targets"]
