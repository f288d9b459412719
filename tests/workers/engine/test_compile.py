"""`train.compile`: off by default and out of the config hash, refused with
tensor parallelism; the blocks compiled by inductor follow the eager loss
curve at world size 2 (two spawned gloo ranks); the compilation happens in
the warm-up, before the first step; and a compiler's error becomes a
`CompileError` with its reason, which the control plane does not restart."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.workers.engine_spec import engine_spec
from workers.cluster.errors import is_permanent
from workers.schema import JobSpec, explain

STEPS = 20


def test_compile_is_off_by_default_leaves_the_hash_alone_and_is_refused_with_tensor_parallelism():
    eager = JobSpec.model_validate(engine_spec(3))
    compiled = JobSpec.model_validate(engine_spec(3, train={"compile": True}))
    assert not eager.train.compile and compiled.train.compile
    assert compiled.config_hash() == eager.config_hash()  # the same curve: resumable either way
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate(engine_spec(3, workers=2, train={"compile": True},
                                           model={"family": "llama"}, parallelism={"tp": 2}))
    assert explain(refused.value).startswith("train.compile: "), explain(refused.value)
    assert "parallelism.tp > 1" in explain(refused.value)


def test_compiled_blocks_follow_the_eager_curve_and_compile_before_the_first_step():
    from tests.checkpoints.ckpt_harness import run_ranks
    from tests.workers.engine.compile_ranks import compiled_and_eager

    with tempfile.TemporaryDirectory() as out:
        run_ranks(compiled_and_eager, 2, out, STEPS)
        found = json.loads(Path(f"{out}/losses.json").read_text())
    print({k: v for k, v in found.items() if "warm" in k})
    for name in ("eager", "int8"):
        eager, compiled = found[name], found[f"{name}/compiled"]
        assert len(eager) == len(compiled) == STEPS
        assert eager[-1] < eager[0]  # it trains
        assert compiled == pytest.approx(eager, abs=1e-4), name
        # the eager Trainer has nothing to warm up; the compiled one compiles there
        assert not found[f"{name}/warmed_up"] and found[f"{name}/warmed_up/compiled"]


def test_a_compile_error_carries_the_compilers_reason_and_is_permanent():
    """The engine's wrapping of a real dynamo error (a job whose compiler cannot run,
    for real: tests/e2e/test_compile_e2e.py)."""
    from torch._dynamo.exc import TorchDynamoException

    from workers.engine.compilation import reason

    error = TorchDynamoException("InvalidCxxCompiler: No working C++ compiler found\n\n"
                                 "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace")
    assert reason(error) == "InvalidCxxCompiler: No working C++ compiler found"
    assert is_permanent(f"rank 0 (pid 7, node 10.0.0.1) failed: CompileError: {reason(error)}")
    assert not is_permanent("rank 1 (pid 8, node 10.0.0.1) failed: RuntimeError: Connection reset")
