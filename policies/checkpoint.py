"""Checkpoint schedules for VMs with age-dependent preemption rates (seed 001, Sec. 4.3, Eq. 9-13).

Time runs in steps of ``step_hours`` (default 1 minute); a checkpoint costs ``delta_hours`` (a
whole number of steps). A segment of ``i`` work steps started at VM age ``a`` (just after a
checkpoint) ends with a checkpoint at age ``u = a + i + d`` (``d`` = delta in steps) or, for the
last segment, at ``a + i`` with no checkpoint (the job is done). A preemption at age ``x`` inside
the segment loses ``x - a`` hours (Eq. 13, conditioned on survival to ``a``: the README slips of
Eq. 10-13 are fixed here) and the job resumes from its last checkpoint on a *new* VM (age 0).

Solving the DP exactly. Write W(j, a) = S(a) E[M*(j, a)]. For the next checkpoint at age u with
j' = j - i steps left after it, Eq. 10-12 become

    W(j, a) = min_u [alpha(j', u) - S(u) Q_j] + S(a) Q_j - a - G(a) + a F(a),
    alpha(j', u) = W(j', u) + u S(u) + G(u),

with Q_j = E[M*(j, 0)] + restart cost and G(x) = int_0^x t dF(t). The unknown Q_j enters
linearly, so at a = 0 the fixed point E[M*(j, 0)] = min_u [...] + Q_j has the closed form
Q_j = min_u (alpha_u + restart) / S(u): no iteration, no tolerance. Every (j', u) with
j' + u = j + a + d lies on one diagonal D, so for each D the candidates are lines
alpha - S Q in the unknown Q, added in order of growing S: a lower convex hull per diagonal
answers each state in O(log T). Total O(T^2 log T) time instead of the paper's O(T^3).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from controlplane.core.errors import InvalidInput
from policies.preemption import PreemptionModel

log = logging.getLogger(__name__)

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

FINISH = -1  # choice code: run to the end of the job, no checkpoint
RUN_TO_DEATH = -2  # choice code: every option surely fails; run until the VM dies

__all__ = [
    "CheckpointIntervals",
    "CheckpointPolicy",
    "CheckpointSchedule",
    "OptimalCheckpointPlanner",
    "YoungDalyPlanner",
    "expected_makespan",
    "simulate_makespan",
]


# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckpointSchedule:
    """Where to checkpoint: cumulative WORK hours (not wall-clock), and the expected makespan."""

    work_hours: float
    start_age_hours: float
    checkpoints: tuple[float, ...]
    intervals_hours: tuple[float, ...]
    expected_makespan_hours: float

    def next_checkpoint_after(self, work_done_hours: float) -> float | None:
        """The first checkpoint strictly after ``work_done_hours`` of work, or None."""
        if work_done_hours < 0:
            raise InvalidInput("work_done_hours", f"must be >= 0, got {work_done_hours}",
                               fix="pass the work completed so far, in hours")
        for c in self.checkpoints:
            if c > work_done_hours + 1e-9:
                return c
        return None

    @property
    def increase_pct(self) -> float:
        """Expected increase of running time over the work itself, in percent."""
        return 100.0 * (self.expected_makespan_hours / self.work_hours - 1.0)


def _intervals(checkpoints: Sequence[float], work: float) -> tuple[float, ...]:
    pts = [0.0, *checkpoints, work]
    return tuple(round(b - a, 12) for a, b in zip(pts[:-1], pts[1:], strict=True))


def _steps(name: str, hours: float, step: float, *, positive: bool = False) -> int:
    if not math.isfinite(hours) or hours < 0 or (positive and hours == 0):
        raise InvalidInput(name, f"must be {'> 0' if positive else '>= 0'} hours, got {hours}",
                           fix="pass a non-negative duration in hours")
    n = round(hours / step)
    if abs(n * step - hours) > 1e-6 * max(1.0, hours):
        raise InvalidInput(name, f"{hours} h is not a whole number of {step} h steps",
                           fix=f"round it to a multiple of step_hours={step}")
    return int(n)


@dataclass(frozen=True, eq=False)
class _Grid:
    """The model on the age grid: ages x_u = u * step, u = 0..U (S(x_U) = 0)."""

    step: float
    x: FloatArray
    S: FloatArray
    F: FloatArray
    G: FloatArray
    U: int  # first index where the VM is surely dead

    @classmethod
    def of(cls, model: PreemptionModel, step: float) -> _Grid:
        n = int(math.ceil(model.max_lifetime / step - 1e-9))
        x = np.arange(n + 1, dtype=np.float64) * step
        S = model.sf(x)
        S[-1] = 0.0
        dead = np.flatnonzero(S <= 0.0)
        U = int(dead[0])
        S[U:] = 0.0
        return cls(step, x, S, 1.0 - S, model.partial_expectation(x), U)

    def tail(self, a: IntArray | int) -> FloatArray:
        """-x_a - G(a) + x_a F(a): the state part of W(j, a) (without S(a) Q)."""
        return np.asarray(-self.x[a] - self.G[a] + self.x[a] * self.F[a], dtype=np.float64)

    def line(self, w_next: FloatArray, u: IntArray) -> FloatArray:
        """alpha = W(j', u) + x_u S(u) + G(u)."""
        return np.asarray(w_next + self.x[u] * self.S[u] + self.G[u], dtype=np.float64)


# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class CheckpointPolicy:
    """The solved DP: the best action for every (work left, VM age) state."""

    grid: _Grid
    d: int
    work_steps: int
    start_age_steps: int
    choice: NDArray[np.int32]  # [j, a]: next checkpoint age u, FINISH or RUN_TO_DEATH
    value: FloatArray          # [j, a]: E[M*(j, a)] in hours (inf where not computed)
    restart_value: FloatArray  # [j]: E[M*(j, 0)]

    def checkpoints_from(self, work_steps: int, age_steps: int) -> tuple[float, ...]:
        """Checkpoint positions (work hours from this point) along the no-failure path."""
        out: list[float] = []
        j, a, done = work_steps, age_steps, 0
        while j > 0:
            c = int(self.choice[j, a])
            if c < 0:
                break
            i = c - a - self.d
            done += i
            out.append(done * self.grid.step)
            j, a = j - i, c
        return tuple(out)

    def restart_checkpoints(self, remaining_work_hours: float) -> tuple[float, ...]:
        """The plan after a preemption: ``remaining_work_hours`` left, on a new VM."""
        return self.checkpoints_from(_steps("remaining_work_hours", remaining_work_hours,
                                            self.grid.step), 0)

    @property
    def schedule(self) -> CheckpointSchedule:
        h = self.grid.step
        cps = self.checkpoints_from(self.work_steps, self.start_age_steps)
        work = self.work_steps * h
        return CheckpointSchedule(work, self.start_age_steps * h, cps, _intervals(cps, work),
                                  float(self.value[self.work_steps, self.start_age_steps]))


class OptimalCheckpointPlanner:
    """Minimum expected makespan E[M*(J, s)] by dynamic programming (Eq. 9-13), solved exactly."""

    def __init__(self, model: PreemptionModel, *, step_hours: float = 1 / 60,
                 delta_hours: float = 1 / 60, restart_hours: float = 0.0,
                 method: str = "auto") -> None:
        if not (math.isfinite(step_hours) and step_hours > 0):
            raise InvalidInput("step_hours", f"must be > 0, got {step_hours}", fix="e.g. 1/60 (a minute)")
        if method not in ("auto", "hull", "dense"):
            raise InvalidInput("method", f"unknown method {method!r}",
                               fix="use 'auto', 'hull' (O(T^2 log T)) or 'dense' (O(T^3) reference)")
        if not (math.isfinite(restart_hours) and restart_hours >= 0):
            raise InvalidInput("restart_hours", f"must be >= 0, got {restart_hours}",
                               fix="time to get a new VM and restore, in hours")
        self.model = model
        self.step = float(step_hours)
        self.d = _steps("delta_hours", delta_hours, self.step)
        self.restart = float(restart_hours)
        self.method = method
        self.grid = _Grid.of(model, self.step)

    def plan(self, work_hours: float, start_age_hours: float = 0.0) -> CheckpointSchedule:
        return self.solve(work_hours, start_age_hours).schedule

    def solve(self, work_hours: float, start_age_hours: float = 0.0) -> CheckpointPolicy:
        J = _steps("work_hours", work_hours, self.step, positive=True)
        a0 = _steps("start_age_hours", start_age_hours, self.step)
        g = self.grid
        if a0 >= g.U:
            raise InvalidInput("start_age_hours", f"a VM of age {start_age_hours} h is past the "
                               f"model's limit ({g.U * self.step:.2f} h)", fix="start on a new VM")
        dense = self.method == "dense"
        if self.method == "auto":  # the dense sweep wins on small problems (less Python per row)
            amax = _amax(g, self.d, J, a0)
            dense = float((np.arange(J + 1) * (amax + 1)).sum()) <= 3e7
        return _solve(g, self.d, self.restart, J, a0, dense=dense)


def _amax(g: _Grid, d: int, J: int, a0: int) -> IntArray:
    """Largest reachable age per row j: a0 + (J - j)(1 + d), capped at the last live age."""
    j = np.arange(J + 1)
    return np.minimum(g.U - 1, a0 + (J - j) * (1 + d)).astype(np.int64)


def _solve(g: _Grid, d: int, r: float, J: int, a0: int, *, dense: bool) -> CheckpointPolicy:
    amax = _amax(g, d, J, a0)
    width = J + g.U + d + 2
    value = np.full((J + 1, g.U), np.inf)
    value[0, :] = 0.0
    choice = np.full((J + 1, g.U), FINISH, dtype=np.int32)
    restart = np.zeros(J + 1)
    fail_alpha = float(g.G[g.U])
    store = _DenseStore(J, width) if dense else _HullStore(J, width)
    for j in range(1, J + 1):
        a = np.arange(amax[j] + 1)
        cols = j + a + d
        # the finish option: run the last j steps, no checkpoint
        uf = np.minimum(a + j, g.U)
        fin_alpha = g.line(np.zeros_like(a, dtype=np.float64), uf)
        # E[M*(j, 0)]: the fixed point in closed form, Q = min (alpha + r) / S
        qa, qs = store.column(int(cols[0]))
        ratios = [(qa + r) / qs] if qa.size else []
        if g.S[uf[0]] > 0:
            ratios.append(np.array([(fin_alpha[0] + r) / g.S[uf[0]]]))
        if not ratios:
            raise InvalidInput("work_hours", "no schedule can finish: every segment outlives the VM",
                               fix="use a smaller step_hours or delta_hours")
        Q = float(np.min(np.concatenate(ratios)))
        restart[j] = Q - r
        best, where = store.query(cols, Q)
        fin = fin_alpha - g.S[uf] * Q
        cand = np.stack([best, fin, np.full_like(fin, fail_alpha)])
        pick = np.argmin(cand, axis=0)
        w = cand[pick, a] + g.S[a] * Q + g.tail(a)
        value[j, a] = w / g.S[a]
        choice[j, a] = np.where(pick == 0, where, np.where(pick == 1, FINISH, RUN_TO_DEATH))
        if j < J:
            store.insert(j, j + a, g.line(w, a), g.S[a])
    return CheckpointPolicy(g, d, J, a0, choice, value, restart)


class _DenseStore:
    """Reference: keep every line alpha[j', D] (O(T^3) total work)."""

    def __init__(self, J: int, width: int) -> None:
        self.alpha = np.full((J + 1, width), np.inf)
        self.slope = np.zeros((J + 1, width))
        self.rows = 1

    def insert(self, j: int, cols: IntArray, alpha: FloatArray, slope: FloatArray) -> None:
        self.alpha[j, cols] = alpha
        self.slope[j, cols] = slope
        self.rows = j + 1

    def column(self, col: int) -> tuple[FloatArray, FloatArray]:
        a, s = self.alpha[1:self.rows, col], self.slope[1:self.rows, col]
        ok = np.isfinite(a) & (s > 0)
        return a[ok], s[ok]

    def query(self, cols: IntArray, Q: float) -> tuple[FloatArray, IntArray]:
        if self.rows <= 1:
            return np.full(cols.shape, np.inf), np.zeros(cols.shape, dtype=np.int64)
        block = self.alpha[1:self.rows, cols] - Q * self.slope[1:self.rows, cols]
        k = np.argmin(block, axis=0)
        best = block[k, np.arange(cols.size)]
        return best, cols - (k + 1)  # u = D - j'


class _HullStore:
    """Per diagonal D, the lower envelope of lines alpha - S Q (slopes S added in growing order).

    On an envelope the values alpha_k - S_k Q are unimodal in k, so a local minimum is the
    minimum: each query starts from the column's previous answer (Q grows with the work left,
    so it rarely moves far) and falls back to binary search where a few steps do not settle.
    """

    def __init__(self, J: int, width: int) -> None:
        self.cap = cap = J + 1
        self.alpha = np.zeros(width * cap)
        self.slope = np.zeros(width * cap)
        self.row = np.zeros(width * cap, dtype=np.int32)
        self.n = np.zeros(width, dtype=np.int64)
        self.ptr = np.zeros(width, dtype=np.int64)

    def column(self, col: int) -> tuple[FloatArray, FloatArray]:
        k, b = int(self.n[col]), col * self.cap
        return self.alpha[b:b + k], self.slope[b:b + k]

    def insert(self, j: int, cols: IntArray, alpha: FloatArray, slope: FloatArray) -> None:
        live = slope > 0
        cols, alpha, slope = cols[live], alpha[live], slope[live]
        base = cols * self.cap
        n = self.n[cols].copy()
        # equal slope as the last line: keep the lower one
        last = base + np.maximum(n - 1, 0)
        same = (n > 0) & (slope <= self.slope[last])
        worse = same & (alpha >= self.alpha[last])
        n = np.where(same & ~worse, n - 1, n)
        idx = np.flatnonzero(~worse & (n >= 2))
        while idx.size:
            i1 = base[idx] + n[idx] - 2
            a1, s1 = self.alpha[i1], self.slope[i1]
            a2, s2 = self.alpha[i1 + 1], self.slope[i1 + 1]
            bad = (alpha[idx] - a1) * (s2 - s1) <= (a2 - a1) * (slope[idx] - s1)
            idx = idx[bad]
            n[idx] -= 1
            idx = idx[n[idx] >= 2]
        keep = ~worse
        at = base[keep] + n[keep]
        self.alpha[at] = alpha[keep]
        self.slope[at] = slope[keep]
        self.row[at] = j
        self.n[cols[keep]] = n[keep] + 1

    def _val(self, at: IntArray, Q: float) -> FloatArray:
        return np.asarray(self.alpha[at] - self.slope[at] * Q, dtype=np.float64)

    def query(self, cols: IntArray, Q: float) -> tuple[FloatArray, IntArray]:
        n = self.n[cols]
        base = cols * self.cap
        top = np.maximum(n - 1, 0)
        k = np.minimum(self.ptr[cols], top)
        move = np.ones(1, dtype=bool)
        for _ in range(3):
            vk = self._val(base + k, Q)
            vr = np.where(k < top, self._val(base + np.minimum(k + 1, top), Q), np.inf)
            vl = np.where(k > 0, self._val(base + np.maximum(k - 1, 0), Q), np.inf)
            move = (vr < vk) | (vl < vk)
            if not move.any():
                break
            k = k + np.where(vr < vk, 1, np.where(vl < vk, -1, 0))
        if move.any():
            sub = np.flatnonzero(move)
            lo, hi, b = np.zeros(sub.size, dtype=np.int64), top[sub], base[sub]
            while True:
                act = lo < hi
                if not act.any():
                    break
                mid = (lo + hi) // 2
                right = act & (self._val(b + np.minimum(mid + 1, hi), Q) < self._val(b + mid, Q))
                lo = np.where(right, mid + 1, lo)
                hi = np.where(act & ~right, mid, hi)
            k[sub] = lo
        self.ptr[cols] = k
        at = base + k
        best = np.where(n > 0, self._val(at, Q), np.inf)
        return best, cols - self.row[at].astype(np.int64)


# ------------------------------------------------------------------------------------------------
STEP_HOURS = 1 / 60  # CheckpointIntervals' default grid: a minute
PLAN_HORIZON_HOURS = 4.0  # ... and its default plan: the first 4 h of work on a new VM


class CheckpointIntervals:
    """Next checkpoint interval after w hours of work since the VM started: the DP of Eq. 9-13."""

    def __init__(self, model: PreemptionModel, delta_hours: float, *,
                 horizon_hours: float = PLAN_HORIZON_HOURS, start_age_hours: float = 0.0,
                 step_hours: float = STEP_HOURS, restart_hours: float = 0.0) -> None:
        # one solve for horizon_hours of work from start_age_hours; the cost in whole steps (>= 1)
        d = max(1, round(delta_hours / step_hours))
        planner = OptimalCheckpointPlanner(model, step_hours=step_hours, delta_hours=d * step_hours,
                                           restart_hours=restart_hours)
        self.policy = planner.solve(horizon_hours, start_age_hours)
        self.schedule = self.policy.schedule
        iv = self.schedule.intervals_hours  # the last one runs to the horizon, not to a checkpoint
        self.last = float(iv[-2] if len(iv) > 1 else iv[-1])

    def interval_hours(self, done_since_start_hours: float) -> float:
        """Hours of work to the next checkpoint (>= 1e-3); past the last one, the last interval."""
        w = max(done_since_start_hours, 0.0)
        nxt = self.schedule.next_checkpoint_after(w)
        return max(float(nxt) - w, 1e-3) if nxt is not None else self.last

    def checkpoints(self, remaining_hours: float | None = None) -> tuple[float, ...]:
        """Checkpoint positions (work hours from the start) with ``remaining_hours`` of work left
        at the start age, e.g. after a restore on a new VM (whole steps, at most the horizon)."""
        if remaining_hours is None:
            return self.schedule.checkpoints
        p = self.policy
        j = max(1, round(remaining_hours / p.grid.step))
        if j > p.work_steps:
            raise InvalidInput("remaining_hours", f"{remaining_hours} h is past the plan's "
                               f"{p.work_steps * p.grid.step} h", fix="plan a longer horizon")
        return p.checkpoints_from(j, p.start_age_steps)


# ------------------------------------------------------------------------------------------------
class YoungDalyPlanner:
    """Periodic checkpoints every sqrt(2 delta MTTF), MTTF = 1 / hazard(0) (Young-Daly, Sec. 4.3)."""

    def __init__(self, model: PreemptionModel, *, step_hours: float = 1 / 60,
                 delta_hours: float = 1 / 60, restart_hours: float = 0.0) -> None:
        self.model = model
        self.step = float(step_hours)
        self.delta = float(delta_hours)
        self.restart = float(restart_hours)
        _steps("delta_hours", delta_hours, self.step)
        h0 = float(model.hazard(np.array(0.0)))
        self.mttf = 1.0 / h0 if h0 > 0 else math.inf
        self.interval_hours = young_daly_interval(self.delta, self.mttf)

    def plan(self, work_hours: float, start_age_hours: float = 0.0) -> CheckpointSchedule:
        J = _steps("work_hours", work_hours, self.step, positive=True)
        if math.isfinite(self.interval_hours):
            k = max(1, round(self.interval_hours / self.step))
            cps = tuple(i * self.step for i in range(k, J, k))
        else:  # hazard(0) = 0: no failure expected, no checkpoint
            cps = ()
        work = J * self.step
        em = expected_makespan(self.model, cps, work, self.delta, start_age_hours, self.step,
                               restart_hours=self.restart)
        return CheckpointSchedule(work, start_age_hours, cps, _intervals(cps, work), em)


def young_daly_interval(delta_hours: float, mttf_hours: float) -> float:
    """Young's first-order checkpoint interval sqrt(2 delta MTTF) (seed 001, Sec. 4.3)."""
    return math.sqrt(2 * delta_hours * mttf_hours)


FALLBACK_MTTF_HOURS = 1.0  # plan_positions without a preemption model
MAX_PLAN_STEPS = 1000  # plan_positions' grid: at most this many steps over the remaining work
MAX_GRID_STEPS = 5000  # ... and over the preemption model's lifetime


def plan_positions(model: PreemptionModel | None, remaining_hours: float, age_hours: float,
                   cost_hours: float, *, max_plan_steps: int = MAX_PLAN_STEPS,
                   max_grid_steps: int = MAX_GRID_STEPS) -> tuple[float, ...]:
    """Checkpoint positions (work hours from now) of the DP schedule (Eq. 9-13) for a replica.

    The grid step is fine enough for the checkpoint cost, with at most ``max_plan_steps`` steps
    over the remaining work and ``max_grid_steps`` over the model's lifetime; the cost is rounded
    up to whole steps (>= 1), so a cost far below the grid is over-estimated (fewer checkpoints).
    Without a model, Young's interval with MTTF = 1 h. An age past the model's limit raises
    :class:`InvalidInput` (the caller decides, e.g. plan from age 0).
    """
    if model is None:
        interval = young_daly_interval(max(cost_hours, 1e-9), FALLBACK_MTTF_HOURS)
        n = int(remaining_hours // interval)
        return tuple(interval * (i + 1) for i in range(n) if interval * (i + 1) < remaining_hours)
    step = max(min(remaining_hours / 240, cost_hours), remaining_hours / max_plan_steps,
               model.max_lifetime / max_grid_steps)
    steps = max(1, math.ceil(remaining_hours / step - 1e-9))
    d = max(1, math.ceil(cost_hours / step - 1e-9))
    plan = CheckpointIntervals(model, d * step, horizon_hours=steps * step,
                               start_age_hours=round(age_hours / step) * step, step_hours=step)
    return plan.checkpoints()


# ------------------------------------------------------------------------------------------------
def _positions(checkpoints: Sequence[float], J: int, step: float) -> list[int]:
    pos = [_steps("checkpoints", float(c), step) for c in checkpoints]
    if any(p <= 0 or p >= J for p in pos) or any(b <= a for a, b in zip(pos, pos[1:], strict=False)):
        raise InvalidInput("checkpoints", "must be strictly increasing work hours inside (0, work)",
                           fix="pass cumulative work positions, e.g. (0.5, 1.25, 2.0)")
    return pos


def expected_makespan(model: PreemptionModel, checkpoints: Sequence[float], work_hours: float,
                      delta_hours: float, start_age_hours: float = 0.0, step_hours: float = 1 / 60,
                      *, restart_hours: float = 0.0) -> float:
    """Exact expected makespan of a fixed schedule; after a preemption the job resumes from its
    last checkpoint on a new VM and keeps the schedule's remaining checkpoints.

    Backward over segments k with V_k(a) linear in the unknown restart value R_k = V_k(0),
    which is solved in closed form per segment (no iteration). O(K * T).
    """
    g = _Grid.of(model, step_hours)
    J = _steps("work_hours", work_hours, step_hours, positive=True)
    d = _steps("delta_hours", delta_hours, step_hours)
    a0 = _steps("start_age_hours", start_age_hours, step_hours)
    if a0 >= g.U:
        raise InvalidInput("start_age_hours", f"{start_age_hours} h is past the model's limit",
                           fix="start on a new VM")
    pos = [0, *_positions(checkpoints, J, step_hours), J]
    a = np.arange(g.U)
    w_next = np.zeros(g.U + 1)  # W_{k+1}(u) for u = 0..U, zero at U (dead) and after the end
    v0 = math.inf
    for k in range(len(pos) - 2, -1, -1):
        dur = pos[k + 1] - pos[k] + (d if k + 1 < len(pos) - 1 else 0)
        u = np.minimum(a + dur, g.U)
        alpha = g.line(w_next[u], u)
        su0 = g.S[u[0]]
        if su0 <= 0:
            return math.inf
        Q = (alpha[0] + restart_hours) / su0
        w = alpha - g.S[u] * Q + g.S[a] * Q + g.tail(a)
        w_next = np.concatenate([w, [0.0]])
        v0 = float(w[a0] / g.S[a0])
    return v0


def simulate_makespan(model: PreemptionModel, checkpoints: Sequence[float], work_hours: float,
                      delta_hours: float, *, runs: int, rng: np.random.Generator,
                      start_age_hours: float = 0.0, restart_hours: float = 0.0,
                      replan: Callable[[float], Sequence[float]] | None = None) -> FloatArray:
    """Monte Carlo makespans: preemptions sampled from the model, restarts on new VMs.

    After a preemption the job resumes from its last checkpoint on a new VM; it keeps the
    remaining ``checkpoints`` or, with ``replan``, uses ``replan(remaining_work)`` (checkpoints
    counted from the restart point).
    """
    if runs <= 0:
        raise InvalidInput("runs", f"must be > 0, got {runs}", fix="e.g. runs=10_000")
    if work_hours <= 0 or delta_hours < 0 or start_age_hours < 0:
        raise InvalidInput("work_hours", "work must be > 0 and delta, start age >= 0 hours",
                           fix="pass non-negative durations")
    s0 = float(model.sf(np.array(start_age_hours)))
    if s0 <= 0:
        raise InvalidInput("start_age_hours", f"{start_age_hours} h is past the model's limit",
                           fix="start on a new VM")
    pool = model.ppf(rng.random(runs * 8))
    first = model.ppf(float(model.cdf(np.array(start_age_hours))) + s0 * rng.random(runs))
    used = 0
    out = np.empty(runs)
    base = [float(c) for c in checkpoints] + [float(work_hours)]
    for n in range(runs):
        clock, age, death, done = 0.0, float(start_age_hours), float(first[n]), 0.0
        targets = base
        t = 0
        while True:
            target = targets[t]
            dur = target - done + (delta_hours if target < work_hours - 1e-12 else 0.0)
            if age + dur <= death:
                clock += dur
                age += dur
                done = target
                if done >= work_hours - 1e-12:
                    break
                t += 1
                continue
            clock += death - age + restart_hours
            if used >= pool.size:
                pool, used = model.ppf(rng.random(runs * 8)), 0
            age, death = 0.0, float(pool[used])
            used += 1
            if replan is not None:
                targets = [done + c for c in replan(work_hours - done)] + [float(work_hours)]
                t = 0
            else:
                t = next(i for i, c in enumerate(targets) if c > done + 1e-12)
        out[n] = clock
    return out
