"""The soak's checks catch what they are for (no server: made-up records)."""

from __future__ import annotations

from tests.soak.soak_checks import (
    check_events,
    check_losses,
    check_recoveries,
    check_rows,
    interruptions,
    ranks_on_ray,
    report,
)
from tests.soak.soak_plan import (
    AIMS,
    CONFIGS,
    MAX_HITS,
    SNAPSHOT_BY_STEP,
    JobPlan,
    SoakPlan,
    aimed_victims,
    chaos_victims,
    ripe,
)


def event(i, came_from, to):
    return {"id": i, "from_state": came_from, "to_state": to, "reason": ""}


def at(i, came_from, to, t):
    return {**event(i, came_from, to), "time": f"2026-12-01T15:00:{t:02d}.500000Z"}


def recovered(i, t, *, in_place, seconds=1.5, state="RUNNING"):
    """A recovery event (service/store/recovery_event.py): from and to the state the job is in."""
    return {**at(i, state, state, t), "kind": "recovery",
            "detail": {"ranks": [1], "from_step": 6, "to_step": 5 if in_place else None,
                       "seconds": seconds, "in_place": in_place, "reason": "rank 1 died"}}


JOB = {"id": "j-1", "state": "SUCCEEDED"}
PLAN = JobPlan(0, "soak-alpha", 0.0, "short", 2, 0)


def test_a_legal_path_with_notes_passes_and_an_illegal_one_is_named():
    path = [event(1, None, "QUEUED"), event(2, "QUEUED", "STARTING"),
            event(3, "STARTING", "STARTING"),  # a note: reconciled after a restart
            event(4, "STARTING", "RUNNING"), event(5, "RUNNING", "SUCCEEDED")]
    assert check_events(JOB, path) == []
    skipped = path[:2] + [event(4, "STARTING", "SUCCEEDED")]
    assert "not a transition" in check_events(JOB, skipped)[0]
    after_the_end = path + [event(6, "SUCCEEDED", "QUEUED")]
    assert check_events(JOB, after_the_end)


def test_a_doubled_or_missing_row_and_a_loss_off_the_curve_are_caught():
    steps = CONFIGS["short"][1]
    rows = [{"step": s, "loss": 5.0 - s / 10} for s in range(1, steps + 1)]
    assert check_rows(JOB, PLAN, rows) == []
    assert "doubled [2]" in check_rows(JOB, PLAN, rows[:2] + rows[1:])[0]
    assert "missing [3]" in check_rows(JOB, PLAN, rows[:2] + rows[3:])[0]
    curve = {r["step"]: r["loss"] for r in rows}
    assert check_losses(JOB, PLAN, rows, {1: curve, 2: curve}) == []
    off = [dict(r, loss=r["loss"] + 1e-7) if r["step"] == 4 else r for r in rows]
    assert "steps [4]" in check_losses(JOB, PLAN, off, {1: curve, 2: curve})[0]


def test_the_plan_is_the_same_for_a_seed():
    a, b = SoakPlan(seed=3, jobs=40), SoakPlan(seed=3, jobs=40)
    assert a.job_plans == b.job_plans and a.fault_plans == b.fault_plans
    assert sum(p.bad_data for p in a.job_plans) == 2
    assert SoakPlan(seed=4, jobs=40).job_plans != a.job_plans


def test_the_chaos_thread_never_picks_a_reference_a_bad_data_job_or_one_hit_enough():
    plan = SoakPlan(seed=5, jobs=30)
    submitted = {f"j-{p.index:03x}": p for p in plan.job_plans}
    bad = next(i for i, p in submitted.items() if p.bad_data)
    good = [i for i, p in submitted.items() if not p.bad_data]
    references = {"j-ref1", "j-ref2"}
    running = [{"id": i} for i in [*references, bad, *good[:3]]]
    hits = {good[0]: MAX_HITS, good[1]: MAX_HITS - 1}
    picked = [j["id"] for j in chaos_victims(running, submitted, references, hits)]
    assert picked == good[1:3]
    # A reference is fenced even where it were somehow among the submitted jobs.
    submitted["j-ref1"] = plan.job_plans[0]
    assert "j-ref1" not in [j["id"] for j in chaos_victims(running, submitted, references, {})]


