"""service.run.lifecycle.decide: every way a worker group can end, from made-up
job facts, to the transition the runner records (no store, no Ray)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from service.run.lifecycle import STAY, GroupOutcome, JobFacts, Outcome, decide, restart_at
from service.scheduling.restart import AttemptSteps, Failure, RestartPolicy
from service.states import JobState as S
from workers.cluster.errors import PlacementTimeoutError, RankFailedError, RankLostError, WorkerGroupError
from workers.cluster.rank_info import RankInfo

CHECKPOINT = {"step": 20, "world_size": 2}
NODES = [RankInfo(node_id="n-a", node_ip="10.0.0.1", pid=101),
         RankInfo(node_id="n-b", node_ip="10.0.0.2", pid=102)]


def job(state=S.RUNNING, step=25, **facts) -> JobFacts:
    """A job whose failures so far (`restarts`) came without progress between them,
    unless `failures_since_progress` says otherwise."""
    facts.setdefault("failures_since_progress", facts.get("restarts", 0))
    return JobFacts(**{"state": state, "step": step, "total_steps": 40, "workers": 2,
                       "attempt": 1, **facts})


def outcome(kind: Outcome, error: str | None = None) -> GroupOutcome:
    return GroupOutcome(kind, error)


LOST = GroupOutcome.failed(RankLostError(1, "rank 1 was lost"), NODES)


# -- a group that stopped by itself ------------------------------------------------


@pytest.mark.parametrize("state", [S.RUNNING, S.SUSPENDING, S.PREEMPTING])
def test_all_steps_done_succeeds_whatever_was_asked_and_clears_the_error(state):
    t = decide(job(state, step=40), outcome(Outcome.FINISHED), checkpoint=CHECKPOINT)
    assert (t.to, t.reason, t.launch) == (S.SUCCEEDED, "all 40 steps done", False)
    assert t.fields == {"error": None, "latest_checkpoint": CHECKPOINT}


def test_a_suspended_job_that_checkpointed_and_stopped_is_suspended():
    t = decide(job(S.SUSPENDING), outcome(Outcome.FINISHED), checkpoint=CHECKPOINT)
    assert (t.to, t.reason) == (S.SUSPENDED, "checkpointed at step 25; workers released")
    assert t.fields == {"workers": None, "latest_checkpoint": CHECKPOINT}


def test_a_preempted_job_that_checkpointed_and_stopped_is_requeued_not_failed():
    t = decide(job(S.PREEMPTING), outcome(Outcome.FINISHED))
    assert (t.to, t.reason) == (S.QUEUED, "checkpointed at step 25 and stopped: preempted, requeued")
    assert t.fields == {"workers": None} and t.failure is None


def test_ranks_that_stop_short_unasked_count_as_a_failure():
    t = decide(job(), outcome(Outcome.FINISHED), policy=RestartPolicy(base_backoff_s=0.5))
    assert (t.to, t.launch, t.backoff_s) == (S.RESTARTING, True, 0.5)
    assert t.reason == "restart 1 of 3 from the latest checkpoint in 0.5 s: ranks stopped at step 25"
    assert t.fields == {"error": "ranks stopped at step 25", "restarts": 1,
                        "failures_since_progress": 1}


# -- failures and the restart policy ------------------------------------------------


def test_a_lost_rank_restarts_with_its_rank_and_node_noted():
    assert (LOST.rank, LOST.node) == (1, "n-b")
    t = decide(job(restarts=1), LOST, checkpoint=CHECKPOINT, policy=RestartPolicy(0.5))
    assert (t.to, t.launch, t.backoff_s) == (S.RESTARTING, True, 1.0)
    assert t.reason == "restart 2 of 3 from the latest checkpoint in 1 s: rank 1 was lost"
    assert t.fields == {"error": "rank 1 was lost", "restarts": 2, "failures_since_progress": 2,
                        "latest_checkpoint": CHECKPOINT}
    assert t.failure == Failure("rank 1 was lost", "n-b", 1)


def test_failures_beyond_max_restarts_fail_with_the_cause():
    t = decide(job(restarts=3, preemptions=2), LOST)
    assert (t.to, t.launch) == (S.FAILED, False)
    assert t.reason == ("failed 4 times, more than max_restarts 3; 2 preemptions not counted: "
                        "rank 1 was lost")
    assert t.fields == {"error": t.reason}


def test_max_restarts_zero_fails_at_the_first_failure():
    assert decide(job(max_restarts=0), LOST).to is S.FAILED


def test_a_group_that_stopped_answering_is_a_failure_without_a_rank():
    ended = GroupOutcome.failed(WorkerGroupError("progress took longer than 30s"), NODES)
    assert (ended.rank, ended.node) == (None, None)
    t = decide(job(), ended)
    assert t.to is S.RESTARTING
    assert t.fields["error"] == "worker group not answering: progress took longer than 30s"


def _fail_on_one_node(times: int, *, multi_node: bool, max_restarts=10):
    """The job's `times`-th failure, every one of rank 1 on node n-b."""
    failed = GroupOutcome.failed(RankFailedError(1, "rank 1 failed: CUDA error"), NODES)
    seen = [Failure(failed.error, "n-b", 1)] * (times - 1)
    return decide(job(restarts=times - 1, max_restarts=max_restarts), failed, failures=seen,
                  multi_node=multi_node)


