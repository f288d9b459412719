"""`train.compile`: every block compiled by torch.compile (inductor, on CPU
and GPU alike), compiled at start-up, and a compiler that cannot run told
apart from a crash.

Where. `compile_blocks` replaces each block of the decoder by
`torch.compile(block)` inside the sharded build (`shard_model`,
workers/engine/sharding.py): after activation checkpointing has wrapped it
(the recomputation is compiled too), before `fully_shard` makes it a unit.
Not with tensor parallelism: the spec refuses it (workers/schema/job.py), as
compiled tensor-parallel blocks left the eager loss curve on gloo (5.7e-3
after 5 steps, torch 2.13) and failed to run with activation checkpointing.
FSDP's hooks (the all-gather before a unit, the reduce-scatter after its
backward) are the unit's, outside the compiled code, which is one block's
math. The compiled wrapper puts `_orig_mod.` into parameter names;
`canonical_name` (workers/engine/build.py) and DCP's `get_state_dict` take it
out again, so a compiled job's checkpoints, seeds and exports are an eager one's.

When. torch.compile is lazy: a block is traced and compiled the first time
it runs. Left to itself that is the first step, whose step time then holds
seconds to minutes of compilation. `warm_up` runs that first time at
start-up instead: one forward and one backward of a batch of token 0s of the
first step's micro-batch shape, so the step's shapes find their kernels
ready. The rank actor records its end as the start-up phase `compiled`
(`RankActor.timeline`; the service shows it as "compile",
service/run/launch.py), and a compiler that cannot run fails the job there,
before any step. Another shape later (a smaller last micro-batch, an
evaluation under no_grad) is compiled when it first comes, in its step.

The warm-up changes nothing the training reads, so the loss curve is the
eager one: no data is read (the tokens are made up), no optimizer step is
taken (its gradients are dropped), the RNG state is restored afterwards; the
trainer drops what it left in the int8 error-feedback residuals
(`Trainer.warm_up`), and each step resets the communication and memory
counters at its start.

Failure. An error of the compiler (dynamo's or inductor's: no working C++
compiler, a backend that failed) raises `CompileError` (workers/engine/errors.py)
with the compiler's own reason: the control plane fails the job at once
rather than restarting it (`is_permanent`, workers/cluster/errors.py).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from workers.engine.errors import CompileError
from workers.models import Decoder

# The hint dynamo appends to every error (how to get more of its internals):
# not the reason, and not something a tenant can act on.
_HINTS = ("Set TORCHDYNAMO_VERBOSE=", "For even more developer context")
_MAX_REASON = 2000  # characters of the compiler's message kept


def compile_blocks(model: nn.Module) -> None:
    """Replace every block of `model` (a `Decoder`) by its compiled self, in place."""
    blocks = cast(Decoder, model).blocks
    for i, block in enumerate(blocks):
        blocks[i] = cast(nn.Module, torch.compile(block))


def warm_up(model: nn.Module, batch_shape: tuple[int, int], device: torch.device) -> None:
    """One forward and backward of `model` on a (rows, seq_len) batch of
    token 0s, so that its compiled blocks compile now; the gradients are
    dropped and the RNG state is as it was. `CompileError` if the compiler
    cannot run."""
    from torch._dynamo.exc import TorchDynamoException

    tokens = torch.zeros(batch_shape, dtype=torch.long, device=device)
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            model(tokens).float().mean().backward()
    except TorchDynamoException as e:  # inductor's errors are dynamo's BackendCompilerFailed
        raise CompileError(f"torch.compile (train.compile) cannot run here: {reason(e)}") from e
    model.zero_grad(set_to_none=True)


def reason(error: BaseException) -> str:
    """The compiler's message, without dynamo's debugging hints."""
    lines = [line for line in str(error).strip().splitlines() if not line.startswith(_HINTS)]
    text = "\n".join(lines).strip() or type(error).__name__
    return text if len(text) <= _MAX_REASON else text[:_MAX_REASON] + " ..."
