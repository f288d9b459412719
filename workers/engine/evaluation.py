"""A validation loss (`eval`): the mean token loss over a fixed set of
samples, so that the figure is the same at any world size and after a resume.

The set is samples 0 .. batches x global_batch - 1 of the evaluation source
(`workers.datasets.sources.eval_source`); each batch is split over the
data-parallel ranks like a training batch (`RankBatches`), each rank sums
its tokens' losses (float64) and counts its tokens, and one all-reduce of
(sum, count) gives the mean: uneven shares weigh right, whatever the split.
Every rank runs the same number of forwards (an empty share too), so FSDP's
all-gathers pair up.

A mixture (`data.mix`) with `eval.holdout_fraction` holds out from each
member: each member's held-out samples are a fixed set of their own, the
same size, whose mean is that member's loss (`mix_eval_loss`, by name), and
`eval_loss` is the members' losses weighed by the mixture's shares (the
loss on the training mixture).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn.functional as F

from workers.engine.data import RankBatches, SampleSource
from workers.schema import EvalSpec, JobSpec

if TYPE_CHECKING:
    from workers.engine.prefetch import BatchPrefetch


class Evaluator:
    """The validation loss of one fixed set, or (`members`: name -> source,
    `shares`: name -> share) of one set a mixture member."""

    def __init__(self, spec: EvalSpec, source: SampleSource | None, global_batch: int, rank: int,
                 world_size: int, device: torch.device, *,
                 members: dict[str, SampleSource] | None = None,
                 shares: dict[str, float] | None = None):
        self.spec, self.device = spec, device
        sets = {"": source} if source is not None else dict(members or {})
        self.sets = {name: RankBatches(s, global_batch, rank, world_size) for name, s in sets.items()}
        self.shares = shares

    def due(self, step: int) -> bool:
        return step % self.spec.every_steps == 0

    @torch.no_grad()
    def run(self, model: torch.nn.Module) -> dict:
        """{"eval_loss", "eval_perplexity"} of the fixed set, and a mixture's
        `mix_eval_loss` (a collective)."""
        # loss sum and tokens of each set, one all-reduce for all of them
        totals = torch.zeros(len(self.sets), 2, dtype=torch.float64, device=self.device)
        for row, batches in enumerate(self.sets.values()):
            batches.next_sample = 0
            for _ in range(self.spec.batches):
                x, y = batches.next_batch()
                x, y = x.to(self.device), y.to(self.device)
                logits = model(x)
                losses = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none")
                totals[row, 0] += losses.double().sum()
                totals[row, 1] += y.numel()
        dist.all_reduce(totals)
        means = (totals[:, 0] / totals[:, 1]).tolist()
        if self.shares is None:
            loss = means[0]
            return {"eval_loss": loss, "eval_perplexity": _perplexity(loss)}
        by_member = dict(zip(self.sets, means, strict=True))
        loss = sum(self.shares[name] * value for name, value in by_member.items())
        return {"eval_loss": loss, "eval_perplexity": _perplexity(loss),
                "mix_eval_loss": {name: value if math.isfinite(value) else None
                                  for name, value in by_member.items()}}

    @classmethod
    def of(cls, config: JobSpec, batches: RankBatches | BatchPrefetch,
           device: torch.device) -> Evaluator | None:
        """The job's evaluator (None without `eval`), split like its training batches."""
        if config.eval is None:
            return None
        from workers.datasets.sources import eval_source, member_eval_sources

        args = (config.train.global_batch_size, batches.rank, batches.world_size, device)
        members = member_eval_sources(config.eval, config.data, config.model, config.train.seed)
        if members:
            assert config.data.mix is not None
            total = sum(m.weight for m in config.data.mix)
            shares = {name: m.weight / total
                      for name, m in zip(config.data.mix_names(), config.data.mix, strict=True)}
            return cls(config.eval, None, *args, members=dict(members), shares=shares)
        source = eval_source(config.eval, config.data, config.model, config.train.seed)
        return cls(config.eval, source, *args)


def _perplexity(loss: float) -> float:
    return math.exp(min(loss, 700.0))
