"""Multi-zone deadline replay where a zone's spot availability costs what it costs to learn.

In :func:`policies.deadline_sim.simulate_zones` a policy sees every zone every tick for free. A
real controller knows a zone's spot availability only where its job runs, where it tried a
launch (a refused launch says "down", for free) or where it bought a probe (billed
``probe_minutes`` of spot in that zone). :func:`simulate_zones_paid` replays that: the policy's
view of a zone is the last thing it learned about it (a zone never seen is believed up, so the
first launch tries it); a policy with a ``probes(obs) -> zone names`` method buys probes before
it decides; a spot choice in a zone that is down is a refused launch, and the policy is asked
again with what it just learned (at most once per zone per tick).

:class:`ProbingSpotplane` is spotplane's policy learning zones the cheapest way there is. Off
spot (idle or on demand) it buys no probe: a zone believed down for ``retry_hours`` (default one
tick) is tried again by a launch, which costs nothing when refused and is what the job wants
when it is not. On spot, where a launch elsewhere would move the job, it buys at most one probe
a tick, of the zone believed down with the best score (price x (1 + d / E[run])) among those
that would beat where the job runs and were not probed for ``reprobe_hours``: a cheaper zone
that came back is found for a minute of spot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from controlplane.core.errors import InvalidInput
from policies.deadline import (
    CODE_KIND,
    Action,
    DeadlinePolicy,
    DeadlineTask,
    Kind,
    Observation,
    ZoneView,
    deadline_policy,
)
from policies.deadline_sim import EPS, PolicyError, SimResult, ZoneLedger, _check_window
from policies.multizone import SpotplaneMultiZone

_IDLE, _SPOT, _OD = 0, 1, 2
IDLE_PROBE_SLACK = 0.25  # probe while idle only with less slack than this fraction of C
_CODE = {Kind.IDLE: _IDLE, Kind.SPOT: _SPOT, Kind.ON_DEMAND: _OD}


@runtime_checkable
class Probing(Protocol):
    """The optional capability of a policy that buys probes before it decides."""

    def probes(self, obs: Observation) -> Sequence[str]: ...


@dataclass(frozen=True)
class PaidResult:
    """A paid-observation replay: the usual result (its cost includes the probes) and what
    learning the zones cost."""

    result: SimResult
    probes: int
    probe_cost: float
    refused_launches: int


def simulate_zones_paid(policy: DeadlinePolicy, available: npt.NDArray[np.bool_], tick_hours: float,
                        zone_names: Sequence[str], spot_prices: Sequence[float],
                        on_demand_prices: Sequence[float], *,
                        probe_minutes: float = 1.0) -> PaidResult:
    """Replay ``policy`` over ``available[z, i]`` learning zones only by running, launching and
    probing (see the module docstring); prices are per node-hour, ``task.nodes`` nodes."""
    avail = np.asarray(available, dtype=bool)
    if avail.ndim != 2:
        raise InvalidInput("available", "multi-zone availability must be a (zones, ticks) array")
    _check_window(avail, tick_hours)
    n_z = avail.shape[0]
    if not (len(zone_names) == len(spot_prices) == len(on_demand_prices) == n_z):
        raise InvalidInput("zone_names", "zones, prices and availability rows must have the same length")
    if probe_minutes < 0:
        raise InvalidInput("probe_minutes", f"must be >= 0, got {probe_minutes}")
    task = policy.task  # type: ignore[attr-defined]
    g, d, c = float(tick_hours), task.overhead_hours, task.compute_hours
    index = {z: j for j, z in enumerate(zone_names)}
    names = list(zone_names)
    sp = [float(p) * task.nodes for p in spot_prices]
    od = [float(p) * task.nodes for p in on_demand_prices]
    probe_price = [p * probe_minutes / 60.0 for p in sp]
    known = [True] * n_z  # never seen: believed up, so a launch tries it
    cols = avail.T.tolist()
    probes_of = policy.probes if isinstance(policy, Probing) else None
    led = ZoneLedger(c, d)
    probe_cost = 0.0
    probes = refused = 0
    for i in range(len(cols)):
        col = cols[i]
        if led.state == _SPOT:
            known[led.zone] = bool(col[led.zone])  # where the job runs, the zone is known
            if not col[led.zone]:
                led.idle()
        state, zone = led.state, led.zone
        if probes_of is not None:
            for name in probes_of(_obs(i * g, led.progress, state, zone, names, known, spot_prices,
                                       on_demand_prices)):
                z = index[name]
                known[z] = bool(col[z])
                probes += 1
                probe_cost += probe_price[z]
        for _ in range(n_z + 1):
            act = policy.decide(_obs(i * g, led.progress, state, zone, names, known, spot_prices,
                                     on_demand_prices))
            new = _CODE[act.kind]
            if new != _SPOT or act.zone is None or act.zone not in index:
                break
            z = index[act.zone]
            if col[z] or (state == _SPOT and z == zone):
                break
            known[z] = False  # a refused launch: free, and now known down
            refused += 1
        else:
            raise PolicyError(f"{type(policy).__name__} kept choosing zones without spot at tick {i}")
        if new == _IDLE:
            led.idle()
            continue
        if act.zone is None or act.zone not in index:
            raise PolicyError(f"{type(policy).__name__} must name a known zone for {act.kind} at tick {i}")
        z = index[act.zone]
        if new == _SPOT:
            known[z] = True
        led.hold(new, z)
        if led.bill(i, g, sp[z] if new == _SPOT else od[z]):
            break
    res = led.result(task.deadline_hours, extra_cost=probe_cost)
    return PaidResult(res, probes, probe_cost, refused)


def _obs(t: float, progress: float, state: int, zone: int, names: list[str], known: list[bool],
         spot: Sequence[float], od: Sequence[float]) -> Observation:
    views = tuple(ZoneView(n, known[j], float(spot[j]), float(od[j])) for j, n in enumerate(names))
    here = known[zone] if zone >= 0 else False
    return Observation(t, progress, CODE_KIND[state], names[zone] if zone >= 0 else None, here, views)


class ProbingSpotplane(SpotplaneMultiZone):
    """spotplane learning zones by free launches off spot and paid probes on spot (module doc)."""

    name = "spotplane_probing"

    def __init__(self, task: Any, *, reprobe_hours: float = 2.0, retry_hours: float | None = None,
                 probe_idle: bool = False, **kw: Any) -> None:
        super().__init__(task, **kw)
        self.reprobe_hours = float(reprobe_hours)
        self.retry_hours = self.tick_hours if retry_hours is None else float(retry_hours)
        self.probe_idle = bool(probe_idle)
        self._probed: dict[str, float] = {}
        self._down_since: dict[str, float] = {}
        self._tried: tuple[float, str | None] = (-1.0, None)  # (when, the zone last launched)

    def _believed(self, obs: Observation) -> Observation:
        """``obs`` with, off spot, each zone believed down for ``retry_hours`` shown up (a launch
        there is free if refused); the zone last tried, now seen down, refused: it stays down."""
        t, (_, tried) = obs.elapsed_hours, self._tried
        views = []
        for z in obs.zones:
            if z.spot_available:
                self._down_since.pop(z.zone, None)
                views.append(z)
                continue
            if tried == z.zone:
                self._down_since[z.zone] = t  # just refused (now, or seen a step later live)
            since = self._down_since.setdefault(z.zone, t)
            retry = obs.state is not Kind.SPOT and t > since and t - since >= self.retry_hours - EPS
            views.append(replace(z, spot_available=True) if retry else z)
        return replace(obs, zones=tuple(views))

    def decide(self, obs: Observation) -> Action:
        act = super().decide(self._believed(obs) if obs.zones else obs)
        self._tried = (obs.elapsed_hours, act.zone if act.kind is Kind.SPOT else None)
        return act

    def probes(self, obs: Observation) -> Sequence[str]:
        """On spot, at most one zone a tick: the best-scored zone believed down that would beat
        where the job runs and was not probed in the last ``reprobe_hours``; off spot none."""
        if self.probe_idle and obs.state is Kind.IDLE:
            return self._idle_probes(obs)
        here = next((z for z in obs.zones if z.zone == obs.zone), None)
        if obs.state is not Kind.SPOT or here is None:
            return ()
        bar = self._score(here)
        stale = [z for z in obs.zones if not z.spot_available and self._score(z) < bar
                 and obs.elapsed_hours - self._probed.get(z.zone, -1e9) >= self.reprobe_hours - EPS]
        if not stale:
            return ()
        best = min(stale, key=lambda z: (self._score(z), z.zone))
        self._probed[best.zone] = obs.elapsed_hours
        return (best.zone,)

    def state_dict(self) -> dict[str, Any]:
        """The multi-zone state with what it learnt of zones: probes, refusals, the last try."""
        return {**super().state_dict(), "probed": dict(self._probed),
                "down_since": dict(self._down_since), "tried": list(self._tried)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._probed = {str(k): float(v) for k, v in state.get("probed", {}).items()}
        self._down_since = {str(k): float(v) for k, v in state.get("down_since", {}).items()}
        when, zone = state.get("tried", (-1.0, None))
        self._tried = (float(when), None if zone is None else str(zone))

    def _idle_probes(self, obs: Observation) -> Sequence[str]:
        """Idle right after a refused launch (``probe_idle``): every other zone believed up and
        not probed for ``reprobe_hours``, so the next step sees them all instead of learning one
        refused launch a step (where a refusal shows a step late, as in a live controller)."""
        t, (_, tried) = obs.elapsed_hours, self._tried
        refused = [z for z, since in self._down_since.items() if abs(since - t) < EPS]
        task = self.task
        slack = task.deadline_hours - t - (task.compute_hours - obs.progress_hours)
        if not refused or slack > IDLE_PROBE_SLACK * task.compute_hours:
            return ()
        wanted = [z.zone for z in obs.zones if z.spot_available and z.zone != tried
                  and t - self._probed.get(z.zone, -1e9) >= self.reprobe_hours - EPS]
        for z in wanted:
            self._probed[z] = t
        return tuple(wanted)


@deadline_policy("spotplane_probing", live=True, ticked=True, probing=True)
def _make_probing(task: DeadlineTask, **kw: Any) -> ProbingSpotplane:
    return ProbingSpotplane(task, **kw)
