"""Migration benchmark (seed 004, Sec. IV): on-demand vs single spot vs two replicas vs adaptive.

Replays the real preemption traces ``spot-traces/preemption/1-node/aws-04-22-2023`` (four AWS
zones, p3.2xlarge, 32 s ticks, 177 h, all on one clock) for a 24 h job with a 1 min checkpoint
cost and a 0.3 h restart overhead, started every ``--every`` hours along the traces (the traces
wrap around). A spot instance in a zone runs while the zone's trace is 1 and is preempted when
it drops to 0; a replacement goes to the up zone with the longest mean up-time that no other
replica uses (or waits, unbilled, until one is up), pays the restart overhead and restores the
freshest checkpoint. No preemption notice is assumed (the trace has none). Strategies:

- ``on_demand``: one on-demand instance, never preempted.
- ``periodic``: one spot instance, a checkpoint every 1 h of work (seed 004's baseline).
- ``dp``: one spot instance, the optimal DP checkpoint schedule of seed 001 (Eq. 9-13) from a
  Weibull preemption model fitted (censored MLE) to the traces' up-times, re-planned at age 0
  after every restore.
- ``replicas2``: seed 004: two spot instances in different zones, 1 h periodic checkpoints;
  when one is preempted the survivor checkpoints at once and the replacement restores from it.
- ``adaptive``: the DP schedule, a second replica only while ``policies.replication.decide``
  says it pays, a replacement restores a checkpoint its live peer writes when the replacement is
  ready (not the one from the preemption), and seed 003's Uniform Progress
  (``policies.deadline``) for the deadline ``1.1 x`` the job: on-demand while behind, back to
  spot when ahead, Safety Net at the end.
- ``replicas2_deadline`` (extra): ``replicas2`` held to the same deadline by the same policy, the
  cost of two replicas at a time to finish within 10% of on-demand.

Cost is billed instance-hours x price (p3.2xlarge: spot 0.92, on-demand 3.06 per hour).
``python -m benchmarks.migration [--json] [--plot FILE.png]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from benchmarks import entry
from clusters.data.catalog import DataCatalog
from clusters.data.spot import SpotTrace
from controlplane.core.config import data_dir
from policies.checkpoint import CheckpointIntervals
from policies.deadline import DeadlineTask, Kind, Observation, make_policy
from policies.preemption import PreemptionModel, WeibullModel
from policies.replication import ReplicationInputs, decide

log = logging.getLogger(__name__)

TRACES = "preemption/1-node/aws-04-22-2023"
SPOT_PRICE, ON_DEMAND_PRICE = (
    0.92,
    3.06,
)  # p3.2xlarge, shared/data/README.md (Can't Be Late, Table 4)
STRATEGIES = ("on_demand", "periodic", "dp", "replicas2", "adaptive")
EXTRA = (
    "replicas2_deadline",
)  # two replicas held to the same +10% deadline: the equal-time comparison
SEED_004 = {
    "periodic_vs_on_demand": 0.328,
    "replicas_vs_periodic": -0.181,
    "replicas_vs_on_demand": 0.087,
    "replicas_cost_vs_on_demand": 0.54,
}


@dataclass(frozen=True)
class JobParams:
    work_hours: float = 24.0
    checkpoint_hours: float = 1 / 60
    restart_hours: float = 0.3
    period_hours: float = 1.0
    deadline_factor: float = 1.1


@dataclass
class Replica:
    zone: int  # -1: on-demand
    phase: str  # "restart" | "compute" | "ckpt"
    left: float  # hours left in the restart / checkpoint phase
    work: float = 0.0
    base: float = 0.0  # work at the last restore (plans count from here)
    age: float = 0.0  # hours since launch
    ckpt_work: float = 0.0
    next_ckpt: float = math.inf
    plan: Any = None
    synced: bool = False  # a peer already checkpointed for this replica's restore

    @property
    def on_demand(self) -> bool:
        return self.zone < 0


@dataclass
class Run:
    hours: float
    cost: float
    preemptions: int = 0
    checkpoints: int = 0
    replica_hours: float = 0.0  # hours a second replica was billed
    on_demand_hours: float = 0.0


# --------------------------------------------------------------------------------------------
# Zones
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Zones:
    """The traces on one clock: ``up[z, tick]`` and what a policy may know about each zone."""

    names: tuple[str, ...]
    up: np.ndarray  # bool [zones, ticks]
    gap_hours: float
    mean_up_hours: np.ndarray  # per zone
    model: PreemptionModel  # pooled preemption model (hazard for replication, DP planning)
    mean_wait_hours: float  # mean time until some zone is up, from a tick where none is
    up_age_ticks: np.ndarray  # int [zones, ticks]: how long the zone has been up (0 when down)
    other_up_at_preemption: float  # P(another zone is up at a zone's preemption and R before it)

    @property
    def n_ticks(self) -> int:
        return int(self.up.shape[1])


def up_runs(available: np.ndarray, gap_hours: float) -> tuple[np.ndarray, np.ndarray]:
    """Lengths (hours) of the up-periods of one trace and whether each ended in a preemption."""
    a = (np.asarray(available) > 0).astype(np.int8)
    d = np.diff(np.r_[0, a, 0])
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    lengths = (ends - starts) * gap_hours
    preempted = ends < len(a)  # the last run is censored at the end of the trace
    return lengths, preempted


def load_zones(catalog: DataCatalog, collection: str = TRACES) -> Zones:
    traces: list[SpotTrace] = catalog.spot_traces(collection)
    up = np.array([t.available > 0 for t in traces])
    gap = traces[0].gap_hours
    lengths, preempted, means = [], [], []
    for t in traces:
        ln, pr = up_runs(t.available, gap)
        lengths.append(ln)
        preempted.append(pr)
        means.append(float(ln.mean()))
    all_len, all_pre = np.concatenate(lengths), np.concatenate(preempted)
    limit = float(max(72.0, math.ceil(all_len.max() + 1.0)))  # AWS has no 24 h limit
    fitted = WeibullModel.fit(all_len, all_pre, max_lifetime=limit, grace_hours=0.0)
    model = WeibullModel(
        fitted.shape, fitted.scale, limit=limit
    )  # keep the limit past the longest run
    none_up: np.ndarray = np.asarray(~up.any(axis=0))
    waits = []
    for run_len in up_runs(none_up, gap)[0]:  # a down-period of n ticks: waits n, n-1, ... ticks
        n = round(run_len / gap)
        waits.append(gap * (n + 1) / 2 * n)
    mean_wait = float(sum(waits) / max(1, int(none_up.sum())))
    return Zones(
        tuple(t.zone for t in traces),
        up,
        gap,
        np.array(means),
        model,
        mean_wait,
        _up_age(up),
        _other_up(up, gap),
    )


def _other_up(up: np.ndarray, gap_hours: float, restart_hours: float = 0.3) -> float:
    """Fraction of preemptions (1 -> 0 in a zone) at which another zone was up, then and ``restart_hours`` before."""
    back = round(restart_hours / gap_hours)
    hits = total = 0
    for z in range(up.shape[0]):
        others: np.ndarray = np.asarray(np.delete(up, z, axis=0).any(axis=0))
        for k in np.flatnonzero(up[z, :-1] & ~up[z, 1:]) + 1:
            total += 1
            hits += bool(others[int(k)] and others[max(0, int(k) - back)])
    return hits / total if total else 1.0


def _up_age(up: np.ndarray) -> np.ndarray:
    """Ticks each zone has been up without a break (what a controller sees from its probes)."""
    age = np.zeros(up.shape, dtype=np.int64)
    run = np.zeros(up.shape[0], dtype=np.int64)
    for k in range(up.shape[1]):
        run = np.where(up[:, k], run + 1, 0)
        age[:, k] = run
    return age


# --------------------------------------------------------------------------------------------
# Checkpoint schedules
# --------------------------------------------------------------------------------------------
class Periodic:
    """A checkpoint every ``period`` hours of work."""

    def __init__(self, period: float) -> None:
        self.period = period

    def next_after(self, r: Replica) -> float:
        return r.work + self.period


class DPSchedule:
    """Seed 001's DP schedule (Eq. 9-13), re-planned at age 0 for the remaining work after each restore."""

    def __init__(self, model: PreemptionModel, job: JobParams, step_hours: float) -> None:
        self.planner = CheckpointIntervals(  # one solve answers every (work left, age 0)
            model,
            job.checkpoint_hours,
            horizon_hours=job.work_hours,
            step_hours=step_hours,
            restart_hours=job.restart_hours,
        )
        self.step = step_hours
        self._plan = lru_cache(maxsize=8192)(self._plan_uncached)

    def _plan_uncached(self, steps: int) -> tuple[float, ...]:
        return self.planner.checkpoints(steps * self.step)

    def plan_for(self, remaining: float) -> tuple[float, ...]:
        return self._plan(max(1, round(remaining / self.step)))

    def next_after(self, r: Replica) -> float:
        done = r.work - r.base
        for c in r.plan or ():
            if c > done + 1e-9:
                return r.base + c
        return math.inf


