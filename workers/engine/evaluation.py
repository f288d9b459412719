"""A validation loss (`eval`): the mean token loss over a fixed set of
samples, so that the figure is the same at any world size and after a resume.

The set is samples 0 .. batches x global_batch - 1 of the evaluation source
(`workers.datasets.sources.eval_source`); each batch is split over the
data-parallel ranks like a training batch (`RankBatches`), each rank sums
its tokens' losses (float64) and counts its tokens, and one all-reduce of
(sum, count) gives the mean: uneven shares weigh right, whatever the split.
Every rank runs the same number of forwards (an empty share too), so FSDP's
all-gathers pair up.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn.functional as F

from workers.engine.data import RankBatches, SampleSource
from workers.spec import EvalSpec, JobSpec

if TYPE_CHECKING:
    from workers.engine.prefetch import BatchPrefetch


class Evaluator:
    def __init__(self, spec: EvalSpec, source: SampleSource, global_batch: int, rank: int,
                 world_size: int, device: torch.device):
        self.spec, self.device = spec, device
        self.batches = RankBatches(source, global_batch, rank, world_size)

    def due(self, step: int) -> bool:
        return step % self.spec.every_steps == 0

    @torch.no_grad()
    def run(self, model: torch.nn.Module) -> dict:
        """{"eval_loss", "eval_perplexity"} of the fixed set (a collective)."""
        self.batches.next_sample = 0
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss sum, tokens
        for _ in range(self.spec.batches):
            x, y = self.batches.next_batch()
            x, y = x.to(self.device), y.to(self.device)
            logits = model(x)
            losses = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none")
            totals[0] += losses.double().sum()
            totals[1] += y.numel()
        dist.all_reduce(totals)
        loss = (totals[0] / totals[1]).item()
        return {"eval_loss": loss, "eval_perplexity": math.exp(min(loss, 700.0))}

    @classmethod
    def of(cls, config: JobSpec, batches: RankBatches | BatchPrefetch,
           device: torch.device) -> Evaluator | None:
        """The job's evaluator (None without `eval`), split like its training batches."""
        if config.eval is None:
            return None
        from workers.datasets.sources import eval_source

        source = eval_source(config.eval, config.data, config.model, config.train.seed)
        return cls(config.eval, source, config.train.global_batch_size, batches.rank,
                   batches.world_size, device)
