"""What can go wrong with a worker group, as exceptions the supervisor can tell apart.

Driver-side only (no torch, no Ray), and picklable so they can cross processes.
"""

from __future__ import annotations


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
