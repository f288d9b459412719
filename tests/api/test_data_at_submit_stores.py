"""The submit's data checks read through fsspec as the ranks do, on any root:
an S3 one (the moto server, its options in BRIGADE_DATA_STORAGE_OPTIONS as a
deployment sets them) and a memory:// one (the server runs in this process).
What is there is accepted; what is not is a 422 naming the field and the
URI. (The same checks on a file:// root: tests/api/test_data_at_submit.py.)"""

from __future__ import annotations

import json
import uuid

import fsspec
import httpx
import pytest

from api.server.app import create_app
from service.intake.data_access import data_prefix
from tests.api.conftest import ADMIN_KEY, make_supervisor
from tests.api.live_server import LiveServer
from tests.broken_data import write_out_of_vocabulary_dataset
from workers.datasets.storage import ENV

SPEC = {"name": "reads", "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16,
                                   "vocab_size": 256}, "train": {"steps": 2}}


@pytest.fixture(scope="module", params=["s3", "memory"])
def store(request, tmp_path_factory, ray_cluster):
    """(an admin HTTP client of a server whose data root is on that store, the
    admin's data prefix, the store's filesystem and its storage options)."""
    tag = uuid.uuid4().hex[:8]
    with pytest.MonkeyPatch.context() as env:
        if request.param == "s3":
            options = request.getfixturevalue("moto_s3")
            root = f"s3://{request.getfixturevalue('s3_bucket')}/data-{tag}"
            env.setenv(ENV, json.dumps(options))
            fs = fsspec.filesystem("s3", **options)
        else:
            root, fs, options = f"memory://brigade-{tag}", fsspec.filesystem("memory"), {}
        supervisor = make_supervisor(tmp_path_factory.mktemp("stores"), data_uri_root=root)
        try:
            with LiveServer(create_app(supervisor)) as live, httpx.Client(
                    base_url=live.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                    timeout=30) as http:
                yield http, data_prefix(root, "admin"), fs, options
        finally:
            supervisor.stop()
            supervisor.store.dispose()


def refused(http: httpx.Client, body: dict, field: str) -> str:
    response = http.post("/v1/jobs", json={**SPEC, **body})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field, error
    return error["message"]


def accepted(http: httpx.Client, body: dict) -> None:
    response = http.post("/v1/jobs", json={**SPEC, **body})
    assert response.status_code == 201, response.text


def test_each_source_is_read_on_the_store(store):
    http, prefix, fs, options = store
    assert refused(http, {"data": {"source": "uri", "uri": "corpora/a.bin"}}, "data.uri") == (
        f"data.uri: {prefix}corpora/a.bin: no such file")
    fs.pipe(f"{prefix}corpora/a.bin", b"enough bytes to draw a window from")
    accepted(http, {"data": {"source": "uri", "uri": "corpora/a.bin"}})
    fs.pipe(f"{prefix}corpora/short.bin", b"abc")
    assert "too short for seq_len 16" in refused(
        http, {"data": {"source": "uri", "uri": "corpora/short.bin"}}, "data.uri")

    tokens = {"source": "tokens", "uri": "datasets/good"}
    assert "no dataset index here" in refused(http, {"data": tokens}, "data.uri")
    write_out_of_vocabulary_dataset(f"{prefix}datasets/good", storage_options=options)
    accepted(http, {"data": tokens})
    mix = {"source": "tokens", "mix": [{"uri": "datasets/good", "weight": 1},
                                       {"uri": "datasets/none", "weight": 1}]}
    assert f"{prefix}datasets/none/index.json" in refused(http, {"data": mix}, "data.mix.1.uri")
    assert "no dataset index here" in refused(
        http, {"data": tokens, "eval": {"uri": "datasets/none"}}, "eval.uri")
    text = {"source": "text", "uri": "corpora/docs.jsonl", "tokenizer": "tokenizers/none.json"}
    assert f"{prefix}tokenizers/none.json: tokenizer file not found" in refused(
        http, {"data": text}, "data.tokenizer")
    response = http.post("/v1/jobs", json={"init": {"uri": "models/none"}, "train": {"steps": 2}})
    assert response.status_code == 422 and response.json()["error"]["field"] == "init.uri", response.text
    assert f"{prefix}models/none/config.json does not exist" in response.json()["error"]["message"]
