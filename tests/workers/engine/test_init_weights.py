"""Start from weights and export them: a tiny random `LlamaForCausalLM` made
here, imported by each rank reading only its own slices (its logits equal
transformers' within 1e-5 at world sizes 1 and 2), a job initialised from
another job's checkpoint at another world size (a step named, or its
latest), and an export that
transformers loads back (and one whose writer is killed, never listed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist
import transformers

from checkpoints import CheckpointTarget
from tests.checkpoints.ckpt_harness import init_single_rank, run_ranks
from tests.workers.hf_ranks import (
    SECRET,
    hf_llama,
    import_and_forward,
    job_spec,
    tokens,
    train_and_save,
)


@pytest.fixture
def one_rank():
    init_single_rank()
    yield
    dist.destroy_process_group()


def expected_logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens()).logits


@pytest.mark.parametrize("shards", [None, "40KB"], ids=["single-file", "sharded-index"])
def test_a_job_initialised_from_hugging_face_weights_has_their_logits(tmp_path, one_rank, shards):
    from workers.engine.trainer import Trainer

    theirs = hf_llama(tmp_path / "hf", max_shard_size=shards)
    if shards:
        assert (tmp_path / "hf" / "model.safetensors.index.json").exists()
    trainer = Trainer(job_spec(init={"uri": f"file://{tmp_path}/hf"}))
    assert trainer.initialised_from == f"weights from file://{tmp_path}/hf"
    with torch.no_grad():
        ours = trainer.model(tokens())
    assert (ours - expected_logits(theirs)).abs().max() <= 1e-5


def test_each_of_two_ranks_reads_only_its_half(tmp_path):
    theirs = hf_llama(tmp_path / "hf", tied=False)
    run_ranks(import_and_forward, 2, f"file://{tmp_path}/hf", str(tmp_path))
    expected = expected_logits(theirs)
    file_bytes = (tmp_path / "hf" / "model.safetensors").stat().st_size
    for rank in range(2):
        got = torch.load(tmp_path / f"logits-{rank}.pt")
        assert (got - expected).abs().max() <= 1e-5
        read = json.loads((tmp_path / f"read-{rank}.json").read_text())
        # every parameter is a dim-0 shard: one ranged read each, of half its bytes
        assert 0.45 * file_bytes <= read["bytes"] <= 0.55 * file_bytes, read
        assert read["reads"] == 1 + 2 * 9 + 2  # embedding, 9 a layer, final norm, head


def test_tensor_parallel_ranks_read_their_rows_and_columns(tmp_path):
    """tp 2: q, k, v, gate, up split by rows, o and down by columns (a run per
    row, read as spans): still about half the bytes each, the same logits."""
    theirs = hf_llama(tmp_path / "hf", tied=False)
    run_ranks(import_and_forward, 2, f"file://{tmp_path}/hf", str(tmp_path), 2)
    expected = expected_logits(theirs)
    file_bytes = (tmp_path / "hf" / "model.safetensors").stat().st_size
    for rank in range(2):
        assert (torch.load(tmp_path / f"logits-{rank}.pt") - expected).abs().max() <= 1e-5
        read = json.loads((tmp_path / f"read-{rank}.json").read_text())
        assert read["bytes"] <= 0.75 * file_bytes, read  # norms are replicated: read whole


def test_a_job_starts_from_another_jobs_checkpoint_resharded(tmp_path, one_rank):
    """Saved at world size 2, loaded at 1: the model is the source's; the
    optimizer and the data cursor start fresh."""
    from workers.engine.trainer import Trainer

    root = f"file://{tmp_path}/storage"
    dist.destroy_process_group()  # the ranks below make their own groups
    run_ranks(train_and_save, 2, root, str(tmp_path))
    init_single_rank()
    source = torch.load(tmp_path / "source.pt")
    target = CheckpointTarget(root=root, tenant="acme", job="forked", secret=SECRET)
    trainer = Trainer(job_spec(init={"job": "source", "step": 3}), target)
    assert trainer.initialised_from == "weights from job source step 3"
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(value.full_tensor(), source[name]), name
    assert trainer.step == 0 and trainer.batches.next_sample == 0
    assert not trainer.optimizer.state  # fresh AdamW: no moments yet
    # No step: the source's latest committed one (a job that waited for its source to succeed).
    latest = Trainer(job_spec(init={"job": "source"}),
                     CheckpointTarget(root=root, tenant="acme", job="forked-latest", secret=SECRET))
    assert latest.initialised_from == "weights from job source step 3"
    resumed = Trainer(job_spec(init={"job": "source", "step": 3, "resume_optimizer": True,
                                     "resume_data": True}),
                      CheckpointTarget(root=root, tenant="acme", job="forked-2", secret=SECRET))
    assert resumed.step == 0 and resumed.batches.next_sample == 3 * 4  # its cursor, asked for
    assert all(int(s["step"]) == 3 for s in resumed.optimizer.state.values())  # its AdamW


def test_an_export_loads_in_transformers_with_brigades_logits(tmp_path, one_rank):
    from workers.engine.export import export_checkpoint, export_request
    from workers.engine.trainer import Trainer

    target = CheckpointTarget(root=f"file://{tmp_path}/storage", tenant="acme", job="j1",
                              secret=SECRET)
    spec = job_spec(checkpoint={"every_steps": 3}, model={**job_spec().model.model_dump(),
                                                          "tie_embeddings": True})
    trainer = Trainer(spec, target)
    trainer.run()
    done = export_checkpoint(export_request(vars(target), spec.model, 3, "float32", 30_000))
    exports = target.open_exports()
    [listed] = exports.list_committed()
    assert listed.id == done["id"] == "step-000000003-float32"
    assert "model.safetensors.index.json" in listed.files  # over the size limit: sharded
    theirs = transformers.LlamaForCausalLM.from_pretrained(exports.path(listed.id)).eval()
    assert theirs.config.tie_word_embeddings
    with torch.no_grad():
        ours = trainer.model(tokens())
    assert (expected_logits(theirs) - ours).abs().max() <= 1e-5
    bf16 = export_checkpoint(export_request(vars(target), spec.model, 3, "bfloat16", 10**9))
    assert bf16["bytes"] < done["bytes"] * 0.6  # half the bytes a weight, one file
    assert {e.id for e in exports.list_committed()} == {done["id"], bf16["id"]}


def test_import_and_export_through_s3(tmp_path, one_rank, moto_s3, s3_bucket):
    """The same paths on an object store (moto): ranged reads of the weights,
    DCP's checkpoint, the export's streamed files and manifest."""
    import fsspec

    from workers.engine.export import export_checkpoint, export_request
    from workers.engine.init_weights import HuggingFaceWeights
    from workers.engine.trainer import Trainer

    root = f"s3://{s3_bucket}/hf-{os.getpid()}-{time.monotonic_ns()}"
    theirs = hf_llama(tmp_path / "hf")
    fsspec.filesystem("s3", **moto_s3).put(str(tmp_path / "hf"), f"{root}/hf", recursive=True)
    target = CheckpointTarget(root=root, tenant="acme", job="j1", secret=SECRET,
                              storage_options=moto_s3)
    trainer = Trainer(job_spec(checkpoint={"every_steps": 3}), target)
    HuggingFaceWeights(f"{root}/hf", moto_s3).fill(trainer.model)
    with torch.no_grad():
        assert (trainer.model(tokens()) - expected_logits(theirs)).abs().max() <= 1e-5
    trainer.run()
    done = export_checkpoint(export_request(vars(target), trainer.spec.model, 3, "float32",
                                            10**9))
    exports = target.open_exports()
    assert [e.id for e in exports.list_committed()] == [done["id"]]
    out = tmp_path / "back"
    exports.fs.get(exports.path(done["id"]) + "/", str(out), recursive=True)
    back = transformers.LlamaForCausalLM.from_pretrained(str(out)).eval()
    with torch.no_grad():
        assert (expected_logits(back) - trainer.model(tokens())).abs().max() <= 1e-5


KILLED_WRITER = """
import sys, time, pathlib
from workers.engine.export import export_checkpoint
request, flag = eval(sys.argv[1]), pathlib.Path(sys.argv[2])
def stall(name):
    flag.write_text(name)
    time.sleep(600)
export_checkpoint(request, on_tensor=stall)
"""


def test_an_export_whose_writer_is_killed_midway_is_never_listed(tmp_path, one_rank):
    from workers.engine.export import export_request
    from workers.engine.trainer import Trainer

    target = CheckpointTarget(root=f"file://{tmp_path}/storage", tenant="acme", job="j1",
                              secret=SECRET)
    spec = job_spec(checkpoint={"every_steps": 3})
    Trainer(spec, target).run()
    request = export_request(vars(target), spec.model, 3, "float32", 10**9)
    flag = tmp_path / "first-tensor-written"
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, repr(request), str(flag)],
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert writer.poll() is None and time.monotonic() < deadline, "the writer never started"
        time.sleep(0.1)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    exports = target.open_exports()
    assert exports.ids() == ["step-000000003-float32"]  # half a file is there...
    assert exports.list_committed() == []  # ...and never listed
    assert exports.cleanup_torn() == ["step-000000003-float32"]
    assert exports.ids() == []
