"""Deadline policies for one job on spot + on-demand (Can't Be Late, NSDI'24, seed 003).

A job needs ``C`` hours of compute before its deadline ``R`` (hours from submission). At every
decision step the policy sees an :class:`Observation` and answers an :class:`Action`: stay idle,
run on spot, or run on on-demand. Each switch onto a new instance costs a changeover delay ``d``
(no progress, billed at the new instance's price). Everything is in hours. Policies are pure and
deterministic; the simulator (:mod:`policies.deadline_sim`) and the live control plane drive the
same objects.

Rules (Sec. 3.3): Thrifty (idle once done), Safety Net (idle and ``R(t) < C(t) + 2d`` -> on-demand
until the end), Exploitation (stay on a spot instance until it is preempted).

Gangs of N instances (Sec. 5.5): by the Polarization rule a job holds N instances of one kind or
none, so the same policies drive a gang when ``spot_available`` means "all N spot instances can be
had" (``SpotTrace.spot_up(N)``); prices in the task are per instance and the simulator bills N.

Decisions are taken at ticks of ``tick_hours`` (the trace gap; 0 = continuous time). With a tick
longer than ``d`` an idle tick can eat more slack than the paper's Safety Net keeps, so the idle
margin is ``max(2d, d + tick)``: after one more idle tick on-demand still finishes in time
(equal to the paper's ``2d`` whenever ``tick <= d``, as in all of its traces).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from controlplane.core.errors import InvalidInput

EPS = 1e-9


class Kind(StrEnum):
    """Instance state of a job (Table 2): idle, on spot, on on-demand."""

    IDLE = "idle"
    SPOT = "spot"
    ON_DEMAND = "on_demand"


@dataclass(frozen=True, slots=True)
class Action:
    """What the job should run on next; ``zone`` only matters for multi-zone policies.
    ``probes``: zones whose spot availability the policy wants bought before its next step."""

    kind: Kind
    zone: str | None = None
    probes: tuple[str, ...] = ()


IDLE = Action(Kind.IDLE)
SPOT = Action(Kind.SPOT)
ON_DEMAND = Action(Kind.ON_DEMAND)


@dataclass(frozen=True, slots=True)
class ZoneView:
    """One zone as a multi-zone policy sees it at a decision step."""

    zone: str
    spot_available: bool
    spot_price: float
    on_demand_price: float
    cloud: str = ""  # where the zone is: what a move there costs in egress ('' : unknown)
    region: str = ""


@dataclass(frozen=True, slots=True)
class Observation:
    """What a policy sees at a decision step (hours since submission, progress made so far).

    ``state`` is the instance the job holds *now*: a preempted spot instance shows as IDLE.
    ``spot_available`` is for the current (or only) zone; ``zones`` lists every zone when the
    policy may move between them; ``checkpoint_bytes`` is the checkpoint a move would carry.
    """

    elapsed_hours: float
    progress_hours: float
    state: Kind
    zone: str | None
    spot_available: bool
    zones: tuple[ZoneView, ...] = ()
    checkpoint_bytes: int | None = None  # what a move between regions carries (None: unknown)


@dataclass(frozen=True)
class DeadlineTask:
    """C (compute hours), R (deadline hours), d (changeover hours), prices per instance-hour, N nodes."""

    compute_hours: float
    deadline_hours: float
    overhead_hours: float
    on_demand_price: float = 3.0
    spot_price: float = 1.0
    nodes: int = 1

    def __post_init__(self) -> None:
        c, r, d = self.compute_hours, self.deadline_hours, self.overhead_hours
        for name, v in (("compute_hours", c), ("deadline_hours", r), ("overhead_hours", d)):
            if not math.isfinite(v):
                raise InvalidInput(name, f"must be a finite number of hours, got {v}")
        if c <= 0:
            raise InvalidInput("compute_hours", f"must be > 0, got {c}", fix="give the job's compute time C in hours")
        if d < 0:
            raise InvalidInput("overhead_hours", f"changeover delay d must be >= 0, got {d}", fix="use d >= 0 hours")
        if r < c + d:
            raise InvalidInput(
                "deadline_hours",
                f"deadline R={r} h leaves no time for C={c} h of compute plus one changeover d={d} h",
                fix=f"choose deadline_hours >= {c + d}",
            )
        if not (self.spot_price > 0 and self.on_demand_price > 0):
            raise InvalidInput("spot_price", "prices must be > 0", fix="pass positive per-hour prices")
        if self.nodes < 1:
            raise InvalidInput("nodes", f"must be >= 1, got {self.nodes}", fix="a gang of N >= 1 instances")

    @property
    def k(self) -> float:
        """On-demand price relative to spot."""
        return self.on_demand_price / self.spot_price

    @property
    def job_fraction(self) -> float:
        return self.compute_hours / self.deadline_hours

    def expected_progress(self, t: float) -> float:
        """ep(t) = t C(0) / R(0), Eq. 5."""
        return t * self.compute_hours / self.deadline_hours


@runtime_checkable
class DeadlinePolicy(Protocol):
    """``decide(obs) -> Action``; small, serialisable state."""

    task: DeadlineTask

    def decide(self, obs: Observation) -> Action: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


# ---------------------------------------------------------------------------------------------
# Shared rule helpers
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PolicyEntry:
    """One registered deadline policy: its maker and what it declares."""

    name: str
    maker: Callable[..., DeadlinePolicy]
    live: bool = False  # a live job may name it: made from the task (and tick_hours) alone
    ticked: bool = False  # its maker takes the controller's tick_hours
    probing: bool = False  # it asks for zone probes (retry_hours, probe_idle in a live host)


_REGISTRY: dict[str, PolicyEntry] = {}
_DISCOVERED: list[bool] = []

M = TypeVar("M", bound=Callable[..., DeadlinePolicy])


def deadline_policy(name: str, *, live: bool = False, ticked: bool = False,
                    probing: bool = False) -> Callable[[M], M]:
    """Register the decorated policy class (or maker function) as ``name`` for :func:`make_policy`."""

    def register(maker: M) -> M:
        _REGISTRY[name] = PolicyEntry(name, maker, live=live, ticked=ticked, probing=probing)
        return maker

    return register


def registered_policies() -> dict[str, PolicyEntry]:
    """Every deadline policy, by name: each module of ``policies`` that carries the decorator
    registers its own on import (the others, scipy's users among them, are not imported)."""
    if not _DISCOVERED:
        package = importlib.import_module(__name__.rpartition(".")[0])
        for module in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            if _declares_policies(module):
                importlib.import_module(module.name)
        _DISCOVERED.append(True)
    return dict(_REGISTRY)


def _declares_policies(module: pkgutil.ModuleInfo) -> bool:
    spec = importlib.util.find_spec(module.name)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return False
    with open(spec.origin, encoding="utf-8") as source:
        return f"@{deadline_policy.__name__}(" in source.read()


def policy_names() -> list[str]:
    """Every registered policy's name, sorted."""
    return sorted(registered_policies())


class _RulesBase:
    """Common bookkeeping: slack, Safety-Net margins, Thrifty / relaxed-C handling."""

    name = "base"

    def __init__(self, task: DeadlineTask, *, tick_hours: float = 0.0) -> None:
        if tick_hours < 0 or not math.isfinite(tick_hours):
            raise InvalidInput("tick_hours", f"must be >= 0, got {tick_hours}")
        self.task = task
        self.tick_hours = float(tick_hours)
        d = task.overhead_hours
        self._c = task.compute_hours
        self._r = task.deadline_hours
        self._d = d
        self._rate = task.compute_hours / task.deadline_hours
        self._spot_margin = 2.0 * d  # jump onto spot only with slack >= 2d (Safety Net, Sec. 3.3)
        self._idle_margin = max(2.0 * d, d + self.tick_hours)  # see module docstring

    def _slack(self, obs: Observation) -> float:
        """R(t) - C(t): spare time beyond the remaining compute."""
        return (self._r - obs.elapsed_hours) - (self._c - obs.progress_hours)

    def _overrun(self, obs: Observation) -> Action:
        """Sec. 5.6: estimate C reached but not done: keep a live spot, else on-demand."""
        if obs.state is Kind.SPOT and obs.spot_available:
            return SPOT
        return ON_DEMAND

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("name", self.name) != self.name:
            raise InvalidInput("state", f"state of {state.get('name')!r} given to {self.name!r}")


@deadline_policy("on_demand", live=True)
class OnDemandOnly(_RulesBase):
    """Baseline: on-demand from start to finish."""

    name = "on_demand"

    def decide(self, obs: Observation) -> Action:
        return ON_DEMAND


@deadline_policy("greedy", live=True, ticked=True)
class Greedy(_RulesBase):
    """Sec. 3.4: spot whenever available, Safety Net to on-demand and stay there to the end."""

    name = "greedy"

    def decide(self, obs: Observation) -> Action:
        if obs.progress_hours >= self._c - EPS:
            return self._overrun(obs)
        state = obs.state
        if state is Kind.ON_DEMAND:
            return ON_DEMAND  # Safety Net: stay until the end
        if state is Kind.SPOT and obs.spot_available:
            return SPOT  # Exploitation
        slack = self._slack(obs)
        if slack < self._idle_margin:
            return ON_DEMAND  # Safety Net
        if obs.spot_available:
            return SPOT
        return IDLE


@deadline_policy("uniform_progress", live=True, ticked=True)
class UniformProgress(_RulesBase):
    """Sec. 5.2: Uniform Progress with Taking Risks, hysteresis cp(t) >= ep(t + 2d), Safety Net.

    1. Uniform progress (Eq. 5): idle and cp(t) < ep(t) -> on-demand, stay on it to catch up.
    2. Taking risks: switch to spot whenever it is available; stay until preempted.
    3. Hysteresis: on on-demand, stay until cp(t) >= ep(t + 2d).
    Safety Net on top. Once the hysteresis is met on on-demand with no spot in sight the job
    keeps the on-demand instance (releasing it only to relaunch it soon after pays d twice).
    """

    name = "uniform_progress"

    def decide(self, obs: Observation) -> Action:
        if obs.progress_hours >= self._c - EPS:
            return self._overrun(obs)
        state = obs.state
        avail = obs.spot_available
        if state is Kind.SPOT and avail:
            return SPOT  # Exploitation
        slack = self._slack(obs)
        cp = obs.progress_hours
        t = obs.elapsed_hours
        if state is Kind.ON_DEMAND:
            if slack < self._spot_margin:
                return ON_DEMAND  # Safety Net: too late for another changeover
            if cp < (t + 2.0 * self._d) * self._rate:
                return ON_DEMAND  # Hysteresis
            return SPOT if avail else ON_DEMAND
        # idle (possibly just preempted)
        if slack < self._idle_margin:
            return ON_DEMAND  # Safety Net
        if avail:
            return SPOT  # Taking risks
        if cp < t * self._rate:
            return ON_DEMAND  # Uniform progress
        return IDLE


@deadline_policy("uniform_progress_loose", live=True, ticked=True)
class UniformProgressLoose(UniformProgress):
    """App. A.8: with a loose deadline use spot greedily until C(t)/R(t) reaches ``switch`` (0.7),
    then Uniform Progress on the line from that point (t0, cp(t0)) to (R, C)."""

    name = "uniform_progress_loose"

    def __init__(self, task: DeadlineTask, *, tick_hours: float = 0.0, switch: float = 0.7) -> None:
        super().__init__(task, tick_hours=tick_hours)
        if not 0 < switch <= 1:
            raise InvalidInput("switch", f"must be in (0, 1], got {switch}")
        self.switch = float(switch)
        self._t0: float | None = None if task.job_fraction < switch else 0.0
        self._cp0 = 0.0

    def decide(self, obs: Observation) -> Action:
        t, cp = obs.elapsed_hours, obs.progress_hours
        if self._t0 is None and (self._c - cp) >= self.switch * (self._r - t):
            self._t0, self._cp0 = t, cp
        if self._t0 is None:  # greedy phase, Safety Net included
            return Greedy.decide(self, obs)  # type: ignore[arg-type]
        # ep(t) re-anchored: cp0 + (t - t0) (C - cp0) / (R - t0); same rules as UniformProgress
        span = self._r - self._t0
        rate = (self._c - self._cp0) / span if span > EPS else math.inf
        shifted = Observation(t - self._t0, cp - self._cp0, obs.state, obs.zone, obs.spot_available)
        saved = (self._c, self._r, self._rate)
        self._c, self._r, self._rate = self._c - self._cp0, span, rate
        try:
            return super().decide(shifted)
        finally:
            self._c, self._r, self._rate = saved

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "t0": self._t0, "cp0": self._cp0}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._t0 = None if state.get("t0") is None else float(state["t0"])
        self._cp0 = float(state.get("cp0", 0.0))


