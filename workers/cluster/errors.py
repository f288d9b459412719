"""What can go wrong with a worker group, as exceptions the supervisor can tell apart.

Driver-side only (no torch, no Ray), and picklable so they can cross processes.
A job's bad data is the datasets' own error (`DataError`, workers/datasets/errors.py),
a compiler that cannot run the engine's (`CompileError`, workers/engine/errors.py);
`is_permanent` tells them apart once they have crossed from a rank as a message.
"""

from __future__ import annotations

from workers.datasets.errors import DataError
from workers.engine.errors import BaseMismatch, CompileError


class WorkerGroupError(RuntimeError):
    """A worker group could not start, or stopped working."""


class CapacityError(WorkerGroupError):
    """The cluster can never hold the group as asked, however long it waits."""


class PlacementTimeoutError(WorkerGroupError):
    """The group could fit, but its bundles were not all free in time."""


class RankError(WorkerGroupError):
    """One rank went wrong; `rank` says which."""

    def __init__(self, rank: int, message: str):
        super().__init__(message)
        self.rank = rank

    def __reduce__(self):
        return type(self), (self.rank, str(self))


class RankLostError(RankError):
    """A rank's actor died (its process or its node): the job needs a new group."""


class RankFailedError(RankError):
    """A rank's code raised; the message carries the remote error."""


class RankHungError(RankError):
    """A rank's process did not answer in time (stopped, or stuck holding the
    interpreter): the job needs a new group, as for a lost rank."""


# How a rank's failure reads when its cause is one a restart cannot fix: bad data
# (workers/datasets/errors.py), a compiler that cannot run (workers/engine/errors.py).
PERMANENT_MARKS = tuple(f"{error.__name__}: " for error in (DataError, CompileError,
                                                            BaseMismatch))


def is_permanent(message: str) -> bool:
    """Whether a rank's failure (its message, as it crossed processes) is one
    that will not go away on a restart."""
    return any(mark in message for mark in PERMANENT_MARKS)
