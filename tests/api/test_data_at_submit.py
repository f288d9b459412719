"""Every data source a job names is there, and readable, at `POST /v1/jobs`:
a byte file (`data.source: uri`), a text file and its tokenizer, a token
dataset, each member of a mixture, `eval.uri`, `init.uri`: a 422 naming the
field and the file, not a job that runs, fails and restarts. Data that a
preparation the job waits on (`after`) will write is not there yet, and is
accepted. The same checks on S3 and memory:// roots:
tests/api/test_data_at_submit_stores.py."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from service.intake.data_access import data_prefix
from tests.broken_data import write_out_of_vocabulary_dataset
from tests.workers.datasets.corpus import write_tokenizer

SPEC = {"name": "reads", "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16,
                                   "vocab_size": 256}, "train": {"steps": 2}}


@pytest.fixture(scope="module")
def prefix(supervisor) -> str:
    """The admin's data prefix (a file:// root)."""
    return data_prefix(supervisor.settings.resolved_data_uri_root, "admin")


@pytest.fixture(scope="module")
def dataset(prefix) -> str:
    """A token dataset that passes every submit check (its ids are bad, which only ranks see)."""
    return write_out_of_vocabulary_dataset(Path(prefix.removeprefix("file://")) / "datasets" / "good")


def put(http: httpx.Client, path: str, content: bytes) -> None:
    assert http.put(f"/v1/data/{path}", content=content).status_code in (200, 201)


def refused(http: httpx.Client, data: dict, field: str, **more) -> str:
    response = http.post("/v1/jobs", json={**SPEC, "data": data, **more})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field, error
    return error["message"]


def test_a_byte_file_must_be_there_a_file_and_long_enough(http, prefix):
    message = refused(http, {"source": "uri", "uri": "corpora/missing.bin"}, "data.uri")
    assert message == f"data.uri: {prefix}corpora/missing.bin: no such file"
    put(http, "corpora/folder/part.bin", b"x" * 100)
    assert "is a folder, not a file" in refused(http, {"source": "uri", "uri": "corpora/folder"},
                                                "data.uri")
    put(http, "corpora/short.bin", b"abc")
    assert refused(http, {"source": "uri", "uri": "corpora/short.bin"}, "data.uri") == (
        f"data.uri: {prefix}corpora/short.bin: 3 bytes is too short for seq_len 16 "
        "(needs at least 18)")
    put(http, "corpora/good.bin", b"enough bytes to draw a window from")
    made = http.post("/v1/jobs", json={**SPEC, "data": {"source": "uri", "uri": "corpora/good.bin"}})
    assert made.status_code == 201, made.text


def test_text_its_tokenizer_token_data_a_mixtures_members_and_eval(http, prefix, dataset):
    put(http, "corpora/docs.jsonl", b'{"text": "hello"}\n')
    text = {"source": "text", "uri": "corpora/docs.jsonl", "tokenizer": "tokenizers/none.json"}
    assert refused(http, text, "data.tokenizer") == (
        f"data.tokenizer: {prefix}tokenizers/none.json: tokenizer file not found")
    write_tokenizer(f"{prefix}tokenizers/bpe.json", vocab_size=300)
    text |= {"tokenizer": "tokenizers/bpe.json"}
    model = {**SPEC["model"], "vocab_size": 512}
    assert refused(http, {**text, "uri": "corpora/none.jsonl"}, "data.uri", model=model) == (
        f"data.uri: {prefix}corpora/none.jsonl: text dataset not found")
    made = http.post("/v1/jobs", json={**SPEC, "model": model, "data": text})
    assert made.status_code == 201, made.text
    assert "no dataset index here" in refused(http, {"source": "tokens", "uri": "datasets/none"},
                                              "data.uri")
    mix = {"source": "tokens", "mix": [{"uri": dataset, "weight": 1},
                                       {"uri": "datasets/none", "weight": 1}]}
    assert refused(http, mix, "data.mix.1.uri").startswith(
        f"data.mix.1.uri: {prefix}datasets/none/index.json: no dataset index here")
    tokens = {"source": "tokens", "uri": dataset}
    assert "no dataset index here" in refused(http, tokens, "eval.uri",
                                              eval={"uri": "datasets/none", "every_steps": 1})
    made = http.post("/v1/jobs", json={**SPEC, "data": tokens, "eval": {"uri": dataset}})
    assert made.status_code == 201, made.text


def test_init_uri_must_be_there(http, prefix):
    response = http.post("/v1/jobs", json={"init": {"uri": "models/none"}, "train": {"steps": 2}})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "init.uri" and f"{prefix}models/none/config.json does not exist" in \
        error["message"], error


def test_data_a_preparation_it_waits_on_will_write_is_accepted(http, prefix):
    put(http, "raw/part-0.jsonl", b'{"text": "a few words to tokenize"}\n' * 20)
    preparing = http.post("/v1/datasets", json={"inputs": ["raw/part-0.jsonl"], "output": "datasets/made",
                                                "train_vocab_size": 300, "workers": 1})
    assert preparing.status_code == 201, preparing.text
    after = [preparing.json()["id"]]  # the module's supervisor is not started: it stays queued
    tokens = {"source": "tokens", "uri": "datasets/made"}
    assert http.post("/v1/jobs", json={**SPEC, "data": tokens, "after": after}).status_code == 201
    text = {"source": "text", "uri": "raw/part-0.jsonl", "tokenizer": "datasets/made/tokenizer.json"}
    assert http.post("/v1/jobs", json={**SPEC, "data": text, "after": after}).status_code == 201
    # what the preparation does not write is checked as ever
    refused(http, {"source": "tokens", "uri": "datasets/other"}, "data.uri", after=after)
    refused(http, {"source": "uri", "uri": "datasets/made-not.bin"}, "data.uri", after=after)
    # waited on by no job: nothing will write it
    refused(http, tokens, "data.uri")
