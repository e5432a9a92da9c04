"""Tenant budgets: a spend-rate cap ($/h over running nodes) and a calendar-month budget ($).

Pure: limits, spend rate and month spend in, decisions out; no I/O and no clock (a time given
in seconds is only converted to its UTC calendar month). Each limit has a soft line (a fraction
of the hard one: an event, a gauge, a banner) and a hard one:

- admission: a job is admitted only if ``rate + job_rate <= hourly_cap`` and
  ``month_spend + job_estimate <= monthly_budget`` (nothing new may cross a hard line);
- at the monthly hard line (``month_spend >= monthly_budget``) the tenant's spot jobs stop at
  their next checkpoint, lowest priority first; HP and deadline jobs stop too only when the
  tenant's rule is ``stop`` (``finish`` lets them run to the end);
- a deadline job whose cheapest plan (:func:`deadline_estimate`) exceeds its ``max_cost`` or the
  tenant's headroom is refused at submission.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

__all__ = [
    "BudgetLimits",
    "Estimate",
    "Level",
    "RunningJob",
    "admission",
    "deadline_estimate",
    "headroom",
    "level",
    "month_of",
    "overshoot_ticks",
    "to_stop",
]

KIND_RANK = {"spot": 0, "deadline": 1, "hp": 2}  # lowest priority first
PROTECTED_RULES = ("finish", "stop")


class Level(StrEnum):
    """Where spend stands against one limit."""

    OK = "ok"
    SOFT = "soft"
    HARD = "hard"


@dataclass(frozen=True)
class BudgetLimits:
    """One tenant's limits (None: no limit); soft lines are fractions of the hard ones."""

    hourly_cap: float | None = None  # $/h over all the tenant's running nodes
    monthly_budget: float | None = None  # $ per calendar month (UTC)
    soft_fraction: float = 0.8
    protected: str = "finish"  # HP and deadline jobs at the monthly hard line: finish | stop


@dataclass(frozen=True)
class RunningJob:
    """What the stop rule needs of a running job."""

    job_id: str
    kind: str  # hp | spot | deadline
    submitted_at: float


@dataclass(frozen=True)
class Estimate:
    """A deadline job's cheapest plan: its expected dollars and which plan bounds them."""

    dollars: float
    basis: str  # "uniform_progress" | "on_demand"


def month_of(t: float) -> str:
    """The UTC calendar month (``YYYY-MM``) of ``t`` seconds since the epoch."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m")


def level(spend: float, limit: float | None, soft_fraction: float) -> Level:
    """OK below ``soft_fraction x limit``, SOFT from there, HARD at ``limit`` and above."""
    if limit is None:
        return Level.OK
    if spend >= limit - 1e-9:
        return Level.HARD
    if spend >= soft_fraction * limit - 1e-9:
        return Level.SOFT
    return Level.OK


def headroom(spend: float, limit: float | None) -> float | None:
    """Dollars (or $/h) left under ``limit``: ``max(0, limit - spend)``; None without a limit."""
    return None if limit is None else max(0.0, limit - spend)


def admission(limits: BudgetLimits, rate: float, month_spend: float, job_rate: float,
              job_estimate: float) -> str | None:
    """Why a job may not start now (None: it may): ``rate + job_rate > hourly_cap`` or
    ``month_spend + job_estimate > monthly_budget``."""
    cap, budget = limits.hourly_cap, limits.monthly_budget
    if cap is not None and rate + job_rate > cap + 1e-9:
        return (f"hourly spend cap: the tenant's running nodes cost ${rate:.2f}/h and the job "
                f"adds ${job_rate:.2f}/h, over its cap of ${cap:.2f}/h; it starts when spend "
                "falls (the admin raises hourly_cap)")
    if budget is not None and month_spend + job_estimate > budget + 1e-9:
        return (f"monthly budget: the tenant spent ${month_spend:.2f} of ${budget:.2f} this "
                f"month and the job is estimated at ${job_estimate:.2f}; it starts next month "
                "(the admin raises monthly_budget)")
    return None


def to_stop(limits: BudgetLimits, month_spend: float,
            running: Sequence[RunningJob]) -> list[str]:
    """The jobs to stop at their next checkpoint once the month's hard line is reached, lowest
    priority first (spot, then deadline, then HP; the newest first within a kind); HP and
    deadline jobs only under the ``stop`` rule."""
    if level(month_spend, limits.monthly_budget, limits.soft_fraction) is not Level.HARD:
        return []
    chosen = [j for j in running if j.kind == "spot" or limits.protected == "stop"]
    chosen.sort(key=lambda j: (KIND_RANK.get(j.kind, 0), -j.submitted_at, j.job_id))
    return [j.job_id for j in chosen]


def deadline_estimate(compute_hours: float, overhead_hours: float, deadline_hours: float,
                      nodes: int, spot_price: float | None, on_demand_price: float,
                      availability: float = 1.0) -> Estimate:
    """The cheapest plan's expected cost for a deadline job: Uniform Progress runs spot while it
    is up, ``h_s = min(C + d, a x D)`` hours, and on-demand the rest, so
    ``E = n x (s x h_s + k x (C + d - h_s))``; where no slack is left (``D <= C + d``) or no
    spot is sold, the on-demand cost ``n x k x (C + d)`` is the bound."""
    work = compute_hours + overhead_hours
    on_demand = nodes * on_demand_price * work
    if spot_price is None or deadline_hours <= work:
        return Estimate(on_demand, "on_demand")
    spot_hours = min(work, max(0.0, min(1.0, availability)) * deadline_hours)
    expected = nodes * (spot_price * spot_hours + on_demand_price * (work - spot_hours))
    if expected >= on_demand:
        return Estimate(on_demand, "on_demand")
    return Estimate(expected, "uniform_progress")


def overshoot_ticks(spend: Sequence[float], cap: float, tick_hours: float) -> float:
    """The worst overshoot of an hourly cap by a per-tick spend series, in ticks of spend at the
    cap: ``max(0, max_w sum_{t in w} spend_t - cap) / (cap x tick_hours)`` over every window
    ``w`` of one hour (``round(1 / tick_hours)`` ticks)."""
    if cap <= 0 or not spend or tick_hours <= 0:
        return 0.0
    width = max(1, round(1.0 / tick_hours))
    worst = run = 0.0
    for i, x in enumerate(spend):
        run += x
        if i >= width:
            run -= spend[i - width]
        worst = max(worst, run)
    return max(0.0, worst - cap) / (cap * tick_hours)
