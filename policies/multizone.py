"""Deadline policies across many zones / clouds (beyond the paper; cf. SkyNomad, NSDI'27).

All zones share one clock; each has its own spot availability and spot / on-demand prices. A job
may (re)start in any zone; every move onto a new instance (another zone or kind) costs the
changeover d. The Uniform Progress skeleton (Sec. 5.2) stays the deadline guard in every policy:

- :class:`ZonePinned` runs a single-zone policy in one fixed zone (up_best_zone, up_zone_mean);
- :class:`EagerFailover` is Uniform Progress over the union of zones: when preempted or idle it
  takes the cheapest zone that has spot now; on-demand goes to the cheapest on-demand zone;
- :class:`SpotplaneMultiZone` (ours) keeps the same deadline rules but ranks zones by the
  expected cost of a unit of progress, ``price x (1 + d / E[run])`` with ``E[run]`` each zone's mean
  spot run length learnt online from past availability only, and migrates a running job to a
  cheaper zone when the expected saving over that zone's run beats the changeover it costs.
- :func:`multizone_plan` is the multi-zone Omniscient (exact DP of :mod:`policies.omniscient`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from controlplane.core.errors import InvalidInput
from policies.deadline import (
    EPS,
    IDLE,
    Action,
    DeadlinePolicy,
    DeadlineTask,
    Kind,
    Observation,
    UniformProgress,
    ZoneView,
    deadline_policy,
)
from policies.omniscient import Mode, Plan, plan_modes
from policies.semimarkov import SemiMarkovDP

BoolArray = npt.NDArray[np.bool_]


def _single(obs: Observation, up: bool) -> Observation:
    return Observation(obs.elapsed_hours, obs.progress_hours, obs.state, obs.zone, up)


def _cheapest_on_demand(zones: Sequence[ZoneView]) -> str:
    return min(zones, key=lambda z: (z.on_demand_price, z.zone)).zone


class ZonePinned:
    """Drive a single-zone policy in one fixed zone of a multi-zone world."""

    def __init__(self, inner: DeadlinePolicy, zone: str) -> None:
        self.inner = inner
        self.task = inner.task
        self.zone = zone

    def decide(self, obs: Observation) -> Action:
        view = next((z for z in obs.zones if z.zone == self.zone), None)
        if view is None:
            raise InvalidInput("zone", f"zone {self.zone!r} is not in the observation")
        act = self.inner.decide(_single(obs, view.spot_available))
        return IDLE if act.kind is Kind.IDLE else Action(act.kind, self.zone)

    def state_dict(self) -> dict[str, Any]:
        return {"name": "zone_pinned", "zone": self.zone, "inner": self.inner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state["inner"])


class EagerFailover(UniformProgress):
    """Uniform Progress over the union of zones; on (re)start take the cheapest zone with spot."""

    name = "up_eager_failover"

    def _spot_zone(self, obs: Observation, avail: list[ZoneView]) -> str:
        return min(avail, key=lambda z: (z.spot_price, z.zone)).zone

    def decide(self, obs: Observation) -> Action:
        if not obs.zones:
            raise InvalidInput("zones", f"{self.name} needs the per-zone view in the observation")
        avail = [z for z in obs.zones if z.spot_available]
        on_spot = obs.state is Kind.SPOT  # the simulator drops a preempted spot to IDLE
        act = self._kind(_single(obs, on_spot or bool(avail)))
        if act.kind is Kind.IDLE:
            return IDLE
        if act.kind is Kind.SPOT:
            if on_spot and obs.zone is not None:
                return self._keep_or_move(obs, avail)
            return Action(Kind.SPOT, self._spot_zone(obs, avail))
        if obs.state is Kind.ON_DEMAND and obs.zone is not None:
            return Action(Kind.ON_DEMAND, obs.zone)
        return Action(Kind.ON_DEMAND, _cheapest_on_demand(obs.zones))

    def _kind(self, obs: Observation) -> Action:
        """Idle, spot or on-demand, seeing spot up when any zone has it: Uniform Progress."""
        return UniformProgress.decide(self, obs)

    def _keep_or_move(self, obs: Observation, avail: list[ZoneView]) -> Action:
        return Action(Kind.SPOT, obs.zone)


class SpotplaneMultiZone(EagerFailover):
    """Ours: UP deadline guard + zones ranked by expected cost per unit of progress + migration.

    Score of a zone: ``spot_price * (1 + d / E[run])`` where ``E[run]`` is the zone's mean spot
    run length seen so far (a prior of ``prior_run_hours`` with weight 1 until runs are seen).
    A running spot job moves to zone z' when ``E[run_z'] * (p_z - p_z') > d * (p_z' + p_z)``
    (saving over the new run beats the new changeover plus the progress it delays) and the
    slack still allows a changeover (Safety Net margin); only zones whose spot has been up for
    ``min_migration_age_hours`` are migration targets (flickering zones cost a changeover each).
    """

    name = "spotplane"

    def __init__(self, task: DeadlineTask, *, tick_hours: float = 0.0, prior_run_hours: float = 6.0,
                 history: BoolArray | None = None, zone_names: Sequence[str] | None = None,
                 min_migration_age_hours: float = 0.5) -> None:
        super().__init__(task, tick_hours=tick_hours)
        self.prior_run_hours = float(prior_run_hours)
        self.min_migration_age_hours = float(min_migration_age_hours)
        self._runs: dict[str, list[float]] = {}  # zone -> [completed runs, total hours, current run hours, last up]
        self._last_t: float | None = None
        if history is not None:
            if zone_names is None or tick_hours <= 0:
                raise InvalidInput("history", "history needs zone_names and tick_hours")
            self._learn_history(np.asarray(history, dtype=bool), list(zone_names))

    def _learn_history(self, hist: BoolArray, names: list[str]) -> None:
        g = self.tick_hours
        for j, z in enumerate(names):
            row = hist[j]
            runs, total, cur = 0.0, 0.0, 0.0
            for up in row.tolist():
                if up:
                    cur += g
                elif cur > 0:
                    runs, total, cur = runs + 1, total + cur, 0.0
            self._runs[z] = [runs, total, cur, 1.0 if (len(row) and row[-1]) else 0.0]

    def _observe(self, obs: Observation) -> None:
        dt = 0.0 if self._last_t is None else max(0.0, obs.elapsed_hours - self._last_t)
        self._last_t = obs.elapsed_hours
        for z in obs.zones:
            st = self._runs.setdefault(z.zone, [0.0, 0.0, 0.0, 0.0])
            if z.spot_available:
                st[2] = st[2] + dt if st[3] else 0.0
                st[3] = 1.0
            else:
                if st[3] and st[2] > 0:
                    st[0] += 1
                    st[1] += st[2]
                st[2], st[3] = 0.0, 0.0

    def expected_run(self, zone: str) -> float:
        st = self._runs.get(zone, [0.0, 0.0, 0.0, 0.0])
        n, total, cur = st[0], st[1], st[2]
        mean = (total + self.prior_run_hours) / (n + 1.0)
        return max(mean, cur, self.tick_hours, EPS)  # a long current run is evidence too

    def _score(self, z: ZoneView) -> float:
        return z.spot_price * (1.0 + self._d / self.expected_run(z.zone))

    def _spot_zone(self, obs: Observation, avail: list[ZoneView]) -> str:
        return min(avail, key=lambda z: (self._score(z), z.zone)).zone

    def _keep_or_move(self, obs: Observation, avail: list[ZoneView]) -> Action:
        here = next(z for z in obs.zones if z.zone == obs.zone)
        if self._slack(obs) < self._idle_margin + self._d:
            return Action(Kind.SPOT, obs.zone)
        # only zones whose current run has lasted a while: flickering zones cost a changeover each
        stable = [z for z in avail if self._runs.get(z.zone, [0.0, 0.0, 0.0, 0.0])[2] >= self.min_migration_age_hours]
        if not stable:
            return Action(Kind.SPOT, obs.zone)
        best = min(stable, key=lambda z: (self._score(z), z.zone))
        saving = self.expected_run(best.zone) * (here.spot_price - best.spot_price)
        if best.zone != here.zone and saving > self._d * (best.spot_price + here.spot_price):
            return Action(Kind.SPOT, best.zone)
        return Action(Kind.SPOT, obs.zone)

    def decide(self, obs: Observation) -> Action:
        self._observe(obs)
        return super().decide(obs)

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "runs": {k: list(v) for k, v in self._runs.items()}, "last_t": self._last_t}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._runs = {k: [float(x) for x in v] for k, v in state.get("runs", {}).items()}
        lt = state.get("last_t")
        self._last_t = None if lt is None else float(lt)


class SemiMarkovSpotplane(SpotplaneMultiZone):
    """spotplane's zones (ranking, migration) with :class:`~policies.semimarkov.SemiMarkovDP`
    choosing idle / spot / on-demand instead of Uniform Progress: its model learnt from when any
    zone had spot in the past, the age it sees that of the current run or gap of "any zone up"."""

    name = "spotplane_semi_markov"

    def __init__(self, task: DeadlineTask, *, tick_hours: float, history: BoolArray | None = None,
                 zone_names: Sequence[str] | None = None, **kw: Any) -> None:
        super().__init__(task, tick_hours=tick_hours, history=history, zone_names=zone_names, **kw)
        union = None if history is None else np.asarray(np.asarray(history, dtype=bool).any(axis=0), dtype=bool)
        self.inner = SemiMarkovDP(task, tick_hours=tick_hours, history=union)

    def _kind(self, obs: Observation) -> Action:
        return self.inner.decide(obs)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "inner": self.inner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if "inner" in state:
            self.inner.load_state_dict(state["inner"])


# ---------------------------------------------------------------------------------------------
# Multi-zone Omniscient
# ---------------------------------------------------------------------------------------------
def zone_modes(task: DeadlineTask, spot_prices: Sequence[float], on_demand_prices: Sequence[float]) -> list[Mode]:
    """idle, spot in each zone, on-demand in the cheapest on-demand zone (it dominates the others)."""
    n = task.nodes
    od = int(np.argmin(np.asarray(on_demand_prices)))
    modes = [Mode(Kind.IDLE, 0.0)]
    modes += [Mode(Kind.SPOT, float(p) * n, zone=j, spot_nodes=n) for j, p in enumerate(spot_prices)]
    modes.append(Mode(Kind.ON_DEMAND, float(on_demand_prices[od]) * n, zone=od))
    return modes


def multizone_plan(task: DeadlineTask, available: BoolArray, tick_hours: float,
                   spot_prices: Sequence[float], on_demand_prices: Sequence[float]) -> Plan:
    """Least-cost plan over every zone with full knowledge of all zones' availability."""
    a = np.asarray(available, dtype=bool)
    if a.ndim != 2 or a.shape[1] == 0:
        raise InvalidInput("available", "need a non-empty (zones, ticks) availability array")
    ones = np.ones((1, a.shape[1]), dtype=bool)
    return plan_modes(zone_modes(task, spot_prices, on_demand_prices), np.vstack([ones, a, ones]), tick_hours,
                      task.compute_hours, task.deadline_hours, task.overhead_hours)


