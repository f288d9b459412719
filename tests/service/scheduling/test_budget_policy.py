"""Budgets and prices, pure: a period is a UTC day, an ISO week from Monday
or a calendar month; the policy holds a tenant's jobs once the period's cost
reaches the limit, saying the limit, the period, what was spent and when
jobs start again; a budget that is none is refused naming the field; a
price history cuts a stretch at each change and prices it at the price in
force then (the default for no flavor and before a flavor's first price)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from service.scheduling.budget import Budget, BudgetPolicy, next_period_start, period_start
from service.scheduling.cost import PriceHistory, stretch_cost

WED = datetime(2026, 12, 30, 17, 45, 12, tzinfo=UTC)  # a Wednesday, the last month of a year


@pytest.mark.parametrize(("period", "start", "after"), [
    ("day", datetime(2026, 12, 30, tzinfo=UTC), datetime(2026, 12, 31, tzinfo=UTC)),
    ("week", datetime(2026, 12, 28, tzinfo=UTC), datetime(2027, 1, 4, tzinfo=UTC)),  # Mondays
    ("month", datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
])
def test_periods_are_utc_calendar_days_iso_weeks_and_months(period, start, after):
    assert period_start(period, WED) == start and next_period_start(period, WED) == after
    assert period_start(period, start) == start  # a period begins at its first instant
    assert period_start(period, after) == after


def test_a_time_in_another_zone_is_placed_by_its_utc_day():
    late_in_new_york = datetime(2026, 12, 30, 22, 0, tzinfo=timezone(timedelta(hours=-5)))
    assert period_start("day", late_in_new_york) == datetime(2026, 12, 31, tzinfo=UTC)


def test_the_policy_holds_once_the_spend_reaches_the_limit_and_says_so():
    policy, budget = BudgetPolicy(), Budget(10, "day")
    assert not policy.make_decision(budget, 9.99, WED).holds
    at_limit = policy.make_decision(budget, 10.0, WED)
    assert at_limit.holds and at_limit.spent == 10.0
    over = policy.make_decision(budget, 10.234, WED)
    assert over.reason == ("budget 10.00 for the day spent (10.23); "
                           "jobs start again from 2026-12-31 00:00 UTC")
    assert "for the month spent" in policy.make_decision(Budget(5, "month"), 6, WED).reason
    assert policy.make_decision(Budget(0, "week"), 0.0, WED).holds  # 0: nothing may start


@pytest.mark.parametrize(("limit", "period", "field"), [
    (-1, "day", "limit"), (float("nan"), "day", "limit"), (float("inf"), "day", "limit"),
    (1, "year", "period"), (1, "Day", "period"),
])
def test_what_no_budget_may_be_is_refused_naming_the_field(limit, period, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        Budget(limit, period)


def test_a_price_history_cuts_a_stretch_at_each_change():
    prices = PriceHistory(default=0.5, changes={"a100": ((100.0, 2.0), (3700.0, 4.0))})
    assert prices.at("a100", 50) == 0.5  # before its first price: the default
    assert prices.at("a100", 100) == 2.0 and prices.at("a100", 3700) == 4.0
    assert prices.at(None, 5000) == 0.5 and prices.at("gone", 5000) == 0.5
    assert list(prices.pieces("a100", 0, 7300)) == [
        (0, 100.0, 0.5), (100.0, 3700.0, 2.0), (3700.0, 7300, 4.0)]
    # 2 workers: 100 s at 0.5, an hour at 2.0, an hour at 4.0 (per worker-hour)
    assert stretch_cost(prices, "a100", 0, 7300, 2) == pytest.approx(
        2 * (100 / 3600 * 0.5 + 2.0 + 4.0))
    assert stretch_cost(prices, None, 0, 3600, 3) == pytest.approx(1.5)
    assert stretch_cost(prices, "a100", 10, 10, 4) == 0
