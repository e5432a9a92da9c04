"""Fair share of one GPU pool between tenants, with borrowing and reclaim (Kueue-style cohorts).

Pure: a snapshot of the pool's tenants in, share lines and victims out; issuing the evictions
is the caller's. Each tenant has a weight and a nominal share of the pool (GPUs it is owed
whenever it asks; by default the weight's part of the pool). A tenant asking for less than its
nominal share lends the rest; tenants asking for more borrow it, split by weight (weighted
max-min fairness, water-filling). When a lender comes back, its entitlement rises again and
the GPUs are reclaimed from the tenants above theirs: victims are chosen by the work they lose
(GPU-hours since their last checkpoint) discounted by how far their tenant is over its share,
so a job that checkpointed a minute ago goes before one that would lose three hours. GFS's spot
quota still bounds spot jobs on top of this (``policies.placement.FrameworkScheduler``).

Equations (per pool of capacity ``K`` GPUs, tenants ``i`` of weight ``w_i``):

* nominal: ``n_i`` as set, else ``(K - sum_set n) * w_i / sum_unset w``           (FS-1)
* demand ``d_i = held_i + waiting_i``; guaranteed ``g_i = min(d_i, n_i)``           (FS-2)
* entitled ``e_i = g_i + x_i``, ``x`` the water-filling of ``K - sum g`` by ``w`` capped at
  ``d_i - g_i``                                                                       (FS-3)
* borrowed ``b_i = max(0, held_i - n_i)``; lent ``l_i = max(0, n_i - held_i)`` while others borrow
* reclaim only while the claimant stays within ``e`` and each victim's tenant above it
* victim key ``lost_i / (1 + over_i)``, ``lost`` = GPUs x hours since the last checkpoint,
  ``over = max(0, held - e) / max(e, 1)``; smallest first                             (FS-4)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Candidate", "ShareLine", "TenantDemand", "entitlements", "nominal_shares",
           "reclaim", "victim_key"]

EPS = 1e-9
VictimRule = Literal["work", "gfs"]


@dataclass(frozen=True)
class TenantDemand:
    """One tenant in one pool: its weight, nominal GPUs (None: the weight's part), the GPUs it
    holds and the GPUs its queued jobs ask of the pool."""

    tenant: str
    weight: float = 1.0
    nominal: float | None = None
    held: float = 0.0
    waiting: float = 0.0

    @property
    def demand(self) -> float:
        return self.held + self.waiting


@dataclass(frozen=True)
class ShareLine:
    """A tenant's standing in a pool (GPUs)."""

    tenant: str
    weight: float
    nominal: float
    entitled: float
    held: float
    borrowed: float
    lent: float

    @property
    def over(self) -> float:
        """How far the tenant is over its entitlement, as a fraction of it (FS-4's ``over``)."""
        return max(0.0, self.held - self.entitled) / max(self.entitled, 1.0)

    @property
    def room(self) -> float:
        """GPUs the tenant may still take before it reaches its entitlement."""
        return self.entitled - self.held


def nominal_shares(capacity: float, tenants: Sequence[TenantDemand]) -> dict[str, float]:
    """Each tenant's nominal GPUs (FS-1); set nominals above the capacity are scaled down."""
    fixed = {t.tenant: max(0.0, t.nominal) for t in tenants if t.nominal is not None}
    total_fixed = sum(fixed.values())
    if total_fixed > capacity > 0:
        fixed = {k: v * capacity / total_fixed for k, v in fixed.items()}
        total_fixed = capacity
    rest = max(0.0, capacity - total_fixed)
    free = [t for t in tenants if t.nominal is None]
    weights = sum(t.weight for t in free)
    out = dict(fixed)
    for t in free:
        out[t.tenant] = rest * t.weight / weights if weights > 0 else 0.0
    return out


def _water_fill(amount: float, caps: Mapping[str, float], weights: Mapping[str, float]
                ) -> dict[str, float]:
    """Split ``amount`` by weight, no one above its cap, the rest to the others (FS-3's ``x``)."""
    got = dict.fromkeys(caps, 0.0)
    active = {k for k, c in caps.items() if c > EPS}
    left = amount
    while left > EPS and active:
        total_w = sum(weights[k] for k in active)
        step = {k: left * weights[k] / total_w for k in active}
        capped = {k for k in active if got[k] + step[k] >= caps[k] - EPS}
        if not capped:
            for k in active:
                got[k] += step[k]
            break
        for k in capped:
            left -= caps[k] - got[k]
            got[k] = caps[k]
        active -= capped
    return got


def entitlements(capacity: float, tenants: Sequence[TenantDemand]) -> dict[str, ShareLine]:
    """Every tenant's share line in a pool of ``capacity`` GPUs (FS-1 to FS-3)."""
    nominal = nominal_shares(capacity, tenants)
    guaranteed = {t.tenant: min(t.demand, nominal[t.tenant]) for t in tenants}
    spare = max(0.0, capacity - sum(guaranteed.values()))
    extra = _water_fill(spare, {t.tenant: max(0.0, t.demand - guaranteed[t.tenant])
                                for t in tenants},
                        {t.tenant: t.weight for t in tenants})
    borrowing = any(t.held > nominal[t.tenant] + EPS for t in tenants)
    return {t.tenant: ShareLine(
        tenant=t.tenant, weight=t.weight, nominal=nominal[t.tenant],
        entitled=guaranteed[t.tenant] + extra[t.tenant], held=t.held,
        borrowed=max(0.0, t.held - nominal[t.tenant]),
        lent=max(0.0, nominal[t.tenant] - t.held) if borrowing else 0.0) for t in tenants}


@dataclass(frozen=True)
class Candidate:
    """A preemptible running job: its tenant, GPUs, hours since its last checkpoint and, for
    GFS's rule, the hours since its last checkpoint as GFS estimates them (a fixed interval
    from its start, Eq. 17)."""

    job_id: str
    tenant: str
    gpus: float
    since_checkpoint_h: float
    estimated_since_checkpoint_h: float | None = None

    @property
    def lost_gpu_hours(self) -> float:
        """The work an eviction now loses: GPUs x hours since the last checkpoint."""
        return self.gpus * max(0.0, self.since_checkpoint_h)


def victim_key(c: Candidate, line: ShareLine | None, rule: VictimRule = "work") -> float:
    """FS-4 (``rule='work'``); GFS's waste alone (``'gfs'``: Eq. 17 with its estimate)."""
    if rule == "gfs":
        est = c.estimated_since_checkpoint_h
        return c.gpus * max(0.0, c.since_checkpoint_h if est is None else est)
    over = line.over if line is not None else 0.0
    return c.lost_gpu_hours / (1.0 + over)


def reclaim(lines: Mapping[str, ShareLine], claimant: str, need: float,
            candidates: Sequence[Candidate], rule: VictimRule = "work",
            asking: float | None = None) -> tuple[str, ...]:
    """Victims that free ``need`` GPUs for a job of ``claimant`` asking ``asking`` GPUs in all
    (default ``need``), least ``victim_key`` first; () when they cannot free enough. No
    tenant crosses its entitlement: the claimant stays at or under it, each victim's tenant at
    or above it (so reclaims never ping-pong between tenants)."""
    mine = lines.get(claimant)
    if mine is None or mine.held + (need if asking is None else asking) > mine.entitled + EPS:
        return ()
    over = {t: -line.room for t, line in lines.items() if t != claimant and line.room < -EPS}
    eligible = [c for c in candidates if c.tenant in over]
    order = sorted(eligible, key=lambda c: (victim_key(c, lines.get(c.tenant), rule), c.job_id))
    chosen: list[str] = []
    freed = 0.0
    for c in order:
        if freed >= need - EPS:
            break
        if c.gpus > over[c.tenant] + EPS:
            continue
        chosen.append(c.job_id)
        freed += c.gpus
        over[c.tenant] -= c.gpus
    return tuple(chosen) if freed >= need - EPS else ()
