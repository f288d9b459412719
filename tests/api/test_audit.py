"""The audit trail over real HTTP: every job and tenant action that changed
something is recorded with who (the tenant, or admin), when, what and the
client's address; a refused one is not; the admin reads it paged and
filtered (`GET /v1/audit`, `brigade audit`), a tenant may not."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from api.client import BrigadeClient, BrigadeError
from service.states import JobState as S
from tests.api.test_cli_jobs import brigade  # noqa: F401 - the fixture

SPEC = {"name": "audited", "model": {"n_layers": 2, "d_model": 64, "n_heads": 4},
        "train": {"steps": 5}}


def trail(client, **filters) -> list:
    return client.audit(limit=500, **filters).items


def test_every_action_is_recorded_with_who_what_and_where(client, server, store):
    started = datetime.now(UTC) - timedelta(seconds=1)
    name = f"audit-{uuid.uuid4().hex[:8]}"
    tenant = client.create_tenant(name, quota={"max_workers": 4})
    client.update_tenant(tenant.id, quota={"max_workers": 8}, weight=2.0)
    with BrigadeClient(server.url, tenant.api_key, timeout=10) as own:
        job = own.submit(SPEC, idempotency_key="once")
        own.submit(SPEC, idempotency_key="once")  # a retry makes no job: not recorded again
        with pytest.raises(BrigadeError) as refused:
            own.resume(job.id)  # a queued job cannot resume: 409, and nothing changed
        assert refused.value.status == 409
        for to in (S.STARTING, S.RUNNING):  # as the supervisor would move it
            store.transition(job.id, to, reason="test")
        own.suspend(job.id)
        store.transition(job.id, S.SUSPENDED, reason="test: checkpointed")
        own.resume(job.id, workers=2)
        own.cancel(job.id)
        with pytest.raises(BrigadeError) as forbidden:
            own.audit()
        assert forbidden.value.status == 403
    client.delete(job.id)
    rotated = client.rotate_key(tenant.id)
    assert rotated.api_key
    client.delete_tenant(tenant.id)

    rows = trail(client, tenant=name, since=started)
    assert [(r.actor, r.action) for r in reversed(rows)] == [
        ("admin", "tenant.create"), ("admin", "tenant.update"), (name, "job.submit"),
        (name, "job.suspend"), (name, "job.resume"), (name, "job.cancel"),
        ("admin", "job.delete"), ("admin", "tenant.rotate_key"), ("admin", "tenant.delete")]
    assert all(r.client == "127.0.0.1" and r.tenant == name for r in rows)
    assert {r.target for r in rows if r.action.startswith("job.")} == {job.id}
    assert {r.target for r in rows if r.action.startswith("tenant.")} == {tenant.id}
    by_action = {r.action: r for r in rows}
    assert by_action["job.submit"].detail == {"name": "audited", "workers": 1, "priority": 0}
    assert by_action["job.resume"].detail == {"workers": 2}
    assert by_action["tenant.update"].detail["changed"] == {"quota": {"max_workers": 8}, "weight": 2.0}
    assert by_action["tenant.update"].detail["before"]["quota"]["max_workers"] == 4
    assert rotated.api_key not in json.dumps([r.model_dump(mode="json") for r in rows])
    assert all(started <= r.time <= datetime.now(UTC) for r in rows)


def test_the_admin_filters_and_pages_the_trail(client, http, brigade):  # noqa: F811
    job = client.submit(SPEC)
    client.cancel(job.id)
    assert [r.action for r in trail(client, target=job.id)] == ["job.cancel", "job.submit"]
    assert [r.actor for r in trail(client, target=job.id, action="job.submit")] == ["admin"]
    assert {r.action for r in trail(client, action="job.")} <= {
        "job.submit", "job.cancel", "job.suspend", "job.resume", "job.delete", "job.export"}
    first, second = client.audit(limit=1), client.audit(limit=1, offset=1)
    assert first.total == second.total >= 2 and first.items[0].id > second.items[0].id
    for bad, field in (({"since": "2026-12-01T09:00:00"}, "since"), ({"limit": 0}, "limit"),
                       ({"action": "x" * 33}, "action")):
        answer = http.get("/v1/audit", params=bad)
        assert answer.status_code == 422 and answer.json()["error"]["field"].endswith(field), answer.text

    shown = brigade("audit", "--target", job.id)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0].split()[:4] == ["TIME", "ACTOR", "ACTION", "TARGET"]
    assert [line.split()[3] for line in lines[1:]] == ["job.cancel", "job.submit"]
    as_json = json.loads(brigade("audit", "--action", "job.submit", "--target", job.id,
                                 "--output", "json").stdout)
    assert [item["target"] for item in as_json["items"]] == [job.id]
