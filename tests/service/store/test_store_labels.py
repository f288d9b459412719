"""Labels and a note on jobs, on SQLite and Postgres: set at submit from the
spec, changed later (the spec as submitted kept), and the jobs of a tenant
filtered on one or more `key=value` (keys with dots, values with `=` and
quotes taken literally), the count agreeing with the page."""

from __future__ import annotations

from store_harness import SPEC, submit



def labelled(store, name, labels, note=None, tenant="acme"):
    spec = SPEC.model_copy(update={"labels": labels, "note": note, "name": name})
    job, _ = store.create_job(tenant=tenant, name=name, spec=spec)
    return job


def test_labels_and_note_come_from_the_spec_and_change_without_it(store):
    job = labelled(store, "a", {"team": "nlp", "exp.id": "x=1"}, note="baseline\nsecond line")
    got = store.get_job(job.id)
    assert got.labels == {"team": "nlp", "exp.id": "x=1"} and got.note == "baseline\nsecond line"
    assert submit(store).labels == {} and submit(store).note is None

    changed = store.update_job(job.id, labels={"team": "vision"}, note=None)
    assert changed.labels == {"team": "vision"} and changed.note is None
    again = store.get_job(job.id)  # read back through the API's reads too
    assert again.labels == {"team": "vision"} and again.note is None
    assert again.spec.labels == {"team": "nlp", "exp.id": "x=1"}  # the spec as submitted


def test_jobs_are_filtered_on_every_label_given(store):
    a = labelled(store, "a", {"team": "nlp", "exp.id": "x=1"})
    b = labelled(store, "b", {"team": "nlp", "exp.id": "2"})
    c = labelled(store, "c", {"team": "cv", "quote": "it's \"q\""})
    labelled(store, "d", {"team": "nlp"}, tenant="other")
    submit(store)

    def names(*labels, tenant="acme"):
        jobs, total = store.list_jobs(tenant=tenant, labels=labels)
        assert total == len(jobs)
        return sorted(j.name for j in jobs)

    assert names(("team", "nlp")) == ["a", "b"]
    assert names(("team", "nlp"), tenant=None) == ["a", "b", "d"]  # the admin's: every tenant's
    assert names(("team", "nlp"), ("exp.id", "x=1")) == ["a"]
    assert names(("exp.id", "x")) == []  # whole values, not a part
    assert names(("quote", "it's \"q\"")) == ["c"]
    assert names(("exp", "x=1")) == []  # a dotted key is one key, not a path
    assert names(("nobody", "")) == []
    store.update_job(c.id, labels={"team": "nlp"})
    assert names(("team", "nlp")) == ["a", "b", "c"]
    assert {a.id, b.id} <= {j.id for j in store.list_jobs(tenant="acme", labels=[("team", "nlp")])[0]}


def test_a_label_change_is_a_change_of_the_tenants_jobs(store):
    job = labelled(store, "a", {"team": "nlp"})
    reads = store.reads
    before = reads.jobs_version("acme")
    store.update_job(job.id, note="looked at")
    assert reads.jobs_version("acme") > before  # a kept page of the list is read again
