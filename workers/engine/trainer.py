"""The train loop of one rank: build, then step until done.

Runs wherever a default process group exists: a Ray rank actor, torchrun, or a
single process (world size 1). Nothing here knows about Ray.
"""

from __future__ import annotations

import statistics
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
from workers.engine.metrics import PeakMemory, achieved_flops, mem_theory_bytes
from workers.engine.peak_flops import device_peak_flops
from workers.engine.prefetch import BatchPrefetch
from workers.engine.sharding import DTYPES, set_prefetch
from workers.engine.snapshot import (
    MEASURED_AFTER,
    RestoredLater,
    Snapshot,
    SnapshotPayload,
    automatic_interval,
)
from workers.engine.snapshot import restore as restore_snapshot
from workers.engine.tensor_parallel import (
    build_layout,
    parallelize,
    params_per_tp_rank,
    tp_comm_theory_bytes,
)
from workers.engine.train_state import TrainState
from workers.schema import JobSpec, split_evenly
from workers.schema.adapter import adapter_params
from workers.schema.flops import job_flops_per_token
from workers.schema.metrics_row import MetricRow

# What a rank asks at a step boundary; the ranks agree on the largest.
STOP_MOVE = 1  # some ranks move to other nodes (a drain): snapshot in memory, no save
STOP_REQUESTED = 2  # suspend, or a scheduler's preemption: checkpoint and stop
STOP_PREEMPTED = 3  # a rank got SIGTERM (spot reclaim, node drain): the same, then requeue
STOP_REASONS = {STOP_MOVE: "move", STOP_REQUESTED: "requested", STOP_PREEMPTED: "preempted"}


