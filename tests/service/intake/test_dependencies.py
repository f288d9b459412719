"""The submit checks of a job that waits on jobs (service/intake/dependencies.py):
`after` names the tenant's own jobs, none failed; the data a prepare job it
waits on (directly or through another job) is still writing is not checked
yet, other data still is."""

from __future__ import annotations

import pytest

from service.intake.checks import Submission, after, job_data
from service.intake.data_access import data_prefix
from service.states import JobState as S
from workers.schema import JobSpec, SpecError

ROOT = "file:///brigade-data"
PREFIX = data_prefix(ROOT, "acme")
GPT = {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16}




def submission(store) -> Submission:
    return Submission("acme", ROOT, store, lambda _: pytest.fail("no checkpoint is read"))


def create(store, tenant="acme", **fields):
    spec = JobSpec.model_validate({"model": GPT, "train": {"steps": 1}, **fields})
    return store.create_job(tenant=tenant, name="j", spec=spec)[0]


def prepare_job(store, output: str):
    spec = JobSpec.model_validate({
        "name": "prep", "kind": "prepare", "model": {}, "train": {"steps": 1},
        "checkpoint": {"every_steps": 0},
        "prepare": {"inputs": [f"{PREFIX}raw/a.jsonl"], "output": output,
                    "train_vocab_size": 300}})
    return store.create_job(tenant="acme", name="prep", spec=spec)[0]


def test_after_names_the_tenants_own_jobs_none_failed(store):
    theirs, failed = create(store, tenant="other"), create(store)
    store.transition(failed.id, S.FAILED, reason="test")
    for ids, field, words in (([theirs.id], "after.0", "not found"),
                              ([create(store).id, failed.id], "after.1", "is FAILED")):
        with pytest.raises(SpecError) as refused:
            after(JobSpec.model_validate({"model": GPT, "train": {"steps": 1}, "after": ids}),
                  submission(store))
        assert refused.value.field == field and words in str(refused.value)


def test_data_a_dependency_is_still_writing_is_checked_as_the_job_starts(store):
    prep = prepare_job(store, f"{PREFIX}corpus/")
    tokens = {"source": "tokens", "uri": "file:///brigade-data/tenants/acme/data/corpus"}
    on_it = {"model": GPT, "train": {"steps": 1}, "data": tokens}
    job_data(JobSpec.model_validate({**on_it, "after": [prep.id]}), submission(store))
    trained = create(store, data=tokens, after=[prep.id])  # through a job that waits on it
    job_data(JobSpec.model_validate({**on_it, "init": {"job": trained.id}}), submission(store))
    with pytest.raises(SpecError) as refused:  # not waiting on it: no index there, as ever
        job_data(JobSpec.model_validate(on_it), submission(store))
    assert refused.value.field == "data.uri"
    store.transition(prep.id, S.CANCELLED, reason="test")  # it will never write it
    with pytest.raises(SpecError):
        job_data(JobSpec.model_validate({**on_it, "after": [prep.id]}), submission(store))