# --------------------------------------------------------------------------------------------
# The replay
# --------------------------------------------------------------------------------------------
@dataclass
class Strategy:
    name: str
    schedule: Any  # Periodic | DPSchedule | None
    replicas: int = 1
    adaptive: bool = False
    survivor_checkpoint: bool = True
    sync_on_restore: bool = False  # a peer checkpoints when a replacement is ready to restore
    deadline_policy: str | None = None  # seed 003 policy name (policies.deadline.make_policy)
    policy: Any = None
    log: list[str] = field(default_factory=list)


def _launch(zones: Zones, tick: int, used: set[int]) -> int | None:
    """The free up zone that has been up the longest (decreasing hazard: the stablest), or None."""
    k = tick % zones.n_ticks
    col = zones.up[:, k]
    free = [z for z in range(len(zones.names)) if col[z] and z not in used]
    return (
        max(free, key=lambda z: (zones.up_age_ticks[z, k], zones.mean_up_hours[z]))
        if free
        else None
    )


def replay(zones: Zones, job: JobParams, strat: Strategy, start_tick: int) -> Run:
    """One job from ``start_tick`` to completion under ``strat``."""
    dt = zones.gap_hours
    J, R, delta = job.work_hours, job.restart_hours, job.checkpoint_hours
    saved = 0.0
    t, cost = 0.0, 0.0
    run = Run(hours=0.0, cost=0.0)
    reps: list[Replica] = []
    replicated = False
    if strat.deadline_policy is not None:
        strat.policy = _make_deadline_policy(strat.deadline_policy, job, zones.gap_hours)

    def restore(r: Replica) -> None:
        r.work = r.base = saved
        r.age = r.age  # the age counts from launch
        if isinstance(strat.schedule, DPSchedule):
            r.plan = strat.schedule.plan_for(J - saved)
        r.next_ckpt = (
            strat.schedule.next_after(r)
            if strat.schedule is not None and not r.on_demand
            else math.inf
        )

    first = True
    for k in range(start_tick, start_tick + 50 * zones.n_ticks):
        col = zones.up[:, k % zones.n_ticks]
        # preemptions
        dead = [r for r in reps if not r.on_demand and not col[r.zone]]
        if dead:
            run.preemptions += len(dead)
            reps = [r for r in reps if r not in dead]
            for r in reps:  # seed 004: the survivor checkpoints at once
                if strat.survivor_checkpoint and r.phase == "compute" and r.work > saved:
                    r.phase, r.left, r.ckpt_work = "ckpt", delta, r.work
        # how many replicas, on which market (seed 003's deadline policy decides the market)
        progress = max([saved, *[r.work for r in reps]])
        want_od = False
        if strat.deadline_policy is not None:
            want_od = _deadline_says_on_demand(
                strat, reps, progress, t, k, zones, lost_one=bool(dead)
            )
        if want_od:
            want = 0
            if not any(r.on_demand for r in reps):
                reps.append(Replica(zone=-1, phase="restart", left=R))
        elif strat.adaptive:
            replicated = _adaptive_wants(zones, job, strat, reps, saved, t, k, replicated)
            want = 1 + int(replicated)
        else:
            want = strat.replicas
        spot = [r for r in reps if not r.on_demand]
        od = [r for r in reps if r.on_demand]
        caught_up = job.checkpoint_hours + 2 * dt  # the restored side has the other's state
        if want_od and spot and math.isfinite(_best(od)) and _best(od) >= _best(spot) - caught_up:
            reps = od  # on-demand restored: release the spot replicas
        elif (
            not want_od
            and od
            and math.isfinite(_best(spot))
            and _best(spot) >= _best(od) - caught_up
        ):
            reps = spot  # back on spot: release on-demand
        spot = [r for r in reps if not r.on_demand]
        while len(spot) < want:
            z = _launch(zones, k, {r.zone for r in reps})
            if z is None:
                break
            if first:  # the very first start pays no restart
                r = Replica(zone=z, phase="compute", left=0.0)
                restore(r)
            else:
                r = Replica(zone=z, phase="restart", left=R)
            reps.append(r)
            spot.append(r)
        first = first and not reps
        if len(spot) > want and not want_od:  # drop the spot replica furthest behind
            spot.sort(key=lambda r: (r.phase == "compute", r.work), reverse=True)
            reps = [r for r in reps if r.on_demand] + spot[: max(want, 0)]
        # advance one tick
        for r in reps:
            budget = dt
            while budget > 1e-12:
                if r.phase in ("restart", "ckpt"):
                    use = min(budget, r.left)
                    r.left -= use
                    budget -= use
                    if r.left <= 1e-12:
                        if r.phase == "ckpt":
                            saved = max(saved, r.ckpt_work)
                            run.checkpoints += 1
                            r.phase = "compute"
                            r.next_ckpt = (
                                strat.schedule.next_after(r)
                                if strat.schedule is not None and not r.on_demand
                                else math.inf
                            )
                        else:
                            if strat.sync_on_restore and not r.synced:
                                wait = _sync_from_peer(r, reps, saved, delta)
                                if wait > 0:
                                    r.left, r.synced = (
                                        wait + dt,
                                        True,
                                    )  # restore once the peer's save is in
                                    continue
                            r.phase = "compute"
                            restore(r)
                else:
                    use = min(budget, min(r.next_ckpt, J) - r.work)
                    r.work += use
                    budget -= use
                    if r.work >= J - 1e-9:
                        run.hours = t + (dt - budget)
                        run.cost = cost + (dt - budget) * sum(_price(x) for x in reps)
                        return run
                    if r.work >= r.next_ckpt - 1e-12:
                        r.phase, r.left, r.ckpt_work = "ckpt", delta, r.work
            r.age += dt
        billed = sum(_price(r) for r in reps)
        cost += billed * dt
        if len([r for r in reps if not r.on_demand]) > 1:
            run.replica_hours += dt
        run.on_demand_hours += dt * sum(r.on_demand for r in reps)
        t += dt
    raise RuntimeError(f"{strat.name}: the job did not finish within 50 trace lengths")


