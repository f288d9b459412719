"""The scheduling pass with flavors, on a real store (SQLite and Postgres) and
a made-up cluster (no Ray): flavors a and b of 2 CPUs each, 4 in all. The
pass reads each flavor's capacity with its labels, starts a job of a flavor
only within that flavor's capacity and its tenant's quota on it (the wait
naming the flavor), preempts within the flavor only, and sizes a restart on
the flavor's nodes."""

from __future__ import annotations

import pytest
from store_harness import SPEC

import service.run.scheduling_pass as scheduling_pass
from service.run.scheduling_pass import SchedulingPass
from service.settings import Settings
from service.states import JobState as S
from workers.schema import WorkerRange

LABELS = {"a": {"pool": "a"}, "b": {"pool": "b"}}


@pytest.fixture
def admission(store, tmp_path, monkeypatch):
    asked = []

    def flavor_capacities(flavors, exclude=frozenset()):
        asked.append(dict(flavors))
        return {name: {"cpu": 2.0, "gpu": 0.0, **made.ray_free.get(name, {})}
                for name in flavors if name in LABELS}

    monkeypatch.setattr(scheduling_pass, "cluster_capacity",
                        lambda exclude=frozenset(), **_: {"cpu": 4.0, "gpu": 0.0})
    monkeypatch.setattr(scheduling_pass, "flavor_capacities", flavor_capacities)
    monkeypatch.setattr(scheduling_pass, "lost_nodes", lambda nodes: set())
    for name, labels in LABELS.items():
        store.flavors.put(name, labels=labels, price_per_worker_hour=1)
    made = SchedulingPass(Settings(data_dir=str(tmp_path)), store)
    made.asked = asked
    made.ray_free = {}  # what Ray says is free on a flavor's nodes: {"free_cpu": ...}
    return made


def submit(store, name: str, flavor: str | None, workers: int | dict | WorkerRange = 1, tenant="acme",
           priority=0):
    resources = SPEC.resources_per_worker.model_copy(update={"flavor": flavor})
    if isinstance(workers, dict):
        workers = WorkerRange(**workers)
    spec = SPEC.model_copy(update={"name": name, "workers": workers, "priority": priority,
                                   "resources_per_worker": resources})
    job, _ = store.create_job(tenant=tenant, name=name, spec=spec, priority=priority)
    return job


def test_a_flavor_quota_holds_one_job_while_another_flavor_runs_then_preemption_stays_within(
        store, admission):
    store.tenants.create("acme", quota={"flavors": {"a": {"max_workers": 1}}})
    on_a = submit(store, "on-a", "a")
    second_a = submit(store, "second-a", "a")
    on_b = submit(store, "on-b", "b", workers=2)
    assert {job.id for job in admission.run_pass()} == {on_a.id, on_b.id}
    assert admission.asked[-1] == LABELS  # each flavor's capacity asked by its labels
    assert "of flavor a" in admission.waiting[second_a.id]
    for job in (on_a, on_b):
        store.transition(job.id, S.RUNNING, reason="test")

    urgent = submit(store, "urgent", "b", workers=2, tenant="admin", priority=50)
    assert admission.run_pass() == []
    assert store.get_job(on_b.id).state == S.PREEMPTING
    assert store.get_job(on_a.id).state == S.RUNNING  # on another flavor: frees nothing for it
    assert "of flavor b" in admission.waiting[urgent.id]


def test_a_job_without_a_flavor_takes_any_free_capacity(store, admission):
    on_a = submit(store, "on-a", "a", workers=2)
    anywhere = submit(store, "anywhere", None, workers=2)
    too_many = submit(store, "too-many", "a")
    assert {job.id for job in admission.run_pass()} == {on_a.id, anywhere.id}
    assert "of flavor a" in admission.waiting[too_many.id]


def test_a_restart_is_sized_on_its_flavors_nodes(store, admission):
    elastic = submit(store, "elastic", "a", workers={"min": 1, "max": 2})
    elastic = store.update_job(elastic.id, workers=2)
    other = submit(store, "other", "a")
    store.transition(other.id, S.STARTING, reason="test", workers=1)
    # the cluster has 3 CPUs free, flavor a 1: the restart fits 1 worker, not 2
    assert admission.restart_size(elastic) == 1


def test_what_ray_holds_on_a_flavors_nodes_for_a_job_of_no_flavor_is_not_free(store, admission):
    # a job of no flavor runs on flavor a's nodes (Ray has 0 CPUs free there): a's job waits
    admission.ray_free = {"a": {"free_cpu": 0.0, "free_gpu": 0.0}}
    on_a = submit(store, "on-a", "a")
    on_b = submit(store, "on-b", "b")
    assert {job.id for job in admission.run_pass()} == {on_b.id}
    assert "of flavor a" in admission.waiting[on_a.id]
    admission.ray_free = {}
    assert {job.id for job in admission.run_pass()} == {on_a.id}


def test_a_job_of_no_flavor_on_a_flavors_nodes_is_preempted_for_a_job_of_that_flavor(
        store, admission, monkeypatch):
    """Its ranks are on a's nodes (where the leader's runner placed them): they hold a's
    capacity, so a job of a of higher priority preempts it; one whose ranks are on b's
    nodes only is left be."""
    placed = {}
    asked = []

    def node_flavors(flavors):
        asked.append(dict(flavors))
        return {"node-a": "a", "node-b": "b"}

    monkeypatch.setattr(scheduling_pass, "node_flavors", node_flavors)
    admission.placed_on = lambda job_id: placed.get(job_id, [])
    plain_a = submit(store, "plain-a", None, workers=2)
    plain_b = submit(store, "plain-b", None, workers=2)
    assert {job.id for job in admission.run_pass()} == {plain_a.id, plain_b.id}
    placed.update({plain_a.id: ["node-a", "node-a"], plain_b.id: ["node-b", "node-b"]})
    for job in (plain_a, plain_b):
        store.transition(job.id, S.RUNNING, reason="test")

    urgent = submit(store, "urgent", "a", workers=2, tenant="admin", priority=50)
    assert admission.run_pass() == []
    assert asked[-1] == LABELS  # the nodes' flavors asked by the flavors' labels
    assert store.get_job(plain_a.id).state == S.PREEMPTING
    assert store.get_job(plain_b.id).state == S.RUNNING  # on b's nodes: frees nothing on a
    assert "of flavor a" in admission.waiting[urgent.id]
