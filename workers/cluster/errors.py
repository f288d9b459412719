"""What can go wrong with a worker group, as exceptions the supervisor can tell apart.

Driver-side only (no torch, no Ray), and picklable so they can cross processes.
A job's bad data is the datasets' own error (`DataError`, workers/datasets/errors.py),
a compiler that cannot run the engine's (`CompileError`, workers/engine/errors.py), a
spec that cannot run as written the spec's (`SpecError`);
`is_permanent` tells them apart once they have crossed from a rank as a message,
and `permanent_cause` says what the user has to change.
"""

from __future__ import annotations

from workers.datasets.errors import DataError
from workers.engine.errors import BaseMismatch, CompileError
from workers.schema import SpecError


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


# The failures a restart cannot fix, as their names read in a rank's message
# ("DataError: ..."), each with its cause in words: what must change before the
# job can run (the job's error ends with it: "not restarted: ...").
PERMANENT_CAUSES: dict[str, str] = {
    DataError.__name__: "its data is bad: fix or replace the file named, then submit again",
    CompileError.__name__: ("the compiler cannot run on these machines: set train.compile "
                            "false, or give the nodes a working C++ compiler"),
    BaseMismatch.__name__: ("its adapter checkpoint was trained on other base weights than "
                            "init now holds: point init at the base it was trained on"),
    SpecError.__name__: "the spec cannot run as written: fix the field named, then submit again",
}
PERMANENT_MARKS = tuple(f"{name}: " for name in PERMANENT_CAUSES)


def permanent_cause(message: str) -> str | None:
    """What a rank's failure (its message, as it crossed processes) needs
    changed, where it is one that will not go away on a restart: the cause of
    the first such error the message names (its summary comes before the
    traceback); None for any other failure."""
    found = [(at, name) for name in PERMANENT_CAUSES
             if (at := message.find(f"{name}: ")) >= 0]
    return PERMANENT_CAUSES[min(found)[1]] if found else None


def is_permanent(message: str) -> bool:
    """Whether a rank's failure (its message, as it crossed processes) is one
    that will not go away on a restart."""
    return permanent_cause(message) is not None