def _make_deadline_policy(name: str, job: JobParams, tick_hours: float) -> Any:

    task = DeadlineTask(
        compute_hours=job.work_hours,
        deadline_hours=job.deadline_factor * job.work_hours,
        overhead_hours=job.restart_hours,
        on_demand_price=ON_DEMAND_PRICE,
        spot_price=SPOT_PRICE,
    )
    return make_policy(name, task, tick_hours=tick_hours)


def _deadline_says_on_demand(
    strat: Strategy,
    reps: list[Replica],
    progress: float,
    t: float,
    k: int,
    zones: Zones,
    *,
    lost_one: bool,
) -> bool:
    """Seed 003: should the job be on on-demand now (Safety Net, Uniform Progress)?

    A replica just preempted counts as a preemption of the job (state IDLE) even when a survivor
    runs on: the policies re-decide only when idle, and a replicated job would otherwise never be.
    """

    if any(r.on_demand for r in reps):
        state = Kind.ON_DEMAND
    elif reps and not lost_one:
        state = Kind.SPOT
    else:
        state = Kind.IDLE
    avail = bool(zones.up[:, k % zones.n_ticks].any())
    obs = Observation(
        elapsed_hours=t, progress_hours=progress, state=state, zone=None, spot_available=avail
    )
    return bool(strat.policy.decide(obs).kind is Kind.ON_DEMAND)


