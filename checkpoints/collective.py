"""The checkpointer's own process group, and the rule that every rank raises.

A save's background thread runs collectives (DCP's planning, our digest
gather) while the training thread runs its own; on one group they could
interleave, so checkpoints get a dedicated gloo group, made from the default
group. Without a default group (a plain single process) it is a group of one.

`agree` runs a step on every rank (or on rank 0 only) and exchanges the
outcomes, so a failure on one rank raises the same `CheckpointError` on all:
a rank that swallowed its error would leave the others hanging. DCP's
`CheckpointException` is a BaseException, so it is caught by name.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException

from checkpoints.errors import CheckpointError

T = TypeVar("T")


class CheckpointGroup:
    def __init__(self, *, timeout_s: float) -> None:
        if dist.is_available() and dist.is_initialized():
            # A collective over the default group: every rank constructs it, in the same order.
            self.pg: dist.ProcessGroup | None = dist.new_group(
                backend="gloo", timeout=timedelta(seconds=timeout_s)
            )
            self.rank = dist.get_rank(self.pg)
            self.world_size = dist.get_world_size(self.pg)
        else:
            self.pg = None
            self.rank, self.world_size = 0, 1

    @property
    def distributed(self) -> bool:
        return self.pg is not None

    def all_gather(self, value: T) -> list[T]:
        if self.pg is None:
            return [value]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value, group=self.pg)
        return gathered

    def agree(self, what: str, step: Callable[[], T], *, rank0_only: bool = False) -> list[T]:
        """Run `step` (everywhere, or on rank 0 with None elsewhere) and return
        every rank's result, or raise on every rank if it failed on any."""
        local_error: BaseException | None = None
        outcome: tuple[Any, ...] = (True, None)
        if self.rank == 0 or not rank0_only:
            try:
                outcome = (True, step())
            except (Exception, CheckpointException) as exc:
                local_error = exc
                kind = type(exc) if isinstance(exc, CheckpointError) else CheckpointError
                outcome = (False, describe(exc), kind)
        outcomes = self.all_gather(outcome)
        failures = [(rank, o[1], o[2]) for rank, o in enumerate(outcomes) if not o[0]]
        if failures:
            detail = "; ".join(f"rank {rank}: {message}" for rank, message, _ in failures)
            # Every rank raises the same type: the first failing rank's.
            error = failures[0][2](f"{what} failed on {len(failures)} rank(s): {detail}")
            raise error from local_error
        return [o[1] for o in outcomes]

    def on_rank0(self, what: str, step: Callable[[], T]) -> T:
        """Run `step` on rank 0 only; every rank returns its result or raises."""
        return self.agree(what, step, rank0_only=True)[0]

    def close(self) -> None:
        if self.pg is not None and dist.is_initialized():
            dist.destroy_process_group(self.pg)
        self.pg = None


def describe(exc: BaseException) -> str:
    """An error as one line, `Type: message`; DCP's CheckpointException (whose
    text is every rank's traceback) by the errors it wraps, e.g. `OSError:
    [Errno 28] No space left on device`."""
    if isinstance(exc, CheckpointException):
        causes = dict.fromkeys(describe(inner) for inner, _ in exc.failures.values())
        return f"{type(exc).__name__}: " + "; ".join(causes)
    return f"{type(exc).__name__}: {exc}"
