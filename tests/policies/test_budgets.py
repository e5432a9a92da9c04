"""The pure budget rule (policies.budgets), by hand: lines, admission, the stop order, the
deadline estimate, the calendar month and the hourly cap's overshoot in ticks."""

from __future__ import annotations

import pytest

from policies.budgets import (
    BudgetLimits,
    Level,
    RunningJob,
    admission,
    deadline_estimate,
    headroom,
    level,
    month_of,
    overshoot_ticks,
    to_stop,
)


def test_levels_and_headroom() -> None:
    assert level(79.0, 100.0, 0.8) is Level.OK
    assert level(80.0, 100.0, 0.8) is Level.SOFT
    assert level(100.0, 100.0, 0.8) is Level.HARD
    assert level(1e9, None, 0.8) is Level.OK
    assert headroom(30.0, 100.0) == 70.0 and headroom(130.0, 100.0) == 0.0
    assert headroom(1.0, None) is None


def test_admission_names_the_line_it_would_cross() -> None:
    lim = BudgetLimits(hourly_cap=2.0, monthly_budget=10.0)
    assert admission(lim, 1.0, 0.0, 1.0, 5.0) is None  # 1 + 1 = 2 <= 2, 0 + 5 <= 10
    assert "hourly spend cap" in (admission(lim, 1.0, 0.0, 1.01, 5.0) or "")
    why = admission(lim, 0.0, 6.0, 1.0, 4.5) or ""  # 6 + 4.5 > 10
    assert why.startswith("monthly budget: the tenant spent $6.00 of $10.00")


def test_the_monthly_hard_line_stops_spot_first_newest_first() -> None:
    running = [RunningJob("hp", "hp", 0.0), RunningJob("s-old", "spot", 1.0),
               RunningJob("s-new", "spot", 5.0), RunningJob("dl", "deadline", 2.0)]
    assert to_stop(BudgetLimits(monthly_budget=10.0), 9.0, running) == []
    assert to_stop(BudgetLimits(monthly_budget=10.0), 10.0, running) == ["s-new", "s-old"]
    assert to_stop(BudgetLimits(monthly_budget=10.0, protected="stop"), 10.0, running) == [
        "s-new", "s-old", "dl", "hp"]


def test_the_deadline_estimate_is_the_cheapest_plan() -> None:
    # slack: Uniform Progress on spot all along, 2 x 0.918 x (10 + 0.05)
    e = deadline_estimate(10.0, 0.05, 20.0, 2, 0.918, 3.06)
    assert e.basis == "uniform_progress" and e.dollars == pytest.approx(18.4518)
    # half the time on spot: 2 x (0.918 x 10 + 3.06 x 0.05) over a 20 h deadline at a = 0.5
    e = deadline_estimate(10.0, 0.05, 20.0, 2, 0.918, 3.06, availability=0.5)
    assert e.dollars == pytest.approx(2 * (0.918 * 10.0 + 3.06 * 0.05))
    # no slack, or no spot: the on-demand cost bounds it
    assert deadline_estimate(10.0, 0.05, 10.05, 2, 0.918, 3.06).basis == "on_demand"
    assert deadline_estimate(10.0, 0.05, 20.0, 2, None, 3.06).dollars == pytest.approx(61.506)


def test_month_of_is_the_utc_calendar_month() -> None:
    assert month_of(0.0) == "1970-01"
    assert month_of(31 * 86400.0 - 1) == "1970-01" and month_of(31 * 86400.0) == "1970-02"


def test_overshoot_is_the_worst_hour_over_the_cap_in_ticks_at_the_cap() -> None:
    tick = 0.25  # h: an hour is 4 ticks; at the $2/h cap a tick spends $0.5
    assert overshoot_ticks([0.5] * 8, 2.0, tick) == 0.0
    assert overshoot_ticks([0.5, 0.5, 0.5, 1.0, 0.5], 2.0, tick) == pytest.approx(1.0)