class MultiZonePlanPolicy:
    """Replays a multi-zone plan (for the Omniscient row, through the same simulator)."""

    name = "multizone_omniscient"

    def __init__(self, task: DeadlineTask, plan: Plan, zone_names: Sequence[str], tick_hours: float) -> None:
        self.task = task
        self.plan = plan
        self.names = list(zone_names)
        self.tick_hours = tick_hours

    def decide(self, obs: Observation) -> Action:
        if obs.progress_hours >= self.task.compute_hours - EPS:
            return IDLE
        i = int(round(obs.elapsed_hours / self.tick_hours))
        if i >= len(self.plan.modes):
            od = self.plan.mode_list[-1]
            return Action(Kind.ON_DEMAND, self.names[od.zone])
        mode = self.plan.mode_list[int(self.plan.modes[i])]
        if mode.kind is Kind.IDLE:
            return IDLE
        return Action(mode.kind, self.names[mode.zone])

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "modes": self.plan.modes.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


@deadline_policy("spotplane", live=True, ticked=True)
def _make_spotplane(task: DeadlineTask, **kw: Any) -> SpotplaneMultiZone:
    return SpotplaneMultiZone(task, **kw)


@deadline_policy("up_eager_failover", live=True, ticked=True)
def _make_eager(task: DeadlineTask, *, tick_hours: float = 0.0, **_: Any) -> EagerFailover:
    return EagerFailover(task, tick_hours=tick_hours)


__all__ = ["ZonePinned", "EagerFailover", "SpotplaneMultiZone", "multizone_plan", "MultiZonePlanPolicy", "zone_modes"]
