"""A submitted job's `data.uri` lies under its tenant's own data prefix
(`{data_uri_root}/tenants/{tenant}/data/`), or the submit is 422 naming
`data.uri`. (Every traversal form: tests/service/intake/test_data_access.py.)"""

from __future__ import annotations

import httpx
import pytest

from tests.api.test_tenants import create

SPEC = {"name": "reads-data", "model": {"n_layers": 2, "d_model": 64, "n_heads": 4},
        "train": {"steps": 5}}


def with_uri(uri: str) -> dict:
    return {**SPEC, "data": {"source": "uri", "uri": uri}}


@pytest.fixture
def tenant_client(server, http):
    tenant = create(http)
    with httpx.Client(base_url=server.url, timeout=10,
                      headers={"Authorization": f"Bearer {tenant.api_key}"}) as client:
        yield tenant.name, client


def put(client: httpx.Client, path: str) -> None:
    """A file of the tenant's at `path` under its prefix (a job's data must be there at submit)."""
    assert client.put(f"/v1/data/{path}", content=b"some bytes to train on " * 20).status_code == 201


def test_a_uri_under_the_tenants_prefix_is_accepted(tenant_client, supervisor):
    name, client = tenant_client
    uri = f"{supervisor.settings.resolved_data_uri_root}/tenants/{name}/data/corpus.bin"
    put(client, "corpus.bin")
    response = client.post("/v1/jobs", json=with_uri(uri))
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["data"]["uri"] == uri


@pytest.mark.parametrize("suffix", [
    "tenants/{other}/data/corpus.bin",
    "tenants/{name}/data/../../{other}/data/corpus.bin",
    "tenants/{name}/data/%2e%2e/%2E%2e/{other}/data/corpus.bin",
    "tenants/{name}/data/%252e%252e/x",
    "tenants/{name}-evil/data/x",
    "tenants/{name}/data/x::s3://bucket/y",
])
def test_a_uri_outside_it_is_422_naming_data_uri(tenant_client, supervisor, http, suffix):
    name, client = tenant_client
    other = create(http).name
    root = supervisor.settings.resolved_data_uri_root
    for uri in (f"{root}/{suffix.format(name=name, other=other)}", "file:///etc/passwd",
                "s3://bucket/x"):
        response = client.post("/v1/jobs", json=with_uri(uri))
        assert response.status_code == 422, (uri, response.text)
        error = response.json()["error"]
        assert error["field"] == "data.uri" and error["message"].startswith("data.uri "), error


def test_a_relative_uri_is_read_under_the_tenants_prefix_and_stored_whole(tenant_client, supervisor):
    name, client = tenant_client
    prefix = f"{supervisor.settings.resolved_data_uri_root}/tenants/{name}/data/"
    put(client, "corpora/corpus.bin")
    response = client.post("/v1/jobs", json=with_uri("corpora/corpus.bin"))
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["data"]["uri"] == prefix + "corpora/corpus.bin"


@pytest.mark.parametrize("uri", ["../other/data/x", "corpora/../../x", "corpora//x", "a/%2e%2e/b"])
def test_a_relative_uri_that_leaves_the_prefix_is_422(tenant_client, uri):
    _, client = tenant_client
    response = client.post("/v1/jobs", json=with_uri(uri))
    assert response.status_code == 422, (uri, response.text)
    assert response.json()["error"]["field"] == "data.uri", response.text
