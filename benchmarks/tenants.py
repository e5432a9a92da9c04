"""A month of multi-tenant load on one GPU pool: fair share with borrowing, and the work lost to
evictions with the work-aware victim rule vs GFS's rule alone.

    python -m benchmarks.tenants [--days 30] [--tick 300] [--seed 2] [--json]

The load is the ``gfs-a100-medium`` workload (``benchmarks.gpucluster``: the GFS paper's task
mix, its HP tenants' demand shapes from the real alibaba-dlrm trace) over ``--days``, its 16
applications mapped onto three tenants of about equal work (largest first, each to the tenant
with the least so far), weighted 1:1:2. One pool holds the cluster's GPUs (no node packing).
Every tick (``--tick`` seconds): jobs progress and checkpoint, HP tasks start first-come
first-served and evict spot tasks when the pool is full, then spot tasks start under fair share
(``policies.fairshare``: a tenant does not borrow past its entitlement while another waits under
its own; one under its entitlement reclaims from tenants above theirs: each victim writes a
checkpoint and gives its GPUs back the next tick, as ``controlplane.reconcile.fairshare.Reclaimer``
does, so a reclaim loses the work of that tick).

Each spot task checkpoints every ``I`` hours of its own work, ``I`` drawn log-uniform in
[10 min, 4 h] per task (what the checkpoint actors report). The two victim rules, for both HP
evictions and reclaims:

* ``work`` (``policies.fairshare.victim_key``, FS-4): the lost GPU-hours since the task's real
  last checkpoint, discounted by how far its tenant is over its share;
* ``gfs``: GFS's Eq. 17 waste as its simulator estimates it, checkpoints every hour from the
  run's start (``RunningTask.checkpoint_every_s``), blind to tenants.

A third run, ``gfs_no_fair_share``, has no fair share at all (spot tasks first-come first-served
across tenants) and GFS's rule: the fair-share error fair share removes.

``--json`` prints one object: ``fair_share_error`` (the worst tenant's time-averaged
|held - entitled| / capacity over the ticks where the pool is contended), ``lost_work_reduction``
(1 - lost GPU-hours with ``work`` / with ``gfs``), ``hp_jqt_s`` (mean HP queueing time per rule),
``cap_overshoot_ticks`` (from ``benchmarks.budgets``: the openb month through the live admission rule), and
``runs`` with each run's lost work, evictions and per-tenant shares.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks import budgets
from benchmarks.gpucluster import build_workload
from policies.fairshare import (
    Candidate,
    ShareLine,
    TenantDemand,
    VictimRule,
    entitlements,
    reclaim,
    victim_key,
)
from policies.sim.workloads import SimTask

TENANTS: tuple[tuple[str, float], ...] = (("a", 1.0), ("b", 1.0), ("c", 2.0))
GFS_CHECKPOINT_S = 3600.0  # GFS's simulator: a checkpoint every hour from the run's start
CHECKPOINT_RANGE_H = (10 / 60, 4.0)  # each spot task's real checkpoint interval, log-uniform
EPS = 1e-9


def cap_overshoot_ticks(days: float) -> float:
    """The worst tenant's overshoot of its hourly spend cap, in ticks of its spend: the month of
    openb arrivals replayed through the live admission rule (``benchmarks.budgets``)."""
    return float(budgets.run(days=days)["cap_overshoot_ticks"])


@dataclass
class Run:
    """A task holding GPUs: its progress and last checkpoint in seconds of its own work."""

    task: SimTask
    tenant: str
    gpus: float
    interval_s: float
    started_s: float  # this run's start
    progress_s: float = 0.0
    checkpointed_s: float = 0.0

    @property
    def hp(self) -> bool:
        return self.task.request.is_hp

    def advance(self, dt: float) -> None:
        """``dt`` seconds of work, checkpointing every ``interval_s`` of it."""
        self.progress_s = min(self.task.duration_s, self.progress_s + dt)
        self.checkpointed_s = max(self.checkpointed_s,
                                  math.floor(self.progress_s / self.interval_s) * self.interval_s)

    def candidate(self, now: float) -> Candidate:
        since_run = max(0.0, now - self.started_s)
        return Candidate(self.task.id, self.tenant, self.gpus,
                         (self.progress_s - self.checkpointed_s) / 3600.0,
                         (since_run % GFS_CHECKPOINT_S) / 3600.0)


@dataclass
class Outcome:
    """What one run of the month measured."""

    name: str
    lost_gpu_hours: float = 0.0
    lost_by_hp: float = 0.0
    lost_by_reclaim: float = 0.0
    evictions: int = 0
    reclaims: int = 0
    hp_waits: list[float] = field(default_factory=list)
    errors: dict[str, float] = field(default_factory=dict)  # tenant -> sum |held - entitled|/K
    held: dict[str, float] = field(default_factory=dict)  # tenant -> sum held/K (contended)
    entitled: dict[str, float] = field(default_factory=dict)
    contended_ticks: int = 0
    finished: int = 0

    def summary(self) -> dict[str, Any]:
        n = max(self.contended_ticks, 1)
        return {
            "lost_gpu_hours": round(self.lost_gpu_hours, 1),
            "lost_gpu_hours_hp_evictions": round(self.lost_by_hp, 1),
            "lost_gpu_hours_reclaims": round(self.lost_by_reclaim, 1),
            "evictions": self.evictions, "reclaims": self.reclaims,
            "hp_jqt_s": round(float(np.mean(self.hp_waits)) if self.hp_waits else 0.0, 1),
            "fair_share_error": round(max(self.errors.values(), default=0.0) / n, 4),
            "contended_ticks": self.contended_ticks, "finished": self.finished,
            "tenants": {t: {"share": round(self.held.get(t, 0.0) / n, 4),
                            "entitled": round(self.entitled.get(t, 0.0) / n, 4),
                            "error": round(self.errors.get(t, 0.0) / n, 4)}
                        for t, _ in TENANTS},
        }


def tenant_of_apps(tasks: Sequence[SimTask]) -> dict[str, str]:
    """Applications onto the tenants, about equal work each (largest first, least-loaded)."""
    work: dict[str, float] = {}
    for t in tasks:
        work[t.request.tenant] = work.get(t.request.tenant, 0.0) + t.request.total_gpus * t.duration_s
    load = {name: 0.0 for name, _ in TENANTS}
    out = {}
    for app in sorted(work, key=lambda a: (-work[a], a)):
        tenant = min(load, key=lambda k: (load[k], k))
        out[app] = tenant
        load[tenant] += work[app]
    return out


class Month:
    """One run of the month under one victim rule, with or without fair share."""

    def __init__(self, tasks: Sequence[SimTask], capacity: float, tick_s: float, seed: int,
                 rule: VictimRule, fair: bool, name: str) -> None:
        self.tasks, self.capacity, self.tick_s = tasks, capacity, tick_s
        self.rule, self.fair = rule, fair
        self.out = Outcome(name)
        self.apps = tenant_of_apps(tasks)
        rng = np.random.default_rng(seed)
        lo, hi = np.log(CHECKPOINT_RANGE_H[0]), np.log(CHECKPOINT_RANGE_H[1])
        self.interval_s = {t.id: float(np.exp(rng.uniform(lo, hi))) * 3600.0 for t in tasks}
        self.weights = dict(TENANTS)
        self.running: dict[str, Run] = {}
        self.progress: dict[str, tuple[float, float]] = {}  # evicted: (progress, checkpoint)
        self.hp_queue: deque[SimTask] = deque()
        self.spot_queue: dict[str, deque[SimTask]] = {t: deque() for t, _ in TENANTS}
        self.free = capacity
        self.draining: dict[str, str] = {}  # reclaim victims checkpointing -> claimant tenant

    # -- bookkeeping ----------------------------------------------------------------------------
    def _held(self) -> dict[str, float]:
        held = dict.fromkeys(self.weights, 0.0)
        for r in self.running.values():
            held[r.tenant] += r.gpus
        return held

    def lines(self) -> dict[str, ShareLine]:
        """Every tenant's share line now (FS-1 to FS-3)."""
        held = self._held()
        waiting = {t: sum(x.request.total_gpus for x in q) for t, q in self.spot_queue.items()}
        for x in self.hp_queue:
            waiting[self.apps[x.request.tenant]] += x.request.total_gpus
        return entitlements(self.capacity, [TenantDemand(t, w, None, held[t], waiting[t])
                                            for t, w in self.weights.items()])

    def _start(self, task: SimTask, now: float) -> None:
        tenant = self.apps[task.request.tenant]
        run = Run(task, tenant, task.request.total_gpus, self.interval_s[task.id], now)
        run.progress_s, run.checkpointed_s = self.progress.pop(task.id, (0.0, 0.0))
        self.running[task.id] = run
        self.free -= run.gpus
        if task.request.is_hp:
            self.out.hp_waits.append(now - task.submit_s)

    def _evict(self, job_id: str, by_reclaim: bool) -> None:
        self.draining.pop(job_id, None)
        run = self.running.pop(job_id)
        lost = run.gpus * (run.progress_s - run.checkpointed_s) / 3600.0
        self.out.lost_gpu_hours += lost
        self.out.evictions += 1
        if by_reclaim:
            self.out.lost_by_reclaim += lost
            self.out.reclaims += 1
        else:
            self.out.lost_by_hp += lost
        self.progress[job_id] = (run.checkpointed_s, run.checkpointed_s)
        self.free += run.gpus
        self.spot_queue[run.tenant].appendleft(run.task)  # back at the head of its queue

    # -- one tick -------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        for job_id, run in list(self.running.items()):
            run.advance(self.tick_s)
            if run.progress_s >= run.task.duration_s - EPS:
                del self.running[job_id]
                self.free += run.gpus
                self.out.finished += 1
                self.draining.pop(job_id, None)
        for job_id in list(self.draining):  # checkpointed last tick: their GPUs go back now
            self._evict(job_id, by_reclaim=True)
        self._place_hp(now)
        self._place_spot(now)
        self._measure()

    def _place_hp(self, now: float) -> None:
        """HP tasks first-come first-served; a full pool evicts spot tasks by the rule."""
        while self.hp_queue:
            task = self.hp_queue[0]
            need = task.request.total_gpus - self.free
            if need > EPS:
                victims = self._hp_victims(need, now)
                if victims is None:
                    return
                for v in victims:
                    self._evict(v, by_reclaim=False)
            self.hp_queue.popleft()
            self._start(task, now)

    def _hp_victims(self, need: float, now: float) -> list[str] | None:
        spot = [r for r in self.running.values() if not r.hp]
        if sum(r.gpus for r in spot) < need - EPS:
            return None
        lines = self.lines()
        order = sorted(spot, key=lambda r: (victim_key(r.candidate(now), lines.get(r.tenant),
                                                       self.rule), r.task.id))
        chosen, freed = [], 0.0
        for r in order:
            if freed >= need - EPS:
                break
            chosen.append(r.task.id)
            freed += r.gpus
        return chosen

    def _place_spot(self, now: float) -> None:
        """Spot tasks: under fair share, the tenants furthest under their entitlement first;
        without it, the oldest head first."""
        for _ in range(10_000):
            if not self._place_one_spot(now):
                return

    def _place_one_spot(self, now: float) -> bool:
        heads = [(t, q[0]) for t, q in self.spot_queue.items() if q]
        if not heads:
            return False
        if not self.fair:
            tenant, task = min(heads, key=lambda h: (h[1].submit_s, h[1].id))
            if task.request.total_gpus > self.free + EPS:
                return False
            self._start(self.spot_queue[tenant].popleft(), now)
            return True
        lines = self.lines()
        heads.sort(key=lambda h: (lines[h[0]].held / max(lines[h[0]].entitled, EPS),
                                  h[1].submit_s))
        for tenant, task in heads:
            gpus, line = task.request.total_gpus, lines[tenant]
            under = line.held < line.entitled - EPS
            if not under and line.held + gpus > line.entitled + EPS and any(
                    o.room > EPS and self.spot_queue[t] for t, o in lines.items() if t != tenant):
                continue  # would borrow what another waiting tenant is owed
            if gpus > self.free + EPS:
                if not under or tenant in self.draining.values():
                    continue  # its earlier victims give their GPUs back next tick
                cands = [r.candidate(now) for r in self.running.values()
                         if not r.hp and r.task.id not in self.draining]
                victims = reclaim(lines, tenant, gpus - self.free, cands, self.rule, gpus)
                for v in victims:  # each writes a checkpoint now, and stops next tick
                    run = self.running[v]
                    run.checkpointed_s = run.progress_s
                    self.draining[v] = tenant
                continue
            self._start(self.spot_queue[tenant].popleft(), now)
            return True
        return False

    def _measure(self) -> None:
        lines = self.lines()
        if sum(line.entitled for line in lines.values()) < self.capacity - EPS:
            return  # demand fits: every tenant holds what it asks for
        self.out.contended_ticks += 1
        for t, line in lines.items():
            self.out.errors[t] = self.out.errors.get(t, 0.0) + abs(line.held - line.entitled) / self.capacity
            self.out.held[t] = self.out.held.get(t, 0.0) + line.held / self.capacity
            self.out.entitled[t] = self.out.entitled.get(t, 0.0) + line.entitled / self.capacity

    def run(self, days: float) -> Outcome:
        arrivals = deque(sorted(self.tasks, key=lambda x: (x.submit_s, x.id)))
        now = 0.0
        end = days * 86400.0
        while now < end:
            now += self.tick_s
            while arrivals and arrivals[0].submit_s <= now:
                task = arrivals.popleft()
                if task.request.is_hp:
                    self.hp_queue.append(task)
                else:
                    self.spot_queue[self.apps[task.request.tenant]].append(task)
            self.tick(now)
        return self.out


