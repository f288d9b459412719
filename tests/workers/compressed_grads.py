"""Run under torchrun (tests/workers/engine/test_compression.py): one backward of the
same batches with each gradient compression; prints, as one JSON line on rank
0, each mode's largest relative L2 error, over the parameters, against the
gradients FSDP's own reduce-scatter gives."""

from __future__ import annotations

import json

import torch
import torch.distributed as dist
import torch.nn.functional as F

from workers.engine.comm import CommCounter
from workers.engine.compression import compress_gradients
from workers.schema import ModelSpec, ShardingSpec
from workers.models import build_model
from workers.engine.sharding import build_mesh, shard_model

MODEL = ModelSpec(n_layers=2, d_model=32, n_heads=4, seq_len=16)


def sharded_grads(compression: str, strategy: str) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = build_model(MODEL)
    cfg = ShardingSpec(strategy=strategy, grad_compression=compression)
    units = shard_model(model, cfg, build_mesh(cfg, dist.get_world_size(), "cpu"))
    compress_gradients(units, compression, CommCounter.install())
    g = torch.Generator().manual_seed(1 + dist.get_rank())  # each rank its own batch
    x = torch.randint(0, MODEL.vocab_size, (4, MODEL.seq_len), generator=g)
    F.cross_entropy(model(x).flatten(0, 1), x.roll(-1, 1).flatten()).backward()
    return {n: p.grad.full_tensor() for n, p in model.named_parameters()}


def main() -> None:
    dist.init_process_group("gloo")
    report = {}
    for strategy in ("full_shard", "hybrid_shard"):
        reference = sharded_grads("none", strategy)
        for mode in ("bf16", "int8"):
            got = sharded_grads(mode, strategy)
            report[f"{strategy}/{mode}"] = max(
                ((got[n] - ref).norm() / ref.norm()).item() for n, ref in reference.items()
            )
    if dist.get_rank() == 0:
        print(json.dumps(report), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
