"""Continue from a PEFT adapter (`init: {uri: DIR, adapter_uri: PEFT_DIR}`,
workers/engine/peft_format.py): a LoRA adapter made and saved here by `peft`
itself, with B non-zero, gives a job whose logits at step 0 are the
PeftModel's within 1e-5 in one process, and at two ranks each reading
only its shards; an adapter that is not the job's, or a file short of a
tensor, is refused at init.adapter_uri naming why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from tests.checkpoints.ckpt_harness import init_single_rank, run_ranks
from tests.workers.hf_ranks import hf_llama, job_spec, tokens
from tests.workers.peft_dirs import TARGETS, continue_and_forward, peft_adapter
from workers.schema import SpecError

ADAPTER = {"rank": 4, "alpha": 8, "targets": TARGETS}


class Made:
    """The base and adapter directories, and the logits transformers and peft give."""

    def __init__(self, root: Path):
        self.root = root
        base = hf_llama(root / "hf")
        with torch.no_grad():
            self.base_logits = base(tokens()).logits
        peft_model = peft_adapter(base, root / "adapter")
        with torch.no_grad():
            self.peft_logits = peft_model(tokens()).logits
        self.base_uri, self.adapter_uri = f"file://{root}/hf", f"file://{root}/adapter"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Made:
    return Made(tmp_path_factory.mktemp("peft"))


@pytest.fixture
def one_rank():
    init_single_rank()
    yield
    dist.destroy_process_group()


def trainer_of(made: Made, adapter_uri: str | None = None, **adapter):
    from workers.engine.trainer import Trainer

    return Trainer(job_spec(init={"uri": made.base_uri,
                                  "adapter_uri": adapter_uri or made.adapter_uri},
                            adapter=ADAPTER | adapter))


def test_a_job_continued_from_a_peft_adapter_has_the_peft_models_logits(made, one_rank):
    trainer = trainer_of(made)
    with torch.no_grad():
        ours = trainer.model(tokens())
    assert (ours - made.peft_logits).abs().max() <= 1e-5
    assert (made.peft_logits - made.base_logits).abs().max() > 1e-2  # B is not zero


@pytest.mark.parametrize("tp", [1, 2], ids=["fsdp", "tp"])
def test_two_ranks_read_their_shards_of_the_adapter(made, tmp_path, tp):
    run_ranks(continue_and_forward, 2, made.base_uri, made.adapter_uri, str(tmp_path), tp)
    tensors = load_file(str(made.root / "adapter" / "adapter_model.safetensors"))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    read = []
    for rank in range(2):
        got = torch.load(tmp_path / f"logits-{rank}.pt")
        assert (got - made.peft_logits).abs().max() <= 1e-5
        read.append(json.loads((tmp_path / f"read-{rank}.json").read_text())["bytes"])
    if tp == 1:  # FSDP: every A and B split by rows, each rank reads half
        assert read == [total // 2, total // 2], (read, total)
    else:  # a column-parallel layer's B and a row-parallel one's A split, the other whole
        # (a row-parallel A's runs, one a row, are read with the short gaps between them)
        assert total // 2 < read[0] == read[1] < total, (read, total)


@pytest.mark.parametrize("change, words", [
    ({"rank": 8}, ["adapter.rank is 8", "has 4"]),
    ({"alpha": 16}, ["adapter.alpha is 16", "has 8"]),
    ({"targets": ["q_proj", "v_proj"]}, ["adapter.targets"]),
])
def test_an_adapter_that_is_not_the_jobs_is_refused(made, one_rank, change, words):
    with pytest.raises(SpecError) as refused:
        trainer_of(made, **change)
    assert refused.value.field == "init.adapter_uri"
    for word in words:
        assert word in str(refused.value), refused.value


def test_a_file_short_of_a_tensor_is_refused_naming_it(made, one_rank, tmp_path):
    short = tmp_path / "short"
    shutil.copytree(made.root / "adapter", short)
    tensors = load_file(str(short / "adapter_model.safetensors"))
    gone = "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"
    del tensors[gone]
    save_file(tensors, str(short / "adapter_model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(SpecError) as refused:
        trainer_of(made, f"file://{short}")
    assert refused.value.field == "init.adapter_uri"
    assert gone in str(refused.value) and "missing" in str(refused.value)


def test_a_directory_that_is_no_adapter_is_refused(made, one_rank):
    with pytest.raises(SpecError) as refused:
        trainer_of(made, made.base_uri)  # a model directory, not an adapter's
    assert refused.value.field == "init.adapter_uri"
    assert "adapter_config.json" in str(refused.value)
