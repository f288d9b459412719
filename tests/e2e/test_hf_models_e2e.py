"""Real models in, real models out, through `brigade serve` over HTTP: a
tiny random `LlamaForCausalLM` made here is fine-tuned 20 steps at world
size 2 from its Hugging Face files, exported when the job succeeds,
downloaded with `brigade export`, and loaded by transformers with Brigade's
logits; a corrupt export file is refused at download, a torn export is
never listed; and every refusal of `init` or of an export is a 4xx that
says why."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch
import torch.distributed as dist
import transformers

from checkpoints import CheckpointTarget
from tests.checkpoints.ckpt_harness import init_single_rank
from tests.e2e.serve_harness import KEY, TERMINAL, Server
from tests.workers.hf_ranks import MODEL, hf_llama, hf_tokenizer, tokens
from workers.schema import JobSpec

pytestmark = pytest.mark.timeout(600)
SECRET = "e2e-secret-0123456789abcdef"  # the harness's BRIGADE_SECRET


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_ray):
    data_dir = tmp_path_factory.mktemp("hf")
    base = data_dir / "data-store" / "tenants" / "admin" / "data" / "tiny-llama"
    hf_llama(base)
    # The base's own identity, which an export must keep: a longer context than the job
    # trains at, token ids, and its tokenizer.
    config = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 128}))
    hf_tokenizer(base)
    srv = Server(data_dir, env={"BRIGADE_EXPORT_ON_SUCCESS": "float32"},  # checked on success
                 ray_address=shared_ray, shared=True).start()
    yield srv
    srv.stop()


def weights_uri(server: Server) -> str:
    return f"file://{server.data_dir}/data-store/tenants/admin/data/tiny-llama"


def fine_tune(server: Server, **model) -> dict:
    return {"name": "fine-tune", "workers": 2, "resources_per_worker": {"cpu": 1},
            "model": {**MODEL, **model}, "init": {"uri": weights_uri(server)},
            "train": {"steps": 20, "global_batch_size": 4, "lr": 1e-3, "warmup_steps": 2},
            "checkpoint": {"every_steps": 10}}


def refused(response: httpx.Response, status: int, field: str | None, *words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if field is not None:
        assert error.get("field") == field, error
    for word in words:
        assert word in error["message"], error


def brigades_logits(server: Server, job_id: str, spec: dict) -> torch.Tensor:
    """The job's final checkpoint in Brigade's own model (one process)."""
    from workers.engine.trainer import Trainer

    target = CheckpointTarget(root=f"file://{server.data_dir}/storage", tenant="admin",
                              job=job_id, secret=SECRET)
    init_single_rank()
    try:
        trainer = Trainer(JobSpec.model_validate(spec), target)
        assert trainer.resumed_from == 20
        with torch.no_grad():
            return trainer.model(tokens())
    finally:
        dist.destroy_process_group()


def test_fine_tune_from_hugging_face_weights_export_and_load_back(server, tmp_path):
    spec = fine_tune(server)
    job = server.submit(spec)
    assert job["spec"]["init"]["uri"] == weights_uri(server)
    server.wait(job["id"], lambda j: j["state"] == "SUCCEEDED", timeout_s=300)
    # exported when it succeeded, at its final checkpoint, in float32
    deadline = time.monotonic() + 180
    while not (listed := server.get(f"/v1/jobs/{job['id']}/exports")):
        assert time.monotonic() < deadline, server.log_tail()
        time.sleep(0.5)
    [export] = listed
    assert (export["id"], export["step"], export["dtype"]) == ("step-000000020-float32", 20,
                                                               "float32")
    out = tmp_path / "downloaded"
    cli = subprocess.run(
        [sys.executable, "-m", "api.cli", "export", job["id"], "-o", str(out),
         "--url", server.url, "--key", KEY], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(export["files"])
    theirs = transformers.LlamaForCausalLM.from_pretrained(str(out)).eval()
    with torch.no_grad():
        their_logits = theirs(tokens()).logits
    assert (their_logits - brigades_logits(server, job["id"], spec)).abs().max() <= 1e-5
    # The model the user brought, fine-tuned: its config but for what training changed, and
    # its tokenizer, so transformers' pipeline generates from the export as it stands.
    base = json.loads((Path(weights_uri(server).removeprefix("file://")) / "config.json")
                      .read_text())
    exported = json.loads((out / "config.json").read_text())
    assert exported["max_position_embeddings"] == 128  # not the job's seq_len, 32
    for key in ("bos_token_id", "eos_token_id", "dtype", "rope_parameters"):
        assert exported.get(key) == base.get(key), key
    assert {"tokenizer.json", "tokenizer_config.json", "generation_config.json"} <= set(
        export["files"])
    generate = transformers.pipeline("text-generation", model=str(out))
    [made] = generate("w1 w2 w3", max_new_tokens=4, do_sample=False)
    assert made["generated_text"].startswith("w1 w2 w3")
    assert len(made["generated_text"].split()) > 3

    # A flipped byte in a stored file: its download is refused, naming the check.
    stored = Path(export["uri"].removeprefix("file://")) / "model.safetensors"
    data = bytearray(stored.read_bytes())
    data[-1] ^= 0xFF
    stored.write_bytes(bytes(data))
    r = server.http.get(f"/v1/jobs/{job['id']}/exports/{export['id']}/files/model.safetensors")
    refused(r, 409, None, "model.safetensors fails its manifest check")
    # A torn export (no manifest: its writer died) is never listed, and is removed.
    torn = stored.parent.parent / "step-000000010-bfloat16"
    torn.mkdir()
    (torn / "model-00001-of-00002.safetensors").write_bytes(b"\x08" + b"\0" * 20)
    assert [e["id"] for e in server.get(f"/v1/jobs/{job['id']}/exports")] == [export["id"]]
    assert not torn.exists()

    # Refusals that need a job: an uncommitted step (409), a tenant reaching
    # for another's job (404), a family with no Hugging Face architecture (422).
    r = server.http.post(f"/v1/jobs/{job['id']}/exports", json={"step": 7})
    refused(r, 409, "step", "no committed checkpoint at step 7")
    made = server.http.post("/v1/tenants", json={"name": "other-team"})
    assert made.status_code == 201, made.text
    other = httpx.Client(base_url=server.url, timeout=30,
                         headers={"Authorization": f"Bearer {made.json()['api_key']}"})
    forked = {**spec, "init": {"job": job["id"]}}
    refused(other.post("/v1/jobs", json=forked), 404, None, job["id"])
    refused(other.get(f"/v1/jobs/{job['id']}/exports"), 404, None)
    fork = server.submit({**forked, "train": {**spec["train"], "steps": 1}})
    assert fork["spec"]["init"] == {"uri": None, "job": job["id"], "step": 20,
                                    "resume_optimizer": False, "resume_data": False,
                                    "adapter_uri": None}
    server.http.post(f"/v1/jobs/{fork['id']}/cancel")
    gpt = server.submit({"name": "gpt", "model": {"n_layers": 1, "d_model": 32, "n_heads": 2},
                         "train": {"steps": 1}})
    refused(server.http.post(f"/v1/jobs/{gpt['id']}/exports", json={}), 422, "model",
            "no Hugging Face architecture")
    server.http.post(f"/v1/jobs/{gpt['id']}/cancel")
    for ended in (fork, gpt):  # nothing left running for the server's stop to wait on
        server.wait(ended["id"], lambda j: j["state"] in TERMINAL, timeout_s=120)  # 1 step: may
        # have succeeded before the cancel came


@pytest.mark.parametrize("change, status, field, words", [
    ({"uri": "file:///etc/llama"}, 422, "init.uri", ["must lie under this tenant's data prefix"]),
    ({"model": {"ffn_dim": 128}}, 422, "init.uri",
     ["model.layers.0.mlp.gate_proj.weight", "[96, 64]", "[128, 64]"]),
    ({"model": {"tie_embeddings": True}}, 422, "model.tie_embeddings",
     ["tie_word_embeddings False"]),
    ({"model": {"norm_eps": 1e-5}}, 422, "model.norm_eps", ["rms_norm_eps 1e-06"]),
    ({"model": {"family": "gpt", "d_model": 64, "n_heads": 4}}, 422, "init.uri",
     ["needs model.family 'llama'"]),
    ({"uri": "missing-dir"}, 422, "init.uri", []),
    ({"job": "no-such-job"}, 404, None, ["no-such-job"]),
    ({"uri": "file:///x", "job": "y"}, 422, "init.uri", ["exactly one of"]),
])
def test_init_refusals_say_why(server, change, status, field, words):
    spec = fine_tune(server)
    if "model" in change:
        model = {k: v for k, v in spec["model"].items()
                 if change["model"].get("family") != "gpt" or k in ("n_layers", "vocab_size",
                                                                    "seq_len")}
        spec["model"] = {**model, **change["model"]}
    else:
        spec["init"] = {k: v for k, v in change.items()}
        if "missing-dir" in change.get("uri", ""):
            spec["init"]["uri"] = weights_uri(server).replace("tiny-llama", "missing-dir")
    refused(server.http.post("/v1/jobs", json=spec), status, field, *words)
