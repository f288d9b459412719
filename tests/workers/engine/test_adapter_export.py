"""An adapter job's exports load where its users will load them: a PEFT
adapter directory that `peft.PeftModel.from_pretrained` puts on the
transformers base, and a merged model that `transformers` loads alone, each
with Brigade's logits within 1e-5. A tiny random Llama made here is the base;
the job trains LoRA adapters on it for a few steps in one process (a world of
one, real gloo, real files), once for the module."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import peft
import pytest
import torch
import transformers
from safetensors.torch import load_file

from checkpoints import CheckpointTarget
from checkpoints.errors import CheckpointInvalid
from tests.workers.hf_ranks import MODEL, SECRET, hf_llama, tokens
from workers.engine.distributed import destroy_process_group, init_single_process
from workers.engine.export import export_checkpoint, export_problem, export_request
from workers.engine.export_plan import CheckpointTensors
from workers.schema import JobSpec

STEPS = 4
ADAPTER = {"rank": 4, "alpha": 8}


def logits_of(model) -> torch.Tensor:
    with torch.no_grad():
        out = model(tokens())
    return getattr(out, "logits", out)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The base's directory, the adapter job's checkpoint target, and Brigade's
    logits (the trained model's, fp32) and the base's on a fixed batch."""
    from workers.engine.trainer import Trainer

    root = tmp_path_factory.mktemp("adapter-export")
    base = hf_llama(root / "hf")
    spec = JobSpec.model_validate({
        "model": dict(MODEL), "init": {"uri": f"file://{root}/hf"}, "adapter": ADAPTER,
        "data": {"source": "synthetic"},
        # lr high enough that B moves far from zero in a few steps
        "train": {"steps": STEPS, "global_batch_size": 4, "lr": 1e-2, "warmup_steps": 0},
        "checkpoint": {"every_steps": 0}})
    target = CheckpointTarget(root=f"file://{root}/storage", tenant="acme", job="lora",
                              secret=SECRET)
    init_single_process(timeout_s=60)
    try:
        trainer = Trainer(spec, target)
        trainer.run()
        ours = logits_of(trainer.model)
    finally:
        destroy_process_group()
    return SimpleNamespace(root=root, base_uri=f"file://{root}/hf", spec=spec, target=target,
                           ours=ours, base=logits_of(base))


def export(trained, kind: str, base_uri: str | None = None, dtype: str = "float32") -> dict:
    spec = trained.spec
    return export_checkpoint(export_request(
        vars(trained.target), spec.model, STEPS, dtype, 30_000, base_uri or trained.base_uri,
        kind=kind, adapter=spec.adapter.model_dump(mode="json")))


def test_the_adapter_jobs_checkpoint_holds_its_adapters_alone(trained):
    store = trained.target.open_store()
    names = CheckpointTensors(store.step_uri(STEPS), {}, STEPS).names()
    assert len(names) == 2 * 7 * MODEL["n_layers"]  # A and B of 7 targets in every block
    assert all(n.endswith((".lora_A.weight", ".lora_B.weight")) for n in names), names
    # trained far enough that the test below could fail: the adapters change the logits
    assert (trained.ours - trained.base).abs().max() > 1e-2


def test_an_adapter_export_loads_in_peft_with_brigades_logits(trained):
    done = export(trained, "adapter")
    exports = trained.target.open_exports()
    assert done["id"] == "step-000000004-float32-adapter"
    [listed] = exports.list_committed()
    assert (listed.id, listed.kind) == (done["id"], "adapter")
    assert sorted(listed.files) == ["adapter_config.json", "adapter_model.safetensors"]
    directory = exports.path(done["id"])
    config = json.loads(exports.fs.cat_file(f"{directory}/adapter_config.json"))
    assert (config["r"], config["lora_alpha"]) == (4, 8)
    keys = load_file(f"{directory}/adapter_model.safetensors")
    assert all(k.startswith("base_model.model.model.layers.") for k in keys)

    base = transformers.LlamaForCausalLM.from_pretrained(trained.root / "hf")
    theirs = peft.PeftModel.from_pretrained(base, directory).eval()
    assert (logits_of(theirs) - trained.ours).abs().max() <= 1e-5


def test_a_merged_export_is_a_plain_hugging_face_model_with_brigades_logits(trained):
    done = export(trained, "merged")
    exports = trained.target.open_exports()
    assert done["id"] == "step-000000004-float32-merged"
    listed = {e.id: e for e in exports.list_committed()}[done["id"]]
    assert listed.kind == "merged"
    assert "model.safetensors.index.json" in listed.files  # over the size limit: sharded
    theirs = transformers.LlamaForCausalLM.from_pretrained(exports.path(done["id"])).eval()
    assert (logits_of(theirs) - trained.ours).abs().max() <= 1e-5


def test_a_merge_onto_another_base_than_the_trained_one_is_refused(trained):
    other = trained.root / "other"
    shutil.copytree(trained.root / "hf", other)
    hf_llama(other, seed=2)  # same shapes, other weights, over the copy
    with pytest.raises(CheckpointInvalid, match="has changed since the adapters were trained"):
        export(trained, "merged", base_uri=f"file://{other}", dtype="bfloat16")
    assert "step-000000004-bfloat16-merged" not in trained.target.open_exports().ids()


def test_an_export_its_job_cannot_make_is_refused_up_front():
    adapter = {"kind": "lora", "rank": 4, "alpha": 8}
    assert export_problem("adapter", adapter, None) is None  # a seeded base: its adapters export
    assert export_problem("merged", adapter, "file:///base") is None
    assert "no init.uri" in export_problem("merged", adapter, None)
    assert "hold its adapters alone" in export_problem("model", adapter, "file:///base")
    assert "trains every weight" in export_problem("adapter", None, None)
    assert "kind is one of" in export_problem("lora", adapter, None)
    assert export_problem("model", None, None) is None


def test_a_resume_on_other_base_weights_is_refused_naming_a_tensor(trained, tmp_path):
    """The checkpoint's manifest holds the base's tensor digests: the same job
    resumed after its init.uri directory was rewritten with other weights fails
    with `BaseMismatch`, a permanent error, before it trains a step."""
    from workers.cluster.errors import is_permanent
    from workers.engine.errors import BaseMismatch
    from workers.engine.trainer import Trainer

    storage = tmp_path / "storage"
    shutil.copytree(trained.root / "storage", storage)
    other = tmp_path / "hf"
    hf_llama(other, seed=2)  # the same shapes and config, other weights
    spec = trained.spec.model_copy(update={"init": trained.spec.init.model_copy(
        update={"uri": f"file://{other}"})})
    target = CheckpointTarget(root=f"file://{storage}", tenant="acme", job="lora", secret=SECRET)
    init_single_process(timeout_s=60)
    try:
        with pytest.raises(BaseMismatch, match=r"other base weights: tensor \S+ differs") as e:
            Trainer(spec, target)
    finally:
        destroy_process_group()
    assert is_permanent(f"{type(e.value).__name__}: {e.value}")
