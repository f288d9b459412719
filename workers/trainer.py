"""The train loop of one rank: build, then step until done.

Runs wherever a default process group exists: a Ray rank actor, torchrun, or a
single process (world size 1). Nothing here knows about Ray.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

from workers.comm import CommCounter, comm_theory_bytes
from workers.config import JobConfig, OptimConfig
from workers.data import RankBatches, build_source
from workers.distributed import local_device
from workers.metrics import PeakMemory, StepMetrics, mem_theory_bytes
from workers.models import build_model
from workers.sharding import DTYPES, build_mesh, shard_model


def lr_at(step: int, total_steps: int, cfg: OptimConfig) -> float:
    """Linear warmup to cfg.lr, then cosine decay to cfg.lr * min_lr_ratio."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.lr - floor) * (1 + math.cos(math.pi * progress))


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    # Decay matrices only; norms' gains and biases stay undecayed.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    keep = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": keep, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.eps,
    )


class Trainer:
    """One rank's model, optimizer and data, and the step that advances them."""

    def __init__(self, config: JobConfig):
        self.config = config
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        config.validate(self.world_size)
        self.device = local_device()

        torch.manual_seed(config.train.seed)  # the same initial weights on every rank
        model = build_model(config.model)
        self.num_params = sum(p.numel() for p in model.parameters())
        self.mesh = build_mesh(config.sharding, self.world_size, self.device.type)
        self.units = shard_model(model, config.sharding, self.mesh)
        self.model = model
        self.optimizer = build_optimizer(model, config.optim)
        self.batches = RankBatches(
            build_source(config.data, config.model),
            config.train.global_batch,
            self.rank,
            self.world_size,
        )
        self.step = 0  # optimizer steps taken
        self.comm = CommCounter.install()
        self.memory = PeakMemory(self.device)
        self._theory = self._comm_theory()

    def _comm_theory(self) -> float:
        sh = self.config.sharding
        return comm_theory_bytes(
            sh.strategy,
            sh.mesh_shape(self.world_size),
            param_bytes=self.num_params * DTYPES[sh.param_dtype].itemsize,
            reduce_bytes=self.num_params * DTYPES[sh.reduce_dtype].itemsize,
            micro_steps=self.config.train.accumulation_steps(self.world_size),
        )

    def train_step(self) -> StepMetrics:
        cfg = self.config
        lr = lr_at(self.step, cfg.train.steps, cfg.optim)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.memory.reset()
        self.comm.take()  # drop anything counted outside the step
        start = time.perf_counter()

        x, y = self.batches.next_batch()
        x, y = x.to(self.device), y.to(self.device)
        micro = cfg.train.accumulation_steps(self.world_size)
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float32)
        for i, (xm, ym) in enumerate(zip(x.chunk(micro), y.chunk(micro))):
            # Reduce gradients once per optimizer step, on the last micro-batch.
            self.model.set_requires_gradient_sync(i == micro - 1)
            logits = self.model(xm)
            loss = F.cross_entropy(logits.float().flatten(0, 1), ym.flatten())
            (loss / micro).backward()
            loss_sum += loss.detach() / micro
        if cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.optim.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        tally = self.comm.take()  # only FSDP's traffic: the loss reduce below is not counted
        dist.all_reduce(loss_sum)
        step_time = time.perf_counter() - start
        self.step += 1

        tokens = cfg.train.global_batch * cfg.model.seq_len
        return StepMetrics(
            step=self.step,
            loss=loss_sum.item() / self.world_size,
            lr=lr,
            tokens_per_s=tokens / step_time,
            step_time_s=step_time,
            peak_mem_bytes=self.memory.peak(),
            mem_theory_bytes=mem_theory_bytes(self.num_params, self._shard_degree()),
            comm_bytes=tally.total_bytes,
            comm_bytes_theory=self._theory,
            comm_bytes_by_op=dict(tally.bytes_by_op),
            collectives=tally.collectives,
        )

    def _shard_degree(self) -> int:
        return self.config.sharding.mesh_shape(self.world_size)[-1]

    def run(self, on_step: Callable[[dict], None] | None = None) -> list[dict]:
        history = []
        while self.step < self.config.train.steps:
            metrics = self.train_step().as_dict()
            history.append(metrics)
            if on_step is not None:
                on_step(metrics)
        return history


def train_rank(config: JobConfig, *, on_step: Callable[[dict], None] | None = None) -> list[dict]:
    """Train this rank to the end of the job; the process group must exist."""
    return Trainer(config).run(on_step)
