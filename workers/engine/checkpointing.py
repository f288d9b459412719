"""The engine's side of checkpoints: what a rank's state is, and restoring it.

The model and optimizer go through DCP (sharded, resharded at load); the rest
of what makes a resumed run continue the same curve — the step, the data
cursor, the RNG — rides in the signed manifest's `extra`, with what the run
looked like (world size, strategy, mesh, config hash) for the listing.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import torch

from checkpoints import CheckpointTarget, decode_bytes, encode_bytes
from checkpoints.checkpointer import Checkpointer, LoadResult
from checkpoints.errors import CheckpointError
from checkpoints.manifest import finite
from checkpoints.stateful import ModelAndOptimizer
from workers.spec import CheckpointSpec

if TYPE_CHECKING:
    from workers.engine.trainer import Trainer

logger = logging.getLogger(__name__)


class TrainerCheckpoints:
    """Saves and restores one rank's `Trainer`; every rank calls every method."""

    def __init__(self, target: CheckpointTarget, policy: CheckpointSpec, timeout_s: float = 600.0):
        self.policy = policy
        self.checkpointer = Checkpointer(target.open_store(), keep_last=policy.keep_last, timeout_s=timeout_s)
        self.last_saved: int | None = None
        self.failures = 0  # saves that failed in this run

    def resume(self, trainer: Trainer) -> LoadResult | None:
        """Load the newest committed step that verifies into `trainer`, at its
        current world size and sharding; None on a fresh start.

        Files are verified as DCP reads them into the live model and optimizer:
        a step that fails is passed over and the next older one is read over
        the whole state. If none loads after one was read in part, this raises
        (`CheckpointInvalid`): the state is no longer the fresh one, so the
        attempt fails rather than train from it (a restart meets the same
        steps: the job ends failed with the reason, never silently restarted
        from a mix of two states)."""
        result = self.checkpointer.resume({"app": ModelAndOptimizer(trainer.model, trainer.optimizer)})
        if result is not None:
            restore_extra(trainer, result.extra)
            self.last_saved = result.step
            for skipped in result.skipped:
                logger.warning("checkpoint step %d passed over: %s", skipped.step, skipped.reason)
        return result

    def due(self, step: int) -> bool:
        every = self.policy.every_steps
        return every > 0 and step % every == 0 and step != self.last_saved

    def save(self, trainer: Trainer, *, blocking: bool) -> dict:
        """Save `trainer`'s current step; returns what to add to the step's
        metrics: `checkpoint_step` and `checkpoint_stall_s` (how long training
        was held), or, where the save (or an async one before it) failed,
        `checkpoint_error` and `checkpoint_failures` (this run's count so far).

        A failed save never stops training: the previous committed step stays
        the one a restart loads (a save commits only with its manifest, written
        last), and the next interval tries again. Every rank gets the same
        outcome (`CheckpointGroup.agree`), so they all go on together.
        """
        start = time.perf_counter()
        out: dict = {}
        self._settle(out)  # an async save before this one may have failed
        state = {"app": ModelAndOptimizer(trainer.model, trainer.optimizer)}
        try:
            if blocking or not self.policy.async_:
                self.checkpointer.save(trainer.step, state, extra=extra_state(trainer))
            else:
                self.checkpointer.async_save(trainer.step, state, extra=extra_state(trainer))
        except CheckpointError as e:
            self._failed(trainer.step, e, out)
        else:
            self.last_saved = trainer.step
            out["checkpoint_step"] = trainer.step
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


def extra_state(trainer: Trainer) -> dict:
    cfg = trainer.config
    return {
        "step": trainer.step,
        "data": trainer.batches.state_dict(),
        "rng": encode_bytes(torch.get_rng_state().numpy().tobytes()),
        "world_size": trainer.world_size,
        "sharding": cfg.sharding.strategy,
        "mesh": list(trainer.mesh.shape),  # (replicate,) shard (, tp)
        "tp": cfg.parallelism.tp,
        "config_hash": cfg.config_hash(),
        # The rows its reader may not have recorded (`Trainer.unrecorded`), this
        # step's included; handed back at a resume (`restore_extra`).
        "metrics": [_json_row(row, trainer.step) for row in trainer.unrecorded()],
    }


def _json_row(row: dict, saved: int) -> dict:
    """A metrics row as the manifest can hold it: JSON has no NaN or infinity
    (the store keeps them as None too); the saved step's row says it was saved."""
    out = {k: finite(v) for k, v in row.items()}
    if row["step"] == saved:
        out["checkpoint_step"] = saved
    return out


def restore_extra(trainer: Trainer, extra: dict) -> None:
    if extra["config_hash"] != trainer.config.config_hash():
        logger.warning(
            "resuming step %d saved by a different job config (hash %s, now %s)",
            extra["step"], extra["config_hash"][:12], trainer.config.config_hash()[:12],
        )
    trainer.step = int(extra["step"])
    trainer.carry_unrecorded(extra.get("metrics", []))
    trainer.batches.load_state_dict(extra["data"])
    rng = torch.frombuffer(bytearray(decode_bytes(extra["rng"])), dtype=torch.uint8)
    torch.set_rng_state(rng)
