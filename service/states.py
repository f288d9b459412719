"""A job's lifecycle: the states, the one table of allowed transitions, and the
sets of states the control plane asks about (ACTIVE, HOLDING, LEAVING, ...).

    QUEUED -> STARTING -> RUNNING -> SUCCEEDED
                            |  |  \\-> FAILED
                            |  \\----> CANCELLING -> CANCELLED
                            |  \\----> PRUNING -> PRUNED      (a sweep's pruner stopped it)
                            |  \\----> SUSPENDING -> SUSPENDED -> QUEUED (resume)
                            \\-------> PREEMPTING -> QUEUED      (checkpoint, then release)
          RUNNING --worker lost--> RESTARTING -> STARTING       (from the latest checkpoint)
    STARTING and RESTARTING may be preempted too; a RESTARTING job that no
    longer fits the cluster at any of its sizes goes back to QUEUED.
    PRUNING stops a sweep's trial at once, like a cancel (its last committed
    checkpoint kept); one that holds no workers (QUEUED, SUSPENDED) goes
    straight to PRUNED.

Every change is a row in the job's event log with its reason; a transition
not in the table is an error (`IllegalTransition`), never a silent overwrite.

A hyperparameter sweep's states and its trials' (`SweepState`, `TrialState`)
are here too, beside the jobs' that a trial's follows. This module imports
nothing but `enum`: the API's schemas and the lean client (`api.client`, no
database driver) type their states with these very enums.
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
    PRUNING = "PRUNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    PRUNED = "PRUNED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


S = JobState
# The sets of states the control plane asks about, each derived here once.
TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.PRUNED})
NOT_FINAL = frozenset(JobState) - TERMINAL
# Driven by a runner: holds workers, or may (a RESTARTING job between its attempts).
ACTIVE = frozenset({S.STARTING, S.RUNNING, S.SUSPENDING, S.PREEMPTING, S.RESTARTING, S.CANCELLING,
                    S.PRUNING})
HOLDING = ACTIVE - {S.RESTARTING}  # its workers held (a RESTARTING job holds none between attempts)
IN_ATTEMPT = frozenset({S.STARTING, S.RUNNING})  # an attempt starting or training, not asked to leave
WITHOUT_WORKERS = frozenset({S.QUEUED, S.SUSPENDED})  # not final, holding none: a cancel or prune ends it
STOPPING = frozenset({S.CANCELLING, S.PRUNING})  # its group stopped at once (no checkpoint asked)
YIELDING = frozenset({S.SUSPENDING, S.PREEMPTING})  # asked to checkpoint and stop within a grace
LEAVING = STOPPING | YIELDING  # giving its workers back: no preemption needs to pick it
REQUEUING = frozenset({S.PREEMPTING})  # leaving its workers to come back to the queue

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    S.QUEUED: frozenset({S.STARTING, S.CANCELLED, S.FAILED, S.PRUNED}),
    S.STARTING: frozenset(
        {S.RUNNING, S.RESTARTING, S.FAILED, S.CANCELLING, S.SUSPENDING, S.PREEMPTING, S.QUEUED,
         S.PRUNING}
    ),
    S.RUNNING: frozenset(
        {S.SUCCEEDED, S.FAILED, S.CANCELLING, S.SUSPENDING, S.PREEMPTING, S.RESTARTING, S.PRUNING}
    ),
    S.SUSPENDING: frozenset(
        {S.SUSPENDED, S.SUCCEEDED, S.FAILED, S.CANCELLING, S.RESTARTING, S.PRUNING}
    ),
    S.SUSPENDED: frozenset({S.QUEUED, S.CANCELLED, S.PRUNED}),
    S.PREEMPTING: frozenset({S.QUEUED, S.SUCCEEDED, S.FAILED, S.CANCELLING, S.PRUNING}),
    S.RESTARTING: frozenset({S.STARTING, S.FAILED, S.CANCELLING, S.PREEMPTING, S.QUEUED,
                             S.PRUNING}),
    S.CANCELLING: frozenset({S.CANCELLED}),
    S.PRUNING: frozenset({S.PRUNED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.PRUNED: frozenset(),
}


# What a person's action is called once done: `refusal` says which jobs it applies to.
_DONE = {"cancel": "cancelled", "suspend": "suspended", "resume": "resumed"}


class IllegalTransition(ValueError):
    def __init__(self, job_id: str, current: JobState, target: JobState):
        self.job_id, self.current, self.target = job_id, current, target
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[current])) or "none: it is final"
        super().__init__(
            f"job {job_id} cannot go from {current.value} to {target.value} (allowed: {allowed})"
        )

    @property
    def allowed_from(self) -> frozenset[JobState]:
        """The states a job may reach the refused target from."""
        return frozenset(s for s, targets in TRANSITIONS.items() if self.target in targets)

    def refusal(self, action: str) -> str:
        """The refusal of a person's `action` (cancel, suspend, resume) in
        words: `job j-1 already SUCCEEDED: nothing to cancel`, `job j-1 is
        QUEUED: only a STARTING or RUNNING job can be suspended`."""
        if self.current.is_terminal:
            return f"job {self.job_id} already {self.current.value}: nothing to {action}"
        states = " or ".join(s.value for s in JobState if s in self.allowed_from)
        done = _DONE.get(action, f"{action}ed")
        return f"job {self.job_id} is {self.current.value}: only a {states} job can be {done}"


def check_transition(job_id: str, current: JobState, target: JobState) -> None:
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(job_id, current, target)


class SweepState(str, Enum):
    """A sweep's state: QUEUED until a trial is launched, RUNNING while any
    may be, then final (its trials' outcome; `service.sweeps.controller`)."""

    QUEUED = "QUEUED"  # no trial launched yet (waiting for its `after` jobs too)
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"  # every trial ended, at least one succeeded
    FAILED = "FAILED"  # every trial failed, or a dependency did (its error names it)
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self not in LIVE_SWEEP


LIVE_SWEEP = (SweepState.QUEUED, SweepState.RUNNING)


class TrialState(str, Enum):
    """A trial's state, its job's (QUEUED while its job waits or before it has
    one; FAILED with `error` when its spec was refused and it has no job)."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PRUNED = "PRUNED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self not in (TrialState.QUEUED, TrialState.RUNNING)
