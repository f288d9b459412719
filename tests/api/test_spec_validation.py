"""Malformed job specs over real HTTP: each gets a 4xx whose JSON message
names the problem; none gets a 5xx."""

from __future__ import annotations

import copy
import json
import socket
import time
from urllib.parse import urlsplit

import pytest

from tests.api.conftest import ADMIN_KEY, make_supervisor
from workers.schema import JobSpec


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory):
    """The module's server stands on a supervisor that never meets Ray: every body here is
    refused before a submit reaches the cluster (these tests do not wait for its start)."""
    supervisor = make_supervisor(tmp_path_factory.mktemp("validation"))
    yield supervisor
    supervisor.store.dispose()

VALID = {"model": {"n_layers": 2, "d_model": 64, "n_heads": 4}, "train": {"steps": 5}}
LLAMA = {"family": "llama", "n_layers": 2, "d_model": 64, "n_heads": 4}


def spec(path: str | None = None, value=None, drop: str | None = None, **top) -> dict:
    """VALID with one change: `path` (dotted) set to `value`, or `drop` removed."""
    body = copy.deepcopy(VALID) | top
    for dotted, action in ((path, "set"), (drop, "drop")):
        if dotted is None:
            continue
        *parents, leaf = dotted.split(".")
        node = body
        for name in parents:
            node = node.setdefault(name, {})
        if action == "set":
            node[leaf] = value
        else:
            del node[leaf]
    return body


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


# (id, body, what the message must name)
MALFORMED = [
    ("steps-zero", spec("train.steps", 0), "train.steps"),
    ("steps-negative", spec("train.steps", -5), "train.steps"),
    ("steps-string", spec("train.steps", "ten"), "train.steps"),
    ("steps-fraction", spec("train.steps", 1.5), "train.steps"),
    ("steps-huge", spec("train.steps", 10**30), "train.steps"),
    ("train-missing", spec(drop="train"), "train"),
    ("model-missing", spec(drop="model"), "model"),
    ("workers-zero", spec(workers=0), "workers"),
    ("workers-negative", spec(workers=-2), "workers"),
    ("workers-bool", spec(workers=True), "workers"),
    ("workers-too-many", spec(workers=100_000), "workers"),
    ("workers-min-over-max", spec(workers={"min": 3, "max": 2}), "workers.min"),
    ("workers-min-zero", spec(workers={"min": 0, "max": 2}), "workers.min"),
    ("workers-unknown-key", spec(workers={"min": 1, "max": 2, "avg": 1}), "workers.avg"),
    ("n-layers-zero", spec("model.n_layers", 0), "model.n_layers"),
    ("d-model-negative", spec("model.d_model", -64), "model.d_model"),
    ("d-model-not-divisible", spec("model.d_model", 63), "model.d_model"),
    ("seq-len-one", spec("model.seq_len", 1), "model.seq_len"),
    ("vocab-huge", spec("model.vocab_size", 10**12), "model.vocab_size"),
    ("family-unknown", spec("model.family", "mamba"), "model.family"),
    ("strategy-unknown", spec("sharding.strategy", "zero4"), "sharding.strategy"),
    ("dtype-unknown", spec("sharding.param_dtype", "int8"), "sharding.param_dtype"),
    ("sharding-not-object", spec(sharding="full"), "sharding"),
    ("compression-unknown", spec("sharding.grad_compression", "int4"), "sharding.grad_compression"),
    ("tp-zero", spec("parallelism.tp", 0), "parallelism.tp"),
    ("tp-without-a-plan", spec(workers=2, parallelism={"tp": 2}), "parallelism.tp: parallelism.tp > 1 "
     "needs a model family with a tensor-parallel plan"),
    ("tp-not-dividing-heads", spec(workers=3, model=LLAMA, parallelism={"tp": 3}),
     "parallelism.tp (3) must divide model.n_heads (4)"),
    ("tp-world-not-a-multiple", spec(workers=3, model=LLAMA, parallelism={"tp": 2}),
     "the world size (3) must be a multiple of parallelism.tp (2)"),
    ("compression-no-shard", spec(sharding={"strategy": "no_shard", "grad_compression": "int8"}),
     "sharding.grad_compression"),
    ("error-feedback-engine-only", spec("sharding.grad_error_feedback", False),
     "sharding.grad_error_feedback"),
    ("prefetch-negative", spec("sharding.prefetch_forward", -1), "sharding.prefetch_forward"),
    ("prefetch-fraction", spec("sharding.prefetch_backward", 1.5), "sharding.prefetch_backward"),
    ("source-unknown", spec("data.source", "ftp"), "data.source"),
    ("uri-missing", spec("data.source", "uri"), "data.uri"),
    ("unknown-top-field", spec(gpus=4), "gpus"),
    ("unknown-nested-field", spec("model.n_experts", 8), "model.n_experts"),
    ("unknown-field-like-a-type", spec(**{"My-Field": 1}), "My-Field"),
    ("cpu-zero", spec("resources_per_worker.cpu", 0), "resources_per_worker.cpu"),
    ("gpu-negative", spec("resources_per_worker.gpu", -1), "resources_per_worker.gpu"),
    ("lr-zero", spec("train.lr", 0), "train.lr"),
    ("lr-string", spec("train.lr", "fast"), "train.lr"),
    ("batch-zero", spec("train.global_batch_size", 0), "train.global_batch_size"),
    ("batch-under-workers", spec("train.global_batch_size", 3, workers=4), "train.global_batch_size"),
    ("seed-negative", spec("train.seed", -1), "train.seed"),
    ("optimizer-unknown", spec("train.optimizer", "lion"), "train.optimizer: train.optimizer "
     "'lion' is not a registered optimizer (registered: "),
    ("schedule-unknown", spec("train.schedule", "step"), "train.schedule: train.schedule 'step' "
     "is not a registered schedule (registered: constant, cosine, linear, wsd)"),
    ("knob-of-another-optimizer", spec("train.momentum", 0.9), "train.momentum: train.momentum "
     "is not read by the 'adamw' optimizer"),
    ("knob-of-another-schedule", spec("train.decay_fraction", 0.1), "train.decay_fraction: "
     "train.decay_fraction is not read by the 'cosine' schedule"),
    ("nesterov-without-momentum", spec(train={"steps": 5, "optimizer": "sgd", "nesterov": True}),
     "train.nesterov: train.nesterov needs train.momentum > 0"),
    ("decay-shape-unknown", spec(train={"steps": 5, "schedule": "wsd", "decay_shape": "step"}),
     "train.decay_shape"),
    ("keep-last-zero", spec("checkpoint.keep_last", 0), "checkpoint.keep_last"),
    ("every-steps-negative", spec("checkpoint.every_steps", -1), "checkpoint.every_steps"),
    ("name-path", spec(name="../../etc/passwd"), "name"),
    ("name-empty", spec(name=""), "name"),
    ("priority-negative", spec(priority=-1), "priority"),
    ("max-restarts-negative", spec(max_restarts=-1), "max_restarts"),
    ("deep-in-a-field", spec("model.extra", nested(200)), "model.extra"),
    # adapters (workers/schema/adapter.py): a family without targets, a target it lacks, and
    # the combinations an adapter job cannot run
    ("adapter-on-gpt", spec(adapter={"rank": 4}), "adapter"),
    ("adapter-unknown-target", spec(model=LLAMA, adapter={"targets": ["q_proj", "c_attn"]}),
     "adapter.targets.1"),
    ("adapter-rank-zero", spec(model=LLAMA, adapter={"rank": 0}), "adapter.rank"),
    ("adapter-unknown-kind", spec(model=LLAMA, adapter={"kind": "ia3"}), "adapter.kind"),
    ("adapter-whole-matrix-optimizer", spec(model=LLAMA, adapter={},
                                            train={"steps": 5, "optimizer": "muon"}),
     "train.optimizer"),
    ("adapter-compressed-grads", spec(model=LLAMA, adapter={},
                                      sharding={"grad_compression": "int8"}),
     "sharding.grad_compression"),
    ("adapter-uri-without-adapter", spec(model=LLAMA, init={"uri": "models/m",
                                                            "adapter_uri": "adapters/a"}),
     "init.adapter_uri"),
    ("body-list", [VALID], "body"),
    ("body-string", "a job", "body"),
    ("body-null", None, "body: a JSON object is required"),
]


