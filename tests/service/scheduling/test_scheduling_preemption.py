"""PreemptionPolicy.select_victims on made-up running jobs: the cheapest set,
never equal or higher priority, none when it cannot help."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scheduling_cases import cluster, queued, running, tenants

from service.scheduling import PreemptionPolicy

select = PreemptionPolicy().select_victims


def test_the_low_priority_elastic_job_makes_room_for_the_high_one():
    """The issue's scenario: A (low) runs 4 workers of a 4-worker cluster, B (high) needs 2."""
    busy = [running("a-elastic", "a", workers=4, priority=0)]
    decision = select(queued("b-job", "b", workers=2, priority=5), busy,
                      cluster(4, running_jobs=busy), tenants("a", "b"))
    assert decision.victims == ["a-elastic"]
    assert "job b-job of tenant b (priority 5) needs room for 2 workers" in decision.reason
    assert "preempting job a-elastic" in decision.reason


@pytest.mark.parametrize("victim_priority", [5, 6, 9])
def test_never_equal_or_higher_priority(victim_priority):
    busy = [running("r", "a", workers=4, priority=victim_priority)]
    decision = select(queued("p", "b", workers=2, priority=5), busy,
                      cluster(4, running_jobs=busy), tenants("a", "b"))
    assert decision.victims == []
    assert decision.reason.startswith("even preempting all 0 running jobs")


def test_priorities_are_compared_after_the_tenants_cap():
    busy = [running("r", "a", workers=4, priority=1)]
    capped = {**tenants("a"), **tenants("b", max_priority=1)}
    decision = select(queued("p", "b", priority=9), busy, cluster(4, running_jobs=busy), capped)
    assert decision.victims == []


def test_none_when_even_all_lower_priority_jobs_would_not_make_room():
    busy = [running("hi", "c", workers=4, priority=9), running("lo", "a", workers=2, priority=0)]
    decision = select(queued("p", "b", workers=4, priority=5), busy,
                      cluster(6, running_jobs=busy), tenants("a", "b", "c"))
    assert decision.victims == []
    assert "even preempting all 1 running jobs of lower priority than 5" in decision.reason


def test_the_lowest_priority_goes_first_even_at_more_cost():
    busy = [running("p1-fresh", "a", workers=2, priority=1, steps=0),
            running("p0-a", "a", workers=1, priority=0, steps=900),
            running("p0-b", "a", workers=1, priority=0, steps=900)]
    decision = select(queued("p", "b", workers=2, priority=5), busy,
                      cluster(4, running_jobs=busy), tenants("a", "b"))
    assert sorted(decision.victims) == ["p0-a", "p0-b"]


def test_a_higher_victim_priority_is_used_only_when_the_lower_are_not_enough():
    busy = [running("p0", "a", workers=1, priority=0),
            running("p1-big", "a", workers=3, priority=1),
            running("p1-small", "a", workers=1, priority=1)]
    decision = select(queued("p", "b", workers=3, priority=5), busy,
                      cluster(5, running_jobs=busy), tenants("a", "b"))
    assert decision.victims == ["p1-big"]  # fewest victims once priority 1 is needed
    assert "(priority 1 at most)" in decision.reason


def test_the_fewest_victims_at_the_same_priority():
    busy = [running("small-1", "a", priority=0), running("small-2", "a", priority=0),
            running("big", "a", workers=2, priority=0, steps=500)]
    decision = select(queued("p", "b", workers=2, priority=5), busy,
                      cluster(4, running_jobs=busy), tenants("a", "b"))
    assert decision.victims == ["big"]


def test_then_the_fewest_steps_lost():
    busy = [running("old", "a", workers=2, steps=50), running("fresh", "a", workers=2, steps=5)]
    decision = select(queued("p", "b", workers=2, priority=5), busy,
                      cluster(4, running_jobs=busy), tenants("a", "b"))
    assert decision.victims == ["fresh"]
    assert "losing 5 steps" in decision.reason


def test_then_the_ids_so_the_choice_is_deterministic():
    busy = [running(name, "a", workers=2) for name in ("r-b", "r-c", "r-a")]
    for order in (busy, busy[::-1]):
        decision = select(queued("p", "b", workers=2, priority=5), order,
                          cluster(6, running_jobs=busy), tenants("a", "b"))
        assert decision.victims == ["r-a"]


def test_free_capacity_counts_so_fewer_victims_are_needed():
    busy = [running("r1", "a", workers=2), running("r2", "a", workers=2)]
    decision = select(queued("p", "b", workers=3, priority=5), busy,
                      cluster(5, running_jobs=busy), tenants("a", "b"))
    assert len(decision.victims) == 1


def test_the_gpu_shortfall_needs_a_gpu_victim():
    busy = [running("cpu-only", "a", workers=4, cpu=2), running("gpu", "a", gpu=1, steps=99)]
    decision = select(queued("p", "b", gpu=1, priority=5), busy,
                      cluster(16, 1, running_jobs=busy), tenants("a", "b"))
    assert decision.victims == ["gpu"]