def test_every_fixed_size_of_a_config_has_its_reference_and_an_elastic_only_config_one():
    plan = SoakPlan(seed=17, jobs=100)
    keys = plan.reference_keys()
    for p in plan.job_plans:
        if p.bad_data:
            continue
        if p.elastic:
            assert any(c == p.config for c, _ in keys), p
        else:
            assert (p.config, p.workers) in keys, p
    assert len(keys) == len(set(keys))
    few = SoakPlan(seed=17, jobs=3, bad_data_jobs=0)
    assert set(few.reference_keys()) <= {(p.config, 1 if p.elastic else p.workers) for p in few.job_plans}


def test_pooled_ranks_are_their_jobs_on_ray_by_their_own_answer():
    names = ["brigade-j-ab12-a1-rank-0", "brigade-j-ab12-a1-rank-1", "brigade-j-ab12-a1-pg",
             "brigade-j-cd34-a2-rank-0"]
    pooled = {"brigade-pool-9f-1": ["brigade-j-cd34-a2", 1],  # the second rank of cd34's attempt 2
              "brigade-pool-9f-2": ["brigade-j-ef56-a1", 0],  # a job whose ranks are all pooled
              "brigade-pool-9f-3": None,  # idle: no job's
              "brigade-pool-9f-4": "no answer"}
    alive = ranks_on_ray(names, pooled)
    assert alive == {"j-ab12": {"1": {0, 1}}, "j-cd34": {"2": {0, 1}}, "j-ef56": {"1": {0}}}
    # A pooled rank of an old attempt alive beside the new one: two attempts at once.
    pooled["brigade-pool-9f-5"] = ["brigade-j-ab12-a0", 0]
    assert set(ranks_on_ray(names, pooled)["j-ab12"]) == {"0", "1"}


def test_each_interruption_is_timed_from_its_event_to_running_again():
    path = [at(1, None, "QUEUED", 0), at(2, "QUEUED", "STARTING", 1), at(3, "STARTING", "RUNNING", 2),
            at(4, "RUNNING", "RESTARTING", 5), at(5, "RESTARTING", "RESTARTING", 6),  # a note
            at(6, "RESTARTING", "STARTING", 7), at(7, "STARTING", "RUNNING", 9),
            at(8, "RUNNING", "PREEMPTING", 10), at(9, "PREEMPTING", "QUEUED", 11),
            at(10, "QUEUED", "STARTING", 20), at(11, "STARTING", "RUNNING", 24),
            at(12, "RUNNING", "RESTARTING", 30), at(13, "RESTARTING", "FAILED", 31)]  # never back
    assert interruptions(path) == [("restart", 4.0), ("preemption", 14.0)]


# Recovered in place at 4 s, then fell back at 6 s and restarted: a path the state machine
# takes with recovery in place on (the recovery events are notes: RUNNING -> RUNNING).
RECOVERED = [at(1, None, "QUEUED", 0), at(2, "QUEUED", "STARTING", 1), at(3, "STARTING", "RUNNING", 2),
             recovered(4, 4, in_place=True, seconds=1.5), recovered(5, 6, in_place=False, seconds=0.5),
             at(6, "RUNNING", "RESTARTING", 6), at(7, "RESTARTING", "STARTING", 7),
             at(8, "STARTING", "RUNNING", 9), at(9, "RUNNING", "SUCCEEDED", 12)]


def test_a_recovery_in_place_is_an_interruption_of_its_own_seconds_and_a_fallback_its_restart():
    assert check_events(JOB, RECOVERED) == []
    assert interruptions(RECOVERED) == [("recovery", 1.5), ("restart", 3.0)]


