"""Flavors in the scheduling policies, on made-up clusters: a job of a
flavor fits only its flavor's free capacity and holds back only there; its
tenant's quota on that flavor binds beside the totals (a wait naming the
flavor, or never where its smallest size is over it); fair share weighs the
tenant's share of that flavor; preemption for it counts only victims of the
same flavor; the forecast starts it only when its flavor frees."""

from __future__ import annotations

from dataclasses import replace

from scheduling_cases import queued, running

from service.scheduling import (
    Capacity,
    FlavorQuota,
    PreemptionPolicy,
    Quota,
    QuotaPolicy,
    Resources,
    Scheduler,
    TenantPolicy,
)
from service.scheduling.forecast import ForecastSettings, QueuedWork, RunningWork, forecast_starts
from service.scheduling.views import capacity_now


def flavored(job, flavor):
    """The job (queued or running) asking for `flavor`."""
    return replace(job, demand=replace(job.demand, flavor=flavor))


def cluster(running_jobs=(), a=2.0, b=2.0):
    """Two flavors' nodes: `a` and `b` CPUs (their sum is the cluster)."""
    totals = {"a": Resources(a), "b": Resources(b)}
    return capacity_now(Resources(a + b), running_jobs, totals)


def tenants(*names, **flavor_quotas) -> dict[str, TenantPolicy]:
    quota = Quota(flavors={f: FlavorQuota(**q) for f, q in flavor_quotas.items()})
    return {name: TenantPolicy(name, quota) for name in names}


def test_a_job_of_a_flavor_fits_only_its_flavors_free_capacity():
    busy = [flavored(running("r1", "x", workers=2), "a")]
    jobs = [flavored(queued("on-a", "y"), "a"), flavored(queued("on-b", "y", workers=2), "b")]
    decision = Scheduler().admit(jobs, busy, tenants("x", "y"), cluster(busy))
    assert decision.start == [("on-b", 2)]
    assert "of flavor a" in decision.waiting["on-a"] and "0 free" in decision.waiting["on-a"]


def test_a_job_without_a_flavor_uses_any_node():
    busy = [flavored(running("r1", "x", workers=2), "a")]
    decision = Scheduler().admit([queued("any", "y", workers=2)], busy, tenants("x", "y"),
                                 cluster(busy))
    assert decision.start == [("any", 2)]


def test_a_flavor_without_nodes_never_starts_naming_it():
    job = flavored(queued("j", "y"), "h100")
    decision = Scheduler().admit([job], [], tenants("y"), cluster())
    assert decision.start == [] and "flavor h100" in decision.waiting["j"]


def test_a_waiting_job_holds_back_capacity_on_its_flavor_only():
    big = flavored(queued("big", "x", workers=3, priority=5), "a")  # a has 2: waits, holds a
    small_a, small_b = flavored(queued("sa", "y"), "a"), flavored(queued("sb", "y"), "b")
    decision = Scheduler().admit([big, small_a, small_b], [], tenants("x", "y"),
                                 cluster(a=3.0, b=2.0, running_jobs=[
                                     flavored(running("r", "z"), "a")]))
    assert ("sb", 1) in decision.start and ("sa", 1) not in decision.start
    assert decision.needs_room[0] == "big"


def test_a_flavor_quota_holds_a_job_naming_the_flavor_while_another_flavor_runs():
    busy = [flavored(running("r1", "y"), "a")]
    jobs = [flavored(queued("a2", "y"), "a"), flavored(queued("b1", "y"), "b")]
    decision = Scheduler().admit(jobs, busy, tenants("y", a={"max_workers": 1}), cluster(busy))
    assert decision.start == [("b1", 1)] or ("b1", 1) in decision.start
    assert "of flavor a" in decision.waiting["a2"] and "1/1 workers" in decision.waiting["a2"]


def test_a_flavor_quota_the_smallest_size_is_over_is_refused_at_submit():
    policy = tenants("y", a={"max_workers": 1})["y"]
    job = flavored(queued("a2", "y", workers=2), "a")
    decision = QuotaPolicy().check_submit(policy, 0, job.demand)
    assert not decision.allowed and "flavor a" in decision.reason
    assert QuotaPolicy().check_submit(policy, 0, flavored(job, "b").demand).allowed


def test_fair_share_weighs_the_share_of_the_jobs_flavor():
    # x holds all of flavor a; on flavor b it is idle, so it keeps its turn there
    busy = [flavored(running("r1", "x", workers=2), "a")]
    x_b = flavored(queued("x-b", "x", at=2), "b")
    y_b = flavored(queued("y-b", "y", at=1), "b")
    decision = Scheduler().admit([y_b, x_b], busy, tenants("x", "y"),
                                 cluster(busy, b=1.0))
    assert decision.start == [("y-b", 1)]  # the tie goes to the older, not to the tenant idle on a
    attained = {"b": {"y": 100.0}}  # y had flavor b lately; x had a, which does not count here
    decision = Scheduler().admit([y_b, x_b], busy, tenants("x", "y"), cluster(busy, b=1.0),
                                 {"x": 1000.0}, attained)
    assert decision.start == [("x-b", 1)]


def test_preemption_for_a_flavor_frees_only_that_flavors_workers():
    low_b = flavored(running("low-b", "x", workers=2), "b")
    low_a = flavored(running("low-a", "x", workers=2), "a")
    pending = flavored(queued("high", "y", workers=2, priority=9), "a")
    busy = [low_b, low_a]
    decision = PreemptionPolicy().select_victims(pending, busy, cluster(busy), tenants("x", "y"))
    assert decision.victims == ["low-a"]
    only_b = [low_b, flavored(running("other", "z", workers=2, priority=20), "a")]
    decision = PreemptionPolicy().select_victims(pending, only_b, cluster(only_b),
                                                 tenants("x", "y", "z"))
    assert decision.victims == []  # a victim on b frees nothing on a


def test_preemption_for_no_flavor_takes_any_victim():
    low_b = flavored(running("low-b", "x", workers=2), "b")
    busy = [low_b, flavored(running("high-a", "x", workers=2, priority=20), "a")]
    pending = queued("any", "y", workers=2, priority=9)
    decision = PreemptionPolicy().select_victims(pending, busy, cluster(busy), tenants("x", "y"))
    assert decision.victims == ["low-b"]


def test_the_forecast_starts_a_flavored_job_when_its_flavor_frees():
    now = 1000.0
    on_a = RunningWork(flavored(running("r-a", "x", workers=2), "a"), remaining_steps=10,
                       step_s=1.0, created_at=0.0, stepped_at=now)
    on_b = RunningWork(flavored(running("r-b", "x", workers=2), "b"), remaining_steps=100,
                       step_s=1.0, created_at=0.0, stepped_at=now)
    wait = QueuedWork(flavored(queued("q", "y", workers=2), "a"), steps=5, step_s=1.0)
    out = forecast_starts([on_a, on_b], [wait], tenants("x", "y"), Resources(4.0), now,
                          settings=ForecastSettings(),
                          flavor_totals={"a": Resources(2.0), "b": Resources(2.0)})
    assert out["q"].expected_start is not None
    assert now + 10 <= out["q"].expected_start < now + 100


def test_capacity_of_an_unknown_flavor_is_none():
    capacity = Capacity(Resources(4), Resources(4))
    assert capacity.of("h100").total == Resources() and capacity.of(None) is capacity
