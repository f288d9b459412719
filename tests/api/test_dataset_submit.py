"""A job on token data is checked at submit: the API reads the dataset's
index, so a vocabulary the model does not cover (both numbers), a missing or
mis-sized shard and a tokenizer that does not parse are a 422 naming the
file, and a good dataset is accepted."""

from __future__ import annotations

import shutil

import httpx
import pytest

from tests.api.test_tenants import create
from tests.workers.datasets.corpus import write_inputs, write_tokenizer
from workers.datasets.prepare import prepare


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("submit-data")
    write_tokenizer(f"file://{root}/tokenizer.json")
    write_inputs(f"file://{root}/in", files=2, docs_per_file=40)
    prepare([f"file://{root}/in/*"], f"file://{root}/ds", tokenizer=f"file://{root}/tokenizer.json",
            workers=0, tokens_per_shard=2000)
    return root / "ds"


@pytest.fixture
def tenant(server, http, supervisor, prepared):
    """(client, the tenant's data prefix as a directory, its URI)."""
    made = create(http)
    uri = f"{supervisor.settings.resolved_data_uri_root}/tenants/{made.name}/data"
    directory = uri.removeprefix("file://")
    shutil.copytree(prepared, f"{directory}/ds")
    with httpx.Client(base_url=server.url, timeout=10,
                      headers={"Authorization": f"Bearer {made.api_key}"}) as client:
        yield client, directory, uri


def submit(client, uri: str, vocab: int = 512):
    return client.post("/v1/jobs", json={
        "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16, "vocab_size": vocab},
        "data": {"source": "tokens", "uri": uri}, "train": {"steps": 2}})


def refused(response) -> str:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "data.uri", error
    return error["message"]


def test_a_good_dataset_is_accepted_and_a_bad_one_is_422_naming_the_file(tenant):
    client, directory, uri = tenant
    assert submit(client, f"{uri}/ds").status_code == 201
    relative = submit(client, "ds")  # read under the tenant's prefix, checked as the full uri is
    assert relative.status_code == 201 and relative.json()["spec"]["data"]["uri"] == f"{uri}/ds"
    assert "(300)" in refused(submit(client, "ds", vocab=300))
    message = refused(submit(client, f"{uri}/ds", vocab=300))
    assert "index.json" in message and "(300)" in message and "vocabulary (" in message
    with open(f"{directory}/ds/shard-00001-000.bin", "ab") as f:
        f.write(b"\0\0")
    assert "shard-00001-000.bin: shard is" in refused(submit(client, f"{uri}/ds"))
    import os

    os.remove(f"{directory}/ds/shard-00001-000.bin")
    assert "shard-00001-000.bin: shard missing" in refused(submit(client, f"{uri}/ds"))
    with open(f"{directory}/ds/tokenizer.json", "w") as f:
        f.write("{broken")
    assert "tokenizer.json: not a tokenizers JSON file" in refused(submit(client, f"{uri}/ds"))
    assert "no dataset index" in refused(submit(client, f"{uri}/nothing-here"))