def test_a_jobs_recoveries_are_its_in_place_events_and_a_fallback_restarts():
    job = {**JOB, "recoveries": 1, "restarts": 1}
    assert check_recoveries(job, RECOVERED) == []
    assert "recoveries 2, but 1 events" in check_recoveries({**job, "recoveries": 2}, RECOVERED)[0]
    # A fallback that the job trained on after, in the same attempt, is no fallback.
    went_on = [e for e in RECOVERED if e["id"] < 6] + [at(9, "RUNNING", "RUNNING", 8)]
    assert "never left RUNNING" in check_recoveries(job, went_on)[0]
    # A recovery in place that names no snapshot step.
    nameless = [{**e, "detail": {**e["detail"], "to_step": None}} if e["id"] == 4 else e for e in RECOVERED]
    assert "names no snapshot step" in check_recoveries(job, nameless)[0]


def test_the_report_counts_recoveries_in_place_and_fallbacks_beside_restarts():
    plans = {"j-1": PLAN, "j-2": PLAN}
    jobs = [{**JOB, "recoveries": 1, "restarts": 1, "preemptions": 0},
            {"id": "j-2", "state": "SUCCEEDED", "recoveries": 0, "restarts": 0, "preemptions": 0},
            {"id": "j-ref", "state": "SUCCEEDED", "recoveries": 3, "restarts": 2, "preemptions": 0}]
    rows = {"j-1": [{"step": 1, "recovered_from": "recovery", "recovery_s": 2.0, "lost_steps": 1}]}
    got = report(jobs, plans, rows, [], 10.0, {"j-1": RECOVERED, "j-2": RECOVERED[:3]})
    assert (got["restarts"], got["recoveries_in_place"], got["recoveries_fallback"]) == (1, 1, 1)
    assert got["recovery_in_place_s_max"] == 1.5
    assert got["interruptions"] == {"recovery": 1, "restart": 1}
    assert got["recoveries"] == {"recovery": 1} and got["lost_steps"] == 1


def test_the_sigkills_aim_in_turn_at_recovery_in_place_and_at_a_restart():
    plan = SoakPlan(seed=17, jobs=10, sigkills=5, sigterms=2)
    aims = [f.aim for f in plan.fault_plans if f.kind == "sigkill"]
    assert aims == [AIMS[i % 2] for i in range(5)] and aims[0] == "in_place"
    assert all(f.aim is None for f in plan.fault_plans if f.kind != "sigkill")

    def running(i, workers, step, steps=8, **counts):
        return {"id": i, "state": "RUNNING", "workers": workers, "step": step,
                "spec": {"train": {"steps": steps}}, "restarts": 0, "preemptions": 0,
                "recoveries": 0, **counts}
    victims = [running("starting", 2, 0), running("mid", 2, SNAPSHOT_BY_STEP), running("late", 2, 7),
               running("short", 2, 2, steps=4), running("restarted", 2, 5, restarts=1),
               running("recovered", 2, 5, recoveries=1), running("alone", 1, 5),
               running("alone-starting", 1, 0)]
    # In place: a job of 2+ ranks in its first run, with room past its first snapshot.
    assert [j["id"] for j in aimed_victims(victims, "in_place")] == ["starting", "mid"]
    assert [j["id"] for j in aimed_victims(victims, "restart")] == ["alone"]
    assert aimed_victims(victims, None) == victims
    # Followed until it has recorded SNAPSHOT_BY_STEP, and let go once past the window.
    assert [ripe(running("j", 2, s)) for s in (0, SNAPSHOT_BY_STEP - 1, SNAPSHOT_BY_STEP, 6, 7)] == [
        False, False, True, True, None]
    assert ripe({**running("j", 2, SNAPSHOT_BY_STEP), "state": "RESTARTING"}) is None
    assert ripe(running("j", 1, SNAPSHOT_BY_STEP)) is None
