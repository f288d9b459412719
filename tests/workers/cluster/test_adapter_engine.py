"""LoRA adapters in Ray rank actors (workers/engine/adapters.py): sharded
under every strategy at world sizes 3 and 2, and at (dp, tp) = (1, 2), the
loss curve is one process's; a checkpoint holds the adapters and their
optimizer state alone, with the base's identity, and resumes at another
world size on the same curve; a resume on another base is refused."""

from __future__ import annotations

import hashlib
import json
from typing import get_args

import pytest

from tests.workers.engine_spec import engine_job, engine_spec
from workers.engine.local import run_single_process
from workers.schema import Strategy

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

STEPS, SAVED_AT = 8, 4
LLAMA = {"family": "llama", "n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2,
         "seq_len": 16, "vocab_size": 256}
ADAPTER = {"rank": 4, "alpha": 8}
SECRET = "adapter-engine-test-secret-0123456789"


def spec(strategy: str = "full_shard", **more) -> dict:
    return engine_spec(STEPS, model=LLAMA, data={"source": "synthetic"},
                       train={"global_batch_size": 12, "lr": 2e-2, "warmup_steps": 0},
                       sharding={"strategy": strategy}, adapter=ADAPTER, **more)


def losses(metrics: list[dict]) -> list[float]:
    return [m["loss"] for m in metrics]


@pytest.fixture(scope="module")
def reference() -> list[float]:
    curve = losses(run_single_process(engine_job(**spec())))
    assert curve[-1] < curve[0] - 0.02  # the adapters alone move the loss
    return curve


@pytest.mark.parametrize("strategy", get_args(Strategy))
@pytest.mark.parametrize("world_size", [3, 2])
def test_sharded_adapters_equal_one_process(groups, reference, world_size, strategy):
    per_rank = groups.get(world_size).train(spec(strategy))
    for metrics in per_rank:
        assert losses(metrics) == pytest.approx(reference, abs=1e-5)
    first = per_rank[0][0]
    # all gathered, only the adapters' gradients reduced (at 3, FSDP pads lora_A's 4 rows to 6)
    if strategy == "full_shard" and world_size == 2:
        assert first["comm_bytes"] == pytest.approx(first["comm_bytes_theory"], rel=0.02)


def test_adapters_at_dp_1_tp_2_equal_one_process(groups, reference):
    # column-parallel layers split B by rows, row-parallel ones A by columns
    per_rank = groups.get(2).train(spec() | {"workers": 2, "parallelism": {"tp": 2}})
    for metrics in per_rank:
        assert losses(metrics) == pytest.approx(reference, abs=1e-5)


def _target(tmp_path, name: str) -> dict:
    return {"root": f"file://{tmp_path}", "tenant": "acme", "job": name, "secret": SECRET,
            "storage_options": {}}


def test_a_checkpoint_holds_the_adapters_alone_and_resumes_at_another_world_size(
        groups, reference, tmp_path):
    target = _target(tmp_path, "lora")
    job = spec() | {"workers": {"min": 1, "max": 3}}
    first = groups.get(2).train(job, checkpoint=target, stop_after=SAVED_AT)[0]
    assert first[-1]["checkpoint_step"] == SAVED_AT
    step_dir = tmp_path / "tenants" / "acme" / "jobs" / "lora" / "checkpoints"
    [saved] = [d for d in step_dir.iterdir() if d.name.endswith(f"{SAVED_AT:09d}")]
    manifest = json.loads((saved / "manifest.json").read_text())
    extra = manifest.get("extra", manifest)
    # the base's identity: the job's model config (a sha256 of its spec) and its seed
    model = engine_job(**job).model.model_dump(mode="json", exclude={"config_uri"})
    config = hashlib.sha256(json.dumps(model, sort_keys=True).encode()).hexdigest()
    assert model["d_model"] == LLAMA["d_model"] and model["n_layers"] == LLAMA["n_layers"]
    assert extra["base"] == {"config": config, "seed": 0}

    import torch.distributed.checkpoint as dcp

    keys = set(dcp.FileSystemReader(str(saved)).read_metadata().state_dict_metadata)
    model_keys = {k for k in keys if k.startswith("app.model.")}
    assert model_keys and all(".lora_A." in k or ".lora_B." in k for k in model_keys)
    assert len(model_keys) == 2 * 7 * LLAMA["n_layers"]
    state_keys = {k for k in keys if k.startswith("app.optim.state.")}
    assert state_keys and all(".lora_A." in k or ".lora_B." in k for k in state_keys)

    resumed = groups.get(3).train(job, checkpoint=target)[0]
    assert [m["step"] for m in resumed] == list(range(SAVED_AT + 1, STEPS + 1))
    assert losses(first) + losses(resumed) == pytest.approx(reference, abs=1e-5)


def test_a_resume_on_another_base_is_refused(groups, tmp_path):
    from workers.cluster.group import WorkerGroupError

    target = _target(tmp_path, "other-base")
    assert groups.get(2).train(spec(), checkpoint=target, stop_after=2)[0][-1]["checkpoint_step"] == 2
    other = spec()
    other["train"]["seed"] = 7  # the seeded base is another
    with pytest.raises(WorkerGroupError, match="BaseMismatch: .*trained on a base seeded 0"):
        groups.get(2).train(other, checkpoint=target)
    groups.close()