def measure(days: float, tick_s: float, seed: int) -> dict[str, Any]:
    """The three runs over the month and the headline numbers."""
    w = build_workload("gfs-a100-medium", days=days, seed=seed)
    capacity = float(w.nodes.total_gpus)
    runs = {}
    variants: tuple[tuple[str, VictimRule, bool], ...] = (
        ("work", "work", True), ("gfs", "gfs", True), ("gfs_no_fair_share", "gfs", False))
    for name, rule, fair in variants:
        t0 = time.perf_counter()
        out = Month(w.tasks, capacity, tick_s, seed, rule, fair, name).run(days)
        runs[name] = {**out.summary(), "wall_s": round(time.perf_counter() - t0, 1)}
        print(f"{name}: {runs[name]['wall_s']} s", file=sys.stderr)
    lost_gfs = runs["gfs"]["lost_gpu_hours"]
    reduction = 1.0 - runs["work"]["lost_gpu_hours"] / lost_gfs if lost_gfs > 0 else 0.0
    return {
        "workload": "gfs-a100-medium", "days": days, "tick_s": tick_s, "seed": seed,
        "capacity_gpus": capacity, "tenants": dict(TENANTS),
        "apps": tenant_of_apps(w.tasks),
        "fair_share_error": runs["work"]["fair_share_error"],
        "lost_work_reduction": round(reduction, 4),
        "hp_jqt_s": {"work": runs["work"]["hp_jqt_s"], "gfs": runs["gfs"]["hp_jqt_s"]},
        "cap_overshoot_ticks": cap_overshoot_ticks(days),
        "runs": runs,
    }


