"""GFS spot quota allocator (SQA, paper 002 Sec. 3.3, Eq. 9-11).

One :class:`SpotQuotaAllocator` manages one GPU pool (one GPU model of one cluster: the paper
schedules "according to GPU models", so a heterogeneous cluster holds one allocator per model).
Quantities are GPUs; the forecast is hourly, one row per HP tenant (organisation).

Two slips in the paper's text are corrected here (and tested):

* Eq. 9 prints ``f(p, H) = C - max(C, sum_o max(y_o|p[1:H]))``, which is never positive. The text
  says "when the aggregated demand exceeds C, we set f(p, H) = 0", i.e. ``C - min(C, D)`` =
  ``max(0, C - D)``, which is what :meth:`SpotQuotaAllocator.inventory` computes.
* Eq. 11 compares the eviction rate ``e`` with ``1.5 p`` and ``0.5 p`` where ``p`` is the guarantee
  rate (0.9): ``e > 1.35`` can never happen. Sec. 3.3.1 defines ``p = 0.95`` as "the eviction
  rate does not exceed 0.05", so the rule is read with the tolerated eviction rate
  ``eps = 1 - p``: ``e > 1.5 eps`` -> ``eta * eps / e``; ``e < 0.5 eps`` and ``l > theta`` ->
  ``eta * (1.5 - e / eps)``; otherwise unchanged.

``eta`` is clamped to ``[eta_min, eta_max]`` (not in the paper) so that a long run of empty
evictions with long queues cannot grow it without bound (it is multiplied by up to 1.5 every
update, every 300 s).
"""

from __future__ import annotations

import functools
import logging
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
from scipy.stats import norm

from controlplane.core.errors import InvalidInput
from policies.gfs_options import CHOICES, LIVE_DEFAULT, GfsOptions

log = logging.getLogger(__name__)


class UpperBound(Protocol):
    """What the allocator needs from a forecast: per-tenant, per-hour p-quantiles."""

    @property
    def mean(self) -> np.ndarray: ...

    def upper(self, p: float) -> np.ndarray: ...


AGGREGATIONS = ("summed_gaussian", "sum_of_quantiles")


@dataclass(frozen=True)
class QuotaParams:
    """Table 4 of the paper (alpha, beta, gamma and m are the scheduler's, kept here for one config).

    ``horizon_hours`` is H in Eq. 9-11 (the paper sweeps 1, 2, 4); ``theta_seconds`` is Eq. 11's
    queueing threshold; ``update_seconds`` is how often the simulator calls :meth:`update_eta`.
    ``aggregation`` is how Eq. 9 joins the tenants: ``summed_gaussian`` (the authors' release:
    the p-quantile of N(sum mu, sqrt(sum sigma^2)) per hour) or ``sum_of_quantiles`` (the text
    of Eq. 9: the sum over tenants of each one's p-quantile).
    """

    alpha: float = 0.5
    beta: float = 0.5
    p: float = 0.9
    theta_seconds: float = 3600.0
    gamma: float = 0.8
    m: float = 3.0
    horizon_hours: int = 1
    update_seconds: float = 300.0
    eta0: float = 1.0
    eta_min: float = 0.05
    eta_max: float = 4.0
    aggregation: str = LIVE_DEFAULT.aggregation

    def __post_init__(self) -> None:
        if not 0.5 <= self.p < 1.0:
            raise InvalidInput("p", f"guarantee rate must be in [0.5, 1), got {self.p}",
                               fix="use e.g. 0.9 (Table 4)")
        if self.horizon_hours < 1:
            raise InvalidInput("horizon_hours", f"must be >= 1, got {self.horizon_hours}",
                               fix="use 1, 2 or 4 (Table 4)")
        if self.theta_seconds < 0 or self.update_seconds <= 0:
            raise InvalidInput("theta_seconds/update_seconds", "must be non-negative / positive",
                               fix="use 3600 and 300 (Table 4)")
        if self.aggregation not in AGGREGATIONS:
            raise InvalidInput("aggregation", f"unknown aggregation {self.aggregation!r}",
                               fix=f"use one of {', '.join(AGGREGATIONS)}")
        if not 0 < self.eta_min <= self.eta0 <= self.eta_max:
            raise InvalidInput("eta0", f"need 0 < eta_min <= eta0 <= eta_max, got "
                               f"{self.eta_min}, {self.eta0}, {self.eta_max}",
                               fix="keep eta0 = 1.0 inside the clamp")

    @classmethod
    def for_options(cls, options: GfsOptions, **params: Any) -> QuotaParams:
        """The params that run GFS's named ``options`` (aggregation, eta's upper clamp)."""
        return cls(aggregation=options.aggregation, eta_max=float(options.eta_max), **params)

    @property
    def tolerated_eviction_rate(self) -> float:
        """``1 - p``: the eviction rate the guarantee ``p`` allows (see the Eq. 11 note)."""
        return round(1.0 - self.p, 12)  # 1 - 0.9 is 0.0999...98 in binary


