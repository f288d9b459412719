"""The submit checks (service/intake/checks.py): one list, in the documented
order; each refusal names its field, the first check that refuses answers;
and `POST /v1/jobs` and `POST /v1/datasets` go through the same list."""

from __future__ import annotations

import inspect
import os
import re

import pytest
import transformers
from fastapi.testclient import TestClient

import service.intake.checks as checks_module
from api.server.app import create_app
from service.intake.checks import CHECKS, intake
from service.intake.data_access import data_prefix
from service.settings import Settings
from service.store import JobNotFound, JobStore
from service.supervisor import Supervisor
from workers.cluster.errors import CapacityError
from workers.schema import JobSpec, SpecError

ROOT = "file:///brigade-data"
PREFIX = data_prefix(ROOT, "acme")
OUTSIDE = "file:///elsewhere/data"
GPT = {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16}
LLAMA = GPT | {"family": "llama"}
ADMIN_KEY = "test-admin-key"


def job(**sections) -> JobSpec:
    return JobSpec.model_validate({"model": GPT, "train": {"steps": 1}, **sections})




def run(spec: JobSpec, store: JobStore) -> JobSpec:
    return intake(spec, "acme", data_root=ROOT, store=store,
                  checkpoints_of=lambda _: pytest.fail("no checkpoint is read"))


def refusal(spec: JobSpec, store: JobStore) -> SpecError:
    with pytest.raises(SpecError) as refused:
        run(spec, store)
    return refused.value


def test_the_checks_run_in_the_documented_order():
    documented = re.findall(r"^\d+\. `([^`]+)`", inspect.getdoc(checks_module) or "", re.M)
    assert [check.field for check in CHECKS] == documented == [
        "operator_only", "tracking.wandb", "uris", "model.config_uri", "after", "data", "init",
        "resources_per_worker.flavor", "workers", "resources_per_worker.memory_gb"]


@pytest.mark.parametrize("sections, field", [
    ({"sharding": {"grad_error_feedback": False}}, "sharding.grad_error_feedback"),
    ({"model": {"config_uri": f"{OUTSIDE}/config.json", "seq_len": 16}}, "model.config_uri"),
    ({"model": {"config_uri": f"{PREFIX}absent/config.json", "seq_len": 16}}, "model.config_uri"),
    ({"data": {"source": "tokens", "uri": f"{OUTSIDE}/ds"}}, "data.uri"),
    ({"data": {"source": "text", "uri": f"{PREFIX}a.txt", "tokenizer": f"{OUTSIDE}/t.json"}},
     "data.tokenizer"),
    ({"data": {"source": "tokens", "uri": f"{PREFIX}ds"}, "eval": {"uri": f"{OUTSIDE}/ds"}},
     "eval.uri"),
    ({"data": {"source": "tokens", "uri": f"{PREFIX}ds"}}, "data.uri"),  # no index there
    ({"model": LLAMA, "init": {"uri": f"{OUTSIDE}/model"}}, "init.uri"),
    ({"model": LLAMA, "init": {"uri": f"{PREFIX}model"}}, "init.uri"),  # no such directory
    # Two faults: the first check in the list answers.
    ({"sharding": {"grad_error_feedback": False}, "data": {"source": "tokens", "uri": OUTSIDE}},
     "sharding.grad_error_feedback"),
    ({"model": LLAMA, "data": {"source": "tokens", "uri": OUTSIDE}, "init": {"uri": OUTSIDE}},
     "data.uri"),
])
def test_each_refusal_names_its_field(store, sections, field):
    error = refusal(job(**sections), store)
    assert error.field == field
    assert str(error).startswith(field), error


def test_an_init_job_the_tenant_cannot_reach_is_not_found(store):
    other, _ = store.create_job(tenant="other", name="j", spec=job())
    with pytest.raises(JobNotFound):
        run(job(init={"job": other.id}), store)


