"""The examples of docs/examples/, run as written: each YAML's leading comment
gives the shell lines a user types (indented by three spaces after `#`,
a trailing `\\` continuing a line), and a test per example runs them, in
order, in one bash (`set -euo pipefail`: a line may use what an earlier one
set), against a fresh `brigade serve` (tests/e2e/serve_harness.py), then
checks what they made. The lines run in a scratch directory that sees the
checkout's `.venv` and `docs` as a user's checkout has them, so whatever they
write stays out of the checkout.

The CLI is told only where that serve keeps its data (BRIGADE_DATA_DIR, what
`.data/` is to a user: it finds the URL there) and the admin key.
(The README's first job, docs/examples/pretrain-llama.yaml, runs as the
README's quick start: tests/e2e/test_readme_quickstart.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.e2e.serve_harness import KEY, Server

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
SECRET = "e2e-secret-0123456789abcdef"  # the harness's BRIGADE_SECRET


def commands(example: Path) -> list[str]:
    """The shell lines of an example's leading comment (`#   ...`), continuations joined."""
    lines: list[str] = []
    for line in example.read_text().splitlines():
        if not line.startswith("#"):
            break  # the comment at the top ends where the spec begins
        if not line.startswith("#   "):
            continue
        text = line[4:].rstrip()
        if lines and lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1].rstrip() + " " + text.strip()
        else:
            lines.append(text)
    return lines


def run_as_written(example: Path, server: Server, workdir: Path, timeout_s: float = 420
                   ) -> subprocess.CompletedProcess:
    """Run the example's lines in one bash in `workdir` (with the checkout's .venv and docs)."""
    lines = commands(example)
    assert lines, f"{example.name} has no commands in its leading comment"
    for name in (".venv", "docs"):
        (workdir / name).symlink_to(ROOT / name)
    env = {k: v for k, v in os.environ.items()
           if k not in ("BRIGADE_URL", "BRIGADE_API_KEY", "BRIGADE_PROFILE")}
    env |= {"BRIGADE_DATA_DIR": str(server.data_dir), "BRIGADE_ADMIN_KEY": KEY,
            "BRIGADE_CONFIG": str(workdir / "no-profiles.yaml"), "COLUMNS": "120"}
    script = "set -euo pipefail\n" + "\n".join(f"echo '+ {i}' >&2\n{line}"
                                                 for i, line in enumerate(lines))
    started = time.monotonic()
    ran = subprocess.run(["bash", "-c", script], cwd=workdir, env=env, capture_output=True,
                         text=True, timeout=timeout_s)
    print(f"{example.name}: {time.monotonic() - started:.1f} s")  # pytest -s: where the time goes
    assert ran.returncode == 0, (f"{example.name}: exit {ran.returncode}\nstdout:\n"
                                 f"{ran.stdout[-3000:]}\nstderr:\n{ran.stderr[-3000:]}\n"
                                 f"{server.log_tail()}")
    return ran


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_ray):
    # the example jobs check the export made when they succeed
    srv = Server(tmp_path_factory.mktemp("examples"), env={"BRIGADE_EXPORT_ON_SUCCESS": "float32"},
                 ray_address=shared_ray, shared=True).start()
    yield srv
    srv.stop()


def test_the_commands_are_read_from_the_leading_comment():
    lines = commands(EXAMPLES / "finetune-hf.yaml")
    assert lines[0].startswith(".venv/bin/python docs/examples/make_tiny_llama.py ")
    assert any(" submit " in line for line in lines)
    assert all(not line.endswith("\\") for line in commands(EXAMPLES / "pretrain-llama.yaml"))


# -- docs/examples/finetune-hf.yaml -----------------------------------------------------------

def engine_logits(server: Server, job: dict, tokens: torch.Tensor) -> torch.Tensor:
    """The job's final checkpoint in Brigade's own model (one process)."""
    from checkpoints import CheckpointTarget
    from tests.checkpoints.ckpt_harness import init_single_rank
    from workers.engine.trainer import Trainer
    from workers.schema import JobSpec

    target = CheckpointTarget(root=f"file://{server.data_dir}/storage", tenant="admin",
                              job=job["id"], secret=SECRET)
    init_single_rank()
    try:
        trainer = Trainer(JobSpec.model_validate(job["spec"]), target)
        assert trainer.resumed_from == job["spec"]["train"]["steps"]
        with torch.no_grad():
            return trainer.model(tokens)
    finally:
        dist.destroy_process_group()