def _sync_from_peer(r: Replica, reps: list[Replica], saved: float, delta: float) -> float:
    """A replica ready to restore asks the most advanced live peer for a checkpoint (or waits for
    the one it is writing); returns how long until that checkpoint is in, 0 if none is needed."""
    saving = [p for p in reps if p is not r and p.phase == "ckpt" and p.ckpt_work > saved + 1e-9]
    computing = [p for p in reps if p is not r and p.phase == "compute" and p.work > saved + delta]
    best_saving = max((p.ckpt_work for p in saving), default=-1.0)
    best_computing = max(computing, key=lambda p: p.work, default=None)
    if best_computing is not None and best_computing.work > best_saving + delta:
        p = best_computing
        p.phase, p.left, p.ckpt_work = "ckpt", delta, p.work
        return delta
    if saving:
        return max(p.left for p in saving)
    return 0.0


def _best(reps: list[Replica]) -> float:
    """Work of the most advanced restored replica (-inf when none is restored)."""
    return max((r.work for r in reps if r.phase != "restart"), default=-math.inf)


def _price(r: Replica) -> float:
    return ON_DEMAND_PRICE if r.on_demand else SPOT_PRICE


def _adaptive_wants(
    zones: Zones,
    job: JobParams,
    strat: Strategy,
    reps: list[Replica],
    saved: float,
    t: float,
    k: int,
    replicated: bool,
) -> bool:
    """Ask ``policies.replication.decide`` whether a second replica pays right now."""
    running = [r for r in reps if not r.on_demand]
    if not running:
        return False
    primary = max(running, key=lambda r: r.work)
    progress = max(saved, primary.work)
    remaining = job.work_hours - progress
    hazard = float(zones.model.hazard(np.array([primary.age]))[0])
    interval = (
        (primary.next_ckpt - primary.base) if math.isfinite(primary.next_ckpt) else job.period_hours
    )
    other_up = bool(np.any(np.delete(zones.up[:, k % zones.n_ticks], primary.zone)))
    x = ReplicationInputs(
        hazard_per_hour=hazard,
        unsaved_hours=max(primary.work - saved, min(interval, remaining) / 2),
        restart_hours=job.restart_hours,
        remaining_work_hours=remaining,
        spot_price=SPOT_PRICE,
        second_price=SPOT_PRICE,
        on_demand_price=ON_DEMAND_PRICE,
        slack_hours=job.deadline_factor * job.work_hours - t - remaining - job.restart_hours,
        wait_hours=0.0 if other_up else zones.mean_wait_hours,
        survivor_checkpoint_hours=job.checkpoint_hours,
        restart_survival=float(zones.model.sf(np.array([job.restart_hours]))[0]),
        peer_survival=float(zones.model.sf(np.array([job.restart_hours]))[0])
        * zones.other_up_at_preemption,
    )
    return decide(x, replicated_now=replicated).replicate