def aggregate_upper_demand(hp_forecast: UpperBound, p: float, horizon_hours: int,
                           aggregation: str = "sum_of_quantiles") -> float:
    """Eq. 9's inner term (GPUs): sum_o max_{1..H} ICDF(p, mu_o, sigma_o) (``sum_of_quantiles``)
    or max_{1..H} ICDF(p, sum_o mu_o, sqrt(sum_o sigma_o^2)) (``summed_gaussian``)."""
    if aggregation == "summed_gaussian":
        return _summed_gaussian(hp_forecast, p, horizon_hours)
    bound = np.asarray(hp_forecast.upper(p), dtype=float)
    if bound.ndim != 2:
        raise InvalidInput("hp_forecast", f"upper(p) must be [tenants, hours], got {bound.shape}",
                           fix="pass a policies.forecast.Forecast")
    _check_horizon(bound.shape[1], horizon_hours)
    if bound.shape[0] == 0:
        return 0.0
    peak = np.max(bound[:, :horizon_hours], axis=1)
    return float(np.sum(np.maximum(peak, 0.0)))


def _check_horizon(hours: int, horizon_hours: int) -> None:
    if hours < horizon_hours:
        raise InvalidInput("hp_forecast", f"covers {hours} h < H = {horizon_hours} h",
                           fix=f"predict with horizon >= {horizon_hours}")


def _summed_gaussian(hp_forecast: UpperBound, p: float, horizon_hours: int) -> float:
    """The p-quantile of the tenants' summed demand, N(sum mu, sqrt(sum sigma^2)), max over H."""
    sigma = getattr(hp_forecast, "sigma", None)
    if sigma is None:  # a bound without a Gaussian (e.g. empirical): fall back to the sum
        return aggregate_upper_demand(hp_forecast, p, horizon_hours)
    mu, sd = np.asarray(hp_forecast.mean, dtype=float), np.asarray(sigma, dtype=float)
    if mu.ndim != 2 or mu.shape != sd.shape:
        raise InvalidInput("hp_forecast", f"mean {mu.shape} and sigma {sd.shape} must be [tenants, hours]",
                           fix="pass a policies.forecast.Forecast")
    _check_horizon(mu.shape[1], horizon_hours)
    if mu.shape[0] == 0:
        return 0.0
    total = mu[:, :horizon_hours].sum(axis=0) + normal_quantile(p) * np.sqrt((sd[:, :horizon_hours] ** 2).sum(axis=0))
    return float(max(np.max(total), 0.0))


@functools.lru_cache(maxsize=64)
def normal_quantile(p: float) -> float:
    """ICDF(p) of the standard normal (cached: the quota asks for the same p every tick)."""
    return float(norm.ppf(p))


def aggregate_mean_demand(hp_forecast: UpperBound, horizon_hours: int) -> float:
    """Eq. 9's inner term with the mean in place of the p-quantile: sum_o max_{1..H} mu_o (GPUs)."""
    mean = np.asarray(hp_forecast.mean, dtype=float)
    if mean.ndim != 2 or mean.shape[0] == 0:
        return 0.0
    return float(np.sum(np.maximum(np.max(mean[:, :horizon_hours], axis=1), 0.0)))


