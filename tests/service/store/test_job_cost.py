"""What jobs cost, over a real store (SQLite and Postgres), at times the test
sets (tests/service/clock.py): a finished job's cost is its worker-seconds x
its flavor's price; a price change while it runs splits the cost at the
change; a job of no flavor is priced at the default; usage gives each
flavor's worker-seconds and cost and their sum; the counter
`brigade_tenant_cost_total{tenant,flavor}` counts the same. A tenant's
budget is kept, replaced and removed; what no budget may be is refused
naming the field."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry
from store_harness import SPEC

from service.observability.cost_counters import CostCollector
from service.observability.usage import job_cost, usage_by_tenant
from service.states import JobState as S
from service.store.tenants import tenant_policy
from tests.service.clock import TestClock, utc

T0 = utc(2026, 3, 10, 12)
LABELS = {"brigade.io/gpu": "a100"}


@pytest.fixture
def clock(monkeypatch):
    return TestClock(monkeypatch, T0)


def submit(store, flavor: str | None = "a100", tenant="acme", name="job"):
    spec = SPEC.model_copy(update={"resources_per_worker": SPEC.resources_per_worker.model_copy(
        update={"flavor": flavor})})
    job, _ = store.create_job(tenant=tenant, name=name, spec=spec)
    return job


def run(store, clock, job, workers: int, seconds: float, end=S.SUCCEEDED):
    """The job starts now, runs `seconds` at `workers` workers and ends."""
    store.transition(job.id, S.STARTING, reason="admitted", workers=workers, attempt=1)
    store.transition(job.id, S.RUNNING, reason="running")
    clock.advance(seconds)
    return store.transition(job.id, end, reason="ended")


def usage(store, since, now):
    jobs = store.jobs_changed_since(since, [])
    return usage_by_tenant(jobs, store.events_of(j.id for j in jobs), since, now,
                           prices=store.flavors.price_history())


def test_a_finished_jobs_cost_is_its_worker_seconds_times_the_price(store, clock):
    store.flavors.put("a100", labels=LABELS, price_per_worker_hour=2.5)
    store.flavors.default_price = 0.4
    clock.advance(60)
    job = submit(store)
    clock.advance(300)  # queued: holds nothing, costs nothing
    run(store, clock, job, workers=4, seconds=1800)
    plain = submit(store, flavor=None, name="plain")
    run(store, clock, plain, workers=2, seconds=900)

    found = usage(store, T0, clock.advance(3600))["acme"]
    assert found.flavors["a100"].worker_seconds == pytest.approx(4 * 1800)
    assert found.flavors["a100"].cost == pytest.approx(4 * 1800 / 3600 * 2.5)  # 5.0
    assert found.flavors["(none)"].cost == pytest.approx(2 * 900 / 3600 * 0.4)  # the default
    assert found.worker_seconds == pytest.approx(4 * 1800 + 2 * 900)
    assert found.cost == pytest.approx(5.0 + 0.2)
    # the window clips: the last half hour of the a100 job alone
    half = usage(store, T0 + timedelta(seconds=360 + 900), T0 + timedelta(seconds=360 + 1800))
    assert half["acme"].flavors["a100"].cost == pytest.approx(2.5 / 2 * 4 / 2)


def test_a_price_change_while_a_job_runs_splits_its_cost(store, clock):
    store.flavors.put("a100", labels=LABELS, price_per_worker_hour=2.0)
    job = submit(store)
    store.transition(job.id, S.STARTING, reason="admitted", workers=2, attempt=1)
    store.transition(job.id, S.RUNNING, reason="running")
    clock.advance(1800)
    store.flavors.put("a100", labels=LABELS, price_per_worker_hour=6.0)  # from now on
    clock.advance(900)
    store.transition(job.id, S.SUCCEEDED, reason="done")
    store.flavors.put("a100", labels=LABELS, price_per_worker_hour=100.0)  # after it ended
    clock.advance(3600)

    expected = 2 * 0.5 * 2.0 + 2 * 0.25 * 6.0  # 2 workers: half an hour at 2, a quarter at 6
    assert usage(store, T0, clock.now)["acme"].cost == pytest.approx(expected)
    assert job_cost(store.get_job(job.id), store.events(job.id), T0, clock.now,
                    store.flavors.price_history()) == pytest.approx(expected)


def test_the_cost_counter_counts_each_tenant_and_flavor_once(store, clock):
    store.flavors.put("a100", labels=LABELS, price_per_worker_hour=3.6)  # 0.001 a worker-second
    collector = CostCollector(store)
    registry = CollectorRegistry()
    registry.register(collector)

    def samples():
        return {(s.labels["tenant"], s.labels["flavor"]): s.value for m in registry.collect()
                for s in m.samples if s.name == "brigade_tenant_cost_total"}

    job = submit(store)
    store.transition(job.id, S.STARTING, reason="admitted", workers=2, attempt=1)
    store.transition(job.id, S.RUNNING, reason="running")
    clock.advance(100)
    assert samples() == {("acme", "a100"): pytest.approx(0.2)}
    clock.advance(100)
    store.transition(job.id, S.SUCCEEDED, reason="done")
    clock.advance(50)
    assert samples() == {("acme", "a100"): pytest.approx(0.4)}
    clock.advance(500)
    assert samples() == {("acme", "a100"): pytest.approx(0.4)}  # ended: never counted again


def test_a_budget_is_kept_replaced_and_removed(store):
    tenant, _ = store.tenants.create("acme", budget={"limit": 10, "period": "day"})
    assert tenant.budget == {"limit": 10.0, "period": "day"}
    assert tenant_policy(tenant).budget.limit == 10.0
    changed = store.tenants.update(tenant.id, weight=2.0)
    assert changed.budget == {"limit": 10.0, "period": "day"}  # not named: kept
    changed = store.tenants.update(tenant.id, budget={"limit": 2.5, "period": "week"})
    assert store.tenants.get(tenant.id).budget == {"limit": 2.5, "period": "week"}
    assert store.tenants.update(tenant.id, budget=None).budget is None
    assert tenant_policy(store.tenants.get(tenant.id)).budget is None


@pytest.mark.parametrize(("budget", "field"), [
    ({"limit": -1, "period": "day"}, "budget.limit"),
    ({"limit": "10", "period": "day"}, "budget.limit"),
    ({"limit": True, "period": "day"}, "budget.limit"),
    ({"limit": 10, "period": "year"}, "budget.period"),
    ({"limit": 10}, "budget.period"),
    ({"limit": 10, "period": "day", "currency": "eur"}, "budget"),
])
def test_what_no_budget_may_be_is_refused_naming_the_field(store, budget, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        store.tenants.create("acme", budget=budget)
    tenant, _ = store.tenants.create("acme")
    with pytest.raises(ValueError, match=f"^{field}: "):
        store.tenants.update(tenant.id, budget=budget)
    assert store.tenants.get(tenant.id).budget is None
