"""The runner's fault rules (service/recovery.py): the restart policy with
where each failure happened, and what an interruption cost."""

from __future__ import annotations

from datetime import datetime, timezone

from service.recovery import FailureHistory, Interruption, backoff_s
from service.states import JobState as S
from workers.errors import RankLostError


class _Group:
    node_infos = [{"node_id": "n-a", "node_ip": "10.0.0.1"}, {"node_id": "n-b", "node_ip": "10.0.0.2"}]


def _fail_on(history: FailureHistory, rank: int, restarts: int, nodes: int, max_restarts=10):
    history.note(RankLostError(rank, f"rank {rank} was lost"), _Group())
    return history.decide(f"rank {rank} was lost", restarts, 0, max_restarts, nodes=nodes)


def test_failures_on_one_node_of_many_stop_the_job_before_max_restarts():
    history = FailureHistory()
    decisions = [_fail_on(history, 1, restarts, nodes=3) for restarts in range(4)]
    assert [d.restart for d in decisions] == [True, True, True, False]
    assert "rank 1 failed on node n-b 4 times in a row" in decisions[-1].reason


def test_failures_moving_between_nodes_use_max_restarts():
    history = FailureHistory()
    decisions = [_fail_on(history, restarts % 2, restarts, nodes=3) for restarts in range(6)]
    assert all(d.restart for d in decisions)


def test_on_a_single_node_the_same_node_rule_never_stops_a_job_early():
    history = FailureHistory()
    decisions = [_fail_on(history, 0, restarts, nodes=1, max_restarts=5) for restarts in range(6)]
    assert [d.restart for d in decisions] == [True] * 5 + [False]
    assert "more than max_restarts 5" in decisions[-1].reason


def test_a_runner_that_did_not_see_the_earlier_failures_still_counts_them():
    history = FailureHistory()  # a runner started after a control-plane restart
    history.note(ValueError("boom"))
    decision = history.decide("boom", restarts=3, preemptions=2, max_restarts=3, nodes=1)
    assert not decision.restart
    assert "failed 4 times, more than max_restarts 3; 2 preemptions not counted: boom" in decision.reason


def test_backoff_doubles_up_to_ten_seconds():
    assert [backoff_s(n, 0.5) for n in (1, 2, 3, 4, 10)] == [0.5, 1.0, 2.0, 4.0, 10.0]


class _Event:
    def __init__(self, from_state, to_state, t):
        self.from_state, self.to_state = from_state, to_state
        self.time = datetime.fromtimestamp(t, timezone.utc)


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