def make_strategies(zones: Zones, job: JobParams, dp_step_hours: float) -> dict[str, Strategy]:
    dp = DPSchedule(zones.model, job, dp_step_hours)
    return {
        "periodic": Strategy("periodic", Periodic(job.period_hours), survivor_checkpoint=False),
        "dp": Strategy("dp", dp, survivor_checkpoint=False),
        "replicas2": Strategy("replicas2", Periodic(job.period_hours), replicas=2),
        "adaptive": Strategy(
            "adaptive", dp, adaptive=True, sync_on_restore=True, deadline_policy="uniform_progress"
        ),
        "replicas2_deadline": Strategy(
            "replicas2_deadline",
            Periodic(job.period_hours),
            replicas=2,
            deadline_policy="uniform_progress",
        ),
    }


def run_benchmark(
    catalog: DataCatalog,
    job: JobParams = JobParams(),
    every_hours: float = 6.0,
    dp_step_hours: float = 1 / 60,
    strategies: Sequence[str] = STRATEGIES + EXTRA,
) -> dict[str, Any]:
    zones = load_zones(catalog)
    starts = list(range(0, zones.n_ticks, max(1, round(every_hours / zones.gap_hours))))
    strats = make_strategies(zones, job, dp_step_hours)
    runs: dict[str, list[Run]] = {}
    for name in strategies:
        if name == "on_demand":
            runs[name] = [Run(hours=job.work_hours, cost=job.work_hours * ON_DEMAND_PRICE)]
            continue
        runs[name] = [replay(zones, job, strats[name], s) for s in starts]
    out: dict[str, Any] = {
        "strategies": {},
        "params": {
            "traces": TRACES,
            "zones": list(zones.names),
            "work_hours": job.work_hours,
            "checkpoint_hours": job.checkpoint_hours,
            "restart_hours": job.restart_hours,
            "period_hours": job.period_hours,
            "deadline_factor": job.deadline_factor,
            "spot_price": SPOT_PRICE,
            "on_demand_price": ON_DEMAND_PRICE,
            "starts": len(starts),
            "every_hours": every_hours,
            "dp_step_hours": dp_step_hours,
            "model": {"name": zones.model.name, **zones.model.params},
            "mean_wait_hours": zones.mean_wait_hours,
        },
    }
    for name, rs in runs.items():
        h = np.array([r.hours for r in rs])
        c = np.array([r.cost for r in rs])
        out["strategies"][name] = {
            "hours": float(h.mean()),
            "cost": float(c.mean()),
            "hours_p90": float(np.percentile(h, 90)),
            "hours_max": float(h.max()),
            "preemptions": float(np.mean([r.preemptions for r in rs])),
            "checkpoints": float(np.mean([r.checkpoints for r in rs])),
            "replica_hours": float(np.mean([r.replica_hours for r in rs])),
            "on_demand_hours": float(np.mean([r.on_demand_hours for r in rs])),
        }
        out.setdefault("_per_run", {})[name] = h.tolist()
    out["targets"] = _targets(out, runs)
    out.pop("_per_run")
    return out