@pytest.mark.parametrize("source, train, carries", [
    ({"optimizer": "sgd", "momentum": 0.9}, {"optimizer": "sgd", "momentum": 0.5}, True),
    ({"optimizer": "sgd", "momentum": 0.9}, {}, False),
    ({"optimizer": "sgd", "momentum": 0.9}, {"optimizer": "sgd"}, False),
    ({}, {"optimizer": "adam"}, False),
])
def test_an_optimizer_state_resumed_from_a_job_must_be_this_jobs_kind(store, source, train,
                                                                       carries):
    other, _ = store.create_job(tenant="acme", name="j", spec=job(train={"steps": 1, **source}))
    spec = job(train={"steps": 1, **train}, init={"job": other.id, "resume_optimizer": True})
    if carries:  # past the check: a source still queued is waited for, its step read then
        from service.intake.init_source import resolve_init

        assert resolve_init(spec, "acme", data_root=ROOT, store=store,
                            checkpoints_of=lambda _: pytest.fail("none read")).init.step is None
        return
    error = refusal(spec, store)
    assert error.field == "init.resume_optimizer"
    assert "the state does not carry over" in str(error)


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.ray
def test_an_accepted_spec_is_the_one_the_checks_fixed(store, tmp_path):
    root = f"file://{tmp_path}"
    config = data_prefix(root, "acme") + "llama/config.json"
    os.makedirs(os.path.dirname(config.removeprefix("file://")))
    with open(config.removeprefix("file://"), "w") as f:
        f.write(transformers.LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96,
                                         num_hidden_layers=2, num_attention_heads=4).to_json_string())
    spec = intake(job(model={"config_uri": config, "seq_len": 16}), "acme", data_root=root,
                  store=store, checkpoints_of=lambda _: pytest.fail("no checkpoint is read"))
    assert spec.model.config_uri is None and spec.model.d_model == 64  # read from the file


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.ray
def test_the_cluster_checks_come_last(store):
    never = {"workers": 64, "resources_per_worker": {"cpu": 64},
             "train": {"steps": 1, "global_batch_size": 64}}
    with pytest.raises(CapacityError, match="could never start"):
        run(job(**never), store)
    big = {"n_layers": 8, "d_model": 1024, "n_heads": 8, "seq_len": 16}
    error = refusal(job(model=big, resources_per_worker={"memory_gb": 0.01}), store)
    assert error.field == "resources_per_worker.memory_gb"
    # A job that never fits, on data outside the prefix: the data check answers first.
    assert refusal(job(**never, data={"source": "tokens", "uri": OUTSIDE}), store).field == "data.uri"


def test_the_store_hands_back_the_spec_it_was_handed(store):
    """Parsed once: what passed intake is what the job's records are, not a parse of its JSON."""
    spec = job()
    created, _ = store.create_job(tenant="acme", name="j", spec=spec)
    found = store.get_job(created.id)
    assert created.spec is spec and found is not None and found.spec is spec
    assert found.stored_spec == spec.to_json()


@pytest.fixture
def api(tmp_path):
    """The REST API of a supervisor that is not started (nothing is admitted)."""
    settings = Settings(data_dir=str(tmp_path), admin_key=ADMIN_KEY, secret="test-secret")
    store = JobStore(settings.resolved_database_url)
    store.migrate()
    supervisor = Supervisor(settings, store)
    with TestClient(create_app(supervisor), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as http:
        yield http, settings.resolved_data_uri_root
    store.dispose()


def test_jobs_and_datasets_are_refused_by_the_same_list(api):
    http, root = api
    prefix = data_prefix(root, "admin")
    inputs = prefix.removeprefix("file://") + "in.jsonl"
    os.makedirs(os.path.dirname(inputs), exist_ok=True)
    with open(inputs, "w") as f:
        f.write('{"text": "a"}\n')
    answers = {
        "data.uri": http.post("/v1/jobs", json={
            "model": {"n_layers": 1}, "train": {"steps": 1},
            "data": {"source": "tokens", "uri": f"{OUTSIDE}/ds"}}),
        "prepare.output": http.post("/v1/datasets", json={
            "inputs": [f"{prefix}in.jsonl"], "output": f"{OUTSIDE}/ds", "train_vocab_size": 300}),
    }
    for field, answer in answers.items():
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"] == {
            "field": field, "message": f"{field} must lie under this tenant's data prefix {prefix!r}"}
