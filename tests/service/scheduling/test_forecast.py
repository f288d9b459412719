"""The start forecast on made-up running and queued jobs: the scheduler's
own rules (priority, fair share, FCFS, gangs, quotas, reservation,
preemption) run forward over the running jobs' remaining steps."""

from __future__ import annotations

import pytest

from service.scheduling import Quota, Resources, TenantPolicy
from service.scheduling.forecast import (
    ForecastSettings,
    QueuedWork,
    RunningWork,
    forecast_starts,
)
from service.scheduling.service_history import ServiceHistory
from tests.service.scheduling_cases import queued, running, tenants

NOW = 1_000.0
QUICK = ForecastSettings(startup_s=2.0, finish_s=1.0, leave_s=3.0)


def held(id, steps_left, step_s, tenant="a", workers=1, priority=0, stepped_at=NOW, **kw):
    return RunningWork(running(id, tenant, workers, priority, **kw), steps_left, step_s,
                       created_at=0, stepped_at=stepped_at)


def waits(id, steps=10, step_s=1.0, tenant="a", workers=1, priority=0, at=None):
    return QueuedWork(queued(id, tenant, workers, priority, at=at), steps, step_s)


def starts(running_, queued_, cpu=1, policies=None, history=None, settings=QUICK):
    policies = policies or tenants("a", "b", "c")
    return forecast_starts(running_, queued_, policies, Resources(cpu), NOW, history, settings)


def test_a_job_behind_a_running_one_starts_when_its_steps_are_done():
    got = starts([held("A", 30, 0.5)], [waits("B")])
    assert got["B"].expected_start == pytest.approx(NOW + 30 * 0.5 + QUICK.finish_s)
    assert got["B"].reason == ""


def test_the_finish_counts_from_the_last_step_seen_not_from_now():
    got = starts([held("A", 10, 1.0, stepped_at=NOW - 4)], [waits("B")])
    assert got["B"].expected_start == pytest.approx(NOW - 4 + 10 + QUICK.finish_s)


def test_a_job_that_fits_now_starts_now():
    got = starts([held("A", 30, 0.5)], [waits("B")], cpu=2)
    assert got["B"].expected_start == NOW


def test_a_job_overdue_starts_no_earlier_than_now():
    got = starts([held("A", 1, 1.0, stepped_at=NOW - 100)], [waits("B")])
    assert got["B"].expected_start == NOW


def test_a_job_not_stepping_yet_first_spends_what_is_left_of_its_start_up():
    work = RunningWork(running("A"), 10, 1.0, created_at=0, started_at=NOW - 0.5)
    got = starts([work], [waits("B")])
    assert got["B"].expected_start == pytest.approx(NOW + 1.5 + 10 + QUICK.finish_s)


def test_a_queue_in_fcfs_order_chains_each_jobs_own_run():
    got = starts([held("A", 10, 1.0)], [waits("B", steps=5, step_s=2.0, at=1),
                                        waits("C", steps=3, at=2)])
    b = NOW + 10 + QUICK.finish_s
    assert got["B"].expected_start == pytest.approx(b)
    assert got["C"].expected_start == pytest.approx(b + QUICK.startup_s + 10 + QUICK.finish_s)


def test_higher_priority_goes_first_whatever_its_age():
    got = starts([held("A", 10, 1.0)], [waits("old", at=1, priority=0),
                                        waits("urgent", at=2, priority=5)])
    assert got["urgent"].expected_start < got["old"].expected_start


def test_a_tenants_cap_on_priority_is_applied():
    policies = {"a": TenantPolicy("a", max_priority=0), "b": TenantPolicy("b")}
    got = starts([held("A", 10, 1.0, tenant="b")],
                 [waits("capped", tenant="a", priority=9, at=1),
                  waits("b2", tenant="b", priority=5, at=2)],
                 policies=policies)
    assert got["b2"].expected_start < got["capped"].expected_start


def test_the_first_freed_workers_go_to_the_tenant_holding_least():
    # One slot; tenant a holds it and has another job queued first; tenant b none.
    got = starts([held("A", 10, 1.0, tenant="a")],
                 [waits("a2", tenant="a", at=1), waits("b1", tenant="b", at=2)])
    assert got["b1"].expected_start < got["a2"].expected_start


def test_fair_share_remembers_what_a_tenant_had_lately():
    # Tenant b ran lately for a long while; a has had nothing: a's job goes first.
    history = ServiceHistory(3600)
    history.restore("old", "b", Resources(1), NOW - 1000, NOW - 10, NOW)
    got = starts([held("A", 10, 1.0, tenant="c")],
                 [waits("b1", tenant="b", at=1), waits("a1", tenant="a", at=2)], history=history)
    assert got["a1"].expected_start < got["b1"].expected_start


def test_a_gang_waits_until_all_its_workers_are_free():
    got = starts([held("A", 10, 1.0), held("B", 20, 1.0)], [waits("gang", workers=2)], cpu=2)
    assert got["gang"].expected_start == pytest.approx(NOW + 20 + QUICK.finish_s)


def test_an_elastic_job_starts_at_its_smallest_size_when_that_frees_first():
    got = starts([held("A", 10, 1.0), held("B", 20, 1.0)], [waits("elastic", workers=(1, 2))],
                 cpu=2)
    assert got["elastic"].expected_start == pytest.approx(NOW + 10 + QUICK.finish_s)


