"""What the ranks of test_compression.py's error-feedback test run (module-level,
so that ranks spawned by `tests.checkpoints.ckpt_harness.run_ranks` import it).

`repeated_gradient`: the engine's Trainer (FSDP2, its compressed reduce-scatter
hooks as the job configures them) computes the gradient of ONE fixed batch,
with the weights held still, `k` times; the rank writes the largest
difference between the sum of what arrived (its gradient shards) and k times
the uncompressed gradient (a Trainer with no compression, the same weights).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

from tests.workers.engine_spec import engine_job


def _gradient(trainer, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """The step's gradient of (x, y) as the trainer computes it: this rank's shards."""
    trainer.model.set_requires_gradient_sync(True)
    logits = trainer.model(x)
    F.cross_entropy(logits.float().flatten(0, 1), y.flatten()).backward()
    grads = []
    for p in trainer.model.parameters():
        g = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
        grads.append(g.detach().clone())
        p.grad = None
    return grads


def repeated_gradient(rank: int, world_size: int, out: str, k: int) -> None:
    from workers.engine.trainer import Trainer

    plain = Trainer(engine_job(workers=world_size))
    x, y = plain.batches.next_batch()
    exact = _gradient(plain, x, y)
    drift = {}
    for feedback in (True, False):
        trainer = Trainer(engine_job(workers=world_size, sharding={
            "grad_compression": "int8", "grad_error_feedback": feedback}))
        total = [torch.zeros_like(g) for g in exact]
        for _ in range(k):
            for t, g in zip(total, _gradient(trainer, x, y), strict=True):
                t += g
        drift[str(feedback)] = max((t - k * g).abs().max().item()
                                   for t, g in zip(total, exact, strict=True))
        if not feedback:  # for scale: what one compressed gradient misses
            drift["one_step"] = max((o - g).abs().max().item()
                                    for o, g in zip(_gradient(trainer, x, y), exact, strict=True))
    drift["grad_max"] = max(g.abs().max().item() for g in exact)
    Path(f"{out}/drift-{rank}.json").write_text(json.dumps(drift))
