"""Budgets in the scheduling pass, on a real store (SQLite and Postgres), a
made-up cluster (no Ray: 8 CPUs) and a clock the test sets (the pass's
`clock` and the store's time: tests/service/clock.py; no sleeping). Once a
tenant's jobs cost its budget for the period, its next job waits with the
reason "budget ... spent", one submitted then is accepted and waits too,
its running job goes on, another tenant's jobs start; the next period
(the next UTC day, the next Monday) lets them in."""

from __future__ import annotations

import pytest
from store_harness import SPEC

import service.run.scheduling_pass as scheduling_pass
from service.run.scheduling_pass import SchedulingPass
from service.run.start_forecast import StartForecasts
from service.settings import Settings
from service.states import JobState as S
from tests.service.clock import TestClock, utc

LABELS = {"brigade.io/gpu": "a100"}


@pytest.fixture
def clock(monkeypatch):
    return TestClock(monkeypatch, utc(2026, 3, 1))  # when the flavor's price is put


@pytest.fixture
def admission(store, tmp_path, monkeypatch, clock):
    monkeypatch.setattr(scheduling_pass, "cluster_capacity",
                        lambda exclude=frozenset(), **_: {"cpu": 8.0, "gpu": 0.0})
    monkeypatch.setattr(scheduling_pass, "flavor_capacities",
                        lambda flavors, exclude=frozenset(): {
                            name: {"cpu": 8.0, "gpu": 0.0} for name in flavors})
    monkeypatch.setattr(scheduling_pass, "lost_nodes", lambda nodes: set())
    monkeypatch.setattr(scheduling_pass, "draining_nodes", dict)
    store.flavors.put("a100", labels=LABELS, price_per_worker_hour=10.0)
    return SchedulingPass(Settings(data_dir=str(tmp_path)), store, clock=clock.time)


def submit(store, name: str, tenant="acme", flavor: str | None = "a100"):
    resources = SPEC.resources_per_worker.model_copy(update={"flavor": flavor})
    spec = SPEC.model_copy(update={"name": name, "workers": 1, "resources_per_worker": resources})
    job, created = store.create_job(tenant=tenant, name=name, spec=spec)
    assert created  # accepted, over budget or not
    return job


def started(admission) -> set[str]:
    return {job.id for job in admission.run_pass()}


def test_a_spent_budget_holds_the_next_job_until_the_next_day(store, admission, clock):
    clock.set(utc(2026, 3, 10, 20))  # a Tuesday, 20:00 UTC
    store.tenants.create("acme", budget={"limit": 10, "period": "day"})
    first = submit(store, "first")
    assert started(admission) == {first.id}
    store.transition(first.id, S.RUNNING, reason="running")
    clock.advance(1800)  # 1 worker, half an hour at 10: 5.00 so far
    second = submit(store, "second")
    assert started(admission) == {second.id}  # under budget: starts
    store.transition(second.id, S.RUNNING, reason="running")
    clock.advance(1800)  # 10.00 + 5.00 = 15.00
    store.transition(first.id, S.SUCCEEDED, reason="done")

    third = submit(store, "third")
    other = submit(store, "other", tenant="globex")  # another tenant: no budget of its own
    assert started(admission) == {other.id}
    assert admission.waiting[third.id] == (
        "budget 10.00 for the day spent (15.00); jobs start again from 2026-03-11 00:00 UTC")
    fourth = submit(store, "fourth")  # accepted while over budget, and waits
    clock.advance(600)
    assert started(admission) == set()
    assert admission.waiting[fourth.id].startswith("budget 10.00 for the day spent (16.67)")
    forecast = StartForecasts(admission, store).of(fourth.id)  # no expected start: the reason
    assert forecast.expected_start is None and forecast.reason == admission.waiting[fourth.id]
    assert store.get_job(second.id).state is S.RUNNING  # a running job goes on

    clock.set(utc(2026, 3, 11, 0, 0, 1))  # the next day: spent 1 s of second, 0.00
    assert started(admission) == {third.id, fourth.id}
    assert third.id not in admission.waiting


def test_a_weekly_budget_waits_for_monday_and_counts_only_this_weeks_cost(store, admission,
                                                                        clock):
    tenant, _ = store.tenants.create("acme", budget={"limit": 4, "period": "week"})
    last_week = submit(store, "last-week")
    clock.set(utc(2026, 3, 8, 20))  # Sunday: the week before
    assert started(admission) == {last_week.id}
    store.transition(last_week.id, S.RUNNING, reason="running")
    clock.set(utc(2026, 3, 9, 0, 30))  # Monday 00:30: half an hour of this week, 5.00
    store.transition(last_week.id, S.SUCCEEDED, reason="done")
    clock.set(utc(2026, 3, 10, 20))
    held = submit(store, "held")
    assert started(admission) == set()
    assert admission.waiting[held.id] == (
        "budget 4.00 for the week spent (5.00); jobs start again from 2026-03-16 00:00 UTC")
    assert admission.budget.decisions["acme"].spent == pytest.approx(5.0)

    store.tenants.update(tenant.id, budget={"limit": 6, "period": "week"})  # raised: in it goes
    assert started(admission) == {held.id}


def test_a_job_of_no_flavor_counts_at_the_default_price(store, admission, clock):
    store.flavors.default_price = 2.0
    clock.set(utc(2026, 3, 31, 23))
    store.tenants.create("acme", budget={"limit": 1, "period": "month"})
    first = submit(store, "first", flavor=None)
    assert started(admission) == {first.id}
    clock.advance(1800)  # 1.00: the limit reached
    held = submit(store, "held", flavor=None)
    assert started(admission) == set()
    assert admission.waiting[held.id] == ("budget 1.00 for the month spent (1.00); "
                                          "jobs start again from 2026-04-01 00:00 UTC")
    clock.set(utc(2026, 4, 1))
    assert started(admission) == {held.id}