def test_a_big_job_reserves_so_a_small_later_one_does_not_slip_past():
    got = starts([held("A", 10, 1.0, tenant="c"), held("B", 20, 1.0, tenant="c")],
                 [waits("big", workers=2, at=1, tenant="a"),
                  waits("small", workers=1, at=2, tenant="b")], cpu=2)
    assert got["big"].expected_start == pytest.approx(NOW + 20 + QUICK.finish_s)
    assert got["small"].expected_start > got["big"].expected_start


def test_a_quota_on_running_jobs_holds_a_tenants_job_until_its_own_job_ends():
    policies = tenants("a", "b", max_running_jobs=1)
    got = starts([held("A", 10, 1.0, tenant="a")], [waits("a2", tenant="a")], cpu=4,
                 policies=policies)
    assert got["a2"].expected_start == pytest.approx(NOW + 10 + QUICK.finish_s)


def test_a_quota_that_will_never_free_gives_no_time_and_says_why():
    policies = {"a": TenantPolicy("a", Quota(max_running_jobs=0))}
    got = starts([], [waits("a1")], cpu=4, policies=policies)
    assert got["a1"].expected_start is None
    assert "will not start" in got["a1"].reason and "may run no jobs" in got["a1"].reason


def test_a_job_bigger_than_the_cluster_gives_no_time_and_says_why():
    got = starts([held("A", 10, 1.0)], [waits("huge", workers=8)], cpu=2)
    assert got["huge"].expected_start is None
    assert "the cluster has 2 cpu in total" in got["huge"].reason


def test_a_running_job_with_no_step_time_yet_leaves_the_jobs_behind_it_unknown():
    got = starts([held("A", 10, None, stepped_at=None)], [waits("B")])
    assert got["B"].expected_start is None
    assert "waiting on job A, which has no step time yet" in got["B"].reason
    assert "capacity" in got["B"].reason


def test_a_queued_job_of_unknown_pace_gets_a_time_but_those_behind_it_do_not():
    got = starts([held("A", 10, 1.0)], [waits("B", step_s=None, at=1), waits("C", at=2)])
    assert got["B"].expected_start == pytest.approx(NOW + 10 + QUICK.finish_s)
    assert got["C"].expected_start is None
    assert "waiting on job B" in got["C"].reason


def test_other_jobs_unknown_pace_does_not_spoil_a_job_that_fits_beside_them():
    got = starts([held("A", 10, None, stepped_at=None), held("B", 5, 1.0)], [waits("C")], cpu=2)
    assert got["C"].expected_start == pytest.approx(NOW + 5 + QUICK.finish_s)


def test_a_leaving_job_frees_its_workers_after_the_leave_time():
    leaving = RunningWork(running("A", leaving=True), 10, 1.0, created_at=0, stepped_at=NOW)
    got = starts([leaving], [waits("B")])
    assert got["B"].expected_start == pytest.approx(NOW + QUICK.leave_s)


def test_a_high_priority_job_preempts_a_lower_one_and_the_victim_comes_back():
    victim = RunningWork(running("low", "a", priority=0), 50, 1.0, created_at=0,
                         stepped_at=NOW)
    got = starts([victim], [waits("urgent", tenant="b", priority=9, steps=10, at=5),
                            waits("later", tenant="a", priority=0, at=6)])
    assert got["urgent"].expected_start == pytest.approx(NOW + QUICK.leave_s)
    # The victim is requeued ahead of `later` (it keeps its place), and resumes after urgent.
    urgent_ends = NOW + QUICK.leave_s + QUICK.startup_s + 10 + QUICK.finish_s
    assert got["later"].expected_start > urgent_ends + 40


def test_only_queued_jobs_are_forecast_and_a_big_queue_is_quick():
    queue = [waits(f"q{i}", tenant="abc"[i % 3], at=i) for i in range(300)]
    got = starts([held("A", 10, 1.0)], queue, cpu=4)
    assert set(got) == {f"q{i}" for i in range(300)}
    times = [got[f"q{i}"].expected_start for i in range(300)]
    assert all(t is not None for t in times)
    assert max(times) > NOW + 60 * 10  # 300 jobs of ~13 s on 4 slots


def test_fair_share_on_a_flavor_remembers_what_each_tenant_had_of_that_flavor():
    # Tenant b ran long lately, but not on flavor a100; tenant a had a while
    # there. On a100 b's job goes first, as the live pass would have it with
    # its history of a100; with none of a100's history, FCFS puts a's first.
    from dataclasses import replace

    def on_a100(work):
        return replace(work, job=replace(work.job, demand=replace(work.job.demand, flavor="a100")))

    whole = ServiceHistory(3600)
    whole.restore("old-b", "b", Resources(1), NOW - 1000, NOW - 10, NOW)
    whole.restore("old-a", "a", Resources(1), NOW - 300, NOW - 10, NOW)
    of_a100 = ServiceHistory(3600)
    of_a100.restore("old-a", "a", Resources(1), NOW - 300, NOW - 10, NOW)
    running_ = [on_a100(held("A", 10, 1.0, tenant="c"))]
    queued_ = [on_a100(waits("a1", tenant="a", at=1)), on_a100(waits("b1", tenant="b", at=2))]
    totals = {"a100": Resources(1)}

    def forecast(flavor_histories):
        return forecast_starts(running_, queued_, tenants("a", "b", "c"), Resources(2), NOW, whole,
                               QUICK, totals, flavor_histories)

    before = of_a100.owed(Resources(1), NOW + 100, 60.0)
    got = forecast({"a100": of_a100})
    assert got["b1"].expected_start < got["a1"].expected_start
    assert of_a100.owed(Resources(1), NOW + 100, 60.0) == before  # copied, not fed the simulation
    without = forecast(None)
    assert without["a1"].expected_start < without["b1"].expected_start
