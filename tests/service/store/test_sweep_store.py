"""The sweep store on SQLite and Postgres: create (idempotent per tenant),
read, list, compare-and-set states, trial rows written once per number."""

from __future__ import annotations

import uuid

import pytest

from service.leadership import Leadership
from service.states import SweepState, TrialState
from service.store.errors import Deposed
from workers.schema.sweep import SweepSpec

SPEC = SweepSpec.model_validate({
    "name": "lr", "base": {"model": {"n_layers": 2}, "train": {"steps": 4}},
    "space": {"train.lr": {"loguniform": [1e-4, 1e-1]}}, "objective": {"metric": "loss"},
    "max_trials": 3,
})


def test_create_get_list_and_idempotency(store):
    sweeps = store.sweeps
    first, created = sweeps.create(tenant="acme", spec=SPEC, idempotency_key="k")
    assert created and first.state is SweepState.QUEUED and first.study == first.id
    assert first.spec == SPEC and first.name == "lr" and first.finished_at is None
    again, created = sweeps.create(tenant="acme", spec=SPEC, idempotency_key="k")
    assert not created and again.id == first.id
    other, created = sweeps.create(tenant="beta", spec=SPEC, idempotency_key="k")
    assert created and other.id != first.id  # keys are per tenant

    assert sweeps.get(first.id) == first
    assert sweeps.get(first.id, tenant="beta") is None
    assert [s.id for s in sweeps.list(tenant="acme")] == [first.id]
    assert {s.id for s in sweeps.list(tenant=None)} == {first.id, other.id}
    assert sweeps.list(tenant=None, states=["RUNNING"]) == []
    assert [s.id for s in sweeps.live()] == [first.id, other.id]


def test_states_change_by_compare_and_set(store):
    sweep, _ = store.sweeps.create(tenant="acme", spec=SPEC)
    running = store.sweeps.set_state(sweep.id, SweepState.RUNNING, expect=[SweepState.QUEUED])
    assert running is not None and running.state is SweepState.RUNNING
    assert store.sweeps.set_state(sweep.id, SweepState.RUNNING, expect=[SweepState.QUEUED]) is None
    done = store.sweeps.set_state(sweep.id, SweepState.FAILED, error="every trial failed")
    assert done.state is SweepState.FAILED and done.error == "every trial failed" and done.finished_at
    # a terminal sweep stays so: the default `expect` is the live states
    assert store.sweeps.set_state(sweep.id, SweepState.CANCELLED) is None
    assert store.sweeps.live() == []


def test_trial_rows_are_written_once_per_number_and_updated(store):
    sweep, _ = store.sweeps.create(tenant="acme", spec=SPEC)
    trial = store.sweeps.add_trial(sweep.id, 0, {"train.lr": 0.01})
    assert (trial.state, trial.job_id, trial.params) == (TrialState.QUEUED, None, {"train.lr": 0.01})
    assert store.sweeps.add_trial(sweep.id, 0, {"train.lr": 0.5}).params == {"train.lr": 0.01}
    store.sweeps.add_trial(sweep.id, 1, {"train.lr": 0.02})
    done = store.sweeps.update_trial(sweep.id, 0, job_id="j-1", state=TrialState.PRUNED,
                                     objective=2.5, pruned_step=3)
    assert (done.job_id, done.state, done.objective, done.pruned_step) == (
        "j-1", TrialState.PRUNED, 2.5, 3)
    assert [t.number for t in store.sweeps.trials(sweep.id)] == [0, 1]
    assert store.sweeps.trial_counts([sweep.id]) == {
        sweep.id: {TrialState.PRUNED: 1, TrialState.QUEUED: 1}}
    with pytest.raises(ValueError):
        store.sweeps.update_trial(sweep.id, 1, params={})

    store.sweeps.delete(sweep.id)
    assert store.sweeps.get(sweep.id) is None and store.sweeps.trials(sweep.id) == []


def test_a_deposed_leaders_sweep_writes_are_refused(store):
    """The controller writes through the leader's fenced view (`JobStore.fenced`):
    once another replica leads, its sweep and trial writes are refused and
    nothing changes; the API's plain store is never fenced."""
    lease = f"test-{uuid.uuid4().hex[:8]}"
    sweep, _ = store.sweeps.create(tenant="acme", spec=SPEC)
    old = Leadership(store.leases, "old", 30, name=lease)
    assert old.acquire()
    leader = store.fenced(old)
    leader.sweeps.add_trial(sweep.id, 0, {"train.lr": 0.01})
    assert store.leases.acquire(lease, "new", 30) is None  # held: nobody else leads yet
    store.leases.release(lease, "old", old.token)
    assert store.leases.acquire(lease, "new", 30) is not None  # another replica leads now
    with pytest.raises(Deposed):
        leader.sweeps.set_state(sweep.id, SweepState.RUNNING, expect=[SweepState.QUEUED])
    with pytest.raises(Deposed):
        leader.sweeps.update_trial(sweep.id, 0, state=TrialState.PRUNED, pruned_step=4)
    with pytest.raises(Deposed):
        leader.sweeps.add_trial(sweep.id, 1, {"train.lr": 0.1})
    assert store.sweeps.get(sweep.id).state is SweepState.QUEUED
    assert [(t.number, t.state) for t in store.sweeps.trials(sweep.id)] == [(0, TrialState.QUEUED)]
    assert store.sweeps.set_state(sweep.id, SweepState.CANCELLED) is not None  # the API's write


