"""A job's lifecycle: the states and the one table of allowed transitions.

    QUEUED -> STARTING -> RUNNING -> SUCCEEDED
                            |  |  \\-> FAILED
                            |  \\----> CANCELLING -> CANCELLED
                            |  \\----> SUSPENDING -> SUSPENDED -> QUEUED (resume)
                            \\-------> PREEMPTING -> QUEUED      (checkpoint, then release)
          RUNNING --worker lost--> RESTARTING -> STARTING       (from the latest checkpoint)
    STARTING and RESTARTING may be preempted too; a RESTARTING job that no
    longer fits the cluster at any of its sizes goes back to QUEUED.

Every change is a row in the job's event log with its reason; a transition
not in the table is an error (`IllegalTransition`), never a silent overwrite.
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    QUEUED = "QUEUED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"
    PREEMPTING = "PREEMPTING"
    RESTARTING = "RESTARTING"
    CANCELLING = "CANCELLING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


S = JobState
TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})
ACTIVE = frozenset({S.STARTING, S.RUNNING, S.SUSPENDING, S.PREEMPTING, S.RESTARTING, S.CANCELLING})

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    S.QUEUED: frozenset({S.STARTING, S.CANCELLED, S.FAILED}),
    S.STARTING: frozenset(
        {S.RUNNING, S.RESTARTING, S.FAILED, S.CANCELLING, S.SUSPENDING, S.PREEMPTING, S.QUEUED}
    ),
    S.RUNNING: frozenset(
        {S.SUCCEEDED, S.FAILED, S.CANCELLING, S.SUSPENDING, S.PREEMPTING, S.RESTARTING}
    ),
    S.SUSPENDING: frozenset({S.SUSPENDED, S.SUCCEEDED, S.FAILED, S.CANCELLING, S.RESTARTING}),
    S.SUSPENDED: frozenset({S.QUEUED, S.CANCELLED}),
    S.PREEMPTING: frozenset({S.QUEUED, S.SUCCEEDED, S.FAILED, S.CANCELLING}),
    S.RESTARTING: frozenset({S.STARTING, S.FAILED, S.CANCELLING, S.PREEMPTING, S.QUEUED}),
    S.CANCELLING: frozenset({S.CANCELLED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


class IllegalTransition(ValueError):
    def __init__(self, job_id: str, current: JobState, target: JobState):
        self.job_id, self.current, self.target = job_id, current, target
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[current])) or "none: it is final"
        super().__init__(
            f"job {job_id} cannot go from {current.value} to {target.value} (allowed: {allowed})"
        )


def check_transition(job_id: str, current: JobState, target: JobState) -> None:
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(job_id, current, target)
