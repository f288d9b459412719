"""What a rank process imports before its job (a warm pool rank, the fork
server its ranks are forked from): torch's distributed package, the
checkpoints, the engine, and what the engine's first model build would
otherwise import lazily. torch's own decorators (`torch._compile`, around
`nn.init` and FSDP's `fully_shard`) import `torch._dynamo` at their first
call: about 200 modules, 0.4 s of the first build here against 0.01 s of a
second. That first build is a replacement rank's during a recovery in place,
so it is paid here, before any job, instead."""

from __future__ import annotations


def import_torch() -> None:
    import torch.distributed  # noqa: F401


def import_engine() -> None:
    """Everything else a rank's first `Trainer` needs imported."""
    import torch._dynamo  # noqa: F401

    import checkpoints  # noqa: F401
    import workers.engine.trainer  # noqa: F401
