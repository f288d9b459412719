"""Tenant isolation (the README: "A tenant sees only its own jobs: another's are
404 on every route"), generated from the app's own /openapi.json: every route
(every method) with a path parameter naming a resource (a job, an export,
an export's file, a tenant, a data file) is called by tenant B on tenant A's
real resources: a real job, a real committed export of it, A's own tenant
record, a file A uploaded under its data prefix.

B's answer is 404, the same body as for an id that does not exist (another
tenant's resource is not even confirmed to exist), or, on a route only the
admin may call, the 403 that A gets too. Nothing of A's changes. Then A
replays each 404'd request and is answered something other than 404: the
404 came from isolation, not from a wrong URL. A route whose path is relative
to the caller's own data prefix (`PUT` and `DELETE /v1/data/{path}`,
CALLER_SCOPED) cannot name A's file at all: B's request writes or removes
B's own, under B's prefix, and A's file stays as it was.

A new route is covered without an edit here. A route whose path parameter
or request body this file does not know fails the test (it does not skip):
a new route forces a decision on what to send it."""

from __future__ import annotations

import hashlib
import re
import uuid

import httpx
import pytest

from api.schemas.tenants import TenantKey
from checkpoints import FileEntry
from checkpoints.exports import export_id
from service.states import JobState

SPEC = {"name": "tiny", "model": {"n_layers": 2, "d_model": 64, "n_heads": 4}, "train": {"steps": 5}}
EXPORT_FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"\x08" + b"\0" * 63}
DATA_FILE = "iso/a.jsonl"  # A's upload, under A's data prefix
UNKNOWN = {"job_id": "j-000000000000", "export_id": export_id(7, "bfloat16"), "name": "nothing.json",
           "tenant_id": "t-000000000000", "path": "nothing/none.jsonl", "sweep_id": "s-000000000000",
           "node_id": "0" * 56}
# A minimal valid body for each route that takes one and names a resource.
BODIES: dict[tuple[str, str], dict] = {
    ("POST", "/v1/jobs/{job_id}/resume"): {"workers": 1},
    ("POST", "/v1/jobs/{job_id}/exports"): {"dtype": "float32"},
    ("PATCH", "/v1/tenants/{tenant_id}"): {"weight": 2},
    ("PUT", "/v1/data/{path}"): {"text": "an upload's raw body"},
    ("POST", "/v1/cluster/nodes/{node_id}/drain"): {"deadline_s": 60, "reason": "isolation"},
    ("PATCH", "/v1/jobs/{job_id}"): {"labels": {"team": "b"}, "note": "tenant B's"},
    ("PATCH", "/v1/sweeps/{sweep_id}"): {"labels": {"team": "b"}, "note": "tenant B's"},
    ("PUT", "/v1/flavors/{name}"): {"labels": {"pool": "b"}, "price_per_worker_hour": 1.0},
}
# Routes whose path is relative to the caller's own data prefix: B's request reaches B's own.
CALLER_SCOPED = {("PUT", "/v1/data/{path}"), ("DELETE", "/v1/data/{path}")}
# Routes the schema must list (a schema read wrongly would otherwise cover nothing, and pass).
EXPECTED = {("GET", "/v1/jobs/{job_id}"), ("DELETE", "/v1/jobs/{job_id}"),
            ("GET", "/v1/jobs/{job_id}/series"), ("POST", "/v1/jobs/{job_id}/exports"),
            ("GET", "/v1/jobs/{job_id}/exports/{export_id}/files/{name}"),
            ("GET", "/v1/jobs/{job_id}/logs"), ("POST", "/v1/tenants/{tenant_id}/keys"),
            ("GET", "/v1/data/{path}"), ("PUT", "/v1/data/{path}"), ("DELETE", "/v1/data/{path}"),
            ("GET", "/v1/sweeps/{sweep_id}"), ("POST", "/v1/sweeps/{sweep_id}/cancel"),
            ("DELETE", "/v1/sweeps/{sweep_id}"), ("POST", "/v1/cluster/nodes/{node_id}/drain"),
            ("PATCH", "/v1/jobs/{job_id}")}
PARAM = re.compile(r"{([^}]+)}")


