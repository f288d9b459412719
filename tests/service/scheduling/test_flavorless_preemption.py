"""Preemption for a job of a flavor where jobs WITHOUT a flavor run on that
flavor's nodes (Ray placed their ranks there): they hold that flavor's
capacity, so they count in its use and are victims that make room there,
for what their ranks there hold; a job without a flavor whose ranks are all
on other nodes frees nothing for it. Pure policy, made-up clusters: flavor
`a` of 2 CPUs, flavor `b` of 2, 2 more CPUs of no flavor; a worker is 1 CPU."""

from __future__ import annotations

from dataclasses import replace

from scheduling_cases import queued, running

from service.scheduling import PreemptionPolicy, Resources, TenantPolicy
from service.scheduling.views import capacity_now


def flavored(job, flavor):
    return replace(job, demand=replace(job.demand, flavor=flavor))


def placed(job, **on_flavors):
    """A job of no flavor with this many ranks on each flavor's nodes."""
    return replace(job, on_flavors=on_flavors)


def cluster(busy):
    return capacity_now(Resources(6.0), busy, {"a": Resources(2.0), "b": Resources(2.0)})


TENANTS = {name: TenantPolicy(name) for name in ("x", "y", "z")}
PENDING = flavored(queued("high-a", "y", workers=2, priority=9), "a")


def test_ranks_of_a_job_without_a_flavor_hold_that_flavors_capacity():
    busy = [placed(running("plain", "x", workers=3), a=2, b=1)]
    capacity = cluster(busy)
    assert capacity.of("a").free == Resources(0.0) and capacity.of("b").free == Resources(1.0)
    assert busy[0].holds_on("a") == Resources(2.0) and busy[0].runs_on("a")
    assert not placed(running("elsewhere", "x"), b=1).runs_on("a")


def test_a_job_without_a_flavor_on_the_flavors_nodes_is_the_victim():
    busy = [placed(running("plain", "x", workers=2), a=2)]
    decision = PreemptionPolicy().select_victims(PENDING, busy, cluster(busy), TENANTS)
    assert decision.victims == ["plain"], decision.reason


def test_a_job_without_a_flavor_elsewhere_frees_nothing_on_the_flavor():
    busy = [placed(running("plain-b", "x", workers=2), b=2),
            placed(running("plain-a", "z", workers=2, priority=20), a=2)]  # above the pending job
    decision = PreemptionPolicy().select_victims(PENDING, busy, cluster(busy), TENANTS)
    assert decision.victims == [] and "would not make room" in decision.reason


def test_what_its_ranks_there_hold_is_what_it_frees_there():
    """One rank of `split` is on a, one on b: it frees one CPU of a, so the job of
    a with one worker there goes too; the fewest victims that make room are both."""
    busy = [placed(running("split", "x", workers=2, steps=1), a=1, b=1),
            flavored(running("on-a", "x", workers=1, steps=5), "a"),
            flavored(running("on-b", "x", workers=1), "b")]
    decision = PreemptionPolicy().select_victims(PENDING, busy, cluster(busy), TENANTS)
    assert sorted(decision.victims) == ["on-a", "split"], decision.reason


def test_a_cheaper_victim_on_the_flavor_is_taken_over_one_without_a_flavor():
    busy = [placed(running("plain", "x", workers=2, priority=3), a=2)]
    pending = flavored(queued("one", "y", workers=2, priority=9), "a")
    low = [flavored(running("low-a", "x", workers=2, priority=1), "a")]
    both = busy + low
    capacity = capacity_now(Resources(6.0), both, {"a": Resources(4.0)})
    decision = PreemptionPolicy().select_victims(pending, both, capacity, TENANTS)
    assert decision.victims == ["low-a"]  # the lowest priority first, flavored or not


def test_a_leaving_job_without_a_flavor_on_the_flavor_is_room_being_made():
    busy = [placed(running("plain", "x", workers=2, leaving=True), a=2)]
    decision = PreemptionPolicy().select_victims(PENDING, busy, cluster(busy), TENANTS)
    assert decision.victims == [] and "room is already being made" in decision.reason