def starvation_guard(quota: float, oldest_gpus: float, oldest_wait_s: float, spot_held: float, idle: float,
                     limit_s: float) -> float:
    """Eq. 10's quota, raised once the oldest waiting spot task has waited ``limit_s``:
    max(Q_H, min(Sa + g, S0 + Sa)), so that it fits under the quota as soon as S0 holds its g GPUs
    (the quota still never exceeds Eq. 10's S0 + Sa)."""
    if oldest_gpus <= 0 or oldest_wait_s < limit_s:
        return quota
    return max(quota, min(spot_held + oldest_gpus, idle + spot_held))


#: ``spot_guard`` choices (policies.gfs_options): never; always; while the eviction rate is calm
#: (after theta, or after 4 theta; ``_1ph``: for one quota step per guarantee horizon H at most).
SPOT_GUARDS = CHOICES["spot_guard"]  # the named guards (policies/gfs_options.py)
#: ``*_bk`` guards: the largest factor an eviction of a guard-admitted task multiplies the wait by.
GUARD_BACKOFF_MAX = 8.0
#: The eviction rate under which the ``oldest_calm3*`` guard acts (the other calm guards: 0.5 (1 - p)).
CALM3_RATE = 0.03


def spot_guard_acts(mode: str, eviction_rate: float | None, tolerated_rate: float) -> bool:
    """Whether :func:`starvation_guard` applies: ``oldest`` always, ``oldest_calm`` while the pool's
    eviction rate is under Eq. 11's growth threshold 0.5 (1 - p) (``oldest_calm3*``: under 3%), ``off`` never."""
    if mode not in SPOT_GUARDS:
        raise InvalidInput("spot_guard", f"unknown spot guard {mode!r}", fix=f"use one of {', '.join(SPOT_GUARDS)}")
    if mode.startswith("oldest_calm3"):
        return (eviction_rate or 0.0) < CALM3_RATE
    if mode.startswith("oldest_calm"):
        return (eviction_rate or 0.0) < 0.5 * tolerated_rate
    return mode == "oldest"


def spot_guard_wait_s(mode: str, theta_s: float) -> float:
    """How long the oldest spot task waits before :func:`starvation_guard` admits it: Eq. 11's
    theta, or n theta (``oldest_calm_<n>h*``, with theta = 1 h)."""
    got = re.search(r"_(\d+)h(?:_|$)", mode)
    return int(got.group(1)) * theta_s if got else theta_s


def spot_guard_gap_s(mode: str, horizon_hours: float) -> float:
    """The least time between two quota steps the guard raises: H / n (``*_<n>ph``), else none."""
    got = re.search(r"_(\d+)ph(?:_|$)", mode)
    return horizon_hours * 3600.0 / int(got.group(1)) if got else 0.0


def spot_guard_yields_to_hp(mode: str) -> bool:
    """Whether the guard stands down while an HP task that may use the pool is queued (``*_hpq``):
    a spot task let in then is the first an arriving HP placement evicts."""
    return mode.endswith("_hpq")


def spot_guard_backs_off(mode: str) -> bool:
    """Whether the guard's wait doubles in a pool after a task it admitted there is evicted (``*_bk``,
    ``*_bkall``) and halves again after one it admitted finishes or holds its GPUs for a guarantee
    period H; ``_bk`` counts the oldest task it raised the quota for, ``_bkall`` every spot task
    that starts in the pool while the quota stands raised (:func:`spot_guard_counts_all_starts`)
    and halves only per :data:`GUARD_QUIET_S` without such an eviction (:func:`guard_quiet_decay`)."""
    return mode.endswith(("_bk", "_bkall"))


#: ``*_bkall`` guards: the quiet time (no eviction of a task the guard admitted) that halves the wait.
GUARD_QUIET_S = 24 * 3600.0