class Trainer:
    """One rank's model, optimizer and data, and the step that advances them.

    `spec` is the parsed job, checked for this world size by whoever started
    the rank (`train_rank`, the worker group): it is not checked again.

    With `restore` (a `SnapshotPayload` of this job at this world size: this
    rank's own, or the one a peer held for it) the trainer starts from that
    snapshot, not from the checkpoints or the job's initial weights: the
    build fills no weights, and the checkpoints are only saved to."""

    def __init__(self, spec: JobSpec, checkpoint: CheckpointTarget | None = None,
                 restore: SnapshotPayload | None = None, snapshots: list[Snapshot] | None = None):
        self.spec = spec
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.device = local_device()

        # What a step frees goes back to the OS, not to the C heap's slack,
        # which held a rank's RSS at twice its theory (workers/engine/memory.py).
        limit_allocator_slack()
        torch.manual_seed(spec.train.seed)
        sh = spec.sharding
        self.comm = CommCounter.install()
        # dp x tp: FSDP over dp, the family's TP plan over tp (workers/engine/tensor_parallel.py)
        self.layout = build_layout(spec, self.world_size, self.device.type)
        self.mesh = self.layout.mesh
        # Built on the meta device; each rank allocates and fills only its own
        # shards, the same full weights at any world size (workers/engine/build.py),
        # from the job's weight source (workers/engine/init_weights.py); none
        # where a snapshot is restored, which writes every tensor.
        built = build_sharded(spec, self.device,
                              lambda m: parallelize(m, self.layout, sh, compiled=spec.train.compile),
                              weights=weight_source(spec) if restore is None else RestoredLater())
        model, self.units, self.num_params = built.model, built.units, built.num_params
        # Error-feedback residuals live in these hooks, not in checkpoints:
        # a resumed run starts them at zero (workers/engine/compression.py);
        # a snapshot carries them.
        self.grad_hooks = compress_gradients(
            self.units, sh.grad_compression, self.comm, error_feedback=sh.grad_error_feedback
        )
        set_prefetch(self.units, sh.prefetch_forward, sh.prefetch_backward, self.device.type)
        self.model = model
        # The job's optimizer and lr schedule, by name (workers/schema/recipes.py)
        self.optimizer = spec.train.optimizer_kind.build(model, spec.train)
        self.lr_at = spec.train.schedule_kind.load()
        self.batches = BatchPrefetch(RankBatches(  # the next batch is read while a step runs
            build_source(spec.data, spec.model, spec.train.seed, spec.eval,
                         global_batch=spec.train.global_batch_size),
            spec.train.global_batch_size,
            self.layout.dp_rank,  # a TP group's ranks read the same batch
            self.layout.dp_size,
        ))
        self.evaluator = Evaluator.of(spec, self.batches, self.device)
        # The step, the data cursor, the RNG and the unrecorded metrics rows:
        # what a checkpoint carries besides the model and optimizer.
        self.state = TrainState(self.batches)
        self.memory = PeakMemory(self.device)
        self._theory = self._comm_theory()
        # The model state a rank holds, by the memory theory: the same every step.
        self._mem_theory = mem_theory_bytes(
            spec, params_per_tp_rank(spec.model, self.layout.tp), self._shard_degree())
        # MFU: the model's FLOPs a token (an adapter's step counts its own) and
        # the device's peak (None on a CPU unless BRIGADE_PEAK_FLOPS says it)
        self._flops_per_token = job_flops_per_token(spec)
        self._peak_flops = device_peak_flops(self.device, sh.param_dtype)
        self.checkpoints: TrainerCheckpoints | None = None
        self.resumed_from: int | None = None
        self.stop_reason: str | None = None  # why the last run() stopped short, if asked to
        self.warmed_up = False  # train.compile: the blocks compiled (`warm_up`)
        # Whether a reader acknowledges the metrics rows it recorded
        # (`state.acknowledge`); without one, a row counts as recorded once
        # `on_step` has it.
        self.acknowledges = False
        # In-memory snapshots (workers/engine/snapshot.py): every this many
        # steps; None until measured where the job leaves it automatic; 0: none.
        # Two of them, captured into in turn: the newest and the one before
        # (why two: docs/architecture.md "Recovery in place"); a rank that
        # rejoins hands its trainer's over (`snapshots`), their buffers reused.
        self.snapshot_every = spec.checkpoint.memory_every_steps
        self.snapshots_skipped = 0  # captures due while a rank's previous copy was on its way
        self._handed_over = 0  # the snapshots this trainer's run handed to `on_snapshot`
        # An automatic interval: the capture's seconds and the step's, measured after
        # MEASURED_AFTER steps; the interval is settled once copies have reached the
        # peers and their time is known too (`_settle_interval`).
        self._measured: tuple[float, float] | None = None
        self._snapshots = list(snapshots or [])[:2]
        while len(self._snapshots) < 2:
            self._snapshots.append(Snapshot(self.device))
        if checkpoint is not None:
            self.checkpoints = TrainerCheckpoints(
                checkpoint, spec, model=model, optimizer=self.optimizer,
                train_state=self.state, mesh_shape=tuple(self.mesh.shape),
                base=None if spec.adapter is None else base_identity(spec),
            )
            if restore is None:
                loaded = self.checkpoints.resume()
                self.resumed_from = None if loaded is None else loaded.step
        # Initial weights from elsewhere, on a fresh start only: a resumed job
        # continues from its own checkpoint (workers/engine/init_weights.py).
        self.initialised_from: str | None = None
        if spec.init is not None and self.resumed_from is None and restore is None:
            self.initialised_from = initialise(spec.init, checkpoint, model=model,
                                               optimizer=self.optimizer, train_state=self.state)
        if restore is not None:
            restore_snapshot(self, restore)
            self.resumed_from = restore.step
            if self.checkpoints is not None:  # saves past the snapshot: a dead branch
                self.checkpoints.rewind(restore.step)
            for kept in self._snapshots:  # one taken past the step restored is no longer this run's
                if kept.step is not None and kept.step > restore.step:
                    kept.step = None

    @property
    def step(self) -> int:
        """Optimizer steps taken (the train state's)."""
        return self.state.step

    @property
    def snapshots(self) -> list[Snapshot]:
        """The in-memory snapshots held, newest first (at most two)."""
        taken = [kept for kept in self._snapshots if kept.step is not None]
        return sorted(taken, key=lambda kept: -(kept.step or 0))

    @property
    def snapshot(self) -> Snapshot | None:
        """The latest in-memory snapshot a run took, if any."""
        return next(iter(self.snapshots), None)

    def _capture(self) -> Snapshot:
        """Capture into the older of the two snapshots (a lease on the newer, a
        send in flight, never holds it up); it is then the newest."""
        older = min(self._snapshots, key=lambda kept: -1 if kept.step is None else kept.step)
        older.capture(self)
        return older

    def _comm_theory(self) -> float:
        """FSDP's formula over this rank's TP piece of the parameters, plus TP's,
        plus what an optimizer that gathers whole matrices says it moves
        (`comm_bytes_per_step`, workers/engine/whole_matrix.py)."""
        spec, sh, dp = self.spec, self.spec.sharding, self.layout.dp_size
        reduce_itemsize = DTYPES[sh.reduce_dtype].itemsize
        params = trained = params_per_tp_rank(spec.model, self.layout.tp)
        if spec.adapter is not None:  # all gathered, only the adapters' gradients reduced
            trained = adapter_params(spec.model, spec.adapter, self.layout.tp)
            params += trained
        fsdp = comm_theory_bytes(
            sh.strategy,
            sh.mesh_shape(dp),
            param_bytes=params * DTYPES[sh.param_dtype].itemsize,
            reduce_bytes=trained * reduce_itemsize,
            micro_steps=spec.train.accumulation_steps(dp),
            reduce_scatter_ratio=wire_bytes_per_value(sh.grad_compression, reduce_itemsize)
            / reduce_itemsize,
        )
        share = len(self.batches.share())
        optimizer = float(getattr(self.optimizer, "comm_bytes_per_step", 0.0))
        return fsdp + optimizer + tp_comm_theory_bytes(
            spec.model, self.layout.tp, tokens=share * spec.model.seq_len,
            act_bytes=DTYPES[sh.param_dtype].itemsize,
            activation_checkpointing=sh.activation_checkpointing,
        )

    def warm_up(self) -> bool:
        """Compile the blocks now, not in the first step (train.compile,
        workers/engine/compilation.py): a forward and backward of the first
        step's micro-batch shape that changes nothing the training reads.
        True if it compiled; False with nothing to do (eager, or done)."""
        if not self.spec.train.compile or self.warmed_up:
            return False
        micro = self.spec.train.accumulation_steps(self.batches.world_size)
        rows = max(split_evenly(len(self.batches.share()), micro))
        residuals = [hook.residual for hook in self.grad_hooks]  # a restored snapshot's
        warm_up(self.model, (rows, self.spec.model.seq_len), self.device)
        for hook, residual in zip(self.grad_hooks, residuals, strict=True):
            hook.residual = residual  # its gradient is no step's: int8 carries none of it
        self.warmed_up = True
        return True

    def train_step(self) -> MetricRow:
        """One optimizer step; its row (`run` adds what the loop knows: the
        data wait, an evaluation, the wall time, a checkpoint)."""
        spec = self.spec
        lr = float(self.lr_at(self.step, spec.train.steps, spec.train))
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
        global_tokens = spec.train.global_batch_size * y.shape[1]
        micro = spec.train.accumulation_steps(dp_size)
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
        if spec.train.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), spec.train.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        tally = self.comm.take()  # only FSDP's and TP's traffic: the loss reduce below is not counted
        if self.layout.tp_rank:  # a TP group's ranks hold the same loss: one of them counts it
            loss_sum.zero_()
        dist.all_reduce(loss_sum)
        step_time = time.perf_counter() - start
        self.state.step += 1

        tokens = spec.train.global_batch_size * spec.model.seq_len
        host_clock = self.device.type == "cpu"  # see workers/engine/comm.py: GPUs' comms are not host-timed
        flops_per_s = achieved_flops(self._flops_per_token, tokens, step_time, self.world_size)
        return MetricRow(
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
        return self.spec.sharding.mesh_shape(self.layout.dp_size)[-1]

    def run(
        self,
        on_step: Callable[[dict], None] | None = None,
        stop_after: int | None = None,
        should_stop: Callable[[], int] | None = None,
        on_snapshot: Callable[[Snapshot], None] | None = None,
        delivered: Callable[[], bool] | None = None,
        handover_s: Callable[[], float | None] | None = None,
    ) -> list[dict]:
        """Step to the end of the job, or to `stop_after`, or until
        `should_stop()` says so on any rank (then checkpoint, so a later run
        resumes there). Saves every `checkpoint.every_steps` and where the
        run stops, the end included (with every_steps 0 too); returns this
        run's metrics.

        `should_stop()` returns 0 (go on), STOP_MOVE, STOP_REQUESTED or
        STOP_PREEMPTED; the ranks agree on the largest after every step, and
        `stop_reason` says which stopped the run ("move", "requested",
        "preempted" or None). A move saves nothing to disk: the run ends with
        an in-memory snapshot of its last step (`snapshot`), from which the
        group's next process group goes on (workers/cluster/replace.py).

        With `on_snapshot`, the run captures this rank's state in memory
        every `checkpoint.memory_every_steps` (`snapshot_every`) at the step's
        end, after its row is recorded and any save, and hands it the
        trainer's one `Snapshot` (to lend to a peer). Without it, none is
        taken: nothing would hold them. With `delivered` (whether this
        rank's latest snapshot handed over has reached its peer), a capture
        is due only where every rank's has (the ranks agree): otherwise it is
        skipped (`snapshots_skipped`) and tried again an interval later. A
        rank's snapshot that replaces its previous one before every copy of
        that is held would leave no step that every rank has in a live
        process (docs/architecture.md "Recovery in place"). With
        `handover_s` (this rank's quickest copy to its peer so far, in
        seconds), an automatic interval counts the copy's time beside the
        capture's once two copies have arrived (`_settle_interval`)."""
        end = self.spec.train.steps
        stop = end if stop_after is None else min(stop_after, end)
        history: list[dict] = []
        self.stop_reason = None
        try:
            self.warm_up()  # where the rank actor has not (its start-up phase `compiled`)
            while self.step < stop:
                row = self.train_step()
                row.data_wait_s = self.batches.wait_s  # the step's wait for its batch
                if seen := self.batches.samples_seen():  # a mixture: each member's tokens so far
                    row.mix_tokens = {name: n * self.spec.model.seq_len for name, n in seen.items()}
                if self.evaluator is not None and self.evaluator.due(self.step):
                    evaluated = time.perf_counter()  # not the step's: eval_s, apart (goodput's eval)
                    row = row.model_copy(update=self.evaluator.run(self.model))
                    row.eval_s = time.perf_counter() - evaluated
                row.wall_time = time.time()  # when the step ended (recovery time)
                if not history:  # where this run began: 0, or the step it resumed from
                    row.resumed_from = self.resumed_from or 0
                if should_stop is not None:
                    code = self._max_over_ranks(int(should_stop()))
                    if code and self.step < end:  # at the end, the run ends anyway
                        stop = self.step  # every rank learns it after the same step
                        self.stop_reason = STOP_REASONS.get(code, "requested")
                # Checkpoint on the interval, and where this run stops: short of
                # the end, or at it (whatever every_steps says: a job that succeeds
                # keeps its final weights), a blocking save then.
                final = self.step == stop and self.stop_reason != "move"
                metrics = row.as_dict()  # as it travels: to the reader, in the checkpoints
                self.state.record(metrics)  # before the save: it carries this row too
                if self.checkpoints is not None and (self.checkpoints.due(self.step) or final):
                    metrics.update(self.checkpoints.save(blocking=final))
                if on_snapshot is not None:
                    self._snapshot_due(on_snapshot, delivered, handover_s, history, metrics)
                if self.stop_reason == "move" and self.step == stop and (
                        self.snapshot is None or self.snapshot.step != self.step):
                    self._capture()  # where the group goes on from: nothing redone
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

    def _snapshot_due(self, on_snapshot: Callable[[Snapshot], None],
                      delivered: Callable[[], bool] | None,
                      handover_s: Callable[[], float | None] | None, history: list[dict],
                      metrics: dict) -> None:
        """Capture on the interval, where every rank's previous copy has
        arrived; where the interval is automatic, measure it first, once this
        run has taken MEASURED_AFTER steps, and settle it once two copies
        have reached the peers."""
        if self.snapshot_every is None and len(history) + 1 == MEASURED_AFTER:
            self.snapshot_every = self._measure_snapshot_interval([*history, metrics])
        if not (self.snapshot_every and self.step % self.snapshot_every == 0):
            return
        if delivered is not None and self._handed_over:
            waiting = self._max_over_ranks(int(not delivered()))  # any rank's copy still on its way
            if waiting:
                self.snapshots_skipped += 1
                return
            if handover_s is not None and self._settle_interval(handover_s):
                return
        on_snapshot(self._capture())
        self._handed_over += 1

    def _measure_snapshot_interval(self, rows: list[dict]) -> int:
        """`automatic_interval` of one capture (the second at this step: the
        first allocates the buffers) and the median step time of this run's
        steps after its first; the ranks agree on the largest, so that they
        all capture the same steps."""
        measured = self._capture()
        measured.capture(self)
        step_s = statistics.median(row["step_time_s"] for row in rows[1:])
        self._measured = (measured.capture_s, step_s)
        return self._max_over_ranks(automatic_interval(measured.capture_s, step_s))

    def _settle_interval(self, handover_s: Callable[[], float | None]) -> bool:
        """An automatic interval, once two copies have reached the peers: the
        smallest k whose capture and copy to the peer, together, cost at most
        the budget of k steps (`automatic_interval`), but no longer than the
        disk checkpoint's interval where the capture alone allows it: a lost
        rank then redoes no more steps in place than a restart from disk
        would. A copy is sent from a thread beside the loop, but on the same
        host: its pickling holds the interpreter, and where ranks train on the
        CPU it takes their cores. On the ranks' largest k, so that they
        capture the same steps. Whether this step is no longer due (the
        interval grew)."""
        if self._measured is None or self._handed_over < 2:
            return False  # set by the job, or not settled yet
        capture_s, step_s = self._measured
        self._measured = None  # settled once
        every = automatic_interval(capture_s + (handover_s() or 0.0), step_s)
        if self.spec.checkpoint.every_steps:  # the capture's own interval is the floor
            every = min(every, max(self.snapshot_every or 1, self.spec.checkpoint.every_steps))
        self.snapshot_every = self._max_over_ranks(every)
        return self.step % self.snapshot_every != 0

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
    spec: JobSpec,
    *,
    on_step: Callable[[dict], None] | None = None,
    checkpoint: CheckpointTarget | None = None,
    stop_after: int | None = None,
) -> list[dict]:
    """Train this rank to the end of the job (or `stop_after`), resuming from
    the latest committed checkpoint when a target is given; the process group
    must exist, and the job must run at its world size (`SpecError` if not)."""
    spec.check_world_size(dist.get_world_size())
    return Trainer(spec, checkpoint).run(on_step, stop_after)