def _table(r: dict[str, Any]) -> str:
    lines = [f"{r['workload']}, {r['days']:g} days, {r['capacity_gpus']:.0f} GPUs, "
             f"tick {r['tick_s']:g} s, tenants {r['tenants']}",
             f"{'run':<20}{'lost GPU-h':>12}{'evictions':>11}{'reclaims':>10}{'HP JQT s':>10}"
             f"{'share err':>11}  shares (entitled)"]
    for name, x in r["runs"].items():
        shares = " ".join(f"{t}={v['share']:.3f}({v['entitled']:.3f})"
                          for t, v in x["tenants"].items())
        lines.append(f"{name:<20}{x['lost_gpu_hours']:>12.1f}{x['evictions']:>11}"
                     f"{x['reclaims']:>10}{x['hp_jqt_s']:>10.1f}{x['fair_share_error']:>11.4f}  "
                     f"{shares}")
    lines.append(f"fair_share_error {r['fair_share_error']:.4f} (target < 0.05); "
                 f"lost_work_reduction {r['lost_work_reduction']:.3f} (target >= 0.30)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tenants", description=__doc__)
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--tick", type=float, default=300.0, help="seconds per tick")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    r = measure(args.days, args.tick, args.seed)
    print(json.dumps(r, sort_keys=True) if args.json else _table(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