def test_on_several_nodes_failures_on_one_node_give_up_before_max_restarts():
    assert _fail_on_one_node(3, multi_node=True).to is S.RESTARTING
    t = _fail_on_one_node(4, multi_node=True)
    assert t.to is S.FAILED
    assert t.reason.startswith("rank 1 failed on node n-b 4 times in a row (more than 3); giving up")


def test_on_a_single_node_the_same_node_rule_never_stops_a_job_early():
    assert _fail_on_one_node(4, multi_node=False).to is S.RESTARTING
    assert _fail_on_one_node(6, multi_node=False, max_restarts=5).reason.startswith(
        "failed 6 times, more than max_restarts 5")


def test_failures_moving_between_nodes_use_max_restarts():
    seen = [Failure("x", node, 1) for node in ("n-a", "n-b", "n-a", "n-b")]
    elsewhere = GroupOutcome(Outcome.FAILED, "x", 1, "n-a")
    assert decide(job(restarts=4, max_restarts=10), elsewhere, failures=seen,
                  multi_node=True).to is S.RESTARTING


def test_failures_a_runner_did_not_see_still_count_without_a_node():
    # A runner started after a control-plane restart knows only job.restarts.
    t = decide(job(restarts=3, max_restarts=3), LOST, failures=[], multi_node=True)
    assert t.reason.startswith("failed 4 times, more than max_restarts 3")


# -- progress between failures ------------------------------------------------------


def test_a_failed_attempt_that_made_progress_counts_afresh():
    # Its fourth failure in a row would fail it; but this attempt committed step 40 after
    # resuming from 20: the count starts again, the backoff is the shortest.
    t = decide(job(restarts=5, failures_since_progress=3), LOST, checkpoint={"step": 40, "world_size": 2},
               steps=AttemptSteps(resumed_from=20, last=45), policy=RestartPolicy(0.5))
    assert (t.to, t.backoff_s) == (S.RESTARTING, 0.5)
    assert t.fields["failures_since_progress"] == 1 and t.fields["restarts"] == 6
    assert t.reason == ("restart 1 of 3 since its last progress (6 in all) from the latest "
                        "checkpoint in 0.5 s: rank 1 was lost")


@pytest.mark.parametrize("steps,count", [
    (AttemptSteps(20, 40), 1),  # 20 steps after its start, its checkpoint still 20's
    (AttemptSteps(20, 39), 3),  # one short: counted on
    (None, 3),  # nothing read of it
])
def test_enough_steps_after_its_start_are_progress_without_a_checkpoint(steps, count):
    t = decide(job(restarts=2), LOST, checkpoint=CHECKPOINT, steps=steps)
    assert t.to is S.RESTARTING and t.fields["failures_since_progress"] == count


def test_an_attempt_that_fails_starting_made_no_progress():
    ended = GroupOutcome.start_failed(WorkerGroupError("forming the process group took longer than 60s"))
    t = decide(job(S.STARTING, restarts=3, failures_since_progress=3), ended, checkpoint=CHECKPOINT)
    assert t.to is S.FAILED and t.reason.startswith("failed 4 times, more than max_restarts 3")