@deadline_policy("time_sliced", live=True, ticked=True)
class TimeSliced(_RulesBase):
    """Sec. 5.1: greedy inside each of n slices of R/n with cumulative targets i C/n.

    Progress beyond a slice's target carries over (reduces the next slice's requirement), spot is
    kept whenever available even after the slice target is met, and on-demand is left only at a
    slice boundary.
    """

    name = "time_sliced"

    def __init__(self, task: DeadlineTask, n: int = 8, *, tick_hours: float = 0.0) -> None:
        super().__init__(task, tick_hours=tick_hours)
        if n < 1:
            raise InvalidInput("n", f"number of slices must be >= 1, got {n}")
        self.n = int(n)
        self._slice = self._r / self.n
        self._od_until = -1.0  # slice end the current on-demand run is committed to

    def _slice_index(self, t: float) -> int:
        return min(self.n, int(math.floor((t + EPS) / self._slice)) + 1)

    def decide(self, obs: Observation) -> Action:
        if obs.progress_hours >= self._c - EPS:
            return self._overrun(obs)
        state = obs.state
        t = obs.elapsed_hours
        avail = obs.spot_available
        if state is Kind.SPOT and avail:
            return SPOT  # Exploitation
        i = self._slice_index(t)
        if state is Kind.ON_DEMAND and (t < self._od_until - EPS or self._slack(obs) < self._spot_margin):
            return ON_DEMAND  # greedy stays on on-demand to the end of its slice
        t_i = i * self._slice
        target = min(self._c, i * self._c / self.n)
        slack_i = (t_i - t) - (target - obs.progress_hours)
        need = self._spot_margin if state is Kind.ON_DEMAND else self._idle_margin
        if slack_i < need or self._slack(obs) < self._idle_margin:
            self._od_until = t_i
            return ON_DEMAND
        if avail:
            return SPOT
        return IDLE

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "n": self.n, "od_until": self._od_until}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._od_until = float(state.get("od_until", -1.0))


