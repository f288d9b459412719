"""Auth, health, Prometheus metrics, the cluster view and the OpenAPI document."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from tests.api.conftest import ADMIN_KEY


def test_the_api_process_never_imports_torch():
    code = "import api.server.app, api.client, api.cli.main, sys; assert 'torch' not in sys.modules, 'torch'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _v1_routes(server) -> list[tuple[str, str]]:
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    return [(method.upper(), path.replace("{job_id}", "j-000000000000"))
            for path, methods in paths.items() if path.startswith("/v1/") for method in methods]


@pytest.mark.parametrize("headers, says", [
    ({}, "missing API key"),
    ({"Authorization": "Bearer wrong"}, "invalid API key"),
    ({"Authorization": f"Bearer {ADMIN_KEY}x"}, "invalid API key"),
    ({"Authorization": f"Basic {ADMIN_KEY}"}, "missing API key"),
    ({"Authorization": ADMIN_KEY}, "missing API key"),
    ({"Authorization": "Bearer  x"}, "invalid API key"),
], ids=["none", "wrong", "longer", "basic", "no-scheme", "extra-space"])
def test_every_v1_route_needs_the_key(server, headers, says):
    routes = _v1_routes(server)
    assert len(routes) >= 11
    for method, path in routes:
        response = httpx.request(method, server.url + path, headers=headers)
        assert response.status_code == 401, (method, path, response.text)
        assert says in response.json()["error"]["message"]
        assert response.headers["www-authenticate"] == "Bearer"


def test_healthz_needs_no_key(server):
    response = httpx.get(f"{server.url}/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_prometheus_metrics_count_jobs_by_state(server, client):
    client.submit({"model": {}, "train": {"steps": 1}})
    response = httpx.get(f"{server.url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = dict(line.rsplit(" ", 1) for line in response.text.splitlines() if not line.startswith("#"))
    assert int(float(samples['brigade_jobs{state="QUEUED",tenant="admin"}'])) >= 1
    assert 'brigade_jobs{state="CANCELLED",tenant="admin"}' in samples
    assert "brigade_queue_length" in samples and 'brigade_cluster_capacity{resource="cpu"}' in samples
    assert "# TYPE brigade_jobs gauge" in response.text
    route = 'brigade_http_requests_total{method="POST",route="/v1/jobs",status="201"}'
    assert float(samples[route]) >= 1  # by route template and status
    assert any(name.startswith("brigade_http_request_duration_seconds_bucket{") for name in samples)


def test_cluster_shows_capacity_usage_and_queue(client):
    cluster = client.cluster()
    assert cluster.capacity and set(cluster.usage) <= set(cluster.capacity)
    assert cluster.queue is not None


def test_errors_are_json_even_for_unknown_routes(http):
    for response in (http.get("/v2/jobs"), http.delete("/v1/jobs"), http.put("/healthz")):
        assert response.status_code in (404, 405)
        assert response.headers["content-type"] == "application/json"
        assert "no route" in response.json()["error"]["message"]


def test_openapi_documents_the_contract(server):
    document = httpx.get(f"{server.url}/openapi.json").json()
    paths = document["paths"]
    for path in ("/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel", "/v1/jobs/{job_id}/suspend",
                 "/v1/jobs/{job_id}/resume", "/v1/jobs/{job_id}/events", "/v1/jobs/{job_id}/metrics",
                 "/v1/jobs/{job_id}/logs", "/v1/jobs/{job_id}/checkpoints", "/v1/jobs/{job_id}/workers",
                 "/v1/cluster", "/healthz", "/metrics"):
        assert path in paths, path
    submit = paths["/v1/jobs"]["post"]
    assert {"201", "200", "422"} <= set(submit["responses"])
    assert submit["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorPublic")
    assert "HTTPBearer" in document["components"]["securitySchemes"]
    schemas = document["components"]["schemas"]
    assert {"restarts", "recoveries", "preemptions"} <= set(schemas["JobPublic"]["properties"])
    assert {"kind", "detail"} <= set(schemas["EventPublic"]["properties"])


def _operations(document):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def test_every_operation_declares_what_stands_before_its_route(server):
    """The statuses any route of its kind answers, declared once for all
    (api/server/openapi.py), each with the one error shape."""
    document = httpx.get(f"{server.url}/openapi.json").json()
    with_body = 0
    for path, method, operation in _operations(document):
        statuses = set(operation["responses"])
        expected = set()
        if "requestBody" in operation:
            with_body += 1
            expected |= {"400", "413", "422"}
        if operation.get("security"):
            expected |= {"401", "403", "429"}
        if any(p["in"] == "path" for p in operation.get("parameters", [])):
            expected |= {"404", "422"}
        assert expected <= statuses, (method, path, expected - statuses)
        for status in expected:
            schema = operation["responses"][status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorPublic"}, (method, path, status)
    assert with_body >= 8
    assert "HTTPValidationError" not in document["components"]["schemas"]  # never answered


def test_a_body_that_is_not_utf8_is_the_400_the_document_declares(http):
    document = http.get("/openapi.json").json()
    for path in ("/v1/tenants", "/v1/jobs", "/v1/sweeps"):
        assert "400" in document["paths"][path]["post"]["responses"], path
        answer = http.post(path, content=b'{"name": "\xff"}', headers={"Content-Type": "application/json"})
        assert answer.status_code == 400, (path, answer.text)
        assert answer.json()["error"] == {"message": "body: not UTF-8 text", "field": "body"}


def test_a_method_a_path_lacks_is_a_405_listing_every_method_it_has(http):
    """Starlette's own 405 listed the first route of the path's only
    (`OPTIONS /v1/jobs/{id}`: GET, not DELETE)."""
    document = http.get("/openapi.json").json()
    checked = 0
    for path, item in document["paths"].items():
        documented = {m.upper() for m in item}
        url = path.replace("{job_id}", "j-000000000000").replace("{path}", "raw/x.jsonl")
        for name in ("sweep_id", "tenant_id", "export_id", "name"):
            url = url.replace("{" + name + "}", "x")
        for method in ("OPTIONS", "TRACE"):  # no route has them
            answer = http.request(method, url)
            assert answer.status_code == 405, (method, path, answer.text)
            allowed = {m.strip() for m in answer.headers["allow"].split(",")}
            assert allowed - {"HEAD"} == documented, (method, path, answer.headers["allow"])
            checked += 1
    assert checked > 40


def test_what_the_server_refuses_the_document_refuses(http):
    """The rules of a parameter the server holds, stated in the document."""
    import re

    from api.client import _path_in_url as in_url  # as the client sends it: `..` not resolved away
    from service.intake.tenant_data import PATH_PATTERN

    document = http.get("/openapi.json").json()
    data_path = document["paths"]["/v1/data/{path}"]["get"]["parameters"][0]["schema"]
    assert data_path["pattern"] == PATH_PATTERN and data_path["maxLength"] == 1024
    for path in ("x" * 256, "raw/..", "a b/./c", "a:b", "a%2e", "é.jsonl", "raw/"):
        assert not re.fullmatch(data_path["pattern"], path), path
        assert http.get(f"/v1/data/{in_url(path)}").status_code == 422, path
    for path in ("x" * 255, "raw/..x", ".env", "a b/(c)+d=e@f,g~h_i-j.jsonl"):
        assert re.fullmatch(data_path["pattern"], path), path
        assert http.get(f"/v1/data/{in_url(path)}").status_code == 404, path  # well-formed: not there

    state = next(p for p in document["paths"]["/v1/jobs"]["get"]["parameters"] if p["name"] == "state")
    pattern = state["schema"]["anyOf"][0]["items"]["pattern"]
    for value, taken in (("QUEUED", True), ("queued,Running", True), ("QUEUED, RUNNING", False),
                         ("QUEUED,", False), ("SLEEPING", False), ("runnıng", False)):
        assert bool(re.fullmatch(pattern, value)) is taken, value
        assert http.get("/v1/jobs", params={"state": value}).status_code == (200 if taken else 422), value
    assert http.get("/v1/audit", params={"since": "0.5"}).status_code == 422  # no POSIX time
    assert http.get("/v1/audit", params={"since": "2026-12-01T09:00:00Z"}).status_code == 200
