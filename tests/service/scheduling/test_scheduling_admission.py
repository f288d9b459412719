"""Scheduler.admit on made-up jobs and clusters: priority, fair share, FCFS,
gang and elastic sizing, quotas, reservation, and a reason for every wait."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scheduling_cases import cluster, queued, running, tenants

from service.scheduling import (
    Demand,
    QueuedJob,
    Quota,
    Resources,
    Run,
    Scheduler,
    TenantPolicy,
    attained_service,
)

admit = Scheduler().admit


def started(decision) -> dict[str, int]:
    return dict(decision.start)


# -- strict priority -------------------------------------------------------------


@pytest.mark.parametrize("low_first", [True, False])
@pytest.mark.parametrize("high_tenant_share", [0, 3])
def test_higher_priority_starts_first_whatever_the_order_or_share(low_first, high_tenant_share):
    low, high = queued("low", "a", priority=0), queued("high", "b", priority=5)
    busy = [running(f"r{i}", "b") for i in range(high_tenant_share)]
    jobs = [low, high] if low_first else [high, low]
    capacity = cluster(high_tenant_share + 1, running_jobs=busy)
    decision = admit(jobs, busy, tenants("a", "b"), capacity)
    assert decision.start == [("high", 1)]
    assert decision.waiting["low"].startswith("capacity: needs 1 cpu for 1 workers, 0 free")


def test_priority_is_capped_at_the_tenants_max_priority():
    capped = {**tenants("a", max_priority=1), **tenants("b")}
    jobs = [queued("a-greedy", "a", priority=9), queued("b-mid", "b", priority=5)]
    decision = admit(jobs, [], capped, cluster(1))
    assert decision.start == [("b-mid", 1)]


def test_levels_are_served_in_order_and_each_drains_before_the_next():
    jobs = [queued(f"p{p}-{i}", "a", priority=p) for p in (0, 2, 1) for i in range(2)]
    decision = admit(jobs, [], tenants("a"), cluster(4))
    assert [job for job, _ in decision.start] == ["p2-0", "p2-1", "p1-0", "p1-1"]


# -- weighted fair share (DRF) ----------------------------------------------------


@pytest.mark.parametrize("weights,expected", [((1, 1), (15, 15)), ((1, 2), (10, 20)),
                                              ((2, 1), (20, 10)), ((1, 4), (6, 24))])
def test_one_pass_fills_the_cluster_in_proportion_to_the_weights(weights, expected):
    policy = {**tenants("a", weight=weights[0]), **tenants("b", weight=weights[1])}
    jobs = [queued(f"{t}{i}", t) for i in range(40) for t in "ab"]
    decision = admit(jobs, [], policy, cluster(30))
    counts = [sum(job.startswith(t) for job, _ in decision.start) for t in "ab"]
    assert tuple(counts) == expected


def test_shares_converge_to_the_weights_over_repeated_passes():
    """Weights 1:2, equal jobs, one finishing per round: the workers held per
    round settle at 1:2."""
    policy = {**tenants("a", weight=1), **tenants("b", weight=2)}
    queue = [queued(f"{t}{i}", t) for i in range(300) for t in "ab"]
    live: list = []
    held = {"a": 0, "b": 0}
    for round_ in range(200):
        decision = admit(queue, live, policy, cluster(9, running_jobs=live))
        starting = started(decision)
        live += [running(job.id, job.tenant) for job in queue if job.id in starting]
        queue = [job for job in queue if job.id not in starting]
        if round_ >= 20:
            for job in live:
                held[job.tenant] += job.workers
        live.pop(round_ % len(live))  # one job ends, from either tenant
    assert held["b"] / held["a"] == pytest.approx(2, rel=0.05)


def test_dominant_resource_fairness_balances_different_bottlenecks():
    """The DRF paper's example: 9 cpu and 18 gpu; A's jobs are gpu-heavy
    (1 cpu, 4 gpu), B's cpu-heavy (3 cpu, 1 gpu): A runs 3 and B 2, each
    tenant at a dominant share of 2/3."""
    jobs = [queued(f"a{i}", "a", cpu=1, gpu=4) for i in range(5)]
    jobs += [queued(f"b{i}", "b", cpu=3, gpu=1) for i in range(5)]
    decision = admit(jobs, [], tenants("a", "b"), cluster(9, 18))
    starts = [job for job, _ in decision.start]
    assert sorted(starts) == ["a0", "a1", "a2", "b0", "b1"]


def test_equal_shares_go_to_the_tenant_whose_job_was_queued_first():
    jobs = [queued("b-old", "b", at=1), queued("a-new", "a", at=2)]
    assert admit(jobs, [], tenants("a", "b"), cluster(1)).start == [("b-old", 1)]


def test_the_running_jobs_count_in_the_share():
    busy = [running("a-run", "a", workers=2)]
    jobs = [queued("a1", "a", at=1), queued("b1", "b", at=2)]
    decision = admit(jobs, busy, tenants("a", "b"), cluster(3, running_jobs=busy))
    assert decision.start == [("b1", 1)]


# -- FCFS within a tenant, gang and elastic sizing ---------------------------------


def test_a_tenants_older_job_goes_first():
    jobs = [queued("new", "a", at=2), queued("old", "a", at=1)]
    assert admit(jobs, [], tenants("a"), cluster(1)).start == [("old", 1)]


def test_a_small_job_waits_behind_its_tenants_older_big_one():
    busy = [running("r", "b")]
    jobs = [queued("big", "a", workers=4, at=1), queued("small", "a", at=2)]
    decision = admit(jobs, busy, tenants("a", "b"), cluster(4, running_jobs=busy))
    assert decision.start == []
    assert decision.waiting["small"].startswith("behind job big of tenant a")
    assert "capacity: needs 4 cpu for 4 workers, 3 free" in decision.waiting["small"]


@pytest.mark.parametrize("free,sizes,expected", [
    (8, [2, 4, 8], 8), (7, [2, 4, 8], 4), (3, [2, 4, 8], 2), (1, [2, 4, 8], None),
    (5, (1, 6), 5), (6, [3, 5], 5), (4, [3, 5], 3),
])
def test_elastic_jobs_start_at_the_largest_valid_size_that_fits(free, sizes, expected):
    decision = admit([queued("e", "a", workers=sizes)], [], tenants("a"), cluster(free))
    assert started(decision).get("e") == expected


@pytest.mark.parametrize("quota,expected", [
    ({"max_workers": 5}, 4), ({"max_workers": 3}, 2), ({"max_gpus": 9}, 8),
    ({"max_gpus": 2.5}, 2), ({"max_workers": 1}, None),
])
def test_elastic_size_stays_within_the_tenants_quota(quota, expected):
    job = queued("e", "a", workers=[2, 4, 8], gpu=1)
    decision = admit([job], [], tenants("a", **quota), cluster(16, 16))
    assert started(decision).get("e") == expected


# -- quotas --------------------------------------------------------------------------


@pytest.mark.parametrize("quota,busy,job,reason", [
    ({"max_workers": 4}, [running("r", "acme", workers=4)], queued("j", "acme"),
     "quota: tenant acme runs 4/4 workers; the job needs at least 1"),
    ({"max_workers": 5}, [running("r", "acme", workers=4)], queued("j", "acme", workers=(2, 4)),
     "quota: tenant acme runs 4/5 workers; the job needs at least 2"),
    ({"max_gpus": 2}, [running("r", "acme", gpu=2)], queued("j", "acme", gpu=1),
     "quota: tenant acme uses 2/2 gpus; the job needs at least 1"),
    ({"max_gpus": 3}, [running("r", "acme", gpu=2)], queued("j", "acme", workers=2, gpu=1),
     "quota: tenant acme uses 2/3 gpus; the job needs at least 2"),
    ({"max_running_jobs": 2}, [running("r1", "acme"), running("r2", "acme")], queued("j", "acme"),
     "quota: tenant acme runs 2/2 jobs"),
])
def test_running_quota_holds_a_job_back_with_its_reason(quota, busy, job, reason):
    decision = admit([job], busy, tenants("acme", **quota), cluster(64, 64, busy))
    assert decision.start == []
    assert decision.waiting == {"j": reason}


def test_a_job_held_by_quota_does_not_hold_capacity_for_itself():
    busy = [running("r", "a", workers=2)]
    jobs = [queued("a-hi", "a", priority=9), queued("b-lo", "b", priority=0)]
    policy = {**tenants("a", max_workers=2), **tenants("b")}
    decision = admit(jobs, busy, policy, cluster(3, running_jobs=busy))
    assert decision.start == [("b-lo", 1)]
    assert decision.waiting["a-hi"].startswith("quota:")


def test_a_tenant_over_quota_does_not_slow_another_tenant():
    jobs = [queued(f"a{i}", "a") for i in range(5)] + [queued(f"b{i}", "b") for i in range(5)]
    policy = {**tenants("a", max_running_jobs=1), **tenants("b")}
    decision = admit(jobs, [], policy, cluster(6))
    assert sorted(started(decision)) == ["a0", "b0", "b1", "b2", "b3", "b4"]


# -- reservation and jobs that never fit -----------------------------------------


def test_a_waiting_high_priority_job_holds_the_free_capacity_it_needs():
    busy = [running("r", "c", workers=2)]
    jobs = [queued("hi", "a", workers=4, priority=5), queued("lo", "b", priority=0)]
    decision = admit(jobs, busy, tenants("a", "b", "c"), cluster(4, running_jobs=busy))
    assert decision.start == []
    assert decision.waiting["hi"] == "capacity: needs 4 cpu for 4 workers, 2 free"
    assert decision.waiting["lo"] == (
        "capacity: needs 1 cpu for 1 workers, 0 free (2 more held for job hi waiting ahead)")


def test_the_reservation_is_per_resource():
    """A waiting gpu job holds the gpus it needs and its cpus, not the rest."""
    busy = [running("r", "c", gpu=1)]
    jobs = [queued("gpu-hi", "a", workers=2, gpu=1, priority=5), queued("cpu-lo", "b")]
    decision = admit(jobs, busy, tenants("a", "b", "c"), cluster(4, 2, busy))
    assert decision.start == [("cpu-lo", 1)]
    assert decision.waiting["gpu-hi"] == "capacity: needs 2 gpu for 2 workers, 1 free"


def test_a_job_that_never_fits_neither_blocks_nor_holds():
    jobs = [queued("huge", "a", workers=16, priority=9, at=1), queued("next", "a", at=2),
            queued("other", "b")]
    decision = admit(jobs, [], tenants("a", "b"), cluster(8))
    assert sorted(started(decision)) == ["next", "other"]
    assert decision.waiting["huge"] == (
        "capacity: needs 16 cpu at its smallest size (16 workers); the cluster has 8 cpu in total")
    assert decision.needs_room == []


def test_a_job_over_its_tenants_whole_quota_never_blocks():
    jobs = [queued("huge", "a", workers=8, at=1), queued("next", "a", at=2)]
    decision = admit(jobs, [], tenants("a", max_workers=4), cluster(16))
    assert decision.start == [("next", 1)]
    assert "tenant a may run 4" in decision.waiting["huge"]


def test_jobs_of_unknown_tenants_wait_saying_so():
    decision = admit([queued("j", "ghost")], [], tenants("a"), cluster(4))
    assert decision.waiting == {"j": "tenant ghost is not known"}


def test_leaving_jobs_still_hold_their_workers():
    busy = [running("r", "a", workers=3, leaving=True)]
    decision = admit([queued("j", "b")], busy, tenants("a", "b"), cluster(3, running_jobs=busy))
    assert decision.start == []


# -- what preemption is offered --------------------------------------------------


def test_needs_room_lists_the_quota_waits_ahead_of_the_first_capacity_wait():
    busy = [running("a-run", "a", workers=2), running("c-run", "c", workers=2)]
    jobs = [queued("a-quota", "a", priority=9), queued("b-cap", "b", workers=4, priority=5),
            queued("c-cap", "c", workers=4, priority=3), queued("d-quota", "d", priority=1)]
    policy = {**tenants("a", max_workers=2), **tenants("b", "c"),
              **tenants("d", max_running_jobs=0)}
    decision = admit(jobs, busy, policy, cluster(4, running_jobs=busy))
    assert decision.needs_room == ["a-quota", "b-cap"]
    assert decision.free_after == Resources(0, 0)


def test_free_after_subtracts_the_starts():
    decision = admit([queued("j", "a", workers=(1, 3), gpu=0.5)], [], tenants("a"), cluster(8, 2))
    assert decision.start == [("j", 3)]
    assert decision.free_after == Resources(5, 0.5)


# -- invariants over random queues ------------------------------------------------

TENANT_NAMES = ["a", "b", "c"]
jobs_strategy = st.lists(st.tuples(
    st.sampled_from(TENANT_NAMES), st.integers(0, 3),  # tenant, priority
    st.lists(st.integers(1, 6), min_size=1, max_size=3),  # valid sizes
    st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from([0.0, 0.0, 1.0]),  # cpu, gpu
), max_size=25)


@settings(max_examples=300, deadline=None)
@given(jobs=jobs_strategy, busy=st.lists(st.tuples(st.sampled_from(TENANT_NAMES),
                                                   st.integers(1, 3)), max_size=4),
       cpu=st.integers(0, 24), gpu=st.integers(0, 8),
       quota=st.tuples(st.none() | st.integers(0, 8), st.none() | st.integers(0, 4),
                       st.none() | st.integers(0, 3)))
def test_every_decision_is_gang_valid_within_capacity_and_quota_and_explained(
        jobs, busy, cpu, gpu, quota):
    max_workers, max_gpus, max_jobs = quota
    policy = {t: TenantPolicy(t, Quota(max_workers, max_gpus, max_jobs)) for t in TENANT_NAMES}
    queue = [queued(f"j{i}", t, sizes, p, c, g) for i, (t, p, sizes, c, g) in enumerate(jobs)]
    live = [running(f"r{i}", t, n) for i, (t, n) in enumerate(busy)]
    capacity = cluster(cpu, gpu, live)
    decision = admit(queue, live, policy, capacity)
    starts = started(decision)
    assert len(starts) == len(decision.start)
    assert set(starts) | set(decision.waiting) == {job.id for job in queue}
    assert not set(starts) & set(decision.waiting)
    assert all(reason for reason in decision.waiting.values())
    by_id = {job.id: job for job in queue}
    held = Resources()
    for job_id, workers in decision.start:
        assert workers in by_id[job_id].demand.world_sizes  # all its ranks, at a valid size
        held = held + by_id[job_id].demand.at(workers)
    assert held.fits_in(capacity.free.at_least_zero())
    for tenant in TENANT_NAMES:
        mine = [by_id[j] for j in starts if by_id[j].tenant == tenant]
        workers = sum(n for _, n in busy if _ == tenant) + sum(starts[j.id] for j in mine)
        gpus = sum(j.demand.at(starts[j.id]).gpu for j in mine)
        if mine and max_workers is not None:
            assert workers <= max_workers
        if mine and max_gpus is not None:
            assert gpus <= max_gpus + 1e-9
        if mine and max_jobs is not None:
            assert len(mine) + sum(t == tenant for t, _ in busy) <= max_jobs
    ranks = [by_id[job_id].demand.priority for job_id, _ in decision.start]
    assert ranks == sorted(ranks, reverse=True)  # levels are served highest first


# -- building the views -----------------------------------------------------------


def test_a_demand_is_read_from_a_job_spec():
    from workers.schema import JobSpec

    spec = JobSpec.model_validate({
        "workers": {"min": 1, "max": 4}, "resources_per_worker": {"cpu": 2, "gpu": 1},
        "priority": 3, "model": {}, "train": {"steps": 5, "global_batch_size": 8}})
    assert Demand.from_spec(spec) == Demand(3, (4, 3, 2, 1), Resources(2, 1))
    assert Demand.from_spec(spec, world_sizes=[2]).world_sizes == (2,)


@pytest.mark.parametrize("free", [2, 3, 4, 5, 6, 7])
def test_an_elastic_job_may_start_at_every_size_in_min_max(free):
    # A global batch of 8 runs at any size up to 8 (8 over 3: 3, 3, 2), so an
    # elastic 2..6 job takes whatever fits, not only the sizes that divide 8.
    from workers.schema import JobSpec

    spec = JobSpec.model_validate({"workers": {"min": 2, "max": 6}, "model": {},
                                   "train": {"steps": 5, "global_batch_size": 8}})
    job = QueuedJob("elastic", "a", 0, Demand.from_spec(spec))
    assert admit([job], [], tenants("a"), cluster(free)).start == [("elastic", min(free, 6))]


def test_attained_service_is_dominant_resource_seconds_within_the_window():
    runs = [Run("a", Resources(2, 0), started=0, ended=10),  # 5 s in the window
            Run("a", Resources(0, 1), started=8, ended=None),  # still running: 7 s
            Run("b", Resources(4, 0), started=20, ended=30),  # after now: nothing
            Run("c", Resources(1, 0), started=0, ended=4)]  # before the window
    attained = attained_service(runs, Resources(10, 2), since=5, now=15)
    assert attained == {"a": pytest.approx(max(2 * 5 / 10, 1 * 7 / 2))}
