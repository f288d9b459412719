"""A LoRA job's exports over real HTTP, through a real supervisor on the
session's Ray cluster: a tiny Llama made here under the tenant's data prefix,
an adapter trained on it for a few steps, exported as its PEFT adapter when it
succeeds, then as a merged model on request; both downloaded with `brigade
export` (the adapter by default, the merged one by `--kind`). PEFT's adapter
on the transformers base and the merged model give the same logits, and not
the base's. A kind the job cannot make is a 422 naming `kind`, before any
checkpoint is looked at (the refusal jobs never run)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import torch
import transformers
from safetensors import safe_open
from typer.testing import CliRunner

from api.server.app import create_app
from api.cli.main import app
from service.intake.data_access import data_prefix
from tests.api.conftest import ADMIN_KEY, make_supervisor
from tests.api.live_server import LiveServer
from tests.workers.hf_ranks import hf_llama, tokens

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

ADAPTER = {"rank": 4, "alpha": 8}
TRAIN = {"steps": 4, "global_batch_size": 4, "lr": 1e-2, "warmup_steps": 0}


@pytest.fixture(scope="module")
def service(tmp_path_factory, ray_cluster):
    """(supervisor not started yet, live server URL, the tiny Llama's URI under the
    admin's data prefix)."""
    supervisor = make_supervisor(tmp_path_factory.mktemp("adapter-exports"),
                                 export_on_success="float32")  # what the first export checks
    uri = data_prefix(supervisor.settings.resolved_data_uri_root, "admin") + "models/tiny-llama"
    hf_llama(Path(uri.removeprefix("file://")))
    try:
        with LiveServer(create_app(supervisor)) as server:
            yield supervisor, server.url, uri
    finally:
        supervisor.stop()
        supervisor.store.dispose()


@pytest.fixture(scope="module")
def running(service):
    supervisor, url, uri = service
    supervisor.start()
    return service


@pytest.fixture
def http(service):
    with httpx.Client(base_url=service[1], headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                      timeout=30) as client:
        yield client


def spec(uri: str | None, **sections) -> dict:
    body: dict = {"name": "lora", "workers": 1, "resources_per_worker": {"cpu": 1},
                  "model": {"seq_len": 16}, "train": TRAIN, "checkpoint": {"every_steps": 4},
                  **sections}
    if uri is not None:
        body["init"] = {"uri": uri}
    return body


def refused(response: httpx.Response, *words: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "kind", error
    assert "kind" in error["message"], error
    for word in words:
        assert word in error["message"], error


def test_a_kind_the_job_cannot_make_is_a_422_at_kind(service, http):
    _, _, uri = service
    full = http.post("/v1/jobs", json=spec(uri)).json()
    lora = http.post("/v1/jobs", json=spec(uri, adapter=ADAPTER)).json()
    no_base = http.post("/v1/jobs", json=spec(None, adapter=ADAPTER, model={
        "family": "llama", "n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2,
        "seq_len": 16, "vocab_size": 256})).json()
    try:
        for job in (full, lora, no_base):
            assert job.get("state") == "QUEUED", job  # never run: no checkpoint to look at
        for kind in ("adapter", "merged"):
            refused(http.post(f"/v1/jobs/{full['id']}/exports", json={"kind": kind}),
                    "trains every weight", "'model'")
        refused(http.post(f"/v1/jobs/{lora['id']}/exports", json={"kind": "model"}),
                "'adapter' or 'merged'")
        refused(http.post(f"/v1/jobs/{no_base['id']}/exports", json={"kind": "merged"}))
        # the kind is one of three, checked by the schema
        bad = http.post(f"/v1/jobs/{lora['id']}/exports", json={"kind": "lora"})
        assert bad.status_code == 422 and "kind" in bad.json()["error"]["field"], bad.text
        # a kind it can make goes on to the checkpoint: none yet
        none = http.post(f"/v1/jobs/{lora['id']}/exports", json={"kind": "adapter"})
        assert none.status_code == 409 and none.json()["error"]["field"] == "step", none.text
    finally:
        for job in (full, lora, no_base):
            if "id" in job:
                http.post(f"/v1/jobs/{job['id']}/cancel")


def listed(http: httpx.Client, job_id: str, kind: str, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        found = [e for e in http.get(f"/v1/jobs/{job_id}/exports").json() if e["kind"] == kind]
        if found:
            return found[0]
        assert time.monotonic() < deadline, http.get(f"/v1/jobs/{job_id}/logs").text[-3000:]
        time.sleep(0.5)


def test_an_adapter_job_exports_its_adapter_and_the_merged_model(running, http, tmp_path):
    _, url, uri = running
    job = http.post("/v1/jobs", json=spec(uri, adapter=ADAPTER)).json()
    deadline = time.monotonic() + 180
    while (state := http.get(f"/v1/jobs/{job['id']}").json()["state"]) != "SUCCEEDED":
        assert state not in ("FAILED", "CANCELLED") and time.monotonic() < deadline, \
            http.get(f"/v1/jobs/{job['id']}/logs").text[-3000:]
        time.sleep(0.5)

    # made when it succeeded: the adapter, its default kind
    adapter = listed(http, job["id"], "adapter")
    assert (adapter["id"], adapter["step"]) == ("step-000000004-float32-adapter", 4)
    assert set(adapter["files"]) == {"adapter_config.json", "adapter_model.safetensors"}
    again = http.post(f"/v1/jobs/{job['id']}/exports", json={})
    assert again.status_code == 202 and again.json()["id"] == adapter["id"], again.text

    started = http.post(f"/v1/jobs/{job['id']}/exports", json={"kind": "merged"})
    assert started.status_code == 202, started.text
    assert (started.json()["id"], started.json()["kind"]) == ("step-000000004-float32-merged",
                                                              "merged")
    merged = listed(http, job["id"], "merged")
    assert {"config.json", "model.safetensors"} <= set(merged["files"])
    assert not {"adapter_config.json", "adapter_model.safetensors"} & set(merged["files"])

    # `brigade export`: the job's own kind unless --kind says another
    env = {"BRIGADE_URL": url, "BRIGADE_API_KEY": ADMIN_KEY, "BRIGADE_ADMIN_KEY": None}
    runner = CliRunner()
    adapter_dir, merged_dir = tmp_path / "adapter", tmp_path / "merged"
    for out, extra in ((adapter_dir, []), (merged_dir, ["--kind", "merged"])):
        result = runner.invoke(app, ["export", job["id"], "-o", str(out), *extra], env=env)
        assert result.exit_code == 0, result.output
    assert sorted(p.name for p in adapter_dir.iterdir()) == sorted(adapter["files"])
    assert sorted(p.name for p in merged_dir.iterdir()) == sorted(merged["files"])
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 4, 8)
    with safe_open(str(adapter_dir / "adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert keys and all(k.startswith("base_model.model.model.layers.") for k in keys), keys

    # PEFT's adapter on the transformers base = the merged model, and neither is the base
    import peft

    base = transformers.LlamaForCausalLM.from_pretrained(uri.removeprefix("file://")).eval()
    with torch.no_grad():
        base_logits = base(tokens()).logits
        peft_logits = peft.PeftModel.from_pretrained(base, str(adapter_dir)).eval()(
            tokens()).logits
        merged_logits = transformers.LlamaForCausalLM.from_pretrained(str(merged_dir)).eval()(
            tokens()).logits
    assert (peft_logits - merged_logits).abs().max() <= 1e-5
    assert (peft_logits - base_logits).abs().max() > 1e-4  # the adapter trained
