"""Omniscient planners (Sec. 5.3, Eq. 6-10; App. A.3, A.7) as an exact dynamic program.

The ILP of Eq. 6-10 picks, per tick, idle / spot / on-demand; progress is time on instances minus
``d`` per changeover (Eq. 8) and a changeover happens whenever the job moves onto a different
instance (Eq. 9-10). Instead of a MILP solver this module solves it exactly by DP over the state
(mode, J = changeovers so far, n = ticks on instances so far): progress is ``n g - J d`` and the
cost so far is minimised per state, one tick at a time, vectorised over (J, n) with numpy. The
same DP serves every variant by its list of *modes*:

- one zone: idle, spot, on-demand (Eq. 6-10), a gang of N homogeneous instances (Eq. 18-22);
- heterogeneous gang: every split (s spot + N - s on-demand), s <= a(t) (Eq. 23-32);
- many zones: spot in each zone, on-demand in the cheapest zone.

Unlike the ILP objective the DP charges the last tick only up to the finish (as the simulator
bills), so replaying the plan in :func:`policies.deadline_sim.simulate` gives the same cost.
Brute force over every plan on small windows checks it (tests/policies/test_omniscient.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from controlplane.core.errors import InvalidInput
from policies.deadline import (
    EPS,
    IDLE,
    ON_DEMAND,
    SPOT,
    Action,
    DeadlineTask,
    Kind,
    Observation,
    PlanPolicy,
    _RulesBase,
    deadline_policy,
)
from policies.deadline_sim import simulate

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
INF = np.inf


@dataclass(frozen=True)
class Mode:
    """One thing the job can run on: kind, price per hour for the whole gang, zone / spot split."""

    kind: Kind
    price: float
    zone: int = -1
    spot_nodes: int = 0


@dataclass(frozen=True)
class Plan:
    """The optimal schedule: mode index per tick (0 = idle; into ``modes``), cost, finish."""

    feasible: bool
    cost: float
    modes: IntArray
    finish_hours: float
    changeovers: int
    progress_hours: float
    mode_list: tuple[Mode, ...]

    def kinds(self) -> list[Kind]:
        return [self.mode_list[m].kind for m in self.modes.tolist()]


def _units(tick_hours: float, overhead_hours: float) -> tuple[float, int, int]:
    """A time unit u (hours) with g = G u and d = D u integers (1-second resolution)."""
    g_s = max(1, int(round(tick_hours * 3600)))
    d_s = int(round(overhead_hours * 3600))
    u_s = math.gcd(g_s, d_s) if d_s > 0 else g_s
    return u_s / 3600.0, g_s // u_s, d_s // u_s


def plan_modes(
    modes: Sequence[Mode],
    available: BoolArray,
    tick_hours: float,
    compute_hours: float,
    deadline_hours: float,
    overhead_hours: float,
    *,
    initial_mode: int = 0,
    initial_debt_hours: float = 0.0,
    min_progress: float | None = None,
) -> Plan:
    """Min-cost plan over ``modes`` (index 0 must be idle) with ``available[m, t]`` per tick.

    State: (mode, progress P in units u). A tick on the same instance adds G units; a tick on a
    new one adds G - D (the changeover, Eq. 8). States with equal (tick, mode, P) have the same
    future, so the DP is exact; plans with a segment shorter than d are dominated (the segment
    could idle instead), which bounds P below by -D.

    Default objective: finish ``compute_hours`` by ``deadline_hours`` at least cost. With
    ``min_progress`` (Partial Lookahead, Eq. 11-15) the horizon is the whole window and the
    objective is the least cost per hour of progress among plans making >= ``min_progress``
    (finishing the job counts as making all of it).
    """
    if modes[0].kind is not Kind.IDLE:
        raise InvalidInput("modes", "mode 0 must be idle")
    g, c, r = float(tick_hours), float(compute_hours), float(deadline_hours)
    if not g > 0:
        raise InvalidInput("tick_hours", f"must be > 0, got {g}")
    avail = np.asarray(available, dtype=bool)
    n_m = len(modes)
    n_t = min(avail.shape[1], int(math.ceil(r / g - 1e-9)))
    if n_t <= 0:
        raise InvalidInput("available", "the trace window is empty", fix="give at least one tick")
    u, gu, du = _units(g, overhead_hours)
    cu = int(math.ceil(c / u - 1e-9))  # progress needed, in units (rounded up)
    lo = du  # index offset: array index i holds P = i - lo
    size = min(cu, n_t * gu + 1) + lo  # P in [-D, C_u - 1] (and no more than the window allows)
    prices = np.array([m.price for m in modes], dtype=np.float64)
    v = np.full((n_m, size), INF)
    v[initial_mode, max(0, lo - int(math.ceil(initial_debt_hours / u - 1e-9)))] = 0.0
    bp = np.zeros((n_t, n_m, size), dtype=np.int8)
    p_idx = np.arange(size) - lo  # P of each index
    best: tuple[float, int, int, int, int] = (INF, -1, -1, 0, 0)  # cost, tick, mode, P before, src
    step_c, step_s = gu, gu - du  # progress added by a tick: continue / changeover
    pa = max(0, lo - int(math.ceil(initial_debt_hours / u - 1e-9)))
    pb = pa + 1  # v is finite only inside the band [pa, pb)
    for t in range(n_t):
        if pa >= pb:
            break
        ar = np.arange(pb - pa)
        w = v[:, pa:pb]
        a1 = np.argmin(w, axis=0)
        m1 = w[a1, ar]
        if n_m > 2:
            masked = w.copy()
            masked[a1, ar] = INF
            a2 = np.argmin(masked, axis=0)
            m2 = masked[a2, ar]
        na, nb = max(0, pa + min(0, step_s)), min(size, pb + step_c)
        if min_progress is None:  # prune states that can no longer finish in time
            na = max(na, cu - (n_t - 1 - t) * gu + lo)
        new = np.full((n_m, size), INF)
        if na < nb:
            i0, i1 = max(na, pa), min(nb, pb)
            if i0 < i1:
                new[0, i0:i1] = m1[i0 - pa : i1 - pa]
                bp[t, 0, i0:i1] = a1[i0 - pa : i1 - pa]
        last = (t + 1) * g > r + 1e-9
        for m in range(1, n_m):
            if not avail[m, t]:
                continue
            if n_m > 2:
                other = np.where(a1 == m, m2, m1)
                src = np.where(a1 == m, a2, a1)
            else:
                other, src = w[0], np.zeros(pb - pa, dtype=np.int64)
            p = prices[m]
            # finishing this tick: from P >= C_u - step (continue) or C_u - step_s (changeover)
            for origin, step, from_m in ((w[m], step_c, None), (other, step_s, src)):
                first = max(pa, cu - step + lo)
                if first < pb:
                    seg = origin[first - pa :]
                    used = c - p_idx[first:pb] * u - (step - gu) * u  # hours of this tick used
                    fc = seg + p * used
                    if last:
                        fc = np.where(t * g + used <= r + 1e-9, fc, INF)
                    k = int(np.argmin(fc))
                    if fc[k] < best[0] - 1e-12:
                        s = m if from_m is None else int(from_m[first - pa + k])
                        best = (float(fc[k]), t, m, int(p_idx[first + k]), s)
            if na >= nb:
                continue
            cand = _shifted(w[m], pa, pb, step_c, na, nb, INF)
            ch = _shifted(other, pa, pb, step_s, na, nb, INF)
            src_ch = _shifted(src, pa, pb, step_s, na, nb, 0)
            take = ch < cand
            new[m, na:nb] = np.where(take, ch, cand) + p * g
            bp[t, m, na:nb] = np.where(take, src_ch, m)
        v = new
        pa, pb = na, nb
    if min_progress is not None:
        return _ratio_plan(v, bp, best, modes, u, gu, du, lo, c, float(min_progress), n_t)
    if best[1] < 0:
        return Plan(False, INF, np.zeros(n_t, dtype=np.int64), INF, 0, 0.0, tuple(modes))
    cost, t_end, m_end, p_before, src = best
    seq = _backtrack(bp, t_end, m_end, src, p_before, n_t, gu, du, lo)
    step = gu if src == m_end else gu - du
    finish = t_end * g + c - p_before * u - (step - gu) * u
    return Plan(True, cost, seq, finish, int(np.sum(_changes(seq))), c, tuple(modes))


def _shifted(arr: npt.NDArray[Any], pa: int, pb: int, shift: int, na: int, nb: int, fill: float) -> npt.NDArray[Any]:
    """``arr`` (indices [pa, pb)) moved by ``shift`` and cut to [na, nb), ``fill`` elsewhere."""
    out = np.full(nb - na, fill, dtype=arr.dtype if fill != INF else np.float64)
    lo_i, hi_i = max(na, pa + shift), min(nb, pb + shift)
    if lo_i < hi_i:
        out[lo_i - na : hi_i - na] = arr[lo_i - shift - pa : hi_i - shift - pa]
    return out


def _changes(seq: IntArray) -> npt.NDArray[np.bool_]:
    prev = np.concatenate([[0], seq[:-1]])
    return (seq != prev) & (seq != 0)


def _backtrack(
    bp: npt.NDArray[np.int8], t_end: int, m_end: int, src: int, p_before: int, n_t: int, gu: int, du: int, lo: int
) -> IntArray:
    """Modes per tick: ``m_end`` at ``t_end`` (the finishing or last tick), then back through ``bp``."""
    seq = np.zeros(n_t, dtype=np.int64)
    seq[t_end] = m_end
    m, p = src, p_before
    for t in range(t_end - 1, -1, -1):
        seq[t] = m
        s = int(bp[t, m, p + lo])
        if m != 0:
            p -= gu if s == m else gu - du
        m = s
    return seq


def _ratio_plan(
    v: FloatArray,
    bp: npt.NDArray[np.int8],
    best: tuple[float, int, int, int, int],
    modes: Sequence[Mode],
    u: float,
    gu: int,
    du: int,
    lo: int,
    c: float,
    min_progress: float,
    n_t: int,
) -> Plan:
    """Eq. 11: least cost per unit of progress among end states with progress >= min_progress."""
    size = v.shape[1]
    prog = (np.arange(size) - lo) * u
    ok = (prog >= min_progress - 1e-6) & (prog > 1e-9)
    ratio = np.where(ok[None] & (v < INF), v / np.maximum(prog, 1e-9)[None], INF)
    k = int(np.argmin(ratio))
    r_best = float(ratio.flat[k])
    fin_ratio = best[0] / c if best[1] >= 0 else INF
    if fin_ratio < INF and fin_ratio <= r_best:
        cost, t_end, m_end, p_before, src = best
        seq = _backtrack(bp, t_end, m_end, src, p_before, n_t, gu, du, lo)
        return Plan(True, cost, seq, INF, int(np.sum(_changes(seq))), c, tuple(modes))
    if r_best == INF:
        return Plan(False, INF, np.zeros(n_t, dtype=np.int64), INF, 0, 0.0, tuple(modes))
    m_end, i_end = divmod(k, size)
    # the state at the end of the last tick: step back one tick to reuse _backtrack
    s = int(bp[n_t - 1, m_end, i_end])
    p_prev = i_end - lo
    if m_end != 0:
        p_prev -= gu if s == m_end else gu - du
    seq = _backtrack(bp, n_t - 1, m_end, s, p_prev, n_t, gu, du, lo)
    return Plan(True, float(v[m_end, i_end]), seq, INF, int(np.sum(_changes(seq))), float(prog[i_end]), tuple(modes))


# ---------------------------------------------------------------------------------------------
# The variants
# ---------------------------------------------------------------------------------------------
def single_zone_modes(task: DeadlineTask) -> list[Mode]:
    n = task.nodes
    return [Mode(Kind.IDLE, 0.0), Mode(Kind.SPOT, task.spot_price * n, spot_nodes=n), Mode(Kind.ON_DEMAND, task.on_demand_price * n)]


def omniscient_plan(task: DeadlineTask, spot_up: Sequence[bool] | BoolArray, tick_hours: float) -> Plan:
    """Eq. 6-10 (and Eq. 18-22 for a homogeneous gang: pass ``spot_up = a(t) >= N``)."""
    up = np.asarray(spot_up, dtype=bool)
    if up.size == 0:
        raise InvalidInput("spot_up", "the trace window is empty", fix="give at least one tick")
    avail = np.vstack([np.ones_like(up), up, np.ones_like(up)])
    return plan_modes(single_zone_modes(task), avail, tick_hours, task.compute_hours, task.deadline_hours, task.overhead_hours)


def heterogeneous_plan(task: DeadlineTask, available_counts: Sequence[int] | IntArray, tick_hours: float) -> Plan:
    """Eq. 23-32: a gang of N mixing s spot and N - s on-demand instances, s <= a(t)."""
    a = np.asarray(available_counts, dtype=np.int64)
    if a.size == 0:
        raise InvalidInput("available_counts", "the trace window is empty", fix="give at least one tick")
    n = task.nodes
    modes = [Mode(Kind.IDLE, 0.0)]
    rows = [np.ones(a.shape[0], dtype=bool)]
    for s in range(n, -1, -1):
        kind = Kind.SPOT if s == n else Kind.ON_DEMAND
        modes.append(Mode(kind, s * task.spot_price + (n - s) * task.on_demand_price, spot_nodes=s))
        rows.append(a >= s)
    return plan_modes(modes, np.vstack(rows), tick_hours, task.compute_hours, task.deadline_hours, task.overhead_hours)


def brute_force_cost(task: DeadlineTask, spot_up: Sequence[bool], tick_hours: float) -> float:
    """Cheapest cost over every idle/spot/on-demand plan, each replayed in the simulator (tiny windows)."""
    import itertools


    up = list(map(bool, spot_up))
    best = INF
    choices = [(0, 1, 2) if u else (0, 2) for u in up]
    for combo in itertools.product(*choices):
        res = simulate(PlanPolicy(task, np.asarray(combo, dtype=np.int8), tick_hours=tick_hours), up, tick_hours)
        if res.met_deadline and res.cost < best:
            best = res.cost
    return best


# ---------------------------------------------------------------------------------------------
# Policies with future knowledge
# ---------------------------------------------------------------------------------------------
class Omniscient(PlanPolicy):
    """Sec. 5.3: follows the optimal plan for the whole window (knows the future)."""

    name = "omniscient"

    def __init__(self, task: DeadlineTask, availability: Sequence[bool] | BoolArray, *, tick_hours: float) -> None:
        self.result = omniscient_plan(task, availability, tick_hours)
        super().__init__(task, self.result.modes.astype(np.int8), tick_hours=tick_hours)


class PartialLookahead(_RulesBase):
    """App. A.3: n slices; at each slice start plan that slice alone, knowing only its availability.

    Each slice minimises cost per unit of progress (Eq. 11) subject to reaching the cumulative
    target i C / n (Eq. 14) and not exceeding C (Eq. 15). A slice that cannot reach its target
    (it happens only after earlier slices fell behind) runs on-demand throughout.
    """

    name = "partial_lookahead"

    def __init__(self, task: DeadlineTask, availability: Sequence[bool] | BoolArray, *, n: int = 8, tick_hours: float) -> None:
        super().__init__(task, tick_hours=tick_hours)
        if n < 1:
            raise InvalidInput("n", f"number of slices must be >= 1, got {n}")
        if tick_hours <= 0:
            raise InvalidInput("tick_hours", "partial lookahead needs the tick length (> 0)")
        self.n = int(n)
        self.availability = np.asarray(availability, dtype=bool)
        self._n_ticks = int(math.ceil(self._r / tick_hours - 1e-9))
        self._bounds = [int(round(i * self._n_ticks / self.n)) for i in range(self.n + 1)]
        self._plan = np.full(self._n_ticks, -1, dtype=np.int8)
        self._slice = -1
        self._last_change = -1

    def _plan_slice(self, i: int, obs: Observation) -> None:
        lo, hi = self._bounds[i], self._bounds[i + 1]
        g = self.tick_hours
        up = self.availability[lo:hi]
        ones = np.ones(hi - lo, dtype=bool)
        start_mode = {Kind.IDLE: 0, Kind.SPOT: 1, Kind.ON_DEMAND: 2}[obs.state]
        debt = 0.0
        if start_mode != 0:
            debt = max(0.0, self._d - (lo - self._last_change) * g)
        remaining = self._c - obs.progress_hours
        # Eq. 14's cumulative target, raised so the time after the slice still fits the rest on
        # on-demand with one changeover (slice ends fall on ticks, the last tick may be partial)
        target = max((i + 1) * self._c / self.n, self._c - (self._r - hi * g) + self._d) - obs.progress_hours
        horizon = min((hi - lo) * g, self._r - lo * g)  # the last tick may end past R
        modes = single_zone_modes(self.task)
        if i == self.n - 1 or target >= remaining - EPS:
            plan = plan_modes(modes, np.vstack([ones, up, ones]), g, remaining, horizon, self._d, initial_mode=start_mode, initial_debt_hours=debt)
        else:
            plan = plan_modes(
                modes, np.vstack([ones, up, ones]), g, remaining, horizon, self._d, initial_mode=start_mode, initial_debt_hours=debt, min_progress=max(target, 0.0),
            )
        if plan.feasible:
            self._plan[lo:hi] = plan.modes[: hi - lo]
        else:
            self._plan[lo:hi] = 2

    def decide(self, obs: Observation) -> Action:
        if obs.progress_hours >= self._c - EPS:
            return self._overrun(obs)
        t = int(round(obs.elapsed_hours / self.tick_hours))
        if t >= self._n_ticks:
            return ON_DEMAND
        i = next(k for k in range(self.n) if self._bounds[k] <= t < self._bounds[k + 1])
        if i != self._slice:
            self._slice = i
            self._plan_slice(i, obs)
        code = int(self._plan[t])
        want = (IDLE, SPOT, ON_DEMAND)[code]
        if want.kind is Kind.SPOT and not obs.spot_available:
            want = ON_DEMAND
        if want.kind is not Kind.IDLE and want.kind is not obs.state:
            self._last_change = t
        return want

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "n": self.n, "plan": self._plan.tolist(), "slice": self._slice, "last_change": self._last_change}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._plan = np.asarray(state["plan"], dtype=np.int8)
        self._slice = int(state["slice"])
        self._last_change = int(state["last_change"])


@deadline_policy("omniscient")
def _make_omniscient(task: DeadlineTask, *, availability: Sequence[bool] | BoolArray, tick_hours: float, **_: Any) -> Omniscient:
    return Omniscient(task, availability, tick_hours=tick_hours)


@deadline_policy("partial_lookahead")
def _make_partial(task: DeadlineTask, *, availability: Sequence[bool] | BoolArray, tick_hours: float, n: int = 8, **_: Any) -> PartialLookahead:
    return PartialLookahead(task, availability, n=n, tick_hours=tick_hours)
