"""Budgets and costs over real HTTP, on a supervisor that never meets Ray:
the admin sets a tenant's budget `{limit, period}` at create and with a
PATCH (replaced; null removes it; left out, kept), audited, and sees it on
the tenant, as the tenant does on `GET /v1/whoami`; what no budget may be (a
negative limit, an unknown period, a limit as text, a field of its own) is a
422 naming the field. `GET /v1/usage` gives each tenant's cost and
worker-seconds per flavor and in all (jobs written to the store at times the
test sets), the admin's per tenant and the cluster's; `brigade usage` prints
the cost, `brigade tenants update --budget` sets one; `GET /v1/whoami` and
`brigade whoami` say what the tenant spent of it this period."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest

from service.states import JobState as S
from service.store.models import utcnow
from tests.api.conftest import make_supervisor
from tests.api.test_cli_jobs import brigade  # noqa: F401 - the fixture
from tests.service.clock import TestClock
from workers.schema import JobSpec

SPEC = {"model": {"n_layers": 2, "d_model": 64, "n_heads": 4}, "train": {"steps": 5}}


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory):
    """No submit here goes through the API: jobs are written to the store, Ray never met."""
    supervisor = make_supervisor(tmp_path_factory.mktemp("budgets"))
    yield supervisor
    supervisor.store.dispose()


def new_tenant(http, **body) -> dict:
    answer = http.post("/v1/tenants", json={"name": f"b-{uuid.uuid4().hex[:8]}", **body})
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_the_admin_sets_replaces_and_removes_a_budget(http, as_key, monkeypatch):
    # whoami shows what the tenant holds of the cluster now: a made-up one, not Ray's
    monkeypatch.setattr("service.control.views.cluster_capacity", lambda **_: {"cpu": 4.0, "gpu": 0.0})
    tenant = new_tenant(http, budget={"limit": 100, "period": "month"})
    assert tenant["budget"] == {"limit": 100.0, "period": "month"}
    path = f"/v1/tenants/{tenant['id']}"
    assert http.patch(path, json={"weight": 2}).json()["budget"] == tenant["budget"]  # kept
    changed = http.patch(path, json={"budget": {"limit": 12.5, "period": "day"}})
    assert changed.status_code == 200 and changed.json()["budget"] == {"limit": 12.5,
                                                                      "period": "day"}
    assert as_key(tenant["api_key"]).get("/v1/whoami").json()["budget"] == changed.json()["budget"]
    audit = http.get("/v1/audit", params={"target": tenant["id"]}).json()["items"]
    assert any(e["action"] == "tenant.update" and json.dumps(e).count("12.5") for e in audit)
    assert http.patch(path, json={"budget": None}).json()["budget"] is None
    assert http.get(path).json()["budget"] is None


@pytest.mark.parametrize(("budget", "field"), [
    ({"limit": -1, "period": "day"}, "budget.limit"),
    ({"limit": "10", "period": "day"}, "budget.limit"),
    ({"limit": 1e300, "period": "day"}, "budget.limit"),
    ({"limit": 10, "period": "year"}, "budget.period"),
    ({"limit": 10, "period": 1}, "budget.period"),
    ({"limit": 10}, "budget.period"),
    ({"limit": 10, "period": "day", "currency": "eur"}, "budget.currency"),
    ([10, "day"], "budget"),
])
def test_what_no_budget_may_be_is_a_422_naming_the_field(http, budget, field):
    answer = http.post("/v1/tenants", json={"name": f"b-{uuid.uuid4().hex[:8]}", "budget": budget})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field, answer.text
    tenant = new_tenant(http)
    answer = http.patch(f"/v1/tenants/{tenant['id']}", json={"budget": budget})
    assert answer.status_code == 422 and answer.json()["error"]["field"] == field, answer.text
    assert http.get(f"/v1/tenants/{tenant['id']}").json()["budget"] is None


def test_usage_gives_the_cost_per_flavor_and_in_all(http, as_key, store, monkeypatch, brigade):  # noqa: F811
    flavor = f"f-{uuid.uuid4().hex[:6]}"
    tenant = new_tenant(http)
    now = utcnow()
    clock = TestClock(monkeypatch, now - timedelta(hours=2))  # the store writes these times
    store.flavors.put(flavor, labels={"brigade.io/pool": flavor}, price_per_worker_hour=3.0)
    spec = JobSpec.model_validate({**SPEC, "resources_per_worker": {"cpu": 1, "flavor": flavor}})
    job, _ = store.create_job(tenant=tenant["name"], name="priced", spec=spec)
    store.transition(job.id, S.STARTING, reason="admitted", workers=2, attempt=1)
    clock.advance(1800)  # 2 workers x half an hour x 3.0
    store.transition(job.id, S.FAILED, reason="stopped")
    clock.set(now)

    own = as_key(tenant["api_key"]).get("/v1/usage", params={"window_s": 86400}).json()
    [usage] = own["tenants"]
    assert usage["cost"] == pytest.approx(3.0) and usage["worker_seconds"] == pytest.approx(3600)
    assert usage["flavors"] == {flavor: {"worker_seconds": pytest.approx(3600),
                                         "cost": pytest.approx(3.0)}}
    every = http.get("/v1/usage", params={"window_s": 86400}).json()
    assert every["cluster"]["cost"] >= 3.0 and every["cluster"]["flavors"][flavor]["cost"] == \
        pytest.approx(3.0)
    assert http.get("/v1/usage", params={"tenant": tenant["name"]}).json()["tenants"] == [usage]

    table = brigade("usage", "--tenant", tenant["name"])
    assert table.exit_code == 0, table.output
    [row] = [line.split() for line in table.stdout.splitlines() if line.startswith(tenant["name"])]
    assert row[2] == "3.00" and row[3] == f"{flavor}=3.00/3600"

    updated = brigade("tenants", "update", tenant["id"], "--budget", "25/day")
    assert updated.exit_code == 0, updated.output
    assert json.loads(updated.stdout)["budget"] == {"limit": 25.0, "period": "day"}
    monkeypatch.setattr("service.control.views.cluster_capacity", lambda **_: {"cpu": 4.0, "gpu": 0.0})
    clock.set(now.replace(hour=23, minute=59))  # the job ran 2 h before: the same UTC day, or not
    me = as_key(tenant["api_key"]).get("/v1/whoami").json()
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    ran_today = (now - timedelta(hours=1.5) - max(day, now - timedelta(hours=2))).total_seconds()
    assert me["budget_spent"] == pytest.approx(2 * max(0.0, ran_today) / 3600 * 3.0)
    assert me["budget_period_ends"].startswith((now + timedelta(days=1)).strftime("%Y-%m-%d"))
    mine = brigade("whoami", env={"BRIGADE_API_KEY": tenant["api_key"]})
    assert f"25 a day, {me['budget_spent']:.2f} spent this day" in mine.stdout, mine.output
    refused = brigade("tenants", "update", tenant["id"], "--budget", "25/year")
    assert refused.exit_code != 0 and "budget.period" in refused.output
    removed = brigade("tenants", "update", tenant["id"], "--no-budget")
    assert json.loads(removed.stdout)["budget"] is None
