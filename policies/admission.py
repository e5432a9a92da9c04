"""Fair shares of the controller's queue slots (``queued_total``) between tenants with work.

Pure: counts in, counts out. Every tenant with work is owed an equal share of the slots
(max-min fair: a tenant asking for less than its share leaves the rest to the others), and at
least one slot. When the slots are full, a tenant under its share still gets in this tick: the
tenants above their share hand back (to the store, where the jobs stay QUEUED) as many of their
queued jobs as that takes, the most-over first, never going below their own share.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["SlotPlan", "fair_shares", "held_back", "plan_slots", "reclaim"]


@dataclass(frozen=True)
class SlotPlan:
    """One tick's admission: jobs to bring in and queued jobs to hand back, per tenant."""

    shares: dict[str, int]  # tenant -> its fair share of the slots
    admit: dict[str, int]  # tenant -> jobs to admit this tick
    evict: dict[str, int]  # tenant -> queued jobs handed back to the store this tick
    total: int  # the slots shared (queued_total)

    def holds(self, held: Mapping[str, int], tenant: str) -> int:
        """How many slots ``tenant`` holds once the plan is applied."""
        return held.get(tenant, 0) + self.admit.get(tenant, 0) - self.evict.get(tenant, 0)


def fair_shares(demand: Mapping[str, int], total: int, floor: int = 1) -> dict[str, int]:
    """Max-min fair split of ``total`` over ``demand`` (water-filling), each tenant with
    demand getting at least ``min(floor, demand)``; ties go to the tenants given first."""
    given = [t for t, d in demand.items() if d > 0]
    order = sorted(given, key=lambda t: demand[t])
    out: dict[str, int] = {}
    left = max(0, total)
    for i, tenant in enumerate(order):
        if demand[tenant] > left // (len(order) - i):  # it and every later one are capped
            rest = set(order[i:])
            level, extra = divmod(left, len(rest))
            for t in (t for t in given if t in rest):
                out[t] = level + (1 if extra > 0 else 0)
                extra -= 1
            break
        out[tenant] = demand[tenant]
        left -= demand[tenant]
    return {t: max(out[t], min(floor, demand[t])) for t in out}


def reclaim(held: Mapping[str, int], shares: Mapping[str, int], coming: int,
            total: int) -> dict[str, int]:
    """Queued jobs each tenant hands back so ``coming`` newcomers fit in ``total`` slots: only
    from tenants over their share, the most-over first, never below their share."""
    need = sum(held.values()) + coming - total
    if need <= 0:
        return {}
    return _take_from({t: n - shares.get(t, 0) for t, n in held.items()}, need)


def _take_from(over: Mapping[str, int], need: int) -> dict[str, int]:
    """Take ``need`` units from ``over`` (tenant -> units above its share), one at a time from
    whoever is the most over; at most what each has."""
    heap = [(-units, tenant) for tenant, units in over.items() if units > 0]
    heapq.heapify(heap)
    taken: dict[str, int] = {}
    while need > 0 and heap:
        units, tenant = heapq.heappop(heap)
        taken[tenant] = taken.get(tenant, 0) + 1
        need -= 1
        if units + 1 < 0:
            heapq.heappush(heap, (units + 1, tenant))
    return taken


def plan_slots(held: Mapping[str, int], asking: Mapping[str, int], total: int,
               batch: int) -> SlotPlan:
    """Who gets which of ``total`` queue slots this tick: ``held`` (tenant -> queued jobs it
    holds now) and ``asking`` (tenant -> jobs waiting to come in) give each tenant's fair
    share; at most ``batch`` jobs come in, split fairly among those under their share; the
    tenants over their share hand back what the newcomers need past ``total``."""
    tenants = list(dict.fromkeys([*held, *asking]))
    demand = {t: held.get(t, 0) + asking.get(t, 0) for t in tenants}
    shares = fair_shares(demand, total)
    gaps = {t: min(asking.get(t, 0), shares.get(t, 0) - held.get(t, 0)) for t in tenants}
    admit = fair_shares({t: g for t, g in gaps.items() if g > 0}, batch, floor=0)
    evict = reclaim(held, shares, sum(admit.values()), total)
    return SlotPlan(shares=shares, admit=admit, evict=evict, total=total)


def held_back(plan: SlotPlan, held: Mapping[str, int], asking: Mapping[str, int], tenant: str,
              per_tenant: int) -> str | None:
    """Why some of ``tenant``'s waiting jobs stay PENDING under ``plan`` (None when only the
    batch does, or nothing): names the setting that binds and the fix."""
    holds = plan.holds(held, tenant)
    share = plan.shares.get(tenant, 0)
    if holds >= per_tenant:
        return (f"queued_per_tenant: tenant {tenant} holds {holds} queued jobs, the cap of "
                f"{per_tenant}; the rest wait PENDING until its queued jobs are placed "
                "(the operator raises ControllerSettings.queued_per_tenant)")
    if holds >= share and share < held.get(tenant, 0) + asking.get(tenant, 0):
        return (f"queued_total: tenant {tenant} holds {holds} of the {plan.total} queue slots, "
                f"its fair share with {len(plan.shares)} tenants waiting; the rest wait PENDING "
                "until its queued jobs are placed or fewer tenants wait (the operator raises "
                "ControllerSettings.queued_total)")
    return None
