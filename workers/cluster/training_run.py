"""Training in flight on every rank of a worker group (workers/cluster/group.py
`WorkerGroup.start_training` makes one): polled without blocking, waited on,
its rank 0's rows fetched as they come; with recovery in place, a lost rank
replaced while waiting."""

from __future__ import annotations

import time
from typing import Any, overload

from checkpoints import CheckpointTarget
from workers.cluster.errors import RankError, WorkerGroupError
from workers.cluster.in_place import CannotRecover
from workers.cluster.replace import Recovery
from workers.schema import JobSpec

WorkerGroup = Any  # workers/cluster/group.py's, passed in (this module is the group's)


class TrainingRun:
    """Training in flight on every rank of a group: poll it without blocking.
    With recovery in place on (`WorkerGroup.in_place`), `wait` replaces a
    lost rank and goes on (`recoveries` lists them); a driver that polls
    `status` instead calls `WorkerGroup.recover` itself."""

    def __init__(self, group: WorkerGroup, refs: list, *, spec: JobSpec,
                 checkpoint: CheckpointTarget | None = None, stop_after: int | None = None,
                 stop_signals: bool = False):
        self._group = group
        self._refs = refs
        self.spec, self.checkpoint, self.stop_after = spec, checkpoint, stop_after
        self.stop_signals = stop_signals  # rank 0 reads `signal_stop`'s key itself, every step
        self._steps: dict[int, dict] = {}  # rank 0's metrics fetched so far, by step
        self._fetched = 0  # rank 0's rows read (its process's: a new rank 0 starts again)
        self.recoveries: list[Recovery] = []

    def replace(self, rank: int, ref) -> None:
        """Rank `rank`'s train call is now `ref` (its replacement's)."""
        self._refs[rank] = ref
        if rank == 0:
            self._fetched = 0

    @overload
    def wait(self, timeout_s: None = None) -> list[list[dict]]: ...
    @overload
    def wait(self, timeout_s: float) -> list[list[dict]] | None: ...
    def wait(self, timeout_s: float | None = None) -> list[list[dict]] | None:
        """Per-rank metrics once every rank is done, or None if still running after
        `timeout_s`. A lost or failed rank raises `RankLostError` or
        `RankFailedError` and the group is shut down (with recovery in place:
        where the rank cannot be replaced)."""
        if None in self._refs:
            raise WorkerGroupError("this training was started by another driver: its results "
                                   "are not this one's to wait on (follow it with status())")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return self._group._await(list(self._refs), left)
            except RankError as e:
                if not self._group.in_place:
                    raise
                try:
                    self.recoveries.append(self._group.recover([e.rank]))
                except CannotRecover as why:
                    self._group.shutdown()
                    e.add_note(f"not recovered in place: {why}")
                    raise e from None

    def progress(self) -> list[dict]:
        """Rank 0's metrics so far, one dict per finished step (a step redone
        after a recovery in place once)."""
        if self._group.actors:
            fetched = self._group.progress(self._fetched)
            self._fetched += len(fetched)
            self._steps.update((row["step"], row) for row in fetched)
        return [self._steps[step] for step in sorted(self._steps)]