def _walk(attempt_steps: int, every: int, faults: int, max_restarts: int = 3):
    """`faults` failures in a row, each attempt taking `attempt_steps` steps from its
    resume point and checkpointing every `every` (0: never), the job's facts carried
    from each decision to the next as the store carries them: the backoffs waited,
    and the last transition."""
    policy, facts, saved = RestartPolicy(0.5), job(max_restarts=max_restarts, step=0), 0
    backoffs, t = [], None
    for _ in range(faults):
        last = saved + attempt_steps
        if every:
            saved = max(saved, last // every * every)
        t = decide(facts, LOST, checkpoint={"step": saved, "world_size": 2} if saved else None,
                   steps=AttemptSteps(facts.step, last), policy=policy)
        if t.to is S.FAILED:
            break
        backoffs.append(t.backoff_s)
        counted = {"restarts": t.fields["restarts"],
                   "failures_since_progress": t.fields["failures_since_progress"]}
        resumed = decide(replace(facts, state=S.RESTARTING, **counted), outcome(Outcome.NO_GROUP),
                         policy=policy)
        assert resumed.backoff_s == t.backoff_s  # waited on a resume as decided
        facts = replace(facts, step=saved, **counted)
    return backoffs, t


def test_a_job_killed_every_ten_seconds_for_an_hour_never_sits_in_long_backoffs():
    # 360 faults, each attempt 25 steps (2.5 steps/s) and a checkpoint every 20: each
    # attempt commits one and takes 20 steps or more, so each makes progress.
    backoffs, last = _walk(attempt_steps=25, every=20, faults=360)
    assert len(backoffs) == 360 and set(backoffs) == {0.5}
    assert last.to is S.RESTARTING and last.fields["restarts"] == 360
    # Its checkpoints too far apart to reach (every 50): its steps alone are progress.
    backoffs, _ = _walk(attempt_steps=25, every=50, faults=360)
    assert len(backoffs) == 360 and set(backoffs) == {0.5}


def test_a_job_that_checkpoints_between_faults_trains_on_past_max_restarts():
    backoffs, last = _walk(attempt_steps=12, every=10, faults=50)  # 12 steps, a commit each
    assert len(backoffs) == 50 and set(backoffs) == {0.5}


def test_a_crash_loop_backs_off_and_fails_at_max_restarts():
    backoffs, last = _walk(attempt_steps=3, every=10, faults=10)  # 3 steps, never a commit
    assert backoffs == [0.5, 1.0, 2.0]
    assert last.to is S.FAILED and last.reason.startswith("failed 4 times, more than max_restarts 3")
    backoffs, _ = _walk(attempt_steps=3, every=0, faults=10, max_restarts=100)
    assert backoffs == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0, 10.0, 10.0]


def test_a_failure_the_runner_did_not_see_counts_only_if_since_progress():
    # A runner started after a control-plane restart knows the count from the store.
    t = decide(job(restarts=6, failures_since_progress=2, max_restarts=3), LOST, failures=[])
    assert t.to is S.RESTARTING and t.backoff_s == 2.0
    assert t.reason.startswith("restart 3 of 3 since its last progress (7 in all)")


def test_the_same_node_rule_counts_only_since_progress():
    failed = GroupOutcome.failed(RankFailedError(1, "rank 1 failed: CUDA error"), NODES)
    seen = [Failure(failed.error, "n-b", 1)] * 5
    stuck = decide(job(restarts=5, max_restarts=10), failed, failures=seen, multi_node=True)
    assert stuck.to is S.FAILED and "on node n-b 6 times in a row" in stuck.reason
    moving = decide(job(restarts=5, failures_since_progress=1, max_restarts=10), failed,
                    failures=seen, multi_node=True)
    assert moving.to is S.RESTARTING  # 2 since its last progress: not a bad node yet
    progressed = decide(job(restarts=5, max_restarts=10), failed, failures=seen, multi_node=True,
                        steps=AttemptSteps(0, 30))
    assert progressed.to is S.RESTARTING and progressed.fields["failures_since_progress"] == 1


def test_a_restarting_job_waits_by_its_failures_since_progress_not_its_restarts():
    t = decide(job(S.RESTARTING, restarts=9, failures_since_progress=1), outcome(Outcome.NO_GROUP),
               policy=RestartPolicy(base_backoff_s=0.5))
    assert (t.launch, t.backoff_s) == (True, 0.5)


def test_a_failure_while_giving_workers_back_is_no_failure_of_the_job():
    suspended = decide(job(S.SUSPENDING), LOST, checkpoint=CHECKPOINT)
    assert suspended.to is S.SUSPENDED and suspended.failure is None
    assert suspended.reason == "stopped while suspending (rank 1 was lost); resumes from checkpoint step 20"
    preempted = decide(job(S.PREEMPTING), LOST)
    assert preempted.to is S.QUEUED and preempted.fields == {"workers": None}
    assert preempted.reason == ("stopped while preempted (rank 1 was lost); requeued, restarts from "
                                "step 0 (no checkpoint yet)")


