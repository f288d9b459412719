"""A job's time by phase (service/observability/goodput.py) from made-up
events and metrics rows: each phase on its own, a job still running, a
suspended one, a restart's recovery and lost steps, a recovery in place (and
one that fell back to a restart), and the sum property over random event
sequences."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from service.observability.goodput import PHASES, job_goodput, phase_intervals
from service.states import TRANSITIONS, JobState
from service.store.records import EventRecord, JobRecord

S = JobState
T0 = datetime(2025, 1, 1, tzinfo=UTC)
E0 = T0.timestamp()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def job(*, finished: float | None = None, state: JobState = S.RUNNING) -> JobRecord:
    return JobRecord(
        id="j-1", tenant="t", name="n", state=state, stored_spec={}, priority=0, workers=2,
        requested_workers=None, step=0, restarts=0, preemptions=0, latest_checkpoint=None,
        attempt=1, error=None, idempotency_key=None, created_at=T0, started_at=None,
        finished_at=None if finished is None else at(finished), updated_at=T0)


def events(*story: tuple[float, JobState]) -> list[EventRecord]:
    """QUEUED at 0, then each (seconds, state) in order."""
    made = [EventRecord(1, "j-1", T0, None, S.QUEUED, "submitted")]
    for time, state in story:
        made.append(EventRecord(len(made) + 1, "j-1", at(time), made[-1].to_state, state, "-"))
    return made


def recovered(story: list[EventRecord], time: float, seconds: float, *,
              in_place: bool = True) -> list[EventRecord]:
    """`story` with a recovery's event at `time` (from and to the state it was in then),
    as `JobStore.record_recovery` writes it, in time order."""
    state = [e for e in story if e.time <= at(time)][-1].to_state
    event = EventRecord(0, "j-1", at(time), state, state, "-", kind="recovery", detail={
        "ranks": [1], "from_step": 0, "to_step": 0 if in_place else None, "seconds": seconds,
        "in_place": in_place, "reason": "lost"})
    merged = sorted([*story, event], key=lambda e: e.time)
    return [replace(e, id=i + 1) for i, e in enumerate(merged)]


def row(step: int, ended: float, step_s: float = 1.0, **extra) -> dict:
    return {"step": step, "wall_time": E0 + ended, "step_time_s": step_s, **extra}


def steps(first: int, ended: float, n: int, step_s: float = 1.0, **extra) -> list[dict]:
    """n back-to-back rows, the first ending at `ended`."""
    return [row(first + i, ended + i * step_s, step_s, **extra) for i in range(n)]


def phases(record: JobRecord, story: list[EventRecord], rows: list[dict],
           now: float = 1000.0) -> dict[str, float]:
    got = job_goodput(record, story, rows, at(now))
    assert list(got.phases) == list(PHASES)
    assert sum(got.phases.values()) == pytest.approx(got.wall_s, rel=1e-9, abs=1e-9)
    return got.phases


def nonzero(found: dict[str, float]) -> dict[str, float]:
    return {k: pytest.approx(v) for k, v in found.items() if abs(v) > 1e-9}


def test_the_phases_are_named_in_the_contracts_order():
    assert PHASES == ("queued", "starting", "training", "data_wait", "eval", "checkpoint_stall",
                      "recovering", "lost", "suspended")


def test_a_clean_run_is_queue_start_up_and_training():
    # Queued 5 s, STARTING 3 s, RUNNING from 8: the first step (start-up) ends at 12,
    # then 8 one-second steps to 20, then 1 s to SUCCEEDED.
    story = events((5, S.STARTING), (8, S.RUNNING), (21, S.SUCCEEDED))
    rows = [row(1, 12)] + steps(2, 13, 8)
    got = job_goodput(job(finished=21, state=S.SUCCEEDED), story, rows, at(1000))
    assert got.wall_s == pytest.approx(21)
    assert nonzero(got.phases) == {"queued": 5, "starting": 7, "training": 9}
    assert got.goodput == pytest.approx(9 / 21)


def test_data_wait_eval_and_checkpoint_stall_come_out_of_the_steps_and_after_them():
    # Each step: 2 s of which 0.5 s waits for data; step 3 evaluates 1 s after its
    # compute and saves for 1.5 s after its end.
    story = events((0, S.STARTING), (1, S.RUNNING), (20, S.SUCCEEDED))
    rows = [row(1, 2, 1.0), row(2, 4, 2.0, data_wait_s=0.5),
            row(3, 7, 2.0, data_wait_s=0.5, eval_s=1.0, checkpoint_stall_s=1.5),
            row(4, 10.5, 2.0, data_wait_s=0.5)]
    found = phases(job(finished=20, state=S.SUCCEEDED), story, rows)
    assert found["data_wait"] == pytest.approx(1.5)
    assert found["eval"] == pytest.approx(1.0)
    assert found["checkpoint_stall"] == pytest.approx(1.5)
    assert found["starting"] == pytest.approx(2)  # STARTING at 0 to the first step's end
    assert found["training"] == pytest.approx(20 - 2 - 1.5 - 1.0 - 1.5)


def test_the_first_rows_eval_and_save_are_not_start_up():
    story = events((0, S.STARTING), (1, S.RUNNING), (10, S.SUCCEEDED))
    rows = [row(1, 3, eval_s=1.0, checkpoint_stall_s=2.0)]
    found = phases(job(finished=10, state=S.SUCCEEDED), story, rows)
    assert nonzero(found) == {"starting": 2, "eval": 1, "checkpoint_stall": 2, "training": 5}


def test_a_job_still_running_counts_to_now():
    story = events((2, S.STARTING), (3, S.RUNNING))
    rows = [row(1, 5)] + steps(2, 6, 4)
    got = job_goodput(job(), story, rows, at(12))
    assert got.wall_s == pytest.approx(12)
    # the step in progress (9 .. 12) is training
    assert nonzero(got.phases) == {"queued": 2, "starting": 3, "training": 7}


def test_a_job_starting_with_no_row_yet_is_all_start_up():
    story = events((2, S.STARTING), (3, S.RUNNING))
    assert nonzero(phases(job(), story, [], now=9)) == {"queued": 2, "starting": 7}


def test_a_suspended_job_counts_suspended_and_goodput_leaves_it_out():
    # Runs to 10 (steps to 9), asked to suspend at 10, the last step saves to 11.5,
    # SUSPENDED at 12, resumed (QUEUED) at 40, starts again at 42, trains to 50.
    story = events((0, S.STARTING), (1, S.RUNNING), (10, S.SUSPENDING), (12, S.SUSPENDED),
                   (40, S.QUEUED), (42, S.STARTING), (43, S.RUNNING), (50, S.SUCCEEDED))
    rows = ([row(1, 2)] + steps(2, 3, 8, checkpoint_stall_s=0.0)
            + [row(10, 10.5, checkpoint_stall_s=1.0, resumed_from=0)]
            + [row(11, 45, resumed_from=10)] + steps(12, 46, 4))
    got = job_goodput(job(finished=50, state=S.SUCCEEDED), story, rows, at(1000))
    found = got.phases
    assert found["suspended"] == pytest.approx(12 - 10.5 - 1.0 + 28)  # less the last step and its save
    assert found["queued"] == pytest.approx(2)
    assert found["checkpoint_stall"] == pytest.approx(1.0)
    assert found["starting"] == pytest.approx(2 + 3)
    assert found["lost"] == 0 and found["recovering"] == 0
    assert got.goodput == pytest.approx(found["training"] / (50 - found["suspended"]))


def test_a_fault_after_a_checkpoint_is_lost_work_then_recovery():
    # Attempt 1 trains steps 1..10 (ending 2..11), checkpoints at step 5 (1 s save
    # after 6), the rank dies at 13.5: RESTARTING. Attempt 2 resumes from 5: its
    # rows 6.. replace attempt 1's; its first new step ends at 20.
    story = events((0, S.STARTING), (1, S.RUNNING), (13.5, S.RESTARTING), (15, S.STARTING),
                   (16, S.RUNNING), (30, S.SUCCEEDED))
    rows = ([row(1, 2)] + steps(2, 3, 3) + [row(5, 6, checkpoint_stall_s=1.0)]
            + [row(6, 20, resumed_from=5, recovered_from="restart")] + steps(7, 21, 9))
    found = phases(job(finished=30, state=S.SUCCEEDED), story, rows)
    assert found["lost"] == pytest.approx(13.5 - 7)  # after step 5's save to the fault
    assert found["recovering"] == pytest.approx(20 - 13.5)  # the fault to the first new step
    assert found["checkpoint_stall"] == pytest.approx(1.0)
    assert found["starting"] == pytest.approx(2)
    assert found["training"] == pytest.approx(4 + 10)


def test_a_failed_attempt_between_fault_and_recovery_is_recovering():
    # Attempt 2 fails while starting: no row of its own; attempt 3 trains.
    story = events((0, S.STARTING), (1, S.RUNNING), (5, S.RESTARTING), (6, S.STARTING),
                   (7, S.RUNNING), (9, S.RESTARTING), (10, S.STARTING), (11, S.RUNNING),
                   (20, S.SUCCEEDED))
    rows = [row(1, 2, checkpoint_stall_s=0.5)] + steps(2, 3, 2) + [row(4, 13, resumed_from=3)] + \
        steps(5, 14, 6)
    found = phases(job(finished=20, state=S.SUCCEEDED), story, rows)
    assert found["lost"] == pytest.approx(5 - 4)
    assert found["recovering"] == pytest.approx(13 - 5)
    assert found["training"] == pytest.approx(2 - 0.5 + 7)


def test_a_recovery_in_place_is_recovering_and_the_steps_done_again_lost():
    # Steps 1..10 end at 2..11; rank 1 is lost at 11.5 and the group goes on at 13 from
    # the in-memory snapshot of step 8 (the event at 13, 1.5 s): steps 9..12 end at
    # 14..17, their rows replacing the first 9 and 10. The attempt is the same.
    story = recovered(events((0, S.STARTING), (1, S.RUNNING), (18, S.SUCCEEDED)), 13, 1.5)
    rows = [row(1, 2)] + steps(2, 3, 7) + steps(9, 14, 4)
    found = phases(job(finished=18, state=S.SUCCEEDED), story, rows)
    assert nonzero(found) == {"starting": 2, "training": 7 + 4 + 1,
                              "lost": 11.5 - 9,  # after step 8 to the loss: 9, 10, the cut one
                              "recovering": 1.5}


def test_recoveries_in_place_one_after_another_lose_the_time_between_them():
    story = recovered(recovered(events((0, S.STARTING), (1, S.RUNNING), (20, S.SUCCEEDED)),
                                6, 1.0), 9, 1.0)
    rows = [row(1, 2)] + steps(2, 3, 2) + steps(4, 10, 10)  # nothing done between them stays
    found = phases(job(finished=20, state=S.SUCCEEDED), story, rows)
    assert found["recovering"] == pytest.approx(2.0)
    assert found["lost"] == pytest.approx((5 - 4) + (8 - 6))  # step 3's end to 5; 6 to 8
    assert found["training"] == pytest.approx(2 + 10 + 1)  # steps 2, 3; 4 .. 13; the tail


def test_a_recovery_before_the_attempts_first_step_is_inside_its_start_up():
    story = recovered(events((0, S.STARTING), (1, S.RUNNING), (10, S.SUCCEEDED)), 3, 1.0)
    rows = [row(1, 5)] + steps(2, 6, 4)
    assert nonzero(phases(job(finished=10, state=S.SUCCEEDED), story, rows)) == {
        "starting": 5 - 1, "recovering": 1, "training": 5}


def test_a_recovery_that_fell_back_is_recovering_then_the_restart_as_any():
    # Steps 1..5 end at 2..6, step 4 checkpointed; rank 1 lost at 7, in place given up at 9
    # (its event, 2 s), RESTARTING at 9.2; attempt 2 resumes from 4, its first step at 14.
    story = recovered(events((0, S.STARTING), (1, S.RUNNING), (9.2, S.RESTARTING),
                             (10, S.STARTING), (11, S.RUNNING), (18, S.SUCCEEDED)),
                      9, 2.0, in_place=False)
    rows = [row(1, 2)] + steps(2, 3, 3) + [row(5, 14, resumed_from=4)] + steps(6, 15, 3)
    found = phases(job(finished=18, state=S.SUCCEEDED), story, rows)
    assert nonzero(found) == {"starting": 2, "training": 3 + 3 + 1,
                              "lost": (7 - 5) + 0.2,  # after step 4, and after giving up
                              "recovering": 2 + 0.8 + 4}  # trying in place, then the restart


def test_a_recovery_past_the_jobs_start_or_end_is_clipped():
    story = recovered(events((0, S.STARTING), (1, S.RUNNING)), 3, 500.0)
    found = phases(job(), story, [row(1, 5)], now=8)
    assert found["recovering"] == pytest.approx(2)  # only RUNNING's part of it
    assert found["starting"] == pytest.approx(1 + 5 - 3)


def test_a_preempted_job_saves_then_is_queued_until_it_starts_again():
    # Preempted at 10 (its step saves by 11, the stop by 11.5), requeued at 11.5, waits to 30.
    story = events((0, S.STARTING), (1, S.RUNNING), (10, S.PREEMPTING), (11.5, S.QUEUED),
                   (30, S.STARTING), (31, S.RUNNING), (40, S.SUCCEEDED))
    rows = ([row(1, 2)] + steps(2, 3, 7) + [row(9, 10.0, checkpoint_stall_s=1.0)]
            + [row(10, 33, resumed_from=9, recovered_from="preemption")] + steps(11, 34, 6))
    found = phases(job(finished=40, state=S.SUCCEEDED), story, rows)
    assert found["queued"] == pytest.approx(18.5)  # the wait; PREEMPTING holds its workers
    assert found["starting"] == pytest.approx(2 + 3)
    assert found["checkpoint_stall"] == pytest.approx(1.0 + 0.5)  # the save, then the stop
    assert found["lost"] == 0 and found["recovering"] == 0


def test_a_preempted_job_killed_before_its_save_loses_its_steps_after_the_checkpoint():
    story = events((0, S.STARTING), (1, S.RUNNING), (10, S.PREEMPTING), (12, S.QUEUED),
                   (20, S.STARTING), (21, S.RUNNING), (30, S.SUCCEEDED))
    rows = [row(1, 2)] + steps(2, 3, 3, checkpoint_stall_s=0.0) + [row(5, 23, resumed_from=4)] + \
        steps(6, 24, 6)
    found = phases(job(finished=30, state=S.SUCCEEDED), story, rows)
    assert found["lost"] == pytest.approx(10 - 5)  # after step 4 to the notice
    assert found["checkpoint_stall"] == pytest.approx(2)  # PREEMPTING, its stop
    assert found["queued"] == pytest.approx(8)


def test_cancelling_counts_as_suspended():
    story = events((0, S.STARTING), (1, S.RUNNING), (6, S.CANCELLING), (8, S.CANCELLED))
    rows = [row(1, 2)] + steps(2, 3, 3)
    found = phases(job(finished=8, state=S.CANCELLED), story, rows)
    assert nonzero(found) == {"starting": 2, "training": 4, "suspended": 2}


def test_a_reattach_note_changes_nothing():
    plain = events((0, S.STARTING), (1, S.RUNNING), (10, S.SUCCEEDED))
    noted = events((0, S.STARTING), (1, S.RUNNING), (4, S.RUNNING), (10, S.SUCCEEDED))
    rows = [row(1, 2)] + steps(2, 3, 7)
    done = job(finished=10, state=S.SUCCEEDED)
    assert phases(done, noted, rows) == phases(done, plain, rows)


def test_untimed_rows_leave_running_to_training():
    story = events((0, S.STARTING), (1, S.RUNNING), (10, S.SUCCEEDED))
    rows = [{"step": 1, "file": "a.jsonl"}, {"step": 2, "file": "b.jsonl"}]
    found = phases(job(finished=10, state=S.SUCCEEDED), story, rows)
    assert nonzero(found) == {"starting": 1, "training": 9}


def test_start_up_sub_phases_add_up_over_attempts():
    first = {"placement_ready": 0.5, "built": 2.0, "first_step": 1.0, "total": 3.5}
    second = {"placement_ready": 0.25, "built": 1.0, "total": 1.25}
    rows = [row(1, 2, startup=first), row(2, 3), row(3, 20, startup=second, resumed_from=2)]
    story = events((0, S.STARTING), (1, S.RUNNING), (5, S.RESTARTING), (15, S.STARTING))
    got = job_goodput(job(), story, rows, at(21))
    assert got.starting_phases == {"placement_ready": 0.75, "built": 3.0, "first_step": 1.0}


def test_goodput_is_none_without_time_outside_suspensions():
    got = job_goodput(job(), events(), [], T0)
    assert got.wall_s == 0 and got.goodput is None
    assert set(got.phases.values()) == {0.0}


def test_nan_and_missing_fields_count_as_nothing():
    story = events((0, S.STARTING), (1, S.RUNNING), (10, S.SUCCEEDED))
    rows = [row(1, 2), row(2, 3, data_wait_s=None, eval_s=float("nan")),
            {"step": 3, "wall_time": E0 + 4, "step_time_s": None}]
    found = phases(job(finished=10, state=S.SUCCEEDED), story, rows)
    assert nonzero(found) == {"starting": 2, "training": 8}


def random_story(rng: random.Random) -> tuple[list[EventRecord], list[dict], float]:
    """A legal walk through the state table at random times, with rows at
    random times (some skewed outside the job's span, some overlapping)."""
    made = [EventRecord(1, "j-1", T0, None, S.QUEUED, "submitted")]
    time, state = 0.0, S.QUEUED
    for _ in range(rng.randint(0, 25)):
        targets = sorted(TRANSITIONS[state], key=lambda s: s.value)
        if not targets:
            break
        nxt = rng.choice(targets + [state])  # sometimes a note, or a recovery
        time += rng.choice([0.0, rng.uniform(0, 20)])
        kind, detail = None, None
        if nxt is state and rng.random() < 0.5:
            kind, detail = "recovery", {
                "ranks": [0], "from_step": 1, "to_step": 1, "reason": "-",
                "seconds": rng.choice([0.0, rng.uniform(0, 30)]), "in_place": rng.random() < 0.7}
        made.append(EventRecord(len(made) + 1, "j-1", at(time), state, nxt, "-", kind=kind,
                                detail=detail))
        state = nxt
    rows, wall = [], rng.uniform(-5, 5)
    for step in range(1, rng.randint(0, 40)):
        wall += rng.uniform(-1, 3)
        rows.append(row(step, wall, rng.uniform(0, 4), data_wait_s=rng.uniform(-1, 3),
                        eval_s=rng.choice([0, rng.uniform(0, 3)]),
                        checkpoint_stall_s=rng.choice([0, rng.uniform(0, 5)])))
    return made, rows, time + rng.uniform(0, 30)


@pytest.mark.parametrize("seed", range(300))
def test_the_phases_always_sum_to_the_wall_time(seed):
    rng = random.Random(seed)
    story, rows, now = random_story(rng)
    final = story[-1].to_state.is_terminal
    record = job(finished=story[-1].time.timestamp() - E0 if final and rng.random() < 0.8 else None,
                 state=story[-1].to_state)
    got = job_goodput(record, story, rows, at(now))
    assert set(got.phases) == set(PHASES)
    assert all(v >= 0 for v in got.phases.values()), got.phases
    assert sum(got.phases.values()) == pytest.approx(got.wall_s, rel=1e-9, abs=1e-6)
    if got.goodput is not None:
        assert 0 <= got.goodput <= 1 + 1e-9
    # The intervals it sums tile the job's span: in order, no gap, no overlap.
    pieces = phase_intervals(record, story, rows, at(now))
    if got.wall_s:
        assert pieces[0][0] == E0 and pieces[-1][1] == pytest.approx(E0 + got.wall_s)
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))
    assert all(start < end and phase in PHASES for start, end, phase in pieces)
