"""Auth, health, Prometheus metrics, the cluster view and the OpenAPI document."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from tests.api.conftest import ADMIN_KEY


def test_the_api_process_never_imports_torch():
    code = "import api.app, api.client, api.cli, sys; assert 'torch' not in sys.modules, 'torch'"
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
