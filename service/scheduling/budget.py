"""A tenant's budget: at most `limit` spent per period (a UTC calendar day,
an ISO week from Monday 00:00 UTC, or a calendar month). Once what the
tenant's jobs cost within the current period (`service.scheduling.cost`)
reaches the limit, its queued jobs wait, the reason saying the limit, the
period and what was spent; new ones are accepted and wait too. Running jobs
go on (the admin may suspend them). The next period starts from nothing and
lets them in.

`BudgetPolicy.make_decision(...) -> BudgetDecision`: pure, fed the budget,
what was spent and the time; the scheduling pass reads the rest
(`service.run.budget_gate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

Period = Literal["day", "week", "month"]
PERIODS: tuple[str, ...] = get_args(Period)


@dataclass(frozen=True)
class Budget:
    limit: float  # the most a period may cost, in the flavors' price unit
    period: Period

    def __post_init__(self) -> None:
        if self.period not in PERIODS:
            raise ValueError(f"period: must be one of {', '.join(PERIODS)}, not {self.period!r}")
        if not 0 <= self.limit < float("inf"):
            raise ValueError(f"limit: must be a finite number >= 0, not {self.limit!r}")


def period_start(period: Period, at: datetime) -> datetime:
    """When the period that `at` falls in began (UTC)."""
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())  # Monday
    return day.replace(day=1)


def next_period_start(period: Period, at: datetime) -> datetime:
    """When the period after the one `at` falls in begins (UTC)."""
    start = period_start(period, at)
    if period == "day":
        return start + timedelta(days=1)
    if period == "week":
        return start + timedelta(weeks=1)
    return (start + timedelta(days=32)).replace(day=1)


@dataclass(frozen=True)
class BudgetDecision:
    spent: float  # what the tenant's jobs cost within the current period
    reason: str | None = None  # why its queued jobs wait; None: they may start

    @property
    def holds(self) -> bool:
        return self.reason is not None


class BudgetPolicy:
    def make_decision(self, budget: Budget, spent: float, now: datetime) -> BudgetDecision:
        """Whether a tenant that spent `spent` within the period of `now` may start a job."""
        if spent < budget.limit:
            return BudgetDecision(spent)
        resumes = next_period_start(budget.period, now)
        return BudgetDecision(spent, (
            f"budget {budget.limit:.2f} for the {budget.period} spent ({spent:.2f}); "
            f"jobs start again from {resumes:%Y-%m-%d %H:%M} UTC"))