@deadline_policy("up_oracle")
class UniformProgressOracle(_RulesBase):
    """Sec. 5.4: Uniform Progress told the lifetime o(t) of the spot instance it would get now.

    The hysteresis is replaced by two thresholds: from idle take spot only if o(t) > k d/(k-1);
    from on-demand only if o(t) > 2 k d/(k-1). ``lifetime`` maps the observation to o(t) in hours
    (the simulator builds it from the trace: the run of available ticks starting now).
    """

    name = "up_oracle"

    def __init__(
        self,
        task: DeadlineTask,
        lifetime: Callable[[Observation], float],
        *,
        tick_hours: float = 0.0,
    ) -> None:
        super().__init__(task, tick_hours=tick_hours)
        self.lifetime = lifetime
        k = task.k
        d = task.overhead_hours
        self._from_idle = math.inf if k <= 1 else k * d / (k - 1)
        self._from_od = math.inf if k <= 1 else 2 * k * d / (k - 1)

    def decide(self, obs: Observation) -> Action:
        if obs.progress_hours >= self._c - EPS:
            return self._overrun(obs)
        state = obs.state
        avail = obs.spot_available
        if state is Kind.SPOT and avail:
            return SPOT
        slack = self._slack(obs)
        cp = obs.progress_hours
        t = obs.elapsed_hours
        life = self.lifetime(obs) if avail else 0.0
        if state is Kind.ON_DEMAND:
            if slack >= self._spot_margin and avail and life > self._from_od:
                return SPOT
            return ON_DEMAND
        if slack < self._idle_margin:
            return ON_DEMAND
        if avail and life > self._from_idle:
            return SPOT
        if cp < t * self._rate:
            return ON_DEMAND
        return IDLE