def test_communication_levers_reach_the_engine_as_submitted():
    from workers.schema import JobSpec

    body = spec(sharding={"grad_compression": "int8", "prefetch_forward": 2, "prefetch_backward": 1})
    sharding = JobSpec.model_validate(body).sharding
    assert (sharding.grad_compression, sharding.prefetch_forward, sharding.prefetch_backward) == (
        "int8", 2, 1
    )
    assert sharding.grad_error_feedback is True  # operator-only: on unless the platform says


@pytest.mark.parametrize("body, names", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_spec_is_refused_naming_the_field(http, body, names):
    response = http.post("/v1/jobs", json=body)
    _assert_refused(response, names)


@pytest.mark.parametrize("train, field", [
    ({"optimizer": "lion"}, "train.optimizer"), ({"schedule": "step"}, "train.schedule"),
    ({"optimizer": "sgd", "beta2": 0.9}, "train.beta2"),
    ({"schedule": "constant", "min_lr_ratio": 0.5}, "train.min_lr_ratio"),
])
def test_a_recipe_refusal_is_a_422_at_its_field(http, train, field):
    response = http.post("/v1/jobs", json=spec(train={"steps": 5, **train}))
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


@pytest.mark.parametrize("path, body, message", [
    ("/v1/jobs", spec("train.global_batch_sise", 8),
     "train.global_batch_sise: unknown field (did you mean global_batch_size"),
    ("/v1/jobs", spec("model.n_layer", 2), "model.n_layer: unknown field (did you mean n_layers"),
    ("/v1/jobs", spec(workrs=2), "workrs: unknown field (did you mean workers"),
    ("/v1/jobs", spec(workers={"min": 1, "max": 2, "maxx": 2}),
     "workers.maxx: unknown field (did you mean max"),
    ("/v1/jobs", spec(eval={"evry_steps": 5}), "eval.evry_steps: unknown field (did you mean every_steps"),
    ("/v1/jobs", spec("train.zzz", 1), "train.zzz: unknown field (allowed: adjust_lr_fn, beta1, beta2,"),
    ("/v1/datasets", {"inputs": ["a.jsonl"], "output": "out", "tokeniser": "t.json"},
     "tokeniser: unknown field (did you mean tokenizer"),
    ("/v1/jobs/{id}/resume", {"worker": 2}, "worker: unknown field (did you mean workers"),
], ids=["train", "model", "top", "worker-range", "optional-section", "no-near-name", "dataset",
        "resume"])
def test_an_unknown_field_is_refused_with_the_nearest_allowed_names(http, supervisor, path, body,
                                                                    message):
    if "{id}" in path:  # a job to resume: made in the store (a submit would size it against Ray)
        job, _ = supervisor.store.create_job(tenant="admin", name="to-resume",
                                             spec=JobSpec.model_validate(VALID))
        path = path.format(id=job.id)
    response = http.post(path, json=body)
    assert response.status_code == 422, response.text
    assert message in response.json()["error"]["message"]
    assert response.json()["error"]["field"] == message.split(":")[0]


# (id, raw bytes, content type, what the message must name)
UNPARSABLE = [
    ("not-json", b"not json", "application/json", "invalid JSON"),
    ("trailing-garbage", json.dumps(VALID).encode() + b" x", "application/json", "invalid JSON"),
    ("truncated", json.dumps(VALID).encode()[:-3], "application/json", "invalid JSON"),
    ("empty", b"", "application/json", "body: a JSON object is required"),
    ("not-utf8", b'{"name": "\xff\xfe"}', "application/json", "UTF-8"),
    ("text-plain", json.dumps(VALID).encode(), "text/plain", "application/json"),
    ("nested-arrays", b"[" * 200_000, "application/json", "nested too deeply"),
    ("nested-objects", b'{"model":' * 100_000, "application/json", "nested too deeply"),
    ("nan-lr", json.dumps(spec("train.lr", float("nan"))).encode(), "application/json", "train.lr"),
    ("infinite-lr", json.dumps(spec("train.lr", float("inf"))).encode(), "application/json", "train.lr"),
]


@pytest.mark.parametrize("raw, content_type, names", [c[1:] for c in UNPARSABLE],
                         ids=[c[0] for c in UNPARSABLE])
def test_unparsable_body_is_refused_saying_why(http, raw, content_type, names):
    response = http.post("/v1/jobs", content=raw, headers={"Content-Type": content_type})
    _assert_refused(response, names)


def test_twenty_megabytes_get_413_quickly(http):
    started = time.perf_counter()
    response = http.post("/v1/jobs", content=b"x" * 20_000_000,
                         headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert "limit" in response.json()["error"]["message"]
    assert time.perf_counter() - started < 2.0


def test_a_chunked_body_over_the_limit_is_cut_off(http):
    def chunks():  # no Content-Length: the server must count as it reads
        for _ in range(200):
            yield b" " * 100_000

    response = http.post("/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["field"] == "body"


def test_a_declared_oversize_body_is_refused_before_it_is_sent(server):
    """Only the headers go out: the 413 comes back without the body being read."""
    parts = urlsplit(server.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/jobs HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + ADMIN_KEY.encode() + b"\r\n"
            b"Content-Length: 20000000\r\n\r\n"
        )
        received = b""
        while chunk := sock.recv(65536):  # the headers and the body may come in apart
            received += chunk
    answer = received.decode()
    assert answer.startswith("HTTP/1.1 413")
    assert "connection: close" in answer.lower()  # nothing more of the body is wanted
    assert '"field":"body"' in answer


@pytest.mark.parametrize("query, names", [
    ("limit=0", "limit"),
    ("limit=100000", "limit"),
    ("limit=ten", "limit"),
    ("offset=-1", "offset"),
    ("offset=99999999999999999999999", "offset"),
    ("state=RUNNING,SLEEPING", "SLEEPING"),
    ("state=QUEUED&state=nope", "NOPE"),
])
def test_malformed_list_query_is_refused(http, query, names):
    _assert_refused(http.get(f"/v1/jobs?{query}"), names)


def test_malformed_idempotency_key_is_refused(http):
    response = http.post("/v1/jobs", json=VALID, headers={"Idempotency-Key": "k" * 300})
    _assert_refused(response, "Idempotency-Key")


def _assert_refused(response, names: str) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    error = response.json()["error"]
    assert names in error["message"], error
    assert set(error) <= {"message", "field"}