def test_leaving_jobs_are_room_being_made_not_victims():
    busy = [running("going", "a", workers=2, leaving=True), running("staying", "a", workers=2)]
    decision = select(queued("p", "b", workers=2, priority=5), busy,
                      cluster(4, running_jobs=busy), tenants("a", "b"))
    assert decision.victims == []
    assert decision.reason == "room is already being made: job going releasing their workers"


def test_leaving_jobs_count_towards_room_so_fewer_victims_are_needed():
    busy = [running("going", "a", workers=2, leaving=True), running("r1", "a", workers=2),
            running("r2", "a", workers=2)]
    decision = select(queued("p", "b", workers=4, priority=5), busy,
                      cluster(6, running_jobs=busy), tenants("a", "b"))
    assert len(decision.victims) == 1


def test_a_tenant_over_its_quota_preempts_its_own_lower_priority_job():
    busy = [running("mine-lo", "a", workers=2, priority=0), running("other", "b", workers=2)]
    policy = {**tenants("a", max_workers=2), **tenants("b")}
    decision = select(queued("mine-hi", "a", workers=2, priority=5), busy,
                      cluster(8, running_jobs=busy), policy)
    assert decision.victims == ["mine-lo"]


def test_another_tenants_job_cannot_cure_a_quota_wait():
    busy = [running("mine", "a", workers=2, priority=5), running("other", "b", workers=2)]
    policy = {**tenants("a", max_workers=2), **tenants("b")}
    decision = select(queued("p", "a", workers=2, priority=5), busy,
                      cluster(4, running_jobs=busy), policy)
    assert decision.victims == []


@pytest.mark.parametrize("pending,policy,reason", [
    (queued("p", "ghost", priority=5), tenants("a"), "tenant ghost is not known"),
    (queued("p", "a", workers=9, priority=5), tenants("a"), "preempting cannot help: capacity"),
    (queued("p", "a", workers=3, priority=5), tenants("a", max_workers=2),
     "preempting cannot help: quota"),
])
def test_no_victims_for_a_job_that_could_never_run(pending, policy, reason):
    busy = [running("r", "a", workers=4)]
    decision = select(pending, busy, cluster(4, running_jobs=busy), policy)
    assert decision.victims == []
    assert decision.reason.startswith(reason)


def test_a_job_that_fits_already_needs_nobody():
    decision = select(queued("p", "a", priority=5), [], cluster(4), tenants("a"))
    assert decision == type(decision)([], "it fits without preempting anyone")


def test_the_greedy_fallback_still_makes_room_without_needless_victims():
    busy = [running(f"r{i}", "a", workers=1 + i % 3, steps=i) for i in range(12)]
    pending = queued("p", "b", workers=7, priority=5)
    capacity = cluster(24, running_jobs=busy)
    decision = PreemptionPolicy(max_subsets=0).select_victims(pending, busy, capacity,
                                                              tenants("a", "b"))
    released = sum(job.workers for job in busy if job.id in decision.victims)
    assert released >= 7
    assert all(released - job.workers < 7 for job in busy if job.id in decision.victims)


# -- against brute force over small random clusters ----------------------------

running_strategy = st.lists(st.tuples(
    st.sampled_from(["a", "b"]), st.integers(1, 4), st.integers(0, 6),  # tenant, workers, priority
    st.integers(0, 100), st.booleans(),  # steps since checkpoint, leaving
), max_size=7)


@settings(max_examples=300, deadline=None)
@given(busy=running_strategy, need=st.integers(1, 8), priority=st.integers(0, 6),
       spare=st.integers(0, 3))
def test_the_choice_is_the_cheapest_of_all_sets_that_make_room(busy, need, priority, spare):
    live = [running(f"r{i}", t, n, p, steps=s, leaving=g) for i, (t, n, p, s, g) in enumerate(busy)]
    total = sum(job.workers for job in live) + spare
    pending = queued("p", "c", workers=need, priority=priority)
    decision = select(pending, live, cluster(total, running_jobs=live), tenants("a", "b", "c"))
    room = spare + sum(job.workers for job in live if job.leaving)
    eligible = [job for job in live if not job.leaving and job.demand.priority < priority]

    def cost(combo):
        return (max(j.demand.priority for j in combo), len(combo),
                sum(j.steps_since_checkpoint for j in combo), sorted(j.id for j in combo))

    feasible = [combo for size in range(1, len(eligible) + 1)
                for combo in combinations(eligible, size)
                if room + sum(j.workers for j in combo) >= need]
    if need <= room or not feasible or need > total:
        assert decision.victims == []
        assert decision.reason
    else:
        chosen = [job for job in live if job.id in decision.victims]
        assert cost(chosen) == min(cost(combo) for combo in feasible)