class PlanPolicy(_RulesBase):
    """Follows a precomputed per-tick plan (Omniscient replay, Partial Lookahead)."""

    name = "plan"

    def __init__(self, task: DeadlineTask, plan: Sequence[Kind] | npt.NDArray[np.int8], *, tick_hours: float) -> None:
        super().__init__(task, tick_hours=tick_hours)
        if tick_hours <= 0:
            raise InvalidInput("tick_hours", "a plan needs the tick length (> 0)")
        self.plan = np.asarray([KIND_CODE[Kind(p)] if not isinstance(p, (int, np.integer)) else int(p) for p in plan], dtype=np.int8)

    def decide(self, obs: Observation) -> Action:
        if obs.progress_hours >= self._c - EPS:
            return self._overrun(obs)
        i = int(round(obs.elapsed_hours / self.tick_hours))
        code = int(self.plan[i]) if i < len(self.plan) else KIND_CODE[Kind.ON_DEMAND]
        if code == KIND_CODE[Kind.SPOT] and not obs.spot_available:
            return ON_DEMAND
        return ACTIONS[code]

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "plan": self.plan.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.plan = np.asarray(state["plan"], dtype=np.int8)


# Integer codes used by the simulator and the planners.
KIND_CODE: dict[Kind, int] = {Kind.IDLE: 0, Kind.SPOT: 1, Kind.ON_DEMAND: 2}
CODE_KIND: tuple[Kind, Kind, Kind] = (Kind.IDLE, Kind.SPOT, Kind.ON_DEMAND)
ACTIONS: tuple[Action, Action, Action] = (IDLE, SPOT, ON_DEMAND)


def make_policy(name: str, task: DeadlineTask, **kwargs: Any) -> DeadlinePolicy:
    """A policy by name: greedy, uniform_progress, time_sliced (n=), up_oracle (lifetime=),
    partial_lookahead (availability=, n=), omniscient (availability=), on_demand, spotplane."""
    entry = registered_policies().get(name)
    if entry is None:
        raise InvalidInput("policy", f"unknown policy {name!r}", fix=f"one of {', '.join(policy_names())}")
    return entry.maker(task, **kwargs)