def unique_name(prefix: str = "iso") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def resource_routes(schema: dict) -> list[tuple[str, str, dict]]:
    """(METHOD, path template, operation) of every operation with a path parameter."""
    return [(method.upper(), path, op) for path, ops in schema["paths"].items()
            for method, op in ops.items()
            if any(p["in"] == "path" for p in op.get("parameters", []))]


def body_of(method: str, path: str, op: dict) -> dict | None:
    if "requestBody" not in op:
        return None
    if (method, path) not in BODIES:
        pytest.fail(f"{method} {path} takes a body this test does not know: add a minimal valid one "
                    "to BODIES", pytrace=False)
    return BODIES[(method, path)]


def filled(path: str, values: dict[str, str]) -> str:
    unknown = set(PARAM.findall(path)) - set(values)
    if unknown:
        pytest.fail(f"{path}: no value for the path parameter(s) {sorted(unknown)}: say which "
                    "resource of tenant A's fills it", pytrace=False)
    return PARAM.sub(lambda m: values[m.group(1)], path)


def order(route: tuple[str, str, dict]) -> tuple[bool, bool, str, str]:
    """DELETE last: A's replays run in this order, and a deleted job answers nothing more;
    before it the caller-scoped writes (B's upload makes a file of B's at A's file's path)."""
    method, path, _ = route
    return (method == "DELETE", (method, path) in CALLER_SCOPED, path, method)


def create_tenant(http) -> TenantKey:
    response = http.post("/v1/tenants", json={"name": unique_name()})
    assert response.status_code == 201, response.text
    return TenantKey.model_validate(response.json())


def committed_export(supervisor, job_id: str) -> str:
    """A real committed export of A's job, written where the service keeps that job's exports
    (a committed export of a checkpoint would need the job run: its bytes do not matter here)."""
    record = supervisor.store.get_job(job_id)
    exports = supervisor.storage.checkpoint_target(record).open_exports()
    ident = export_id(5, "float32")
    directory = exports.begin(ident)
    for name, data in EXPORT_FILES.items():
        exports.fs.pipe_file(f"{directory}/{name}", data)
    exports.commit(ident, world_size=1, files={
        n: FileEntry(size=len(d), algo="sha256", digest=hashlib.sha256(d).hexdigest())
        for n, d in EXPORT_FILES.items()}, extra={})
    return ident


def snapshot(http, a: httpx.Client, job_id: str, tenant_id: str) -> dict:
    """What B might change of A's: the job, its events and logs, its exports, A's record."""
    return {"job": a.get(f"/v1/jobs/{job_id}").json(),
            "events": a.get(f"/v1/jobs/{job_id}/events").json(),
            "logs": a.get(f"/v1/jobs/{job_id}/logs").json(),
            "exports": a.get(f"/v1/jobs/{job_id}/exports").json(),
            "tenant": http.get(f"/v1/tenants/{tenant_id}").json(),
            "data": a.get(f"/v1/data/{DATA_FILE}").content}


