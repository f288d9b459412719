"""Each flavor's capacity and use as `GET /v1/cluster` shows it: a pure view
over the flavors' capacities and the active jobs (no cluster)."""

from __future__ import annotations

from dataclasses import replace

from scheduling_cases import running

from service.observability.flavor_view import flavor_use
from service.scheduling import Resources

AMOUNTS = {  # flavor a: 2 nodes, 4 CPUs (Ray has 1 free); b: 1 node of 2 GPUs; c: no node now
    "a": {"cpu": 4.0, "gpu": 0.0, "free_cpu": 1.0, "free_gpu": 0.0, "nodes": 2},
    "b": {"cpu": 8.0, "gpu": 2.0, "free_cpu": 8.0, "free_gpu": 2.0, "nodes": 1},
    "c": {"cpu": 0.0, "gpu": 0.0, "free_cpu": 0.0, "free_gpu": 0.0, "nodes": 0},
}


def flavored(job, flavor):
    return replace(job, demand=replace(job.demand, flavor=flavor))


def test_each_flavors_workers_used_and_free_its_jobs_and_those_of_no_flavor_there():
    jobs = [flavored(running("on-a", "x", workers=2), "a"),
            flavored(running("on-b", "y", workers=1, cpu=1.0, gpu=1.0), "b"),
            replace(running("plain", "x", workers=3), on_flavors={"a": 1, "b": 1}),
            running("elsewhere", "z", workers=2)]  # on nodes of no flavor
    rows = {row.flavor: row for row in flavor_use(AMOUNTS, jobs)}
    assert list(rows) == ["a", "b", "c"]
    a, b, c = rows["a"], rows["b"], rows["c"]
    assert (a.nodes, a.capacity, a.workers, a.jobs, a.workers_of_no_flavor) == (
        2, Resources(4.0), 3, 2, 1)
    assert a.used == Resources(3.0)
    assert a.free == Resources(1.0)  # 4 less 3 held, and Ray says 1 free
    assert (b.workers, b.jobs, b.workers_of_no_flavor) == (2, 2, 1)
    assert b.used == Resources(2.0, 1.0) and b.free == Resources(6.0, 1.0)
    assert (c.nodes, c.workers, c.jobs, c.used, c.free) == (0, 0, 0, Resources(), Resources())


def test_ray_free_bounds_what_is_shown_free():
    amounts = {"a": {**AMOUNTS["a"], "free_cpu": 0.0}}  # something outside Brigade holds it all
    assert flavor_use(amounts, [])[0].free == Resources(0.0)
    assert flavor_use({}, []) == []