def guard_quiet_decay(factor: float, quiet_s: float) -> tuple[float, float]:
    """``*_bkall``: the wait factor after ``quiet_s`` without an eviction of a task the guard admitted,
    halved once per :data:`GUARD_QUIET_S` (at least 1), and the quiet time those halvings used."""
    steps = int(quiet_s // GUARD_QUIET_S)
    got = max(factor / 2.0 ** steps, 1.0)
    return got, steps * GUARD_QUIET_S


def spot_guard_counts_all_starts(mode: str) -> bool:
    """``*_bkall``: every spot task started under a raised quota counts as admitted by the guard."""
    return mode.endswith("_bkall")


def guard_backoff(factor: float, evicted: bool) -> float:
    """The ``*_bk`` guard's next wait factor: doubled after an eviction of a task it admitted (at most
    :data:`GUARD_BACKOFF_MAX`), halved (at least 1) after such a task finished or held its GPUs for H."""
    return min(2.0 * factor, GUARD_BACKOFF_MAX) if evicted else max(0.5 * factor, 1.0)


@dataclass
class SpotQuotaAllocator:
    """Spot quota of one GPU pool: inventory (Eq. 9), quota (Eq. 10), eta feedback (Eq. 11)."""

    params: QuotaParams = field(default_factory=QuotaParams)
    _eta: float = field(init=False)
    updates: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._eta = self.params.eta0

    @property
    def eta(self) -> float:
        """Safety coefficient of Eq. 10 (starts at 1.0)."""
        return self._eta

    def inventory(self, capacity_gpus: float, hp_forecast: UpperBound) -> float:
        """Eq. 9 (corrected): f(p, H) = C - min(C, sum_o max_{1..H} ICDF(p, mu_o, sigma_o))."""
        _check_nonneg("capacity_gpus", capacity_gpus)
        demand = aggregate_upper_demand(hp_forecast, self.params.p, self.params.horizon_hours,
                                        self.params.aggregation)
        return capacity_gpus - min(capacity_gpus, demand)

    def quota(self, capacity_gpus: float, hp_forecast: UpperBound, s0: float, sa: float) -> float:
        """Eq. 10: Q_H = min(f(p, H) * eta, S0 + Sa).

        ``s0``: idle GPUs now; ``sa``: GPUs held by spot tasks whose guaranteed duration still
        covers at least H hours. The result is the number of spot GPUs the pool may hold.
        """
        _check_nonneg("s0", s0)
        _check_nonneg("sa", sa)
        return min(self.inventory(capacity_gpus, hp_forecast) * self._eta, s0 + sa)

    def update_eta(self, eviction_rate: float, max_queue_seconds: float) -> float:
        """Eq. 11 (with eps = 1 - p): shrink on high eviction, grow on low eviction + long queues."""
        e, q = eviction_rate, max_queue_seconds
        if not (0.0 <= e <= 1.0) or math.isnan(e):
            raise InvalidInput("eviction_rate", f"must be in [0, 1], got {e}",
                               fix="pass evictions / runs over the last H hours")
        _check_nonneg("max_queue_seconds", q)
        eps = self.params.tolerated_eviction_rate
        old = self._eta
        if e > 1.5 * eps:
            new = old * eps / e
        elif e < 0.5 * eps and q > self.params.theta_seconds:
            new = old * (1.5 - e / eps)
        else:
            new = old
        self._eta = min(max(new, self.params.eta_min), self.params.eta_max)
        self.updates += 1
        if self._eta != old:
            log.debug("eta %.4f -> %.4f (e=%.4f, l=%.0fs)", old, self._eta, e, q)
        return self._eta

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: params, eta and the update count."""
        return {"params": asdict(self.params), "eta": self._eta, "updates": self.updates}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        try:
            self.params = QuotaParams(**d["params"])
            eta = float(d["eta"])
            updates = int(d.get("updates", 0))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput("state", f"not a SpotQuotaAllocator state: {exc}",
                               fix="pass the dict state_dict() returned") from exc
        self._eta = min(max(eta, self.params.eta_min), self.params.eta_max)
        self.updates = updates


def _check_nonneg(name: str, value: float) -> None:
    if not value >= 0 or math.isinf(value):
        raise InvalidInput(name, f"must be a finite number >= 0, got {value}",
                           fix="pass GPUs (or seconds) as a non-negative float")