def _targets(out: dict[str, Any], runs: dict[str, list[Run]]) -> dict[str, Any]:
    s = out["strategies"]
    if not all(n in s for n in STRATEGIES):
        return {}
    od, per, rep, ad = (s[n] for n in ("on_demand", "periodic", "replicas2", "adaptive"))
    per_h = np.array([r.hours for r in runs["periodic"]])
    ad_h = np.array([r.hours for r in runs["adaptive"]])
    within = ad["hours"] <= 1.10 * od["hours"]
    not_slower = ad["hours"] <= per["hours"]
    out_t: dict[str, Any] = {
        "periodic_vs_on_demand": per["hours"] / od["hours"] - 1,
        "replicas2_vs_periodic": rep["hours"] / per["hours"] - 1,
        "replicas2_vs_on_demand": rep["hours"] / od["hours"] - 1,
        "replicas2_cost_vs_on_demand": rep["cost"] / od["cost"],
        "adaptive_vs_on_demand": ad["hours"] / od["hours"] - 1,
        "adaptive_cost_vs_replicas2": ad["cost"] / rep["cost"],
        "adaptive_not_slower_than_periodic_runs": float(np.mean(ad_h <= per_h + 1e-9)),
        "adaptive_max_vs_on_demand": float(ad_h.max() / od["hours"] - 1),
        "met_vs_replicas2": bool(not_slower and within and ad["cost"] < rep["cost"]),
        "seed_004": SEED_004,
    }
    if "replicas2_deadline" in s:
        rd = s["replicas2_deadline"]
        out_t["replicas2_deadline_vs_on_demand"] = rd["hours"] / od["hours"] - 1
        out_t["adaptive_cost_vs_replicas2_deadline"] = ad["cost"] / rd["cost"]
        out_t["met_vs_replicas2_deadline"] = bool(not_slower and within and ad["cost"] < rd["cost"])
    return out_t