# -- stop requests, preemption notices, cancel ---------------------------------------


def test_a_preempted_job_killed_after_its_grace_is_requeued_from_its_checkpoint():
    killed = outcome(Outcome.KILLED, "did not checkpoint and stop within its grace period of "
                                     "0.05 s: ranks killed")
    t = decide(job(S.PREEMPTING), killed, checkpoint=CHECKPOINT)
    assert (t.to, t.launch) == (S.QUEUED, False)
    assert "grace period of 0.05 s" in t.reason and "resumes from checkpoint step 20" in t.reason
    assert t.fields == {"workers": None, "latest_checkpoint": CHECKPOINT}


def test_a_sigterm_to_a_running_job_passes_through_preempting_and_counts_a_preemption():
    notice = ("rank 0 (pid 7, node 10.0.0.1) got SIGTERM (a preemption notice): checkpointed at "
              "step 25 and stopped")
    t = decide(job(preemptions=1), outcome(Outcome.PREEMPTED, notice))
    assert (t.via.to, t.via.reason, t.via.fields) == (S.PREEMPTING, notice, {"preemptions": 2})
    assert (t.to, t.reason) == (S.QUEUED, f"{notice}: preempted, requeued")
    assert decide(job(S.PREEMPTING), outcome(Outcome.PREEMPTED)).via is None  # counted already
    suspended = decide(job(S.SUSPENDING), outcome(Outcome.PREEMPTED))
    assert (suspended.to, suspended.reason) == (S.SUSPENDED, "a rank got SIGTERM; suspended")


@pytest.mark.parametrize("kind", [Outcome.CANCELLED, Outcome.FINISHED, Outcome.FAILED,
                                  Outcome.KILLED, Outcome.START_FAILED])
def test_a_cancelled_job_ends_cancelled_however_its_group_ended(kind):
    t = decide(job(S.CANCELLING), outcome(kind, "boom"))
    assert (t.to, t.reason, t.launch) == (S.CANCELLED, "cancelled; workers released", False)


@pytest.mark.parametrize("kind", [Outcome.PRUNED, Outcome.FINISHED, Outcome.FAILED,
                                  Outcome.KILLED, Outcome.PREEMPTED, Outcome.START_FAILED])
def test_a_pruned_job_ends_pruned_however_its_group_ended_keeping_its_checkpoint(kind):
    t = decide(job(S.PRUNING), outcome(kind, "boom"), checkpoint=CHECKPOINT)
    assert (t.to, t.reason, t.launch) == (S.PRUNED, "pruned: stopped at step 25; workers released", False)
    assert (t.fields, t.via) == ({"latest_checkpoint": CHECKPOINT}, None)
    assert decide(job(S.PRUNING), outcome(kind)).fields == {}  # none committed: none to keep


# -- starting ----------------------------------------------------------------------


def test_a_group_that_cannot_start_is_a_failure_that_restarts():
    ended = GroupOutcome.start_failed(WorkerGroupError("forming the process group took longer than 60s"))
    assert ended.kind is Outcome.START_FAILED
    t = decide(job(S.STARTING, step=0), ended)
    assert t.to is S.RESTARTING
    assert t.fields["error"] == "could not start: forming the process group took longer than 60s"


def test_a_group_without_capacity_in_time_goes_back_to_the_queue_uncounted():
    ended = GroupOutcome.start_failed(PlacementTimeoutError("2 bundles were not free within 60s"))
    assert ended.kind is Outcome.NO_CAPACITY
    t = decide(job(S.STARTING, step=0), ended)
    assert (t.to, t.fields, t.launch) == (S.QUEUED, {"workers": None}, False)
    assert t.reason == "capacity not available: 2 bundles were not free within 60s; requeued"
    # Cancelled while it waited for its bundles: straight on.
    assert decide(job(S.CANCELLING), ended).reason == "cancelled between attempts: no workers were running"
    assert decide(job(S.PRUNING), ended).reason == "pruned between attempts: no workers were running"


# -- between attempts --------------------------------------------------------------


@pytest.mark.parametrize("state,to,what", [(S.PREEMPTING, S.QUEUED, "requeued"),
                                           (S.SUSPENDING, S.SUSPENDED, "suspended"),
                                           (S.CANCELLING, S.CANCELLED, "cancelled"),
                                           (S.PRUNING, S.PRUNED, "pruned")])
def test_a_job_asked_to_give_back_workers_it_does_not_hold_goes_straight_on(state, to, what):
    t = decide(job(state), outcome(Outcome.NO_GROUP))
    assert (t.to, t.fields, t.launch) == (to, {"workers": None}, False)
    assert t.reason == f"{what} between attempts: no workers were running"


