"""Right-censored lifetime data: validation and the Kaplan-Meier estimator (seed 001, Sec. 3.1).

The Google data hold 725 VMs that their user stopped before any preemption: each such lifetime
is right-censored (the VM was still alive then), never a preemption and never dropped.

Preemptible VMs live at most ``max_lifetime`` (24 h); reported lifetimes run a little past it
(up to 24.8 h, a reporting delay, see ``shared/data/README.md``). A lifetime within
``grace_hours`` past the limit is read as "alive until the limit" and clipped to it; anything
further past the limit is bad input.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from controlplane.core.errors import InvalidInput

log = logging.getLogger(__name__)

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

DEFAULT_GRACE_HOURS = 1.0


@dataclass(frozen=True, eq=False)
class CensoredLifetimes:
    """Validated lifetimes (hours, clipped to ``max_lifetime``) and their preempted mask."""

    lifetimes: FloatArray
    preempted: BoolArray
    max_lifetime: float

    @property
    def at_limit(self) -> BoolArray:
        """VMs still alive at the limit (killed by the deadline or stopped after it)."""
        return self.lifetimes >= self.max_lifetime

    def __len__(self) -> int:
        return int(self.lifetimes.shape[0])


def validate_lifetimes(
    lifetimes: ArrayLike,
    preempted_mask: ArrayLike,
    max_lifetime: float = 24.0,
    grace_hours: float = DEFAULT_GRACE_HOURS,
) -> CensoredLifetimes:
    """Check and clip lifetimes; raise InvalidInput naming the field and the fix."""
    if not np.isfinite(max_lifetime) or max_lifetime <= 0:
        raise InvalidInput("max_lifetime", f"must be a positive number of hours, got {max_lifetime}",
                           fix="pass the provider's maximum VM lifetime, 24.0 for Google")
    t = np.asarray(lifetimes, dtype=np.float64).ravel()
    p = np.asarray(preempted_mask).ravel()
    if t.size == 0:
        raise InvalidInput("lifetimes", "empty group: no VMs to fit",
                           fix="choose a group with VMs (e.g. GceLifetimes.groups(min_size=40))")
    if p.shape != t.shape:
        raise InvalidInput("preempted_mask", f"has {p.size} entries for {t.size} lifetimes",
                           fix="pass one True/False per VM (False = stopped by its user)")
    if p.dtype != np.bool_:
        if not np.isin(p, (0, 1)).all():
            raise InvalidInput("preempted_mask", "must be boolean (True = preempted, False = stopped)",
                               fix="pass GceLifetimes.preempted")
        p = p.astype(bool)
    if not np.isfinite(t).all():
        raise InvalidInput("lifetimes", "contain NaN or infinite values", fix="drop or repair those rows")
    if (t < 0).any():
        raise InvalidInput("lifetimes", f"negative durations, e.g. {t[t < 0][0]:.3f} h",
                           fix="lifetimes are hours since launch, >= 0")
    limit = max_lifetime + grace_hours
    if (t > limit).any():
        raise InvalidInput(
            "lifetimes",
            f"{int((t > limit).sum())} lifetimes over the limit, e.g. {t[t > limit].max():.2f} h > "
            f"{max_lifetime} h + {grace_hours} h grace",
            fix="check the units (hours) or raise max_lifetime for this provider")
    return CensoredLifetimes(np.minimum(t, max_lifetime), p.copy(), float(max_lifetime))


@dataclass(frozen=True, eq=False)
class KaplanMeier:
    """Product-limit estimate of the survival function from right-censored lifetimes."""

    times: FloatArray      # distinct preemption times, ascending
    survival: FloatArray   # S just after each time
    at_risk: NDArray[np.int64]
    events: NDArray[np.int64]
    max_lifetime: float

    @classmethod
    def fit(cls, lifetimes: ArrayLike, preempted_mask: ArrayLike, max_lifetime: float = 24.0,
            grace_hours: float = DEFAULT_GRACE_HOURS) -> KaplanMeier:
        """S(t) = prod_{t_i <= t} (1 - d_i / n_i); a VM censored at t_i is at risk at t_i."""
        data = validate_lifetimes(lifetimes, preempted_mask, max_lifetime, grace_hours)
        t, p = data.lifetimes, data.preempted
        ev_times, d = np.unique(t[p], return_counts=True)
        order = np.sort(t)
        n = t.size - np.searchsorted(order, ev_times, side="left")
        s = np.asarray(np.cumprod(1.0 - d / n), dtype=np.float64)
        return cls(ev_times, s, n.astype(np.int64), d.astype(np.int64), data.max_lifetime)

    def sf(self, t: ArrayLike) -> FloatArray:
        """Right-continuous step survival function."""
        x = np.asarray(t, dtype=np.float64)
        idx = np.searchsorted(self.times, x, side="right")
        s = np.concatenate(([1.0], self.survival))
        return np.asarray(s[idx], dtype=np.float64)

    def cdf(self, t: ArrayLike) -> FloatArray:
        return 1.0 - self.sf(t)

    def greenwood_se(self) -> FloatArray:
        """Greenwood standard error of S at each event time."""
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = self.events / (self.at_risk * (self.at_risk - self.events))
        var = self.survival**2 * np.cumsum(np.where(np.isfinite(terms), terms, 0.0))
        return np.asarray(np.sqrt(var), dtype=np.float64)
