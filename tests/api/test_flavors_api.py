"""Resource flavors over real HTTP, on a supervisor that never meets Ray: the
admin puts, lists, looks at and deletes them (audited); a tenant may not;
hostile input is a 4xx naming its field (a negative price, labels Ray would
not take, a name that is no short slug, another flavor's labels); a job asks
for a flavor by name only (a label selector of its own is refused), one that
does not exist or whose quota could never hold it is a 422 at
`resources_per_worker.flavor`; a flavor in use is not deleted (409 naming
the job); a tenant's quota per flavor is put and read through the tenant, names only
flavors that exist (a 422 at `quota.flavors.<name>`) and keeps the flavor
from being deleted (409 naming the tenant); a put whose labels a live node
has with another flavor's is a 409 naming both."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.api.conftest import make_supervisor
from tests.api.test_cli_jobs import brigade  # noqa: F401 - the fixture

SPEC = {"model": {"n_layers": 2, "d_model": 64, "n_heads": 4}, "train": {"steps": 5}}
LABELS = {"brigade.io/pool": "a"}


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory):
    """Every submit here is refused, or asks for no capacity check, before Ray is met."""
    supervisor = make_supervisor(tmp_path_factory.mktemp("flavors"))
    yield supervisor
    supervisor.store.dispose()


def name(prefix="f") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def put(http, flavor, labels=None, **body):
    return http.put(f"/v1/flavors/{flavor}", json={
        "labels": labels or {"brigade.io/pool": flavor}, **body})


def test_the_admin_puts_lists_gets_and_deletes_a_flavor_audited(http):
    flavor = name()
    made = put(http, flavor, price_per_worker_hour=2.5, description="A100 nodes")
    assert made.status_code == 200, made.text
    body = made.json()
    assert (body["name"], body["labels"], body["price_per_worker_hour"], body["description"]) == (
        flavor, {"brigade.io/pool": flavor}, 2.5, "A100 nodes")
    assert http.get(f"/v1/flavors/{flavor}").json() == body
    assert flavor in {f["name"] for f in http.get("/v1/flavors").json()["items"]}
    changed = put(http, flavor, price_per_worker_hour=3.0).json()
    assert changed["price_per_worker_hour"] == 3.0 and changed["created_at"] == body["created_at"]
    assert http.delete(f"/v1/flavors/{flavor}").status_code == 204
    assert http.get(f"/v1/flavors/{flavor}").status_code == 404
    assert http.delete(f"/v1/flavors/{flavor}").status_code == 404
    trail = http.get("/v1/audit", params={"target": flavor, "limit": 10}).json()["items"]
    assert [row["action"] for row in trail] == ["flavor.delete", "flavor.put", "flavor.put"]
    assert trail[1]["detail"]["before"]["price_per_worker_hour"] == 2.5


def test_a_tenant_may_not_touch_flavors(http, as_key):
    tenant = http.post("/v1/tenants", json={"name": name("t")}).json()
    own = as_key(tenant["api_key"])
    assert own.get("/v1/flavors").status_code == 403
    assert own.put("/v1/flavors/x", json={"labels": LABELS}).status_code == 403


@pytest.mark.parametrize(("path", "body", "field"), [
    ("ok", {"labels": LABELS, "price_per_worker_hour": -1}, "price_per_worker_hour"),
    ("ok", {"labels": LABELS, "price_per_worker_hour": "1"}, "price_per_worker_hour"),
    ("ok", {"labels": {"bad key!": "a"}}, "labels.bad key!"),
    ("ok", {"labels": {"pool": "-a"}}, "labels.pool"),
    ("ok", {"labels": {"pool": "in(a,b)"}}, "labels.pool"),
    ("ok", {"labels": {"x" * 64: "a"}}, "labels." + "x" * 64),
    ("ok", {"labels": {}}, "labels"),
    ("ok", {"labels": {"pool": 5}}, "labels.pool"),
    ("ok", {"price_per_worker_hour": 1}, "labels"),
    ("ok", {"labels": LABELS, "selector": {"a": "b"}}, "selector"),
    ("Not-A-Slug", {"labels": LABELS}, "name"),
    ("a" * 33, {"labels": LABELS}, "name"),
])
def test_hostile_input_is_a_4xx_naming_the_field(http, path, body, field):
    answer = http.put(f"/v1/flavors/{path}", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field, answer.text
    assert http.get("/v1/flavors/ok").status_code == 404


def test_another_flavors_labels_are_a_409_naming_it(http):
    first, second = name(), name()
    assert put(http, first, labels={"pool": first}).status_code == 200
    answer = put(http, second, labels={"pool": first})
    assert answer.status_code == 409
    assert answer.json()["error"]["field"] == "labels" and first in answer.json()["error"]["message"]


def test_a_job_names_a_flavor_never_labels(http):
    for resources, field in [({"cpu": 1, "label_selector": {"pool": "a"}},
                              "resources_per_worker.label_selector"),
                             ({"cpu": 1, "flavor": "Bad Name"}, "resources_per_worker.flavor"),
                             ({"cpu": 1, "flavor": name("none")}, "resources_per_worker.flavor")]:
        answer = http.post("/v1/jobs", json={**SPEC, "resources_per_worker": resources})
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["field"] == field, answer.text


def test_a_flavor_quota_is_kept_with_the_tenant_and_one_never_fitting_is_a_422(http, as_key):
    flavor = name()
    assert put(http, flavor).status_code == 200
    tenant = http.post("/v1/tenants", json={"name": name("t"), "quota": {
        "max_workers": 8, "flavors": {flavor: {"max_workers": 1}}}}).json()
    assert tenant["quota"]["flavors"] == {flavor: {"max_workers": 1, "max_gpus": None}}
    other = name()
    assert put(http, other).status_code == 200
    patched = http.patch(f"/v1/tenants/{tenant['id']}", json={"quota": {"flavors": {
        other: {"max_gpus": 2}}}}).json()
    assert set(patched["quota"]["flavors"]) == {flavor, other}
    assert http.patch(f"/v1/tenants/{tenant['id']}", json={"quota": {"flavors": {
        "Bad Name": {"max_workers": 1}}}}).status_code == 422
    answer = as_key(tenant["api_key"]).post("/v1/jobs", json={
        **SPEC, "workers": 2, "resources_per_worker": {"cpu": 1, "flavor": flavor}})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "resources_per_worker.flavor" and f"of flavor {flavor}" in \
        error["message"]


def test_a_flavor_in_use_is_not_deleted(http, store):
    flavor = name()
    assert put(http, flavor).status_code == 200
    from workers.schema import JobSpec

    spec = JobSpec.model_validate({**SPEC, "resources_per_worker": {"cpu": 1, "flavor": flavor}})
    job, _ = store.create_job(tenant="admin", name="uses-it", spec=spec)  # no Ray to check it here
    answer = http.delete(f"/v1/flavors/{flavor}")
    assert answer.status_code == 409 and job.id in answer.json()["error"]["message"]
    assert http.get(f"/v1/flavors/{flavor}").status_code == 200
    assert http.post(f"/v1/jobs/{job.id}/cancel").status_code == 200
    assert http.delete(f"/v1/flavors/{flavor}").status_code == 204


def test_the_cli_puts_lists_and_removes_flavors(brigade):  # noqa: F811
    flavor = name()
    made = brigade("flavors", "put", flavor, "--label", f"pool={flavor}", "-l", "zone=b",
                   "--price", "1.5", "--output", "json")
    assert made.exit_code == 0, made.output
    assert json.loads(made.stdout)["labels"] == {"pool": flavor, "zone": "b"}
    listed = brigade("flavors")
    assert listed.exit_code == 0 and listed.stdout.splitlines()[0].split()[:2] == ["NAME", "LABELS"]
    assert any(line.startswith(flavor) and "1.5" in line for line in listed.stdout.splitlines())
    assert brigade("flavors", "put", flavor, "--label", "nope").exit_code == 2
    assert brigade("flavors", "rm", flavor).exit_code == 0
    gone = brigade("flavors", "rm", flavor)
    assert gone.exit_code != 0


def test_a_quota_on_a_flavor_that_does_not_exist_is_a_422_naming_it(http):
    flavor, missing = name(), name("none")
    assert put(http, flavor).status_code == 200
    answer = http.post("/v1/tenants", json={"name": name("t"), "quota": {"flavors": {
        flavor: {"max_workers": 1}, missing: {"max_workers": 1}}}})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == f"quota.flavors.{missing}" and flavor in error["message"]
    tenant = http.post("/v1/tenants", json={"name": name("t")}).json()
    answer = http.patch(f"/v1/tenants/{tenant['id']}",
                        json={"quota": {"max_workers": 2, "flavors": {missing: {"max_gpus": 1}}}})
    assert answer.status_code == 422 and answer.json()["error"]["field"] == f"quota.flavors.{missing}"
    assert http.get(f"/v1/tenants/{tenant['id']}").json()["quota"]["max_workers"] is None
    # removing the limits of a flavor that is not there is no error
    assert http.patch(f"/v1/tenants/{tenant['id']}",
                      json={"quota": {"flavors": {missing: None}}}).status_code == 200


def test_a_flavor_a_tenants_quota_names_is_not_deleted(http):
    flavor, tenant_name = name(), name("t")
    assert put(http, flavor).status_code == 200
    tenant = http.post("/v1/tenants", json={"name": tenant_name, "quota": {"flavors": {
        flavor: {"max_workers": 2}}}}).json()
    answer = http.delete(f"/v1/flavors/{flavor}")
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"]["field"] == "name" and tenant_name in answer.json()["error"]["message"]
    assert http.patch(f"/v1/tenants/{tenant['id']}", json={"quota": {"flavors": {
        flavor: None}}}).status_code == 200
    assert http.delete(f"/v1/flavors/{flavor}").status_code == 204


def test_a_put_whose_labels_a_live_node_has_with_another_flavors_is_a_409(http, monkeypatch):
    first, second = name(), name()
    node = "0123456789ab (10.0.0.7)"
    monkeypatch.setattr("service.control.views.live_node_labels",
                        lambda: {node: {"pool": first, "market": "spot"}})
    assert put(http, first, labels={"pool": first}).status_code == 200
    answer = put(http, second, labels={"market": "spot"})
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert error["field"] == "labels" and first in error["message"] and node in error["message"]
    assert put(http, second, labels={"market": "on-demand"}).status_code == 200


def test_the_cluster_shows_each_flavors_capacity_and_use(http, as_key, store, monkeypatch):
    """A made-up cluster (no Ray): the flavor's 2 nodes hold 4 CPUs; a job of the flavor
    holds 2 workers there, a job of no flavor has 1 of its 2 ranks there."""
    from service.states import JobState as S
    from workers.schema import JobSpec

    flavor = name()
    assert put(http, flavor).status_code == 200
    monkeypatch.setattr("service.control.views.cluster_capacity",
                        lambda **_: {"cpu": 8.0, "gpu": 0.0})
    monkeypatch.setattr("service.control.views.flavor_capacities", lambda flavors: {
        f: {"cpu": 4.0, "gpu": 0.0, "free_cpu": 1.0, "free_gpu": 0.0, "nodes": 2} for f in flavors})
    monkeypatch.setattr("service.control.views.node_flavors", lambda flavors: {"node-f": flavor})
    monkeypatch.setattr("service.control.views.group_workers", lambda group, n, **_: [
        {"rank": 0, "node": "10.0.0.1", "node_id": "node-f", "pid": 1, "state": "running"},
        {"rank": 1, "node": "10.0.0.2", "node_id": "node-other", "pid": 2, "state": "running"}])
    jobs = []
    for resources in ({"cpu": 1, "flavor": flavor}, {"cpu": 1}):
        spec = JobSpec.model_validate({**SPEC, "workers": 2, "resources_per_worker": resources})
        job, _ = store.create_job(tenant="admin", name="j", spec=spec)
        store.transition(job.id, S.STARTING, reason="test", workers=2)
        jobs.append(store.transition(job.id, S.RUNNING, reason="test"))
    try:
        tenant = http.post("/v1/tenants", json={"name": name("t")}).json()
        for caller in (http, as_key(tenant["api_key"])):  # a tenant sees it too (no job named)
            answer = caller.get("/v1/cluster")
            assert answer.status_code == 200, answer.text
            shown = {row["flavor"]: row for row in answer.json()["flavors"]}
            assert shown[flavor] == {
                "flavor": flavor, "nodes": 2, "capacity": {"cpu": 4.0, "gpu": 0.0},
                "usage": {"cpu": 3.0, "gpu": 0.0}, "free": {"cpu": 1.0, "gpu": 0.0},
                "workers": 3, "jobs": 2, "workers_of_no_flavor": 1}
    finally:
        for job in jobs:
            store.transition(job.id, S.FAILED, reason="test")
