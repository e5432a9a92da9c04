"""Expected cost of preemptions and the VM-reuse job placement policy (seed 001, Sec. 4.1-4.2).

A job of length T that is preempted loses the work done since it started; it is not restarted
here (single-preemption analysis of Eq. 6-7). For a VM that is already ``s`` hours old every
probability is conditioned on its survival to ``s`` (the seed's Eq. 8 omits it, see
shared/seeds/README.md), and the work lost at a preemption at VM age t is t - s, the time the
job ran (Eq. 8 writes t, which would count the VM's age before the job as lost work).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize

from controlplane.core.errors import InvalidInput
from policies.placement import BoolArray, ClusterSnapshot, TaskRequest, WorkState
from policies.preemption import PreemptionModel

log = logging.getLogger(__name__)

FloatArray = NDArray[np.float64]


class ReuseDecision(StrEnum):
    REUSE = "reuse"
    NEW_VM = "new_vm"


def _hours(name: str, value: ArrayLike) -> FloatArray:
    v = np.asarray(value, dtype=np.float64)
    if not np.isfinite(v).all() or (v < 0).any():
        raise InvalidInput(name, f"must be finite and >= 0 hours, got {value!r}",
                           fix="pass a non-negative number of hours")
    return v


def expected_waste(model: PreemptionModel, job_hours: ArrayLike) -> FloatArray:
    """E[W1(T)] = (1/F(T)) int_0^T t f(t) dt: lost work given one preemption (Eq. 5)."""
    T = _hours("job_hours", job_hours)
    F = model.cdf(T)
    G = model.partial_expectation(T)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(F > 0, G / np.where(F > 0, F, 1.0), 0.0)
    return np.asarray(w, dtype=np.float64)


def expected_lost_work(model: PreemptionModel, job_hours: ArrayLike,
                       vm_age_hours: ArrayLike = 0.0) -> FloatArray:
    """E[lost work; preempted] = int_s^{s+T} (t - s) dF(t) / S(s) for a VM alive at age s."""
    T = _hours("job_hours", job_hours)
    s = _hours("vm_age_hours", vm_age_hours)
    S = model.sf(s)
    num = (model.partial_expectation(s + T) - model.partial_expectation(s)
           - s * (model.cdf(s + T) - model.cdf(s)))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(S > 0, num / np.where(S > 0, S, 1.0), np.inf)
    return np.asarray(np.maximum(out, 0.0), dtype=np.float64)


def expected_running_time(model: PreemptionModel, job_hours: ArrayLike,
                          vm_age_hours: ArrayLike = 0.0) -> FloatArray:
    """E[T_s] = T + int_s^{s+T} (t - s) f(t) dt / S(s) (Eq. 7 at s = 0, Eq. 8 conditioned)."""
    T = _hours("job_hours", job_hours)
    return np.asarray(T + expected_lost_work(model, T, vm_age_hours), dtype=np.float64)


def expected_makespan_with_restarts(model: PreemptionModel, job_hours: ArrayLike,
                                    vm_age_hours: ArrayLike = 0.0) -> FloatArray:
    """Expected completion time when every failed attempt restarts from scratch on a new VM.

    M_0 = ((1 - p_0) T + lost_0) / (1 - p_0) (a fixed point, solved exactly) and
    M_s = (1 - p_s) T + lost_s + p_s M_0, with p_s = P(fail within T | alive at s). This is the
    "higher order terms" version of Eq. 7-8 the paper mentions; it never prefers a VM that is
    sure to die (Eq. 8 alone does: a job on a VM about to hit the limit loses little work).
    """
    T = _hours("job_hours", job_hours)
    s = _hours("vm_age_hours", vm_age_hours)
    p0 = model.conditional_failure(np.zeros_like(T), T)
    ok0 = (1 - p0) * T + expected_lost_work(model, T, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        m0 = np.where(p0 < 1, ok0 / np.where(p0 < 1, 1 - p0, 1.0), np.inf)
    ps = model.conditional_failure(s, T)
    lost = expected_lost_work(model, T, s)
    with np.errstate(invalid="ignore"):
        ms = np.where(ps > 0, (1 - ps) * T + lost + ps * m0, T)
    return np.asarray(ms, dtype=np.float64)


class VmReusePolicy:
    """Run a job on an existing VM of age s iff its expected time is <= a new VM's (Sec. 4.2).

    ``restarts=True`` (default) compares expected completion times with failed attempts retried
    on new VMs (:func:`expected_makespan_with_restarts`); ``restarts=False`` is the paper's
    literal single-preemption rule E[T_s] <= E[T_0] (Eq. 7-8).
    """

    def __init__(self, model: PreemptionModel, *, restarts: bool = True) -> None:
        self.model = model
        self.restarts = restarts

    def _cost(self, T: FloatArray, s: float | FloatArray) -> FloatArray:
        f = expected_makespan_with_restarts if self.restarts else expected_running_time
        return f(self.model, T, s)

    def decide(self, job_hours: float, vm_age_hours: float) -> ReuseDecision:
        T = float(_hours("job_hours", job_hours))
        s = float(_hours("vm_age_hours", vm_age_hours))
        if float(self.model.sf(np.array(s))) <= 0.0:
            return ReuseDecision.NEW_VM
        old = float(self._cost(np.array(T), s))
        new = float(self._cost(np.array(T), 0.0))
        return ReuseDecision.REUSE if old <= new + 1e-12 else ReuseDecision.NEW_VM

    def reuse_mask(self, job_hours: float, vm_ages_hours: ArrayLike) -> NDArray[np.bool_]:
        """:meth:`decide` for many VM ages at once: True where reusing the VM is no worse."""
        T = np.asarray(_hours("job_hours", job_hours), dtype=np.float64)
        s = _hours("vm_age_hours", vm_ages_hours)
        alive = self.model.sf(s) > 0.0
        old = self._cost(T, np.where(alive, s, 0.0))
        new = self._cost(T, np.zeros_like(s))
        return np.asarray(alive & (old <= new + 1e-12), dtype=bool)

    def _gap(self, T: FloatArray, s: float) -> FloatArray:
        with np.errstate(invalid="ignore"):
            gap = self._cost(T, s) - self._cost(T, 0.0)
        return np.asarray(np.nan_to_num(gap, nan=0.0), dtype=np.float64)

    def crossover_job_hours(self, vm_age_hours: float, step_hours: float = 1 / 60) -> float:
        """T*(s): the shortest job for which a new VM beats a VM of age s (inf if none)."""
        s = float(_hours("vm_age_hours", vm_age_hours))
        if float(self.model.sf(np.array(s))) <= 0.0:
            return 0.0
        L = self.model.max_lifetime
        T = np.arange(1, int(math.ceil(L / step_hours)) + 1, dtype=np.float64) * float(step_hours)
        gap = self._gap(T, s)
        above = np.flatnonzero(gap > 1e-12)
        if above.size == 0:
            return math.inf
        k = int(above[0])
        if k == 0:
            return float(T[0]) if self._gap(np.array([1e-9]), s)[0] > 0 else float(
                optimize.brentq(lambda x: float(self._gap(np.array([x]), s)[0]), 1e-9, T[0]))
        lo, hi = float(T[k - 1]), float(T[k])
        return float(optimize.brentq(lambda x: float(self._gap(np.array([x]), s)[0]), lo, hi,
                                     xtol=1e-9))


ReuseMode = Literal["by_age", "always", "never"]
REUSE_MODES: tuple[ReuseMode, ...] = ("by_age", "always", "never")


@dataclass(frozen=True)
class ReuseByAge:
    """Placement plugin (Filter + Score): reuse an idle VM only when seed 001's policy says so.

    Filter: an idle VM of age s is feasible for a job of T expected hours iff
    :meth:`VmReusePolicy.reuse_mask` says reusing it is no worse than a new VM (Sec. 4.2, with
    restarts); a VM whose model key has no model is memoryless (its age does not matter).
    Score: minus the expected completion time in hours, E[M_s(T)] on an idle VM and
    E[M_0(T)] + ``provision_hours`` on a slot that needs a new VM, so the reusable VM that
    finishes soonest wins. ``mode='always'`` reuses any idle VM, ``'never'`` none.
    """

    models: Mapping[str, PreemptionModel] = field(default_factory=dict)
    provision_hours: float = 150.0 / 3600.0
    mode: ReuseMode = "by_age"
    name: str = "reuse_by_age"

    def __post_init__(self) -> None:
        if self.mode not in REUSE_MODES:
            raise InvalidInput("reuse", f"unknown reuse mode {self.mode!r}",
                               fix=f"use one of {', '.join(REUSE_MODES)}")

    def policy(self, key: str) -> VmReusePolicy | None:
        m = self.models.get(key)
        return None if m is None else VmReusePolicy(m)

    def filter(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> BoolArray | None:
        ages = snap.ages
        if ages is None or self.mode == "always":
            return None
        live = np.isfinite(ages.hours)
        if self.mode == "never":
            return ~live
        if task.expected_hours is None or not live.any():
            return None
        ok = np.ones(snap.n_nodes, dtype=bool)
        for key in np.unique(ages.model[live]):
            pol = self.policy(str(key))
            if pol is None:
                continue
            idx = live & (ages.model == key)
            ok[idx] = pol.reuse_mask(task.expected_hours, ages.hours[idx])
        return ok

    def score(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> FloatArray:
        ages = snap.ages
        if ages is None or self.mode != "by_age":
            return np.zeros(snap.n_nodes)  # 'always': the first idle node, as without the plugin
        T = float(task.expected_hours or 0.0)
        live = np.isfinite(ages.hours)
        fresh = self.policy(ages.fresh)
        new = T if fresh is None else float(fresh._cost(np.array(T), 0.0))
        out = np.full(snap.n_nodes, -(new + self.provision_hours))
        for key in np.unique(ages.model[live]):
            pol = self.policy(str(key))
            idx = live & (ages.model == key)
            out[idx] = -T if pol is None else -pol._cost(np.array(T), ages.hours[idx])
        return np.asarray(np.nan_to_num(out, nan=-np.inf, neginf=-1e18), dtype=np.float64)

    def expected_hours(self, key: str, job_hours: float, age_hours: float) -> float:
        """E[M_s(T)]: the expected completion time of a T-hour job on a VM of age s."""
        pol = self.policy(key)
        return job_hours if pol is None else float(pol._cost(np.array(job_hours), age_hours))

    def spare_saving_hours(self, key: str, typical_hours: float, age_hours: float) -> float:
        """Hours a typical job saves on this idle VM against a fresh one: E[M_0(T)] +
        provisioning - E[M_s(T)] (> 0 while the VM is past the fresh VM's infant mortality
        and short of its end of life; 0 for a memoryless or never-preempted VM)."""
        pol = self.policy(key)
        if pol is None or self.mode == "never":
            return 0.0
        if float(pol.model.sf(np.array(age_hours))) <= 0.0:
            return 0.0
        return max(0.0, self.fresh_vm_hours(key, typical_hours)
                   - self.expected_hours(key, typical_hours, age_hours))

    def fresh_vm_hours(self, key: str, job_hours: float) -> float:
        """E[M_0(T)] + provisioning: a T-hour job's hours on a VM launched for it."""
        return self.expected_hours(key, job_hours, 0.0) + self.provision_hours

    def spare_saving_dollars(self, key: str, typical_hours: float, age_hours: float,
                             spare_price: float, fresh_price: float) -> float:
        """Dollars a typical job saves on this idle VM against the fresh VM a launch would get:
        p_f (E[M_0(T)] + provisioning) - p_s E[M_s(T)] (negative when the spare's zone costs
        more than its stability saves; a VM past its model's end saves nothing, -inf)."""
        for name, p in (("spare_price", spare_price), ("fresh_price", fresh_price)):
            if not (math.isfinite(p) and p >= 0):
                raise InvalidInput(name, f"must be a finite price >= 0 per hour, got {p!r}",
                                   fix="pass the offer's spot price per hour")
        pol = self.policy(key)
        if pol is not None and float(pol.model.sf(np.array(age_hours))) <= 0.0:
            return -math.inf
        return (fresh_price * self.fresh_vm_hours(key, typical_hours)
                - spare_price * self.expected_hours(key, typical_hours, age_hours))