def test_finetune_hf(server, tmp_path):
    import transformers

    ran = run_as_written(EXAMPLES / "finetune-hf.yaml", server, tmp_path)
    [job] = [j for j in server.get("/v1/jobs")["items"] if j["name"] == "finetune-hf"]
    spec, steps = job["spec"], job["spec"]["train"]["steps"]
    assert job["state"] == "SUCCEEDED"
    # The model was read from the directory's config.json: the stored spec holds its fields.
    assert {k: spec["model"][k] for k in ("family", "n_layers", "d_model", "n_kv_heads",
                                          "ffn_dim", "vocab_size", "config_uri")} == {
        "family": "llama", "n_layers": 2, "d_model": 64, "n_kv_heads": 2, "ffn_dim": 128,
        "vocab_size": 256, "config_uri": None}
    assert spec["init"]["uri"].endswith("/tenants/admin/data/models/tiny-llama")
    # every_steps 0: the final step is the one checkpoint, and the export on success is of it.
    assert spec["checkpoint"]["every_steps"] == 0
    assert [c["step"] for c in server.get(f"/v1/jobs/{job['id']}/checkpoints")] == [steps]
    [export] = server.get(f"/v1/jobs/{job['id']}/exports")
    assert (export["step"], export["dtype"]) == (steps, "float32")
    asked = server.http.post(f"/v1/jobs/{job['id']}/exports", json={"dtype": "bfloat16"})
    assert asked.status_code == 202 and asked.json()["step"] == steps, asked.text
    deadline = time.monotonic() + 120
    while len(server.get(f"/v1/jobs/{job['id']}/exports")) < 2:
        assert time.monotonic() < deadline, server.log_tail()
        time.sleep(0.5)

    # The downloaded export: transformers loads it with Brigade's logits, its weights moved
    # from the ones it started from, and the last line generated from it.
    tuned = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path / "tiny-llama-tuned")).eval()
    base = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path / "tiny-llama")).eval()
    tokens = torch.tensor([list(b"def main():\n    return 0\n")])
    with torch.no_grad():
        theirs, before = tuned(tokens).logits, base(tokens).logits
    assert (theirs - engine_logits(server, job, tokens)).abs().max() <= 1e-5
    assert (theirs - before).abs().max() > 1e-2
    assert "uploaded tiny-llama/model.safetensors" in ran.stdout
    # What the example says to expect: `def ` and then spaces (30 steps of a tiny model learn
    # the corpus's commonest bytes, its indentation), as many as the tokens it was asked for.
    generated = ran.stdout[ran.stdout.rindex("\ndef ") + 1:]
    print(f"the pipeline printed {generated!r}")  # pytest -s
    assert len(generated.encode()) > len("def ") + 10, ran.stdout
    continuation = generated[len("def "):]
    assert sum(c.isspace() for c in continuation) >= 0.8 * len(continuation), generated
    assert "`def ` followed by spaces" in (EXAMPLES / "finetune-hf.yaml").read_text()


# -- docs/examples/lora-hf.yaml ---------------------------------------------------------------

def test_lora_hf(server, tmp_path):
    import peft
    import transformers

    ran = run_as_written(EXAMPLES / "lora-hf.yaml", server, tmp_path)
    [job] = [j for j in server.get("/v1/jobs")["items"] if j["name"] == "lora-hf"]
    spec, steps = job["spec"], job["spec"]["train"]["steps"]
    assert job["state"] == "SUCCEEDED"
    assert (spec["adapter"]["rank"], spec["adapter"]["alpha"]) == (8, 16)
    # Exported on success as its own kind (the adapter), and merged when asked.
    exports = {e["kind"]: e for e in server.get(f"/v1/jobs/{job['id']}/exports")}
    assert set(exports) == {"adapter", "merged"}
    assert exports["adapter"]["id"] == f"step-{steps:09d}-float32-adapter"
    assert set(exports["adapter"]["files"]) == {"adapter_config.json",
                                                "adapter_model.safetensors"}

    # The adapter directory is PEFT's: its config, and it loads onto the transformers base
    # with Brigade's logits; the merged model has them too, and both moved from the base.
    lora, merged = tmp_path / "tiny-llama-lora", tmp_path / "tiny-llama-merged"
    config = json.loads((lora / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 8, 16)
    assert set(config["target_modules"]) == set(spec["adapter"]["targets"])
    base = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path / "tiny-llama")).eval()
    tokens = torch.tensor([list(b"def main():\n    return 0\n")])
    with torch.no_grad():
        before = base(tokens).logits
        adapted = peft.PeftModel.from_pretrained(base, str(lora)).eval()
        theirs = adapted(tokens).logits
        folded = transformers.LlamaForCausalLM.from_pretrained(str(merged)).eval()(tokens).logits
    assert (theirs - engine_logits(server, job, tokens)).abs().max() <= 1e-5
    assert (folded - theirs).abs().max() <= 1e-5
    assert (theirs - before).abs().max() > 1e-2
    assert "tokenizer.json" in exports["merged"]["files"]  # the base's, for a pipeline
    assert "tiny-llama-lora" in ran.stderr and "tiny-llama-merged" in ran.stderr


# -- docs/examples/mixture.yaml ---------------------------------------------------------------

def test_mixture(server, tmp_path):
    ran = run_as_written(EXAMPLES / "mixture.yaml", server, tmp_path)
    [job] = [j for j in server.get("/v1/jobs")["items"] if j["name"] == "mixture"]
    assert job["state"] == "SUCCEEDED"
    mix = job["spec"]["data"]["mix"]
    assert [m["uri"].rsplit("/", 2)[-2:] for m in mix] == [["datasets", "prose"], ["datasets", "code"]]
    assert mix[0]["uri"].endswith("/tenants/admin/data/datasets/prose")
    rows = server.get(f"/v1/jobs/{job['id']}/metrics")
    steps, seq = job["spec"]["train"]["steps"], job["spec"]["model"]["seq_len"]
    assert [row["step"] for row in rows] == list(range(1, steps + 1))
    # prose 3 : code 1 of 8 samples: 6 and 2 a batch, each member's tokens so far in every row
    assert [row["mix_tokens"] for row in rows] == [{"prose": 6 * s * seq, "code": 2 * s * seq}
                                                   for s in range(1, steps + 1)]
    evals = [row for row in rows if row["eval_loss"] is not None]
    assert [row["step"] for row in evals] == [10, 20, 30]
    for row in evals:
        by_member = row["mix_eval_loss"]
        assert set(by_member) == {"prose", "code"}
        assert row["eval_loss"] == pytest.approx(0.75 * by_member["prose"] + 0.25 * by_member["code"])
    assert evals[-1]["mix_eval_loss"]["code"] < evals[0]["mix_eval_loss"]["code"]
    # the metrics line of the example: the per-member columns, as JSON
    assert '"prose": ' in ran.stdout and '"code": ' in ran.stdout and "MIX_EVAL_LOSS" in ran.stdout
