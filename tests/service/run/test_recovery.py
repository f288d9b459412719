"""What an interruption cost (service/run/recovery.py): the recovery time and
lost steps of the first step after a restart or a preemption. (Whether a
failure restarts: tests/service/run/test_lifecycle.py.)"""

from __future__ import annotations

from datetime import UTC, datetime

from service.run.recovery import Interruption
from service.states import JobState as S


class _Event:
    def __init__(self, from_state, to_state, t):
        self.from_state, self.to_state = from_state, to_state
        self.time = datetime.fromtimestamp(t, UTC)


class _Store:
    def __init__(self, events):
        self._events = events

    def events(self, job_id):
        return self._events


class _Job:
    id, step = "j-1", 27


def test_an_attempt_after_a_failure_measures_the_recovery():
    store = _Store([_Event(None, S.QUEUED, 0), _Event(S.QUEUED, S.STARTING, 1),
                    _Event(S.STARTING, S.RUNNING, 2), _Event(S.RUNNING, S.RESTARTING, 100),
                    _Event(S.RESTARTING, S.RESTARTING, 101),  # a note: reconciled
                    _Event(S.RESTARTING, S.STARTING, 102)])
    interruption = Interruption.before(store, _Job())
    assert interruption.kind == "restart" and interruption.last_step == 27
    cost = interruption.measure({"step": 21, "resumed_from": 20, "wall_time": 112.5})
    assert cost == {"recovery_s": 12.5, "lost_steps": 7, "recovered_from": "restart"}


def test_an_attempt_after_a_suspend_is_no_recovery():
    store = _Store([_Event(S.STARTING, S.RUNNING, 2), _Event(S.RUNNING, S.SUSPENDING, 3),
                    _Event(S.SUSPENDING, S.SUSPENDED, 4), _Event(S.SUSPENDED, S.QUEUED, 50),
                    _Event(S.QUEUED, S.STARTING, 51)])
    assert Interruption.before(store, _Job()) is None
