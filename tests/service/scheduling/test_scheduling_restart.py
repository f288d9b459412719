"""RestartPolicy: failures and preemptions apart, capped backoff, a bad node, and
what makes an attempt's progress (a committed checkpoint, enough steps) that starts
the count again."""

from __future__ import annotations

import pytest

from service.scheduling import AttemptSteps, Failure, RestartPolicy
from service.scheduling.restart import RESET_AFTER_STEPS

policy = RestartPolicy(base_backoff_s=0.5, max_backoff_s=10.0, max_same_node=3)


def failures(*nodes, error="rank 1 died"):
    return [Failure(error, node, rank=1) for node in nodes]


@pytest.mark.parametrize("count,backoff", [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 8.0),
                                           (6, 10.0), (7, 10.0), (20, 10.0)])
def test_backoff_doubles_up_to_the_cap(count, backoff):
    decision = policy.decide([Failure("boom", node=f"n{i}") for i in range(count)], 0, 100)
    assert decision.restart
    assert decision.backoff_s == backoff


@pytest.mark.parametrize("count,max_restarts,restart", [
    (1, 0, False), (1, 1, True), (3, 3, True), (4, 3, False), (2, 1, False)])
def test_max_restarts_counts_failures(count, max_restarts, restart):
    decision = policy.decide(failures(*[None] * count), 0, max_restarts)
    assert decision.restart is restart
    if not restart:
        assert decision.reason.startswith(f"failed {count} times, more than max_restarts")


@pytest.mark.parametrize("preemptions", [0, 1, 5, 1000])
def test_preemptions_never_use_up_restarts(preemptions):
    decision = policy.decide(failures(None), preemptions, max_restarts=1)
    assert decision.restart
    assert decision.backoff_s == 0.5
    if preemptions:
        assert f"{preemptions} preemptions not counted" in decision.reason


def test_the_reason_says_which_restart_and_why():
    decision = policy.decide(failures("n1", "n2", error="NCCL timeout"), 0, 3)
    assert decision.reason == "restart 2 of 3 from the latest checkpoint in 1 s: NCCL timeout"


def test_a_rank_failing_on_the_same_node_again_and_again_gives_up_naming_it():
    decision = policy.decide(failures("n0", "10.0.0.5", "10.0.0.5", "10.0.0.5", "10.0.0.5"), 0, 100)
    assert not decision.restart
    assert decision.reason.startswith(
        "rank 1 failed on node 10.0.0.5 4 times in a row (more than 3); giving up")


@pytest.mark.parametrize("nodes", [
    ("a", "a", "a"),  # three in a row is not more than three
    ("a", "a", "a", "b"),  # the streak is broken by the latest
    ("a", "b", "a", "b", "a", "b"),
    (None, None, None, None, None),  # nodes unknown: only max_restarts applies
])
def test_failures_spread_over_nodes_keep_restarting(nodes):
    assert policy.decide(failures(*nodes), 0, 100).restart


def test_the_default_policy_caps_the_backoff_at_ten_seconds():
    default = RestartPolicy()
    assert [default.backoff_s(n) for n in (0, 1, 2, 3, 4, 5, 10)] == [0.5, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert default.decide(failures(*[None] * 9), 0, 100).backoff_s == 10.0


def test_on_a_single_node_the_same_node_streak_does_not_count():
    same = failures(*["n0"] * 5)
    assert not policy.decide(same, 0, 100).restart
    assert policy.decide(same, 0, 100, multi_node=False).restart


def test_decide_needs_a_failure():
    with pytest.raises(ValueError):
        policy.decide([], 0, 3)


# -- progress: what resets the count ------------------------------------------------


@pytest.mark.parametrize("steps,committed,progressed", [
    (None, None, False),  # failed starting, or before a step was read
    (None, 500, False),  # a checkpoint, but nothing says this attempt made it
    (AttemptSteps(0, 0), None, False),
    (AttemptSteps(0, 19), None, False),  # one step short
    (AttemptSteps(0, 20), None, True),
    (AttemptSteps(100, 119), 100, False),  # resumed from 100: none of its own committed
    (AttemptSteps(100, 119), 90, False),  # an older one
    (AttemptSteps(100, 101), 101, True),  # committed after its start, however soon
    (AttemptSteps(100, 120), 100, True),
    (AttemptSteps(100, 5000), None, True),
], ids=["nothing", "nothing-but-a-checkpoint", "no-step", "19-steps", "20-steps",
        "its-own-start", "older", "one-committed", "20-after-resume", "long"])
def test_an_attempt_made_progress_by_a_checkpoint_or_enough_steps(steps, committed, progressed):
    assert policy.made_progress(steps, committed) is progressed


def test_how_many_steps_make_progress_is_the_policys():
    assert RESET_AFTER_STEPS == 20 and policy.reset_after_steps == RESET_AFTER_STEPS
    patient = RestartPolicy(reset_after_steps=100)
    assert not patient.made_progress(AttemptSteps(0, 99), None)
    assert patient.made_progress(AttemptSteps(0, 100), None)
    assert patient.made_progress(AttemptSteps(0, 1), 1)  # a checkpoint is progress whatever the steps


def test_the_backoff_counts_the_failures_it_is_given_not_those_before_progress():
    decision = policy.decide(failures(None), 0, 3, before_progress=40)
    assert decision.restart and decision.backoff_s == 0.5
    assert decision.reason == ("restart 1 of 3 since its last progress (41 in all) from the "
                               "latest checkpoint in 0.5 s: rank 1 died")


def test_max_restarts_bounds_the_failures_since_progress():
    decision = policy.decide(failures(None, None, None, None), 2, 3, before_progress=5)
    assert not decision.restart
    assert decision.reason == ("failed 4 times since its last progress (9 in all), more than "
                               "max_restarts 3; 2 preemptions not counted: rank 1 died")
    assert policy.decide(failures(None, None, None), 0, 3, before_progress=50).restart


@pytest.mark.parametrize("count,backoff", [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 8.0),
                                           (6, 10.0), (30, 10.0)])
def test_before_progress_changes_no_backoff(count, backoff):
    for before in (0, 1, 1000):
        assert policy.decide(failures(*[None] * count), 0, 100,
                             before_progress=before).backoff_s == backoff
