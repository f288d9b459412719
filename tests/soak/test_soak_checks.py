"""The soak's checks catch what they are for (no server: made-up records)."""

from __future__ import annotations

from tests.soak.soak_checks import check_events, check_losses, check_rows, interruptions, ranks_on_ray
from tests.soak.soak_plan import CONFIGS, MAX_HITS, JobPlan, SoakPlan, chaos_victims


def event(i, came_from, to):
    return {"id": i, "from_state": came_from, "to_state": to, "reason": ""}


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
    def at(i, came_from, to, t):
        return {**event(i, came_from, to), "time": f"2026-12-01T15:00:{t:02d}.500000Z"}
    path = [at(1, None, "QUEUED", 0), at(2, "QUEUED", "STARTING", 1), at(3, "STARTING", "RUNNING", 2),
            at(4, "RUNNING", "RESTARTING", 5), at(5, "RESTARTING", "RESTARTING", 6),  # a note
            at(6, "RESTARTING", "STARTING", 7), at(7, "STARTING", "RUNNING", 9),
            at(8, "RUNNING", "PREEMPTING", 10), at(9, "PREEMPTING", "QUEUED", 11),
            at(10, "QUEUED", "STARTING", 20), at(11, "STARTING", "RUNNING", 24),
            at(12, "RUNNING", "RESTARTING", 30), at(13, "RESTARTING", "FAILED", 31)]  # never back
    assert interruptions(path) == [("restart", 4.0), ("preemption", 14.0)]