def _table(out: dict[str, Any]) -> str:
    od = out["strategies"].get("on_demand", {"hours": math.nan, "cost": math.nan})
    lines = [
        f"{'strategy':<19} {'hours':>7} {'vs OD':>7} {'p90 h':>7} {'cost $':>8} {'x OD':>6} {'preempt':>8} {'ckpts':>6} {'2nd h':>6} {'OD h':>6}"
    ]
    for name, s in out["strategies"].items():
        lines.append(
            f"{name:<19} {s['hours']:7.2f} {s['hours'] / od['hours'] - 1:+7.1%} {s['hours_p90']:7.2f} {s['cost']:8.2f} "
            f"{s['cost'] / od['cost']:6.2f} {s['preemptions']:8.1f} {s['checkpoints']:6.1f} {s['replica_hours']:6.2f} {s['on_demand_hours']:6.2f}"
        )
    tg = out.get("targets", {})
    if tg:
        lines.append("")
        lines.append(
            f"seed 004: periodic +32.8% vs OD; two replicas -18.1% vs periodic, +8.7% vs OD, 0.54x OD cost. "
            f"Here: periodic {tg['periodic_vs_on_demand']:+.1%}, replicas2 {tg['replicas2_vs_periodic']:+.1%} vs periodic, "
            f"{tg['replicas2_vs_on_demand']:+.1%} vs OD, {tg['replicas2_cost_vs_on_demand']:.2f}x OD cost"
        )
        lines.append(
            f"target: adaptive <= periodic, <= +10% vs OD, cheaper than two replicas -> adaptive {tg['adaptive_vs_on_demand']:+.1%} vs OD "
            f"(worst run {tg['adaptive_max_vs_on_demand']:+.1%}), not slower than periodic in {tg['adaptive_not_slower_than_periodic_runs']:.0%} of runs; "
            f"cost {tg['adaptive_cost_vs_replicas2']:.2f}x replicas2 ({'MET' if tg['met_vs_replicas2'] else 'MISSED'})"
            + (
                f", {tg['adaptive_cost_vs_replicas2_deadline']:.2f}x replicas2 held to the same deadline "
                f"({tg['replicas2_deadline_vs_on_demand']:+.1%} vs OD; {'MET' if tg['met_vs_replicas2_deadline'] else 'MISSED'})"
                if "adaptive_cost_vs_replicas2_deadline" in tg
                else ""
            )
        )
    return "\n".join(lines)


def _plot(out: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(out["strategies"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    axes[0].bar(names, [out["strategies"][n]["hours"] for n in names])
    axes[0].set_ylabel("time to finish (h)")
    axes[1].bar(names, [out["strategies"][n]["cost"] for n in names])
    axes[1].set_ylabel("cost ($)")
    fig.suptitle(f"24 h job on {TRACES}")
    fig.tight_layout()
    fig.savefig(path)


@entry
def main(
    argv: Sequence[str] | None = None, *, catalog_factory: Callable[[], DataCatalog] | None = None
) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.migration", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--plot", default=None, help="draw a bar chart to this PNG")
    ap.add_argument(
        "--every", type=float, default=4.0, help="hours between job starts along the traces"
    )
    ap.add_argument(
        "--dp-step-minutes",
        type=float,
        default=1.0,
        help="DP planner step (the checkpoint cost must be whole steps)",
    )
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args(argv)
    catalog = catalog_factory() if catalog_factory else DataCatalog(data_dir(args.data_dir))
    out = run_benchmark(catalog, every_hours=args.every, dp_step_hours=args.dp_step_minutes / 60)
    if args.plot:
        _plot(out, args.plot)
    if args.json:
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        print(_table(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
