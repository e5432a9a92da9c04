"""A deadline policy from a dynamic program over a learned semi-Markov spot availability model.

Uniform Progress (Can't Be Late, Sec. 5.2) treats spot as memoryless; the traces are not: a spot
run that has just begun dies far more often in its next tick than one that has lasted hours, and
a gap that has just opened closes far sooner than an old one. This module learns, from the trace
*before* the job (the past only), the hazard of a run ending and of a gap closing at every age
(in ticks), and solves a finite-horizon dynamic program whose state is

    (n ticks left, slack S = time left - work left, instance held, spot up or down, its age)

for the least expected cost (spot 1 per hour, on-demand k, a changeover d: Sec. 3). The policy
then answers, at every tick, the action of least expected cost-to-go, among the actions Uniform
Progress's own rules allow in that state (Safety Net margins, Exploitation): the same guarantee,
so no deadline is missed where UP meets it. Nothing after the current tick is read: the age of
the current run or gap is counted from the observations, the model from the past.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from controlplane.core.errors import InvalidInput
from policies.deadline import (
    ACTIONS,
    EPS,
    ON_DEMAND,
    SPOT,
    Action,
    DeadlineTask,
    Kind,
    Observation,
    _RulesBase,
    deadline_policy,
)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
_IDLE, _SPOT, _OD = 0, 1, 2
_TIE = {_OD: 0, _SPOT: 1, _IDLE: 2}  # on equal cost: the safest first
BIG = 1e9  # cost of a state that can no longer meet the deadline
MAX_AGE_HOURS = 4.0  # ages beyond this share one hazard (the tail)
PRIOR_UP_HOURS = 3.0  # prior mean spot run (no history yet)
PRIOR_DOWN_HOURS = 1.0  # prior mean gap
PRIOR_WEIGHT = 2.0  # pseudo-observations per age behind each hazard estimate
HALF_LIFE_HOURS = float("inf")  # weight of old segments halves every this many hours
IDLE_FLOOR = 0.65  # idle only above this share of the slack on UP's line (pick-guards' choice)
OD_TO_IDLE = False  # may leave on-demand to wait for spot (pays d twice when the gap lasts)
GRID_PER_TICK = 2  # slack grid points per tick
MAX_AGES = 48  # at most this many ages tracked one by one
MAX_POINTS = 160  # at most this many slack grid points (coarser grid for long slack)
MIN_STEP_HOURS = 1 / 6  # DP step without a history to fix it (the 10-minute tick of the traces)


@dataclass(frozen=True)
class AvailabilityModel:
    """Per-age hazards of the two-state semi-Markov availability process, one tick per step.

    ``up_hazard[a - 1]``: P(spot down next tick | up for exactly a ticks up to now), a = 1..A,
    the last entry for every age >= A; ``down_hazard`` the same for a gap closing.
    """

    up_hazard: FloatArray
    down_hazard: FloatArray

    def __post_init__(self) -> None:
        for name, h in (("up_hazard", self.up_hazard), ("down_hazard", self.down_hazard)):
            if h.ndim != 1 or h.size < 1 or h.size != self.up_hazard.size:
                raise InvalidInput(name, "hazards must be 1-d, non-empty and of equal length")
            if not (np.all(h >= 0) and np.all(h <= 1)):
                raise InvalidInput(name, "hazards are probabilities in [0, 1]")

    @property
    def max_age(self) -> int:
        return int(self.up_hazard.size)


def max_age_ticks(tick_hours: float) -> int:
    """Ages tracked one by one: MAX_AGE_HOURS of ticks, at least 2 and at most MAX_AGES."""
    return min(MAX_AGES, max(2, int(math.ceil(MAX_AGE_HOURS / tick_hours - 1e-9))))


def segments(history: BoolArray) -> list[tuple[bool, int]]:
    """Run-length encoding of an availability sequence: (spot up?, ticks), in order."""
    out: list[tuple[bool, int]] = []
    for up in np.asarray(history, dtype=bool).tolist():
        if out and out[-1][0] == up:
            out[-1] = (up, out[-1][1] + 1)
        else:
            out.append((up, 1))
    return out


def _hazard(segs: list[tuple[int, bool, float]], max_age: int, prior_mean_ticks: float) -> FloatArray:
    """Kaplan-Meier hazard per age from weighted segments (length, ended?, weight), shrunk to the
    pooled hazard.

    At age a < A a segment of length L is at risk when L >= a (a censored one when L > a) and
    ends there when L = a; ages >= A pool exposure (ticks at risk) and ends.
    """
    a_max = max_age
    ends = np.zeros(a_max)
    risk = np.zeros(a_max)
    for length, done, w in segs:
        top = length if done else length - 1  # last age whose next tick was seen
        head = min(top, a_max - 1)
        if head >= 1:
            risk[:head] += w
        if top >= a_max:
            risk[a_max - 1] += w * (top - a_max + 1)
        if done:
            ends[min(length, a_max) - 1] += w
    pooled = (ends.sum() + 1.0) / (risk.sum() + prior_mean_ticks)
    h = (ends + PRIOR_WEIGHT * pooled) / (risk + PRIOR_WEIGHT)
    return np.clip(h, 1e-4, 1.0 - 1e-4)


def fit_availability(history: BoolArray, tick_hours: float) -> AvailabilityModel:
    """Hazards of runs and gaps learnt from ``history`` (the past); the first segment, whose
    start is unseen, is left out, the last one is right-censored; a segment that ended h hours
    ago weighs 2^(-h / HALF_LIFE_HOURS)."""
    if not tick_hours > 0:
        raise InvalidInput("tick_hours", f"must be > 0, got {tick_hours}")
    segs = segments(np.asarray(history, dtype=bool))
    ends = np.cumsum([n for _, n in segs]) if segs else np.zeros(0)
    total = float(ends[-1]) if segs else 0.0
    a_max = max_age_ticks(tick_hours)
    hz = []
    for up, prior in ((True, PRIOR_UP_HOURS), (False, PRIOR_DOWN_HOURS)):
        picked = [(n, i < len(segs) - 1, 0.5 ** ((total - float(ends[i])) * tick_hours / HALF_LIFE_HOURS))
                  for i, (s, n) in enumerate(segs) if s == up and i > 0]
        hz.append(_hazard(picked, a_max, prior / tick_hours))
    return AvailabilityModel(hz[0], hz[1])


def prior_model(tick_hours: float) -> AvailabilityModel:
    """What a job with no past knows: geometric runs and gaps of the prior means."""
    return fit_availability(np.zeros(0, dtype=bool), tick_hours)


# ---------------------------------------------------------------------------------------------
# The dynamic program
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Guards:
    """The two restrictions the model does not learn, picked on the windows before the cut
    (``python -m benchmarks.deadline pick-guards``): idle only at or above ``idle_floor`` of the
    slack on Uniform Progress's line; leave on-demand to wait for spot only if ``od_to_idle``."""

    idle_floor: float = IDLE_FLOOR
    od_to_idle: bool = OD_TO_IDLE

    def __post_init__(self) -> None:
        if not 0.0 <= self.idle_floor <= 1.0:
            raise InvalidInput("idle_floor", f"is a share of UP's slack in [0, 1], got {self.idle_floor}")


