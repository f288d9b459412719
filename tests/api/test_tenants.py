"""Tenants over real HTTP: the admin creates, lists, looks at, changes and
deletes them; a tenant's key is answered once, kept only as a hash, and stops
working at once when rotated; a tenant may not raise a job above its
`max_priority`. That a tenant reaches nothing of another's (404 on every
route, generated from the schema) is tests/api/test_tenant_isolation.py."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import create_engine, text

from api.schemas.tenants import TenantKey, TenantPublic
from service.states import JobState

QUOTA_LIMITS = ("max_workers", "max_gpus", "max_running_jobs", "max_queued_jobs")
SPEC = {"name": "tiny", "model": {"n_layers": 2, "d_model": 64, "n_heads": 4}, "train": {"steps": 5}}


def unique_name(prefix: str = "team") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(http, **fields) -> TenantKey:
    response = http.post("/v1/tenants", json={"name": unique_name(), **fields})
    assert response.status_code == 201, response.text
    return TenantKey.model_validate(response.json())


def test_create_answers_the_tenant_and_its_key_once(http):
    body = {"name": unique_name(), "quota": {"max_workers": 4, "max_queued_jobs": 10},
            "max_priority": 50, "weight": 2}
    response = http.post("/v1/tenants", json=body)
    assert response.status_code == 201
    tenant = TenantKey.model_validate(response.json())
    assert tenant.id.startswith("t-") and tenant.name == body["name"]
    assert tenant.quota.model_dump() == {"max_workers": 4, "max_gpus": None,
                                         "max_running_jobs": None, "max_queued_jobs": 10, "flavors": {}}
    assert (tenant.max_priority, tenant.weight) == (50, 2.0)
    assert tenant.api_key
    for again in (http.get(f"/v1/tenants/{tenant.id}"), http.get("/v1/tenants")):
        assert again.status_code == 200 and tenant.api_key not in again.text
        assert "api_key" not in again.text
    listed = http.get("/v1/tenants").json()
    assert tenant.id in {t["id"] for t in listed["items"]} and listed["total"] >= 1


def test_defaults_and_refusals(http):
    tenant = create(http)
    assert tenant.quota.model_dump() == {**dict.fromkeys(QUOTA_LIMITS), "flavors": {}}  # all unlimited
    assert (tenant.max_priority, tenant.weight) == (1000, 1.0)
    for name, status in [(tenant.name, 409), ("admin", 409), ("Bad Name", 422), ("-x", 422),
                         ("x" * 64, 422)]:
        response = http.post("/v1/tenants", json={"name": name})
        assert response.status_code == status, (name, response.text)
        assert response.json()["error"]["field"] == "name"
    for body in [{"name": unique_name(), "quota": {"max_cpus": 1}},
                 {"name": unique_name(), "weight": 0}, {"name": unique_name(), "max_priority": 1001},
                 {"name": unique_name(), "quota": {"max_workers": -1}}, {"name": unique_name(), "id": "t-1"}]:
        assert http.post("/v1/tenants", json=body).status_code == 422, body


def test_patch_changes_only_what_it_names(http):
    tenant = create(http, quota={"max_workers": 4, "max_gpus": 2})
    response = http.patch(f"/v1/tenants/{tenant.id}",
                          json={"quota": {"max_gpus": None, "max_running_jobs": 1}, "weight": 3})
    assert response.status_code == 200, response.text
    patched = TenantPublic.model_validate(response.json())
    assert patched.quota.model_dump() == {"max_workers": 4, "max_gpus": None,
                                          "max_running_jobs": 1, "max_queued_jobs": None, "flavors": {}}
    assert (patched.weight, patched.max_priority) == (3.0, tenant.max_priority)
    assert http.patch(f"/v1/tenants/{tenant.id}", json={"max_priority": 2000}).status_code == 422
    assert http.get(f"/v1/tenants/{tenant.id}").json() == response.json()


@pytest.mark.parametrize("body, field", [
    ({"max_priority": False}, "max_priority"), ({"max_priority": "5"}, "max_priority"),
    ({"max_priority": 5.5}, "max_priority"), ({"weight": 5e-324}, "weight"),
    ({"weight": 1000.5}, "weight"), ({"weight": "2"}, "weight"), ({"weight": True}, "weight"),
    ({"quota": {"max_workers": True}}, "quota.max_workers"), ({"quota": {"max_gpus": "1"}}, "quota.max_gpus"),
])
def test_a_patch_the_openapi_document_calls_invalid_is_refused_not_coerced(http, body, field):
    tenant = create(http)
    response = http.patch(f"/v1/tenants/{tenant.id}", json=body)
    assert response.status_code == 422, (body, response.text)
    assert response.json()["error"]["field"] == field
    unchanged = TenantPublic.model_validate(http.get(f"/v1/tenants/{tenant.id}").json())
    assert unchanged.model_dump() == TenantPublic.model_validate(tenant.model_dump()).model_dump()
    weight = http.get("/openapi.json").json()["components"]["schemas"]["TenantUpdate"]["properties"]["weight"]
    assert {"minimum": 0.001, "maximum": 1000.0} == {k: v for k, v in weight["anyOf"][0].items()
                                                    if k in ("minimum", "maximum")}


@pytest.mark.parametrize("tenant_id", ["t-000000000000", "nope", "t-" + "a" * 300])
def test_an_unknown_tenant_is_404_on_every_route(http, tenant_id):
    for method, suffix in [("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/keys")]:
        response = http.request(method, f"/v1/tenants/{tenant_id}{suffix}", json={})
        assert response.status_code == 404, (method, suffix, response.text)
        assert "not found" in response.json()["error"]["message"]


def test_a_tenant_key_works_and_only_the_admin_manages_tenants(http, as_key):
    tenant = create(http)
    own = as_key(tenant.api_key)
    assert own.get("/v1/jobs").json()["total"] == 0
    for method, path in [("GET", "/v1/tenants"), ("POST", "/v1/tenants"),
                         ("GET", f"/v1/tenants/{tenant.id}"), ("PATCH", f"/v1/tenants/{tenant.id}"),
                         ("DELETE", f"/v1/tenants/{tenant.id}"), ("POST", f"/v1/tenants/{tenant.id}/keys")]:
        response = own.request(method, path, json={"name": unique_name()})
        assert response.status_code == 403, (method, path, response.text)
        assert "admin" in response.json()["error"]["message"]
    for wrong in ("nope", tenant.api_key[:-2], tenant.api_key + "x"):
        response = as_key(wrong).get("/v1/jobs")
        assert response.status_code == 401 and "invalid API key" in response.json()["error"]["message"]
        assert wrong not in response.text


def test_rotation_stops_the_old_key_at_once(http, as_key):
    tenant = create(http)
    assert as_key(tenant.api_key).get("/v1/jobs").status_code == 200  # the key cache holds it now
    response = http.post(f"/v1/tenants/{tenant.id}/keys")
    assert response.status_code == 201
    rotated = TenantKey.model_validate(response.json())
    assert rotated.id == tenant.id and rotated.api_key != tenant.api_key
    assert as_key(tenant.api_key).get("/v1/jobs").status_code == 401
    assert as_key(rotated.api_key).get("/v1/jobs").status_code == 200


def test_the_database_holds_no_plaintext_key(http, supervisor):
    keys = [create(http).api_key for _ in range(2)]
    keys.append(http.post(f"/v1/tenants/{create(http).id}/keys").json()["api_key"])
    engine = create_engine(supervisor.settings.resolved_database_url)
    try:
        with engine.connect() as connection:
            dump = repr(connection.execute(text("SELECT * FROM tenants")).all())
    finally:
        engine.dispose()
    for key in keys:
        secret = key.rsplit("_", 1)[-1]
        assert key not in dump and secret[:16] not in dump


def test_delete_is_refused_while_a_job_is_unfinished(http, as_key, store):
    tenant = create(http)
    own = as_key(tenant.api_key)
    job = own.post("/v1/jobs", json=SPEC).json()
    response = http.delete(f"/v1/tenants/{tenant.id}")
    assert response.status_code == 409 and "unfinished" in response.json()["error"]["message"]
    assert own.post(f"/v1/jobs/{job['id']}/cancel").json()["state"] == JobState.CANCELLED
    assert http.delete(f"/v1/tenants/{tenant.id}").status_code == 204
    assert http.get(f"/v1/tenants/{tenant.id}").status_code == 404
    assert own.get("/v1/jobs").status_code == 401  # its key went with it
    assert store.get_job(job["id"]) is None  # and its finished jobs


def test_a_tenant_may_not_raise_a_job_above_its_max_priority(http, as_key):
    tenant = create(http, max_priority=5)
    own = as_key(tenant.api_key)
    response = own.post("/v1/jobs", json=SPEC | {"priority": 6})
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["field"] == "priority" and "max_priority 5" in error["message"]
    assert own.get("/v1/jobs").json()["total"] == 0
    assert own.post("/v1/jobs", json=SPEC | {"priority": 5}).status_code == 201
    assert http.post("/v1/jobs", json=SPEC | {"priority": 1000}).status_code == 201  # the admin may
    http.patch(f"/v1/tenants/{tenant.id}", json={"max_priority": 0})
    assert own.post("/v1/jobs", json=SPEC | {"priority": 1}).status_code == 403
