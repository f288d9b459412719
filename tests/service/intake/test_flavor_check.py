"""`resources_per_worker.flavor` at submit: a flavor the admin never put, one
the tenant's quota on it could never hold, or one whose nodes could never
place the job is a 422 at that field; no flavor, or one that fits, passes.
The cluster's answer is made up here (the check asks `never_fits` with the
flavor's labels); tests/e2e/test_flavors.py asks a labelled cluster."""

from __future__ import annotations

import pytest

import service.intake.flavors as flavors
from service.intake.flavors import FIELD, check_flavor
from workers.schema import JobSpec, SpecError

A = {"brigade.io/pool": "a"}


def spec(flavor=None, workers=2) -> JobSpec:
    return JobSpec.model_validate({"model": {"n_layers": 2}, "train": {"steps": 1},
                                   "workers": workers,
                                   "resources_per_worker": {"cpu": 1, "flavor": flavor}})


@pytest.fixture
def asked(monkeypatch):
    """The labels the check asked the cluster about; every node fits."""
    calls = []

    def never_fits(workers, cpu, gpu, placement, labels=None):
        calls.append((workers, labels))
        return "" if workers <= 2 else f"{workers} workers need {workers} CPU, the nodes have 2"

    monkeypatch.setattr(flavors, "never_fits", never_fits)
    return calls


def test_no_flavor_passes_without_asking(store, asked):
    assert check_flavor(spec(), "acme", store) == spec()
    assert asked == []


def test_a_flavor_that_fits_passes_asking_its_nodes(store, asked):
    store.flavors.put("a", labels=A, price_per_worker_hour=1)
    assert check_flavor(spec("a"), "acme", store).resources_per_worker.flavor == "a"
    assert asked == [(2, A)]


def test_an_unknown_flavor_is_refused_naming_the_field_and_the_known_ones(store, asked):
    store.flavors.put("a", labels=A, price_per_worker_hour=1)
    with pytest.raises(SpecError, match="no flavor 'h100' .*the flavors: a") as error:
        check_flavor(spec("h100"), "acme", store)
    assert error.value.field == FIELD


def test_a_flavor_its_nodes_could_never_hold_is_refused(store, asked):
    store.flavors.put("a", labels=A, price_per_worker_hour=1)
    with pytest.raises(SpecError, match="no nodes of flavor a could ever hold") as error:
        check_flavor(spec("a", workers=3), "acme", store)
    assert error.value.field == FIELD


def test_a_flavor_quota_the_job_could_never_fit_is_refused(store, asked):
    store.flavors.put("a", labels=A, price_per_worker_hour=1)
    store.tenants.create("acme", quota={"flavors": {"a": {"max_workers": 1}}})
    with pytest.raises(SpecError, match="may run 1 of flavor a") as error:
        check_flavor(spec("a"), "acme", store)
    assert error.value.field == FIELD
    assert check_flavor(spec("a", workers=1), "acme", store)  # within it
