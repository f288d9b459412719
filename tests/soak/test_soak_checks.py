"""The soak's checks catch what they are for (no server: made-up records)."""

from __future__ import annotations

from tests.soak.soak_checks import check_events, check_losses, check_rows
from tests.soak.soak_plan import CONFIGS, JobPlan, SoakPlan


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
