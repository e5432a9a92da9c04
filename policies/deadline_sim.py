"""Trace-replay simulator for deadline policies (pure: numpy arrays in, a result out).

Time advances in ticks of ``tick_hours`` (the trace gap). At the start of tick ``i`` a running
spot instance is preempted if the trace says spot is down, then the policy decides. A switch onto
a new instance (the first launch too) starts a changeover of ``d`` hours: billed at the new
instance's price, no progress. Progress accrues continuously inside a tick, so a changeover may
span ticks and the job may finish mid-tick (billing stops then). This is the accounting of the
Omniscient ILP (Eq. 8): progress = time on instances - d x changeovers.

Sec. 5.6 relaxations: ``actual_compute_hours`` (the true C, the policy only knows the estimate in
its task) and ``overheads`` (the delay of each successive changeover, e.g. drawn up to d_max).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from controlplane.core.errors import InvalidInput, SpotplaneError
from policies.deadline import (
    CODE_KIND,
    EPS,
    KIND_CODE,
    DeadlinePolicy,
    Kind,
    Observation,
    ZoneView,
)

BoolArray = npt.NDArray[np.bool_]

_IDLE, _SPOT, _OD = 0, 1, 2


class PolicyError(SpotplaneError):
    """A policy asked for something impossible (spot where none is available)."""


@dataclass(frozen=True)
class SimResult:
    """Outcome of one replay. Hours exclude changeovers; ``*_billed_hours`` include them."""

    cost: float
    spot_hours: float
    od_hours: float
    spot_billed_hours: float
    od_billed_hours: float
    changeovers: int
    finish_hours: float  # inf when the job did not finish inside the window
    met_deadline: bool
    progress_hours: float
    decisions: npt.NDArray[np.int8] | None = None  # state per tick (0 idle, 1 spot, 2 od)
    zones: npt.NDArray[np.int16] | None = None  # zone index per tick (-1 none), multi-zone only

    def decision_list(self) -> list[list[int | str]]:
        """``[[tick, state], ...]`` for every tick the job was live."""
        if self.decisions is None:
            return []
        return [[i, CODE_KIND[int(c)].value] for i, c in enumerate(self.decisions.tolist())]


def _check_window(available: npt.NDArray[np.bool_], tick_hours: float) -> None:
    if available.ndim == 0 or available.shape[-1] == 0:
        raise InvalidInput("available", "the trace window is empty", fix="give at least one tick of availability")
    if not tick_hours > 0:
        raise InvalidInput("tick_hours", f"must be > 0, got {tick_hours}")


def simulate(
    policy: DeadlinePolicy,
    available: Sequence[bool] | BoolArray,
    tick_hours: float,
    *,
    actual_compute_hours: float | None = None,
    overheads: Sequence[float] | None = None,
    record: bool = False,
    zone: str | None = None,
) -> SimResult:
    """Replay ``policy`` on one zone's spot availability (True = spot up) from tick 0.

    The window may be longer than the deadline (a late job keeps running until the window ends:
    ``finish_hours`` is inf if it never finishes). Prices and N come from ``policy.task``.
    """
    avail = np.asarray(available, dtype=bool)
    _check_window(avail, tick_hours)
    task = policy.task
    g = float(tick_hours)
    c_true = task.compute_hours if actual_compute_hours is None else float(actual_compute_hours)
    if c_true <= 0:
        raise InvalidInput("actual_compute_hours", f"must be > 0, got {c_true}")
    d = task.overhead_hours
    oh_list = list(overheads) if overheads is not None else None
    n = task.nodes
    price = (0.0, task.spot_price * n, task.on_demand_price * n)
    decide = policy.decide
    avail_list = avail.tolist()
    n_ticks = len(avail_list)
    dec = np.zeros(n_ticks, dtype=np.int8) if record else None
    kinds = CODE_KIND
    spot_code = KIND_CODE

    state = _IDLE
    progress = 0.0
    overhead_left = 0.0
    billed = [0.0, 0.0, 0.0]
    work = [0.0, 0.0, 0.0]
    changeovers = 0
    finish = float("inf")
    for i in range(n_ticks):
        up = avail_list[i]
        if state == _SPOT and not up:
            state = _IDLE  # preempted
        act = decide(Observation(i * g, progress, kinds[state], zone, up))
        new = spot_code[act.kind]
        if new == _IDLE:
            state = _IDLE
            continue
        if new == _SPOT and not up:
            raise PolicyError(f"{type(policy).__name__} chose spot at tick {i} while spot is unavailable")
        if new != state:
            overhead_left = d if oh_list is None else float(oh_list[changeovers % len(oh_list)])
            changeovers += 1
            state = new
        if dec is not None:
            dec[i] = state
        oh = overhead_left if overhead_left < g else g
        overhead_left -= oh
        gain = g - oh
        rest = c_true - progress
        if gain >= rest - EPS:
            used = oh + max(rest, 0.0)
            billed[state] += used
            work[state] += max(rest, 0.0)
            progress = c_true
            finish = i * g + used
            break
        billed[state] += g
        work[state] += gain
        progress += gain
    cost = billed[_SPOT] * price[_SPOT] + billed[_OD] * price[_OD]
    return SimResult(
        cost=cost,
        spot_hours=work[_SPOT],
        od_hours=work[_OD],
        spot_billed_hours=billed[_SPOT],
        od_billed_hours=billed[_OD],
        changeovers=changeovers,
        finish_hours=finish,
        met_deadline=finish <= task.deadline_hours + 1e-6,
        progress_hours=progress,
        decisions=dec,
    )


@dataclass
class ZoneLedger:
    """The accounting of one multi-zone replay: changeovers of d, then per tick the price of the
    instance held and the work it does (the billing of Sec. 3, shared by the multi-zone replays)."""

    compute_hours: float
    overhead_hours: float
    state: int = _IDLE
    zone: int = -1
    progress: float = 0.0
    overhead_left: float = 0.0
    cost: float = 0.0
    changeovers: int = 0
    finish: float = float("inf")
    work: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    billed: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])

    def idle(self) -> None:
        self.state, self.zone = _IDLE, -1

    def hold(self, state: int, zone: int) -> None:
        """Run on ``state`` in ``zone`` this tick; any move is a changeover of d."""
        if state != self.state or zone != self.zone:
            self.overhead_left = self.overhead_hours
            self.changeovers += 1
            self.state, self.zone = state, zone

    def bill(self, tick: int, tick_hours: float, price: float) -> bool:
        """Pay one tick at ``price`` per hour; True when the job finishes in it."""
        g = tick_hours
        oh = self.overhead_left if self.overhead_left < g else g
        self.overhead_left -= oh
        gain = g - oh
        rest = self.compute_hours - self.progress
        if gain >= rest - EPS:
            used = oh + max(rest, 0.0)
            self.cost += used * price
            self.billed[self.state] += used
            self.work[self.state] += max(rest, 0.0)
            self.progress = self.compute_hours
            self.finish = tick * g + used
            return True
        self.cost += g * price
        self.billed[self.state] += g
        self.work[self.state] += gain
        self.progress += gain
        return False

    def result(self, deadline_hours: float, *, extra_cost: float = 0.0,
               decisions: npt.NDArray[np.int8] | None = None,
               zones: npt.NDArray[np.int16] | None = None) -> SimResult:
        return SimResult(cost=self.cost + extra_cost, spot_hours=self.work[_SPOT], od_hours=self.work[_OD],
                         spot_billed_hours=self.billed[_SPOT], od_billed_hours=self.billed[_OD],
                         changeovers=self.changeovers, finish_hours=self.finish,
                         met_deadline=self.finish <= deadline_hours + 1e-6,
                         progress_hours=self.progress, decisions=decisions, zones=zones)


def simulate_zones(
    policy: DeadlinePolicy,
    available: BoolArray,
    tick_hours: float,
    zone_names: Sequence[str],
    spot_prices: Sequence[float],
    on_demand_prices: Sequence[float],
    *,
    record: bool = False,
) -> SimResult:
    """Replay a multi-zone policy: ``available[z, i]`` per zone, real per-zone prices per hour.

    Any move to another zone or instance kind is a changeover of d. The observation lists every
    zone (:class:`ZoneView`); an action names its zone (on-demand may name any zone).
    """
    avail = np.asarray(available, dtype=bool)
    if avail.ndim != 2:
        raise InvalidInput("available", "multi-zone availability must be a (zones, ticks) array")
    _check_window(avail, tick_hours)
    n_z = avail.shape[0]
    if not (len(zone_names) == len(spot_prices) == len(on_demand_prices) == n_z):
        raise InvalidInput("zone_names", "zones, prices and availability rows must have the same length")
    task = policy.task
    g = float(tick_hours)
    d = task.overhead_hours
    index = {z: j for j, z in enumerate(zone_names)}
    names = list(zone_names)
    sp = [float(p) * task.nodes for p in spot_prices]
    od = [float(p) * task.nodes for p in on_demand_prices]
    cols = avail.T.tolist()
    n_ticks = len(cols)
    dec = np.zeros(n_ticks, dtype=np.int8) if record else None
    zrec = np.full(n_ticks, -1, dtype=np.int16) if record else None
    views_static = [(names[j], float(spot_prices[j]), float(on_demand_prices[j])) for j in range(n_z)]

    led = ZoneLedger(task.compute_hours, d)
    for i in range(n_ticks):
        col = cols[i]
        if led.state == _SPOT and not col[led.zone]:
            led.idle()
        zone = led.zone
        views = tuple(ZoneView(nm, col[j], ps, po) for j, (nm, ps, po) in enumerate(views_static))
        up_here = bool(col[zone]) if zone >= 0 else False
        act = policy.decide(Observation(i * g, led.progress, CODE_KIND[led.state],
                                        names[zone] if zone >= 0 else None, up_here, views))
        new = KIND_CODE[act.kind]
        if new == _IDLE:
            led.idle()
            continue
        if act.zone is None or act.zone not in index:
            raise PolicyError(f"{type(policy).__name__} must name a known zone for {act.kind} at tick {i}")
        z = index[act.zone]
        if new == _SPOT and not col[z]:
            raise PolicyError(f"{type(policy).__name__} chose spot in {act.zone} at tick {i} while it is unavailable")
        led.hold(new, z)
        if dec is not None and zrec is not None:
            dec[i] = led.state
            zrec[i] = led.zone
        if led.bill(i, g, sp[z] if new == _SPOT else od[z]):
            break
    return led.result(task.deadline_hours, decisions=dec, zones=zrec)


def window_ticks(task_deadline_hours: float, tick_hours: float) -> int:
    """Ticks covering the deadline (the last one may be partial)."""
    return int(np.ceil(task_deadline_hours / tick_hours - 1e-9))


def lifetime_oracle(available: BoolArray, tick_hours: float) -> npt.NDArray[np.float64]:
    """o(t) of Sec. 5.4 per tick: hours of uninterrupted availability starting at tick t (0 if down)."""
    a = np.asarray(available, dtype=bool)
    out = np.zeros(a.shape[0], dtype=np.float64)
    run = 0
    for i in range(a.shape[0] - 1, -1, -1):
        run = run + 1 if a[i] else 0
        out[i] = run * tick_hours
    return out


__all__ = ["PolicyError", "SimResult", "simulate", "simulate_zones", "window_ticks", "lifetime_oracle", "Kind"]