def test_a_trials_job_is_read_with_its_trial_and_its_list_moves_with_it(store):
    """A job that is a trial carries the trial's number and objective as the
    sweep has them (`JobRecord.trial`), in one job's read and in a page; a
    trial's objective written is a change of its tenant's jobs (a kept page
    of the list is read again)."""
    from workers.schema.sweep import trial_spec

    sweep, _ = store.sweeps.create(tenant="acme", spec=SPEC)
    jobs = []
    for number in (0, 1):
        store.sweeps.add_trial(sweep.id, number, {"train.lr": 0.01})
        job, _ = store.create_job(tenant="acme", name=f"lr-t{number}", sweep=sweep.id,
                                  spec=trial_spec(SPEC, {"train.lr": 0.01}, number))
        jobs.append(job)
    plain, _ = store.create_job(tenant="acme", name="plain", spec=SPEC.base)
    assert store.get_job(jobs[0].id).trial is None  # no job recorded on the trial yet

    before = store.reads.jobs_version("acme")
    store.sweeps.update_trial(sweep.id, 0, job_id=jobs[0].id)
    store.sweeps.update_trial(sweep.id, 1, job_id=jobs[1].id)
    assert store.reads.jobs_version("acme") > before
    before = store.reads.jobs_version("acme")
    store.sweeps.update_trial(sweep.id, 1, state=TrialState.PRUNED, objective=3.6665, pruned_step=16)
    assert store.reads.jobs_version("acme") > before
    before = store.reads.jobs_version("acme")
    store.sweeps.update_trial(sweep.id, 1, state=TrialState.PRUNED)  # nothing a job shows
    assert store.reads.jobs_version("acme") == before

    pruned = store.get_job(jobs[1].id).trial
    assert (pruned.sweep, pruned.number, pruned.metric, pruned.objective, pruned.pruned_step) == (
        sweep.id, 1, "loss", 3.6665, 16)
    listed = {j.name: j.trial for j in store.list_jobs(tenant="acme")[0]}
    assert listed["lr-t1"] == pruned and listed["plain"] is None
    assert (listed["lr-t0"].number, listed["lr-t0"].objective) == (0, None)
    assert store.get_job(plain.id).trial is None
    assert store.list_jobs(tenant="acme", sweep=sweep.id)[1] == 2


def test_a_sweeps_labels_and_note_come_from_its_spec_change_and_filter_its_list(store):
    from service.store.errors import SweepNotFound

    labelled = SPEC.model_copy(update={"labels": {"team": "nlp", "exp.id": "x=1"}, "note": "first"})
    a, _ = store.sweeps.create(tenant="acme", spec=labelled)
    b, _ = store.sweeps.create(tenant="acme", spec=SPEC.model_copy(update={"labels": {"team": "nlp"}}))
    c, _ = store.sweeps.create(tenant="acme", spec=SPEC)
    theirs, _ = store.sweeps.create(tenant="other", spec=labelled)
    assert (a.labels, a.note, c.labels, c.note) == ({"team": "nlp", "exp.id": "x=1"}, "first", {}, None)

    def ids(*labels, tenant="acme"):
        return {s.id for s in store.sweeps.list(tenant=tenant, labels=labels)}

    assert ids(("team", "nlp")) == {a.id, b.id}
    assert ids(("team", "nlp"), tenant=None) == {a.id, b.id, theirs.id}  # the admin's: every tenant's
    assert ids(("team", "nlp"), ("exp.id", "x=1")) == {a.id}
    assert ids(("exp", "x=1")) == set() and ids(("team", "nl")) == set()  # whole keys and values

    changed = store.sweeps.relabel(a.id, labels={"team": "cv"}, note=None)
    assert (changed.labels, changed.note) == ({"team": "cv"}, None)
    again = store.sweeps.get(a.id)
    assert (again.labels, again.note) == ({"team": "cv"}, None)
    assert again.spec.labels == {"team": "nlp", "exp.id": "x=1"}  # the spec as submitted
    assert ids(("team", "cv")) == {a.id} and ids(("team", "nlp")) == {b.id}
    assert store.sweeps.relabel(c.id, note="looked at").labels == {}  # what is left out is kept
    with pytest.raises(SweepNotFound):
        store.sweeps.relabel("s-000000000000", note="x")


def test_a_sweep_made_before_its_labels_column_gets_its_specs(store, db_url):
    """Migration 0013 fills a sweep's labels and note from its spec as submitted."""
    from alembic import command

    from service.store.store import alembic_config

    labelled, _ = store.sweeps.create(tenant="acme", spec=SPEC.model_copy(
        update={"labels": {"team": "nlp"}, "note": "it's \"quoted\""}))
    plain, _ = store.sweeps.create(tenant="acme", spec=SPEC)
    command.downgrade(alembic_config(db_url), "0011")
    command.upgrade(alembic_config(db_url), "head")
    found = store.sweeps.get(labelled.id)
    assert (found.labels, found.note) == ({"team": "nlp"}, "it's \"quoted\"")
    assert (store.sweeps.get(plain.id).labels, store.sweeps.get(plain.id).note) == ({}, None)
    assert [s.id for s in store.sweeps.list(tenant="acme", labels=[("team", "nlp")])] == [labelled.id]