@dataclass(frozen=True)
class Steps:
    """Everything of the task in ticks: margins, changeover, grid step, prices per tick."""

    ticks: int  # N: ticks up to the deadline
    slack0: float  # (R - C) / g
    d: float
    idle_margin: float
    spot_margin: float
    grid: float  # slack between grid points, ticks
    spot_cost: float
    od_cost: float
    guards: Guards = Guards()

    @classmethod
    def of(cls, task: DeadlineTask, tick_hours: float, guards: Guards | None = None) -> Steps:
        g = float(tick_hours)
        d = task.overhead_hours / g
        n = task.nodes
        slack0 = (task.deadline_hours - task.compute_hours) / g
        return cls(int(math.ceil(task.deadline_hours / g - 1e-9)), slack0, d,
                   max(2.0 * d, d + 1.0), 2.0 * d, max(1.0 / GRID_PER_TICK, slack0 / (MAX_POINTS - 2)),
                   task.spot_price * n * g, task.on_demand_price * n * g, guards or Guards())

    @property
    def points(self) -> int:
        return int(math.floor(self.slack0 / self.grid + 1e-9)) + 2


def _transitions(model: AvailabilityModel) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], FloatArray]:
    """Availability states z (up ages 1..A, then down ages 1..A): next if unchanged, next if
    flipped, P(flip)."""
    a = model.max_age
    ages = np.arange(a)
    same_up = np.minimum(ages + 1, a - 1)
    cont = np.concatenate([same_up, a + same_up])
    flip = np.concatenate([np.full(a, a), np.zeros(a, dtype=np.int64)])
    return cont, flip, np.concatenate([model.up_hazard, model.down_hazard])


def _shift(v: FloatArray, by: float, grid: float) -> FloatArray:
    """``v`` (last axis: slack on the grid) read at slack - ``by`` ticks, linearly between points;
    below zero slack the deadline is lost (BIG)."""
    k = by / grid
    lo = int(math.floor(k + 1e-9))
    frac = k - lo
    pad = np.full(v.shape[:-1] + (lo + 1,), BIG)
    ext = np.concatenate([pad, v], axis=-1)  # ext[..., j + lo + 1] = v[..., j]
    n = v.shape[-1]
    first = ext[..., 1 : n + 1]  # v[j - lo]
    second = ext[..., 0:n]  # v[j - lo - 1]
    return (1.0 - frac) * first + frac * second if frac > 1e-9 else first


