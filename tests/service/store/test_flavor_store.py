"""Resource flavors in the store: put (made, replaced), got, listed and
deleted; refused where no flavor may be (a bad name, labels Ray would not
take, a negative price, another flavor's labels) or while an unfinished job
asks for it; and every price kept, from when, for `price_at`."""

from __future__ import annotations

from datetime import timedelta

import pytest
from store_harness import SPEC

from service.states import JobState
from service.store.errors import FlavorConflict, FlavorInUse, FlavorNotFound
from service.store.models import utcnow
from workers.schema import SpecError

A100 = {"brigade.io/gpu": "a100"}


def test_put_makes_then_replaces_and_lists_by_name(store):
    made, before = store.flavors.put("a100", labels=A100, price_per_worker_hour=2.5,
                                     description="A100 80GB")
    assert before is None and made.labels == A100 and made.price_per_worker_hour == 2.5
    store.flavors.put("cpu", labels={"kind": "cpu"}, price_per_worker_hour=0)
    changed, before = store.flavors.put("a100", labels={**A100, "zone": "b"},
                                        price_per_worker_hour=3.0)
    assert before == made and changed.created_at == made.created_at
    assert changed.labels == {"brigade.io/gpu": "a100", "zone": "b"}
    assert [f.name for f in store.flavors.list()] == ["a100", "cpu"]
    assert store.flavors.get("a100") == changed and store.flavors.get("h100") is None


@pytest.mark.parametrize(("name", "labels", "price", "field"), [
    ("A100", A100, 1.0, "name"),
    ("a" * 33, A100, 1.0, "name"),
    ("-a", A100, 1.0, "name"),
    ("a100", {}, 1.0, "labels"),
    ("a100", {"bad key!": "x"}, 1.0, "labels"),
    ("a100", {"gpu": "-a100"}, 1.0, "labels"),
    ("a100", {"gpu": ""}, 1.0, "labels"),
    ("a100", {"gpu": "x" * 64}, 1.0, "labels"),
    ("a100", A100, -0.01, "price_per_worker_hour"),
    ("a100", A100, float("nan"), "price_per_worker_hour"),
    ("a100", A100, float("inf"), "price_per_worker_hour"),
])
def test_what_no_flavor_may_be_is_refused_naming_the_field(store, name, labels, price, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        store.flavors.put(name, labels=labels, price_per_worker_hour=price)
    assert store.flavors.list() == []


def test_another_flavors_labels_are_refused_naming_it(store):
    store.flavors.put("a100", labels=A100, price_per_worker_hour=1)
    with pytest.raises(FlavorConflict, match="flavor a100"):
        store.flavors.put("gpu", labels=dict(A100), price_per_worker_hour=1)
    store.flavors.put("a100", labels=A100, price_per_worker_hour=2)  # its own labels again: fine
    store.flavors.put("a100-zone", labels={**A100, "zone": "b"}, price_per_worker_hour=1)


def test_delete_is_refused_while_an_unfinished_job_asks_for_it(store):
    store.flavors.put("a100", labels=A100, price_per_worker_hour=1)
    spec = SPEC.model_copy(update={"resources_per_worker": SPEC.resources_per_worker.model_copy(
        update={"flavor": "a100"})})
    job, _ = store.create_job(tenant="acme", name="j", spec=spec)
    store.create_job(tenant="acme", name="other", spec=SPEC)
    with pytest.raises(FlavorInUse, match=job.id):
        store.flavors.delete("a100")
    store.transition(job.id, JobState.CANCELLED, reason="test")
    assert store.flavors.delete("a100").name == "a100"
    assert store.flavors.get("a100") is None
    with pytest.raises(FlavorNotFound):
        store.flavors.delete("a100")


def test_a_job_of_a_flavor_deleted_after_its_submit_check_is_refused_at_its_insert(store):
    # The submit check (service/intake/flavors.py) read the flavor; a delete
    # came between it and the insert, which checks again under the row's lock.
    store.flavors.put("a100", labels=A100, price_per_worker_hour=1)
    spec = SPEC.model_copy(update={"resources_per_worker": SPEC.resources_per_worker.model_copy(
        update={"flavor": "a100"})})
    store.flavors.delete("a100")
    with pytest.raises(SpecError, match="resources_per_worker.flavor: no flavor 'a100'"):
        store.create_job(tenant="acme", name="j", spec=spec)
    assert store.list_jobs(tenant="acme")[1] == 0


def test_price_at_is_the_price_put_last_before_then(store):
    store.flavors.default_price = 0.5
    start = utcnow()
    store.flavors.put("a100", labels=A100, price_per_worker_hour=2.0)
    after_first = utcnow()
    store.flavors.put("a100", labels=A100, price_per_worker_hour=2.0, description="same price")
    store.flavors.put("a100", labels=A100, price_per_worker_hour=3.0)
    after_second = utcnow()
    assert store.flavors.price_at("a100", after_first) == 2.0
    assert store.flavors.price_at("a100", after_second) == 3.0
    assert store.flavors.price_at("a100", start - timedelta(days=1)) == 0.5  # before it was put
    assert store.flavors.price_at(None, after_second) == 0.5  # no flavor: the default
    store.flavors.delete("a100")
    assert store.flavors.price_at("a100", after_second) == 3.0  # history outlives the flavor


def test_a_job_spec_names_a_flavor_never_labels():
    spec = SPEC.model_dump()
    spec["resources_per_worker"] = {"cpu": 1, "flavor": "a100"}
    assert type(SPEC).model_validate(spec).resources_per_worker.flavor == "a100"
    spec["resources_per_worker"] = {"cpu": 1, "label_selector": {"gpu": "a100"}}
    with pytest.raises(ValueError, match="label_selector"):
        type(SPEC).model_validate(spec)
    spec["resources_per_worker"] = {"cpu": 1, "flavor": "Not A Slug"}
    with pytest.raises(ValueError, match="flavor"):
        type(SPEC).model_validate(spec)


def test_a_put_whose_labels_a_live_node_has_with_another_flavors_is_refused_naming_both(store):
    store.flavors.put("a100", labels=A100, price_per_worker_hour=1)
    nodes = {"node-1 (10.0.0.1)": {**A100, "market": "spot", "zone": "b"},
             "node-2 (10.0.0.2)": {"kind": "cpu"}}
    with pytest.raises(FlavorConflict, match=r"flavor a100's are both on live node node-1 "
                                             r"\(10.0.0.1\)") as error:
        store.flavors.put("spot", labels={"market": "spot"}, price_per_worker_hour=1, nodes=nodes)
    assert (error.value.other, error.value.node) == ("a100", "node-1 (10.0.0.1)")
    with pytest.raises(FlavorConflict, match="live node node-1"):  # a subset too, not only equal
        store.flavors.put("a100-b", labels={**A100, "zone": "b"}, price_per_worker_hour=1,
                          nodes=nodes)
    assert [f.name for f in store.flavors.list()] == ["a100"]
    # labels no live node has with another flavor's: fine (no node would be of both now)
    store.flavors.put("a100-c", labels={**A100, "zone": "c"}, price_per_worker_hour=1, nodes=nodes)
    store.flavors.put("cpu", labels={"kind": "cpu"}, price_per_worker_hour=1, nodes=nodes)
    # a flavor put again with the nodes it has alone is no conflict with itself
    store.flavors.put("a100", labels=A100, price_per_worker_hour=2, nodes=nodes)
