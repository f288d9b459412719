"""The engine's side of checkpoints: what a rank's state is, and restoring it.

The model and optimizer go through DCP (sharded, resharded at load); the rest
of what makes a resumed run continue the same curve — the step, the data
cursor, the RNG, the unrecorded metrics rows: the `TrainState` — rides in the
signed manifest's `extra`, with what the run looked like (world size,
strategy, mesh, config hash) for the listing.

`TrainerCheckpoints` is handed what it saves and restores (the model, the
optimizer, the `TrainState`); it never sees the loop that owns them.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from checkpoints import CheckpointTarget
from checkpoints.checkpointer import Checkpointer, LoadResult
from checkpoints.errors import CheckpointError
from checkpoints.stateful import ModelAndOptimizer
from workers.engine.base_identity import check_base
from workers.engine.train_state import TrainState
from workers.schema import JobSpec

logger = logging.getLogger(__name__)


def run_info(spec: JobSpec, mesh_shape: Sequence[int], base: dict | None = None) -> dict:
    """What the run looks like, recorded beside its state for the listing
    (the world size is the mesh's size: (replicate,) shard (, tp)); an
    adapter job's `base` identity too (workers/engine/adapters.py)."""
    info: dict[str, Any] = {
        "world_size": math.prod(mesh_shape),
        "sharding": spec.sharding.strategy,
        "mesh": list(mesh_shape),
        "tp": spec.parallelism.tp,
        "config_hash": spec.config_hash(),
    }
    if base is not None:
        info["base"] = base
    return info


class TrainerCheckpoints:
    """Saves and restores one rank's model, optimizer and `TrainState`;
    every rank calls every method."""

    def __init__(
        self,
        target: CheckpointTarget,
        spec: JobSpec,
        *,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        train_state: TrainState,
        mesh_shape: Sequence[int],
        base: dict | None = None,
        timeout_s: float = 600.0,
    ):
        self.policy = spec.checkpoint
        self.checkpointer = Checkpointer(target.open_store(), keep_last=self.policy.keep_last,
                                         timeout_s=timeout_s)
        # an adapter job's checkpoints hold its adapters and their state alone
        self.model_and_optimizer = ModelAndOptimizer(model, optimizer,
                                                     trainable_only=spec.adapter is not None)
        self.train_state = train_state
        self.base = base
        self.run_info = run_info(spec, mesh_shape, base)
        self.last_saved: int | None = None
        self.failures = 0  # saves that failed in this run

    def resume(self) -> LoadResult | None:
        """Load the newest committed step that verifies into the model,
        optimizer and train state, at the current world size and sharding;
        None on a fresh start.

        Files are verified as DCP reads them into the live model and optimizer:
        a step that fails is passed over and the next older one is read over
        the whole state. If none loads after one was read in part, this raises
        (`CheckpointInvalid`): the state is no longer the fresh one, so the
        attempt fails rather than train from it (a restart meets the same
        steps: the job ends failed with the reason, never silently restarted
        from a mix of two states)."""
        result = self.checkpointer.resume({"app": self.model_and_optimizer})
        if result is not None:
            extra = result.extra
            if self.base is not None:  # adapters resume only on the base they were trained on
                check_base(extra.get("base"), self.base, result.step)
            if extra["config_hash"] != self.run_info["config_hash"]:
                logger.warning(
                    "resuming step %d saved by a different job config (hash %s, now %s)",
                    extra["step"], extra["config_hash"][:12], self.run_info["config_hash"][:12],
                )
            self.train_state.load_state_dict(extra)
            self.last_saved = result.step
            for skipped in result.skipped:
                logger.warning("checkpoint step %d passed over: %s", skipped.step, skipped.reason)
        return result

    def rewind(self, step: int) -> None:
        """The run goes on from an in-memory snapshot of `step`: the steps saved
        after it are deleted (a dead branch), the next save is of a later step."""
        self.checkpointer.rewind(step)
        self.last_saved = None

    def due(self, step: int) -> bool:
        every = self.policy.every_steps
        return every > 0 and step % every == 0 and step != self.last_saved

    def save(self, *, blocking: bool) -> dict:
        """Save the train state's current step; returns what to add to the
        step's metrics: `checkpoint_step` and `checkpoint_stall_s` (how long
        training was held), or, where the save (or an async one before it)
        failed, `checkpoint_error` and `checkpoint_failures` (this run's count
        so far).

        A failed save never stops training: the previous committed step stays
        the one a restart loads (a save commits only with its manifest, written
        last), and the next interval tries again. Every rank gets the same
        outcome (`CheckpointGroup.agree`), so they all go on together.
        """
        start = time.perf_counter()
        out: dict = {}
        self._settle(out)  # an async save before this one may have failed
        step = self.train_state.step
        state = {"app": self.model_and_optimizer}
        # The train state's keys (step, data, rng, metrics) beside the run's description.
        extra = {**self.train_state.state_dict(), **self.run_info}
        try:
            if blocking or not self.policy.async_:
                self.checkpointer.save(step, state, extra=extra)
            else:
                self.checkpointer.async_save(step, state, extra=extra)
        except CheckpointError as e:
            self._failed(step, e, out)
        else:
            self.last_saved = step
            out["checkpoint_step"] = step
        out["checkpoint_stall_s"] = time.perf_counter() - start
        return out

    def _settle(self, out: dict | None = None) -> None:
        """Wait for the async save in flight; a failure is counted, not raised."""
        step = self.checkpointer.in_flight
        try:
            self.checkpointer.wait()
        except CheckpointError as e:
            self._failed(step, e, out)
            if step is not None and self.last_saved == step:
                self.last_saved = None  # not saved after all: the next interval saves

    def _failed(self, step: int | None, error: CheckpointError, out: dict | None) -> None:
        self.failures += 1
        message = f"checkpoint of step {step} failed: {error}"
        logger.warning("%s (%d failed saves in this run; training goes on from the last "
                       "committed step)", message, self.failures)
        if out is not None:
            out["checkpoint_error"] = message[:1000]
            out["checkpoint_failures"] = self.failures

    def close(self) -> None:
        """Wait for the save in flight to commit, then release the group."""
        try:
            self._settle()
        finally:
            self.checkpointer.close()
