"""The train loop of one rank: build, then step until done.

Runs wherever a default process group exists: a Ray rank actor, torchrun, or a
single process (world size 1). Nothing here knows about Ray.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import cast

import torch
import torch.distributed as dist
import torch.nn.functional as F

from checkpoints import CheckpointTarget
from workers.engine.base_identity import base_identity
from workers.engine.build import build_sharded
from workers.engine.checkpointing import TrainerCheckpoints
from workers.engine.comm import CommCounter, comm_theory_bytes
from workers.engine.compilation import warm_up
from workers.engine.compression import compress_gradients, wire_bytes_per_value
from workers.engine.data import RankBatches, build_source
from workers.engine.distributed import local_device
from workers.engine.evaluation import Evaluator
from workers.engine.init_weights import initialise, weight_source
from workers.engine.memory import limit_allocator_slack
from workers.engine.metrics import PeakMemory, StepMetrics, achieved_flops, mem_theory_bytes
from workers.engine.peak_flops import device_peak_flops
from workers.engine.prefetch import BatchPrefetch
from workers.engine.sharding import DTYPES, set_prefetch
from workers.engine.tensor_parallel import (
    build_layout,
    parallelize,
    params_per_tp_rank,
    tp_comm_theory_bytes,
)
from workers.engine.train_state import TrainState
from workers.spec import JobSpec, split_evenly
from workers.spec.adapter import adapter_params
from workers.spec.flops import job_flops_per_token

STOP_REQUESTED = 1  # suspend, or a scheduler's preemption: checkpoint and stop
STOP_PREEMPTED = 2  # a rank got SIGTERM (spot reclaim, node drain): the same, then requeue
STOP_REASONS = {STOP_REQUESTED: "requested", STOP_PREEMPTED: "preempted"}


class Trainer:
    """One rank's model, optimizer and data, and the step that advances them.

    `config` is the parsed spec, checked for this world size by whoever
    started the rank (`train_rank`, the rank actor): it is not checked again."""

    def __init__(self, config: JobSpec, checkpoint: CheckpointTarget | None = None):
        self.config = config
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.device = local_device()

        # What a step frees goes back to the OS, not to the C heap's slack,
        # which held a rank's RSS at twice its theory (workers/engine/memory.py).
        limit_allocator_slack()
        torch.manual_seed(config.train.seed)
        sh = config.sharding
        self.comm = CommCounter.install()
        # dp x tp: FSDP over dp, the family's TP plan over tp (workers/engine/tensor_parallel.py)
        self.layout = build_layout(config, self.world_size, self.device.type)
        self.mesh = self.layout.mesh
        # Built on the meta device; each rank allocates and fills only its own
        # shards, the same full weights at any world size (workers/engine/build.py),
        # from the job's weight source (workers/engine/init_weights.py).
        built = build_sharded(config, self.device,
                              lambda m: parallelize(m, self.layout, sh, compiled=config.train.compile),
                              weights=weight_source(config))
        model, self.units, self.num_params = built.model, built.units, built.num_params
        # Error-feedback residuals live in these hooks, not in checkpoints:
        # a resumed run starts them at zero (workers/engine/compression.py).
        self.grad_hooks = compress_gradients(
            self.units, sh.grad_compression, self.comm, error_feedback=sh.grad_error_feedback
        )
        set_prefetch(self.units, sh.prefetch_forward, sh.prefetch_backward, self.device.type)
        self.model = model
        # The job's optimizer and lr schedule, by name (workers/spec/recipes.py)
        self.optimizer = config.train.optimizer_kind.build(model, config.train)
        self.lr_at = config.train.schedule_kind.load()
        self.batches = BatchPrefetch(RankBatches(  # the next batch is read while a step runs
            build_source(config.data, config.model, config.train.seed, config.eval,
                         global_batch=config.train.global_batch_size),
            config.train.global_batch_size,
            self.layout.dp_rank,  # a TP group's ranks read the same batch
            self.layout.dp_size,
        ))
        self.evaluator = Evaluator.of(config, self.batches, self.device)
        # The step, the data cursor, the RNG and the unrecorded metrics rows:
        # what a checkpoint carries besides the model and optimizer.
        self.state = TrainState(self.batches)
        self.memory = PeakMemory(self.device)
        self._theory = self._comm_theory()
        # The model state a rank holds, by the memory theory: the same every step.
        self._mem_theory = mem_theory_bytes(
            config, params_per_tp_rank(config.model, self.layout.tp), self._shard_degree())
        # MFU: the model's FLOPs a token (an adapter's step counts its own) and
        # the device's peak (None on a CPU unless BRIGADE_PEAK_FLOPS says it)
        self._flops_per_token = job_flops_per_token(config)
        self._peak_flops = device_peak_flops(self.device, sh.param_dtype)
        self.checkpoints: TrainerCheckpoints | None = None
        self.resumed_from: int | None = None
        self.stop_reason: str | None = None  # why the last run() stopped short, if asked to
        self.warmed_up = False  # train.compile: the blocks compiled (`warm_up`)
        # Whether a reader acknowledges the metrics rows it recorded
        # (`state.acknowledge`); without one, a row counts as recorded once
        # `on_step` has it.
        self.acknowledges = False
        if checkpoint is not None:
            self.checkpoints = TrainerCheckpoints(
                checkpoint, config, model=model, optimizer=self.optimizer,
                train_state=self.state, mesh_shape=tuple(self.mesh.shape),
                base=None if config.adapter is None else base_identity(config),
            )
            loaded = self.checkpoints.resume()
            self.resumed_from = None if loaded is None else loaded.step
        # Initial weights from elsewhere, on a fresh start only: a resumed job
        # continues from its own checkpoint (workers/engine/init_weights.py).
        self.initialised_from: str | None = None
        if config.init is not None and self.resumed_from is None:
            self.initialised_from = initialise(config.init, checkpoint, model=model,
                                               optimizer=self.optimizer, train_state=self.state)

    @property
    def step(self) -> int:
        """Optimizer steps taken (the train state's)."""
        return self.state.step

    def _comm_theory(self) -> float:
        """FSDP's formula over this rank's TP piece of the parameters, plus TP's,
        plus what an optimizer that gathers whole matrices says it moves
        (`comm_bytes_per_step`, workers/engine/whole_matrix.py)."""
        cfg, sh, dp = self.config, self.config.sharding, self.layout.dp_size
        reduce_itemsize = DTYPES[sh.reduce_dtype].itemsize
        params = trained = params_per_tp_rank(cfg.model, self.layout.tp)
        if cfg.adapter is not None:  # all gathered, only the adapters' gradients reduced
            trained = adapter_params(cfg.model, cfg.adapter, self.layout.tp)
            params += trained
        fsdp = comm_theory_bytes(
            sh.strategy,
            sh.mesh_shape(dp),
            param_bytes=params * DTYPES[sh.param_dtype].itemsize,
            reduce_bytes=trained * reduce_itemsize,
            micro_steps=cfg.train.accumulation_steps(dp),
            reduce_scatter_ratio=wire_bytes_per_value(sh.grad_compression, reduce_itemsize)
            / reduce_itemsize,
        )
        share = len(self.batches.share())
        optimizer = float(getattr(self.optimizer, "comm_bytes_per_step", 0.0))
        return fsdp + optimizer + tp_comm_theory_bytes(
            cfg.model, self.layout.tp, tokens=share * cfg.model.seq_len,
            act_bytes=DTYPES[sh.param_dtype].itemsize,
            activation_checkpointing=sh.activation_checkpointing,
        )

    def warm_up(self) -> bool:
        """Compile the blocks now, not in the first step (train.compile,
        workers/engine/compilation.py): a forward and backward of the first
        step's micro-batch shape that changes nothing the training reads.
        True if it compiled; False with nothing to do (eager, or done)."""
        if not self.config.train.compile or self.warmed_up:
            return False
        micro = self.config.train.accumulation_steps(self.batches.world_size)
        rows = max(split_evenly(len(self.batches.share()), micro))
        warm_up(self.model, (rows, self.config.model.seq_len), self.device)
        for hook in self.grad_hooks:  # its gradient is no step's: int8 carries none of it
            hook.residual = None
        self.warmed_up = True
        return True

    def train_step(self) -> StepMetrics:
        cfg = self.config
        lr = float(self.lr_at(self.step, cfg.train.steps, cfg.train))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.memory.reset()
        self.comm.take()  # drop anything counted outside the step
        start = time.perf_counter()

        x, y = self.batches.next_batch()
        x, y = x.to(self.device), y.to(self.device)
        # The ranks' shares (and a share's micro-batches) may differ by a sample:
        # each micro-batch's loss is its tokens' summed loss over the global
        # batch's token count, so the ranks' losses add up to the global mean
        # loss whatever the split. FSDP averages gradients over the data-parallel
        # ranks; scaling by their number turns that mean into the sum, so the
        # gradient is the one-process gradient of the mean loss.
        dp_size = self.batches.world_size
        global_tokens = cfg.train.global_batch_size * y.shape[1]
        micro = cfg.train.accumulation_steps(dp_size)
        sizes = split_evenly(len(x), micro)  # every rank runs `micro` (some may be empty)
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float32)
        for i, (xm, ym) in enumerate(zip(x.split(sizes), y.split(sizes), strict=True)):
            # Reduce gradients once per optimizer step, on the last micro-batch.
            self.model.set_requires_gradient_sync(i == micro - 1)
            logits = self.model(xm)
            loss = F.cross_entropy(logits.float().flatten(0, 1), ym.flatten(), reduction="sum")
            loss = loss / global_tokens
            (loss * dp_size).backward()
            loss_sum += loss.detach()
        if cfg.train.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.train.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        tally = self.comm.take()  # only FSDP's and TP's traffic: the loss reduce below is not counted
        if self.layout.tp_rank:  # a TP group's ranks hold the same loss: one of them counts it
            loss_sum.zero_()
        dist.all_reduce(loss_sum)
        step_time = time.perf_counter() - start
        self.state.step += 1

        tokens = cfg.train.global_batch_size * cfg.model.seq_len
        host_clock = self.device.type == "cpu"  # see workers/engine/comm.py: GPUs' comms are not host-timed
        flops_per_s = achieved_flops(self._flops_per_token, tokens, step_time, self.world_size)
        return StepMetrics(
            step=self.step,
            loss=loss_sum.item(),
            lr=lr,
            tokens_per_s=tokens / step_time,
            step_time_s=step_time,
            peak_mem_bytes=self.memory.peak(),
            mem_theory_bytes=self._mem_theory,
            comm_bytes=tally.total_bytes,
            comm_bytes_theory=self._theory,
            comm_bytes_by_op=dict(tally.bytes_by_op),
            collectives=tally.collectives,
            comm_time_s=tally.time_s if host_clock else None,
            exposed_comm_s=tally.exposed_s if host_clock else None,
            flops_per_token=self._flops_per_token,
            flops_per_s=flops_per_s,
            mfu=None if self._peak_flops is None else flops_per_s / self._peak_flops,
        )

    def _shard_degree(self) -> int:
        return self.config.sharding.mesh_shape(self.layout.dp_size)[-1]

    def run(
        self,
        on_step: Callable[[dict], None] | None = None,
        stop_after: int | None = None,
        should_stop: Callable[[], int] | None = None,
    ) -> list[dict]:
        """Step to the end of the job, or to `stop_after`, or until
        `should_stop()` says so on any rank (then checkpoint, so a later run
        resumes there). Saves every `checkpoint.every_steps` and where the
        run stops, the end included (with every_steps 0 too); returns this
        run's metrics.

        `should_stop()` returns 0 (go on), STOP_REQUESTED or STOP_PREEMPTED;
        the ranks agree on the largest after every step, and `stop_reason`
        says which stopped the run ("requested", "preempted" or None)."""
        end = self.config.train.steps
        stop = end if stop_after is None else min(stop_after, end)
        history: list[dict] = []
        self.stop_reason = None
        try:
            self.warm_up()  # where the rank actor has not (its start-up phase `compiled`)
            while self.step < stop:
                metrics = self.train_step().as_dict()
                metrics["data_wait_s"] = self.batches.wait_s  # the step's wait for its batch
                if seen := self.batches.samples_seen():  # a mixture: each member's tokens so far
                    metrics["mix_tokens"] = {name: n * self.config.model.seq_len
                                             for name, n in seen.items()}
                if self.evaluator is not None and self.evaluator.due(self.step):
                    evaluated = time.perf_counter()  # not the step's: eval_s, apart (goodput's eval)
                    metrics.update(self.evaluator.run(self.model))
                    metrics["eval_s"] = time.perf_counter() - evaluated
                metrics["wall_time"] = time.time()  # when the step ended (recovery time)
                if not history:  # where this run began: 0, or the step it resumed from
                    metrics["resumed_from"] = self.resumed_from or 0
                if should_stop is not None:
                    code = self._max_over_ranks(int(should_stop()))
                    if code and self.step < end:  # at the end, the run ends anyway
                        stop = self.step  # every rank learns it after the same step
                        self.stop_reason = STOP_REASONS.get(code, "requested")
                # Checkpoint on the interval, and where this run stops: short of
                # the end, or at it (whatever every_steps says: a job that succeeds
                # keeps its final weights), a blocking save then.
                final = self.step == stop
                self.state.record(metrics)  # before the save: it carries this row too
                if self.checkpoints is not None and (self.checkpoints.due(self.step) or final):
                    metrics.update(self.checkpoints.save(blocking=final))
                history.append(metrics)
                if on_step is not None:
                    on_step(metrics)
                if not self.acknowledges:
                    self.state.acknowledge(self.step)
        finally:
            self.batches.close()
            if self.checkpoints is not None:
                self.checkpoints.close()
        return history

    def _max_over_ranks(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.int32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def state_digests(self) -> dict[str, str]:
        """sha256 of every full model and optimizer tensor (collective: the
        shards are gathered): equal digests mean bitwise-equal state."""
        import hashlib

        from torch.distributed.checkpoint.state_dict import ValueType, get_state_dict
        from torch.distributed.tensor import DTensor

        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        flat = {f"model.{k}": v for k, v in model_state.items()}
        # An optimizer state dict's "state" maps each parameter's FQN to its
        # state by name (a dict), which get_state_dict's union type does not say.
        per_fqn = cast(dict[str, dict[str, ValueType]], optim_state.get("state", {}))
        for fqn, per_param in per_fqn.items():
            flat.update({f"optim.{fqn}.{k}": v for k, v in per_param.items()})
        digests = {}
        for key in sorted(flat):
            value = flat[key]
            if isinstance(value, DTensor):
                value = value.full_tensor()
            if isinstance(value, torch.Tensor):
                blob = value.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()
                digests[key] = hashlib.sha256(blob).hexdigest()
        return digests


def train_rank(
    config: JobSpec,
    *,
    on_step: Callable[[dict], None] | None = None,
    checkpoint: CheckpointTarget | None = None,
    stop_after: int | None = None,
) -> list[dict]:
    """Train this rank to the end of the job (or `stop_after`), resuming from
    the latest committed checkpoint when a target is given; the process group
    must exist, and the job must run at its world size (`SpecError` if not)."""
    config.check_world_size(dist.get_world_size())
    return Trainer(config, checkpoint).run(on_step, stop_after)