@pytest.mark.parametrize("restarts,backoff", [(0, 0.5), (1, 0.5), (2, 1.0), (4, 4.0), (9, 10.0)])
def test_a_restarting_job_launches_after_the_policys_backoff(restarts, backoff):
    t = decide(job(S.RESTARTING, restarts=restarts), outcome(Outcome.NO_GROUP),
               policy=RestartPolicy(base_backoff_s=0.5))
    assert (t.to, t.launch, t.backoff_s) == (None, True, backoff)


def test_the_backoff_decided_at_a_failure_is_the_one_waited_on_a_resume():
    policy = RestartPolicy(base_backoff_s=0.5)
    for restarts in range(8):
        failed = decide(job(restarts=restarts, max_restarts=100), LOST, policy=policy)
        resumed = decide(job(S.RESTARTING, restarts=restarts + 1), outcome(Outcome.NO_GROUP),
                         policy=policy)
        assert failed.backoff_s == resumed.backoff_s == policy.backoff_s(restarts + 1)


def test_an_admitted_job_launches_at_once_and_a_finished_one_stays():
    assert decide(job(S.STARTING), outcome(Outcome.NO_GROUP)) == decide(
        job(S.STARTING), outcome(Outcome.NO_GROUP), policy=RestartPolicy(9.0))
    assert decide(job(S.STARTING), outcome(Outcome.NO_GROUP)).launch
    for state in (S.SUCCEEDED, S.FAILED, S.CANCELLED, S.PRUNED):
        assert decide(job(state), LOST) is STAY


def test_a_control_plane_error_fails_the_job_or_ends_its_cancel_or_prune():
    t = decide(job(), outcome(Outcome.CONTROL_PLANE_ERROR, "control plane error: KeyError: 'x'"))
    assert (t.to, t.fields) == (S.FAILED, {"error": "control plane error: KeyError: 'x'"})
    assert decide(job(S.CANCELLING), outcome(Outcome.CONTROL_PLANE_ERROR, "e")).to is S.CANCELLED
    assert decide(job(S.PRUNING), outcome(Outcome.CONTROL_PLANE_ERROR, "e")).to is S.PRUNED


def test_restart_at_the_size_that_fits_or_requeue():
    same = restart_at(job(S.RESTARTING), 2)
    assert (same.to, same.reason, same.launch) == (S.STARTING, "starting attempt 2", True)
    assert same.fields == {"attempt": 2, "workers": 2}
    shrunk = restart_at(job(S.RESTARTING), 1)
    assert shrunk.reason == "starting attempt 2 at 1 workers (was 2)"
    none = restart_at(job(S.RESTARTING), None)
    assert (none.to, none.fields, none.launch) == (S.QUEUED, {"workers": None}, False)
    assert none.reason == "restart: not enough free capacity for any of its sizes; requeued"


# -- a group reconcile found gone after a control-plane restart ----------------------

GONE_WHY = "reconciled after a control-plane restart: worker group brigade-j-1-a1 is gone"


@pytest.mark.parametrize("state,to,fields", [
    (S.CANCELLING, S.CANCELLED, {}), (S.PRUNING, S.PRUNED, {}),
    (S.SUSPENDING, S.SUSPENDED, {"workers": None}), (S.PREEMPTING, S.QUEUED, {}),
])
def test_a_job_asked_to_give_its_workers_back_whose_group_is_gone_gives_them(state, to, fields):
    t = decide(job(state), outcome(Outcome.GONE, GONE_WHY), checkpoint=CHECKPOINT)
    assert (t.to, t.reason, dict(t.fields), t.launch, t.via) == (to, GONE_WHY, fields, False, None)


@pytest.mark.parametrize("state", [S.STARTING, S.RUNNING])
def test_a_job_whose_group_is_gone_restarts_without_counting_a_restart(state):
    t = decide(job(state, restarts=2), outcome(Outcome.GONE, GONE_WHY))
    assert (t.to, t.launch, t.backoff_s, dict(t.fields)) == (S.RESTARTING, True, 0.0, {})
    assert t.reason == f"{GONE_WHY}; restarting from the latest checkpoint"


def test_a_restarting_job_whose_group_is_gone_is_launched_with_a_note():
    t = decide(job(S.RESTARTING), outcome(Outcome.GONE, GONE_WHY))
    assert (t.to, t.reason, t.launch) == (None, GONE_WHY, True)