def _expect(vn: FloatArray, cont: npt.NDArray[np.int64], flip: npt.NDArray[np.int64], p: FloatArray,
            stay: int, flipped: int) -> FloatArray:
    """E[V(next)] for each availability state (rows of ``cont``, ``flip``, ``p``): holding
    ``stay`` if spot keeps its state, ``flipped`` if it changes (a spot instance is lost when
    spot goes down)."""
    return (1.0 - p)[:, None] * vn[stay][cont] + p[:, None] * vn[flipped][flip]


def q_values(vn: FloatArray, st: Steps, model: AvailabilityModel,
             rows: npt.NDArray[np.int64] | None = None) -> dict[tuple[int, int], FloatArray]:
    """Q(action, from) on the grid for every availability state (or those in ``rows``), one tick
    with ``vn`` next: keys (action, 0 = continue on it / 1 = changeover onto it); idle has only
    (idle, 0)."""
    cont, flip, p = _transitions(model)
    if rows is not None:
        cont, flip, p = cont[rows], flip[rows], p[rows]
    e_idle = _expect(vn, cont, flip, p, _IDLE, _IDLE)
    e_od = _expect(vn, cont, flip, p, _OD, _OD)
    e_spot = _expect(vn, cont, flip, p, _SPOT, _IDLE)
    return {
        (_IDLE, 0): _shift(e_idle, 1.0, st.grid),
        (_OD, 0): st.od_cost + e_od,
        (_OD, 1): st.od_cost + _shift(e_od, st.d, st.grid),
        (_SPOT, 0): st.spot_cost + e_spot,
        (_SPOT, 1): st.spot_cost + _shift(e_spot, st.d, st.grid),
    }


def idle_floor(st: Steps, n: int) -> float:
    """Least slack (ticks) that allows idling with n ticks left: the Safety Net margin, and
    the guards' idle floor share of the slack Uniform Progress keeps on its line, (R - C) n / N (Eq. 5)."""
    return max(st.idle_margin, st.guards.idle_floor * st.slack0 * n / st.ticks)


def _allowed(st: Steps, slack: FloatArray, n: int) -> dict[str, BoolArray]:
    """Uniform Progress's margins on the slack grid (Safety Net, Sec. 3.3) and the idle floor."""
    return {"idle": slack >= idle_floor(st, n) - 1e-9, "idle_to_spot": slack >= st.idle_margin - 1e-9,
            "od_to_spot": slack >= st.spot_margin - 1e-9}


def _step(vn: FloatArray, st: Steps, model: AvailabilityModel, n: int, slack: FloatArray) -> FloatArray:
    """V with ``n`` ticks left from V with n - 1 left."""
    q = q_values(vn, st, model)
    a = model.max_age
    up = np.zeros(2 * a, dtype=bool)
    up[:a] = True
    ok = _allowed(st, slack, n)
    idle_ok = np.broadcast_to(ok["idle"], q[(_IDLE, 0)].shape)
    spot_idle = up[:, None] & ok["idle_to_spot"][None, :]
    spot_od = up[:, None] & ok["od_to_spot"][None, :]
    v_idle = np.minimum(q[(_OD, 1)], np.where(idle_ok, q[(_IDLE, 0)], BIG))
    v_idle = np.minimum(v_idle, np.where(spot_idle, q[(_SPOT, 1)], BIG))
    v_od = np.minimum(q[(_OD, 0)], np.where(idle_ok & st.guards.od_to_idle, q[(_IDLE, 0)], BIG))
    v_od = np.minimum(v_od, np.where(spot_od, q[(_SPOT, 1)], BIG))
    v_spot = np.where(up[:, None], q[(_SPOT, 0)], v_idle)
    out = np.stack([v_idle, v_spot, v_od])
    out[..., slack >= n - 1e-9] = 0.0  # done: no work left
    return np.minimum(out, BIG)


def solve(task: DeadlineTask, tick_hours: float, model: AvailabilityModel,
          guards: Guards | None = None) -> npt.NDArray[np.float32]:
    """V[n, instance, availability state, slack point]: Bellman's recursion over the ticks left
    (finite horizon, expected cost of spot 1 / on-demand k per hour, changeover d)."""
    st = Steps.of(task, tick_hours, guards)
    slack: FloatArray = np.arange(st.points, dtype=np.float64) * st.grid
    z = 2 * model.max_age
    out = np.empty((st.ticks + 1, 3, z, st.points), dtype=np.float32)
    v = np.zeros((3, z, st.points))
    out[0] = v
    for n in range(1, st.ticks + 1):
        v = _step(v, st, model, n, slack)
        out[n] = v
    return out


