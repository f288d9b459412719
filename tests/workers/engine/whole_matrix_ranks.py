"""What the ranks of tests/workers/engine/test_whole_matrix.py run (module-level,
so that ranks spawned by `tests.checkpoints.ckpt_harness.run_ranks` import them).

`curves`: the engine's Trainer, one short run per case (optimizer, strategy,
tensor parallelism), its losses on rank 0. `resume`: a run to a checkpoint,
then (at another world size) on from it. `one_step`: one matrix, sharded by
FSDP2 over the group, stepped by Muon or Adafactor, against torch's own
optimizer on the whole matrix and on this rank's shard alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from tests.workers.engine_spec import engine_job

STEPS = 4
LLAMA = {"family": "llama", "n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2,
         "seq_len": 16, "vocab_size": 256}


def case_job(world_size: int, optimizer: str, strategy: str = "full_shard", tp: int = 1,
             steps: int = STEPS, llama: bool = False):
    sections: dict = {"data": {"source": "synthetic"}, "workers": world_size,
                      "sharding": {"strategy": strategy}, "train": {"optimizer": optimizer}}
    if llama:
        sections |= {"model": LLAMA, "parallelism": {"tp": tp}}
    return engine_job(steps, **sections)


def curves(rank: int, world_size: int, out: str, cases: list[dict]) -> None:
    from workers.engine.trainer import Trainer

    found = {}
    for case in cases:
        trainer = Trainer(case_job(world_size, **case))
        found[json.dumps(case, sort_keys=True)] = [trainer.train_step().loss for _ in range(STEPS)]
    if rank == 0:
        Path(f"{out}/curves-{world_size}.json").write_text(json.dumps(found))


def resume(rank: int, world_size: int, out: str, root: str | None, optimizer: str,
           stop_after: int | None,
           steps: int) -> None:
    from checkpoints import CheckpointTarget
    from workers.engine.trainer import Trainer

    target = None if root is None else CheckpointTarget(
        root=root, tenant="acme", job=optimizer, secret="whole-matrix-test-secret-0123456789")
    trainer = Trainer(case_job(world_size, optimizer, steps=steps), target)
    metrics = trainer.run(stop_after=stop_after)
    if rank == 0:
        Path(f"{out}/resume-{optimizer}-{world_size}.json").write_text(json.dumps(
            {"resumed_from": trainer.resumed_from, "losses": [m["loss"] for m in metrics]}))


class OneMatrix(nn.Module):
    """A decoder's view with one block holding one 7 x 5 matrix (uneven shards at 2 and 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(5, 7, bias=False)])


def one_step(rank: int, world_size: int, out: str, optimizer: str) -> None:
    """Two steps of our optimizer on a sharded matrix with a known gradient;
    torch's own optimizer on the whole matrix, and on this rank's rows alone."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    from workers.engine.whole_matrix import build_adafactor, build_muon
    from workers.spec import TrainSpec

    torch.manual_seed(0)
    start, grads = torch.randn(7, 5), [torch.randn(7, 5) for _ in range(2)]
    model = OneMatrix()
    model.blocks[0].weight.data.copy_(start)
    mesh = init_device_mesh("cpu", (world_size,))
    fully_shard(model, mesh=mesh)
    weight = model.blocks[0].weight
    assert isinstance(weight, DTensor)
    train = TrainSpec(steps=1, optimizer=optimizer, lr=0.02)
    ours = (build_muon if optimizer == "muon" else build_adafactor)(model, train)

    def theirs(param: torch.Tensor) -> torch.optim.Optimizer:
        if optimizer == "muon":
            return torch.optim.Muon([param], lr=0.02, weight_decay=train.weight_decay,
                                    adjust_lr_fn=train.adjust_lr_fn)
        return torch.optim.Adafactor([param], lr=0.02, weight_decay=train.weight_decay)

    whole = nn.Parameter(start.clone())
    rows = weight.to_local().shape[0]
    first = rank * -(-7 // world_size)  # FSDP2 shards rows as torch.chunk does
    alone = nn.Parameter(start[first:first + rows].clone())
    reference, per_shard = theirs(whole), theirs(alone)
    for g in grads:
        weight.grad = distribute_tensor(g, mesh, weight.placements)
        whole.grad, alone.grad = g.clone(), g[first:first + rows].clone()
        for opt in (ours, reference, per_shard):
            opt.step()
    got = weight.full_tensor()
    if rank == 0:
        Path(f"{out}/one-{optimizer}-{world_size}.json").write_text(json.dumps({
            "bitwise": bool(torch.equal(got, whole.detach())),
            "max_diff_whole": (got - whole.detach()).abs().max().item(),
            "max_diff_per_shard": (got[:rows] - alone.detach()).abs().max().item(),
        }))