def test_every_resource_route_of_the_schema_is_404_to_another_tenant(http, as_key, supervisor):
    schema = http.get("/openapi.json")
    assert schema.status_code == 200, schema.text
    routes = sorted(resource_routes(schema.json()), key=order)
    assert EXPECTED.issubset((m, p) for m, p, _ in routes), "the schema lost routes this test must try"

    tenant_a = create_tenant(http)
    a, b = as_key(tenant_a.api_key), as_key(create_tenant(http).api_key)
    job = a.post("/v1/jobs", json=SPEC).json()
    ident = committed_export(supervisor, job["id"])
    assert a.put(f"/v1/data/{DATA_FILE}", content=b'{"text": "A\'s"}\n').status_code == 201
    sweep = a.post("/v1/sweeps", json={  # waits QUEUED on A's queued job: no trial runs
        "name": "iso", "base": SPEC, "space": {"train.lr": {"grid": [0.001]}}, "sampler": "grid",
        "objective": {"metric": "loss"}, "max_trials": 1, "after": [job["id"]]})
    assert sweep.status_code == 201, sweep.text
    values = {"job_id": job["id"], "export_id": ident, "name": "model.safetensors",
              "tenant_id": tenant_a.id, "path": DATA_FILE, "sweep_id": sweep.json()["id"],
              # no tenant's: the cluster's node (the head), whose drain is the admin's alone
              "node_id": http.get("/v1/cluster/nodes").json()["nodes"][0]["node_id"]}
    assert [e["id"] for e in a.get(f"/v1/jobs/{job['id']}/exports").json()] == [ident]
    before = snapshot(http, a, job["id"], tenant_a.id)
    assert before["job"]["state"] == JobState.QUEUED

    refused: dict[tuple[str, str], int] = {}
    for method, path, op in routes:
        body = body_of(method, path, op)
        response = b.request(method, filled(path, values), json=body)
        where = f"{method} {path}"
        if (method, path) in CALLER_SCOPED:  # B's own, under B's prefix
            assert response.status_code < 300, (where, response.status_code, response.text)
            assert f"/tenants/{tenant_a.name}/" not in response.text, (where, response.text)
            refused[(method, path)] = response.status_code
            continue
        unknown = b.request(method, filled(path, UNKNOWN), json=body)
        assert response.status_code in (403, 404), (where, response.status_code, response.text)
        message = response.json()["error"]["message"]
        assert "not found" in message if response.status_code == 404 else "admin" in message, \
            (where, message)
        # The same answer as for an id that does not exist, ids aside.
        assert unknown.status_code == response.status_code, (where, unknown.text, response.text)
        mine = response.text
        for name, value in values.items():
            mine = mine.replace(value, UNKNOWN[name])
        assert mine == unknown.text, (where, mine, unknown.text)
        refused[(method, path)] = response.status_code
    assert snapshot(http, a, job["id"], tenant_a.id) == before, "B changed something of A's"
    assert a.get("/v1/jobs").status_code == 200  # A's key was not rotated by B

    # A replays each: a 404 to B is a URL that works for its owner; a 403 to B is a route
    # only the admin may call (A is refused it too).
    for method, path, op in routes:
        response = a.request(method, filled(path, values), json=body_of(method, path, op))
        where = f"{method} {path}"
        if (method, path) in CALLER_SCOPED:
            assert response.status_code < 300, (where, response.status_code, response.text)
        elif refused[(method, path)] == 404:
            assert response.status_code != 404 and response.status_code < 500, \
                (where, response.status_code, response.text)
        else:
            assert response.status_code == 403 and "admin" in response.json()["error"]["message"], \
                (where, response.status_code, response.text)
    print(f"{len(routes)} routes tried as another tenant:",
          *(f"{refused[(m, p)]} {m} {p}" for m, p, _ in routes), sep="\n  ")


def test_a_tenant_sees_none_of_another_tenants_jobs_in_lists(http, as_key):
    a, b = as_key(create_tenant(http).api_key), as_key(create_tenant(http).api_key)
    job = a.post("/v1/jobs", json=SPEC).json()
    assert job["id"] not in {j["id"] for j in b.get("/v1/jobs", params={"limit": 500}).json()["items"]}
    assert job["id"] not in b.get("/v1/cluster").text
    assert http.get(f"/v1/jobs/{job['id']}").status_code == 200  # the admin reaches every tenant's
    assert [j["id"] for j in a.get("/v1/jobs").json()["items"]] == [job["id"]]


def test_every_tenant_filter_of_the_schema_refuses_another_tenant(http, as_key):
    """Every GET route with a `tenant` query parameter, asked by B for A's: 403, or an
    answer with nothing of A's in it."""
    schema = http.get("/openapi.json").json()
    routes = [path for path, ops in schema["paths"].items() if "get" in ops
              and "{" not in path
              and any(p["in"] == "query" and p["name"] == "tenant" for p in ops["get"].get("parameters", []))]
    assert {"/v1/jobs", "/v1/usage", "/v1/audit"} <= set(routes), routes
    tenant_a = create_tenant(http)
    a, b = as_key(tenant_a.api_key), as_key(create_tenant(http).api_key)
    job = a.post("/v1/jobs", json=SPEC).json()
    for path in routes:
        for named in (tenant_a.name, tenant_a.id):
            response = b.get(path, params={"tenant": named})
            assert response.status_code in (200, 403), (path, response.status_code, response.text)
            if response.status_code == 200:
                assert job["id"] not in response.text and tenant_a.name not in response.text, \
                    (path, response.text)
