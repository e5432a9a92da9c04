"""Zone ranking: where a launch of a job's nodes goes, best first (pure, over a snapshot).

The reconcile loop's placement phase hands the job's offers and what it knows of each zone's
spot capacity (:class:`ZoneEvidence`); :func:`rank_offers` answers them in launch order. On-demand
capacity is ranked by price. Spot capacity is ranked by price x (1 + penalty x recent
preemptions in the zone) over the zones believed up and not recently refused (a zone that just
refused a launch is skipped for ``refused_s``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from controlplane.core.models import Market

ZONE_OBSERVATIONS = ("free", "evidence")  # how spot availability is known (ZoneRule.observation)
NEVER = -1e18  # the time of an event that never happened


class Priced(Protocol):
    """An offer as ranking sees it: a zone and its two prices per hour."""

    @property
    def zone(self) -> str: ...

    @property
    def spot_price(self) -> float: ...

    @property
    def on_demand_price(self) -> float: ...


OfferT = TypeVar("OfferT", bound=Priced)


@dataclass(frozen=True)
class ZoneRule:
    """How spot zones are ranked: recent preemptions' penalty and memory, refusals' back-off."""

    observation: Literal["free", "evidence"] = "free"
    penalty: float = 0.25  # price multiplier per recent preemption in the zone
    memory_s: float = 3 * 3600.0  # preemptions older than this are forgotten
    refused_s: float = 600.0  # a zone that refused a spot launch is skipped this long


@dataclass(frozen=True)
class ZoneEvidence:
    """What the loop knows of every zone's spot capacity now (read-only views)."""

    available: Mapping[str, bool]  # zone -> spot up (the provider's view, 'free' observation)
    refused_at: Mapping[str, float]  # zone -> when it last refused a spot launch
    preempted_at: Mapping[str, Sequence[float]]  # zone -> times of its recent preemptions


def open_offers(offers: Sequence[OfferT], closed: Collection[str]) -> list[OfferT]:
    """The offers whose zone takes new work: a zone in ``closed`` (its workload cluster drains
    or is unhealthy) is no candidate for a launch in any market."""
    if not closed:
        return list(offers)
    return [o for o in offers if o.zone not in closed]


def rank_on_demand(offers: Sequence[OfferT]) -> list[OfferT]:
    """On-demand offers by price (then zone name)."""
    return sorted(offers, key=lambda o: (o.on_demand_price, o.zone))


def rank_spot(offers: Sequence[OfferT], evidence: ZoneEvidence, rule: ZoneRule, now: float, *,
              chosen: bool = False) -> list[OfferT]:
    """Spot offers where a launch may go now, best first (a policy's ``chosen`` zone is tried on
    evidence: a launch is how a zone is learned there, and a refusal is free)."""
    recent_refusal = now - rule.refused_s
    if rule.observation == "evidence":
        ok = list(offers) if chosen else [
            o for o in offers if evidence.refused_at.get(o.zone, NEVER) < recent_refusal]
    else:
        ok = [o for o in offers if evidence.available.get(o.zone, False)
              and evidence.refused_at.get(o.zone, NEVER) < recent_refusal]
    horizon = now - rule.memory_s

    def score(o: OfferT) -> tuple[float, str]:
        recent = sum(1 for t in evidence.preempted_at.get(o.zone, ()) if t >= horizon)
        return (o.spot_price * (1 + rule.penalty * recent), o.zone)

    return sorted(ok, key=score)


def rank_offers(offers: Sequence[OfferT], market: Market, evidence: ZoneEvidence, rule: ZoneRule,
                now: float, *, chosen_zone: str | None = None) -> list[OfferT]:
    """The offers in ``market`` in launch order; a deadline policy's ``chosen_zone`` (when the
    job has an offer there) narrows them to that zone."""
    chosen = [o for o in offers if o.zone == chosen_zone] if chosen_zone else []
    pool = chosen or offers
    if market is Market.ON_DEMAND:
        return rank_on_demand(pool)
    return rank_spot(pool, evidence, rule, now, chosen=bool(chosen))
