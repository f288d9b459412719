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


class RankHungError(RankError):
    """A rank's process did not answer in time (stopped, or stuck holding the
    interpreter): the job needs a new group, as for a lost rank."""


class DataError(ValueError):
    """A job's data is wrong in a way a restart cannot fix (a missing or
    corrupt shard, a token id outside the vocabulary, a tokenizer that does
    not parse): the job fails at once, naming `file`, without using up its
    restarts. The control plane tells it apart by `is_permanent` on the
    message that crosses from the rank."""

    def __init__(self, file: str, message: str):
        super().__init__(f"{file}: {message}")
        self.file = file

    def __reduce__(self):
        return _data_error, (self.file, str(self))


def _data_error(file: str, text: str) -> DataError:
    error = DataError(file, "")
    error.args = (text,)
    return error


PERMANENT_MARK = "DataError: "  # how a rank's failure reads when its cause is a DataError


def is_permanent(message: str) -> bool:
    """Whether a rank's failure (its message, as it crossed processes) is one
    that will not go away on a restart."""
    return PERMANENT_MARK in message
