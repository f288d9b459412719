"""What the ranks of tests/workers/engine/test_whole_matrix.py run (module-level,
so that ranks spawned by `tests.checkpoints.ckpt_harness.run_ranks` import them):
one matrix, sharded by FSDP2 over the group, stepped by our Muon or Adafactor,
against torch's own optimizer on the whole matrix, on this rank's rows alone,
and on FSDP2's DTensor shard as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

ROWS, COLUMNS = 22, 12  # shards of 8, 8 and 6 rows at world size 3


class OneMatrix(nn.Module):
    """A decoder's view with one block holding one matrix."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(COLUMNS, ROWS, bias=False)])


def one_step(rank: int, world_size: int, out: str, optimizer: str) -> None:
    """Two steps of our optimizer on a sharded matrix with known gradients,
    and of torch's own on the whole matrix, on this rank's rows alone and on
    FSDP2's DTensor shard; rank 0 writes how far each landed from the whole's."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    from workers.engine.whole_matrix import build_adafactor, build_muon
    from workers.schema import TrainSpec

    torch.manual_seed(0)
    start, grads = torch.randn(ROWS, COLUMNS), [torch.randn(ROWS, COLUMNS) for _ in range(2)]
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

    # torch's optimizer handed FSDP2's DTensor shard, as the engine would without us
    twin = OneMatrix()
    twin.blocks[0].weight.data.copy_(start)
    fully_shard(twin, mesh=mesh)
    twin_weight = twin.blocks[0].weight
    whole = nn.Parameter(start.clone())
    rows = weight.to_local().shape[0]
    first = rank * -(-ROWS // world_size)  # FSDP2 shards rows as torch.chunk does
    alone = nn.Parameter(start[first:first + rows].clone())
    reference, per_shard, on_dtensor = theirs(whole), theirs(alone), theirs(twin_weight)
    dtensor_error = None
    for g in grads:
        weight.grad = distribute_tensor(g, mesh, weight.placements)
        twin_weight.grad = distribute_tensor(g, mesh, weight.placements)
        whole.grad, alone.grad = g.clone(), g[first:first + rows].clone()
        for opt in (ours, reference, per_shard):
            opt.step()
        try:
            on_dtensor.step()
        except RuntimeError as e:  # torch's Adafactor: an in-place op DTensor cannot place
            dtensor_error = str(e).splitlines()[0]
    got, torch_on_dtensor = weight.full_tensor(), twin_weight.full_tensor()
    if rank == 0:
        Path(f"{out}/one-{optimizer}-{world_size}.json").write_text(json.dumps({
            "bitwise": bool(torch.equal(got, whole.detach())),
            "max_diff_whole": (got - whole.detach()).abs().max().item(),
            "max_diff_per_shard": (got[:rows] - alone.detach()).abs().max().item(),
            "max_diff_torch_on_dtensor": (torch_on_dtensor - whole.detach()).abs().max().item(),
            "torch_on_dtensor_error": dtensor_error,
            "max_update": (whole.detach() - start).abs().max().item(),
        }))