# ---------------------------------------------------------------------------------------------
# The policy
# ---------------------------------------------------------------------------------------------
def _interp(row: FloatArray, slack: float, grid: float) -> float:
    """A grid row read at ``slack`` ticks (linear; below 0 is BIG, above the grid the last point)."""
    if slack < -1e-9:
        return BIG
    x = min(slack / grid, row.size - 1.0)
    i = int(math.floor(x))
    f = x - i
    if i + 1 >= row.size or f < 1e-12:
        return float(row[i])
    return float((1.0 - f) * row[i] + f * row[i + 1])


class SemiMarkovDP(_RulesBase):
    """Threshold policy from the DP over a learnt semi-Markov availability model (module doc).

    ``history``: the zone's availability before the job (one entry per tick of ``tick_hours``,
    True = up), the only data the model is fitted to; its tail also gives the age of the current
    run or gap, and the DP steps one tick at a time. Without it (a live job) the policy starts
    from :func:`prior_model` and steps ``max(tick_hours, MIN_STEP_HOURS)``. ``guards``: the
    restrictions the model does not learn (default: the picked :data:`IDLE_FLOOR`, :data:`OD_TO_IDLE`).
    """

    name = "semi_markov_dp"

    def __init__(self, task: DeadlineTask, *, tick_hours: float, history: BoolArray | None = None,
                 model: AvailabilityModel | None = None, guards: Guards | None = None) -> None:
        super().__init__(task, tick_hours=tick_hours)
        if tick_hours <= 0:
            raise InvalidInput("tick_hours", "the semi-Markov policy needs the tick length (> 0)")
        hist = np.zeros(0, dtype=bool) if history is None else np.asarray(history, dtype=bool)
        self.step_hours = float(tick_hours) if hist.size else max(float(tick_hours), MIN_STEP_HOURS)
        self.model = model if model is not None else fit_availability(hist, self.step_hours)
        self.guards = guards or Guards()
        self.steps = Steps.of(task, self.step_hours, self.guards)
        self.values = solve(task, self.step_hours, self.model, self.guards)
        segs = segments(hist)
        self._up: bool | None = segs[-1][0] if segs else None
        self._since = -segs[-1][1] * tick_hours if segs else 0.0  # start of the current run / gap

    def _age_state(self, obs: Observation) -> int:
        """Index z of the current availability state, updating the age from this observation."""
        t, up = obs.elapsed_hours, bool(obs.spot_available)
        if self._up is None or up != self._up:
            self._up, self._since = up, t
        age = int(math.floor((t - self._since) / self.step_hours + 0.5)) + 1
        a = min(age, self.model.max_age) - 1
        return a if up else self.model.max_age + a

    def _choices(self, obs: Observation, n: int) -> list[tuple[int, int]]:
        """(action, changeover?) pairs Uniform Progress's margins and the idle floor allow here."""
        state, up = obs.state, obs.spot_available
        hours = self._slack(obs)
        idle_ok = hours / self.step_hours >= idle_floor(self.steps, n) and hours >= self._idle_margin
        out: list[tuple[int, int]] = [(_OD, 0 if state is Kind.ON_DEMAND else 1)]
        if idle_ok and (self.guards.od_to_idle or state is not Kind.ON_DEMAND):
            out.append((_IDLE, 0))
        if up and hours >= (self._idle_margin if state is Kind.IDLE else self._spot_margin):
            out.append((_SPOT, 1))
        return out

    def decide(self, obs: Observation) -> Action:
        z = self._age_state(obs)
        if obs.progress_hours >= self._c - EPS:
            return self._overrun(obs)
        if obs.state is Kind.SPOT and obs.spot_available:
            return SPOT  # Exploitation
        if self._slack(obs) < self._idle_margin and obs.state is not Kind.ON_DEMAND:
            return ON_DEMAND  # Safety Net
        slack = self._slack(obs) / self.step_hours
        n = int(math.ceil((self._r - obs.elapsed_hours) / self.step_hours - 1e-9))
        if n < 1:
            return ON_DEMAND
        q = q_values(self.values[n - 1].astype(np.float64), self.steps, self.model, np.array([z]))
        best = min(self._choices(obs, n), key=lambda c: (_interp(q[c][0], slack, self.steps.grid), _TIE[c[0]]))
        return ACTIONS[best[0]]

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "up": self._up, "since": self._since}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        up = state.get("up")
        self._up = None if up is None else bool(up)
        self._since = float(state.get("since", 0.0))


@deadline_policy("semi_markov_dp", live=True, ticked=True)
def _make(task: DeadlineTask, *, tick_hours: float, history: BoolArray | None = None,
          guards: Guards | None = None, **_: Any) -> SemiMarkovDP:
    return SemiMarkovDP(task, tick_hours=tick_hours, history=history, guards=guards)
