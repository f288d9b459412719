"""What a job waits on (service/run/dependencies.py), pure: its ids, and
whether it may start, waits, or never will, from made-up states; and the
`after` field itself (workers/schema): job ids, at most 32, each once, outside
the loss curve's hash."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.run.dependencies import Broken, Waiting, dependency_ids, dependency_status
from service.states import JobState as S
from workers.schema import MAX_AFTER, JobSpec

BASE = {"model": {"n_layers": 1, "d_model": 32, "n_heads": 2}, "train": {"steps": 1}}


def spec(**fields) -> JobSpec:
    return JobSpec.model_validate({**BASE, **fields})


@pytest.mark.parametrize("fields, ids", [
    ({}, []),
    ({"after": ["j-a", "j-b"]}, ["j-a", "j-b"]),
    ({"init": {"job": "j-src"}}, ["j-src"]),  # its step not fixed yet: wait for it
    ({"init": {"job": "j-src", "step": 3}}, []),  # fixed at submit: nothing to wait for
    ({"after": ["j-a", "j-src"], "init": {"job": "j-src"}}, ["j-a", "j-src"]),  # once each
])
def test_the_ids_a_job_waits_for(fields, ids):
    assert dependency_ids(spec(**fields)) == ids


def test_a_sweep_like_spec_waits_for_its_after_and_its_bases_init():
    class Sweep:  # what a SweepSpec has of it: `after` and a JobSpec `base`
        after = ["j-a"]
        base = spec(init={"job": "j-src"})

    assert dependency_ids(Sweep()) == ["j-a", "j-src"]


@pytest.mark.parametrize("states, expected", [
    ({}, None),  # nothing named
    ({"j-a": S.SUCCEEDED, "j-b": S.SUCCEEDED}, None),
    ({"j-a": S.RUNNING, "j-b": S.SUCCEEDED}, Waiting("waiting for j-a (RUNNING)")),
    ({"j-a": S.QUEUED, "j-b": S.PREEMPTING},
     Waiting("waiting for j-a (QUEUED), j-b (PREEMPTING)")),
    ({"j-a": S.SUCCEEDED, "j-b": S.FAILED}, Broken("dependency j-b FAILED")),
    ({"j-a": S.RUNNING, "j-b": S.CANCELLED}, Broken("dependency j-b CANCELLED")),  # never: fail now
    ({"j-a": S.SUSPENDED, "j-b": None}, Broken("dependency j-b no longer exists (deleted)")),
    ({"j-a": S.SUCCEEDED}, Broken("dependency j-b no longer exists (deleted)")),  # not in the map
])
def test_start_wait_or_never(states, expected):
    ids = ["j-a", "j-b"] if states else []
    assert dependency_status(ids, states) == expected


def test_after_is_job_ids_each_once_and_at_most_the_limit():
    def refused(after) -> dict:
        with pytest.raises(ValidationError) as e:
            spec(after=after)
        return e.value.errors()[0]

    assert refused(["j-a", "not an id"])["loc"] == ("after", 1)
    twice = refused(["j-a", "j-b", "j-a"])
    assert twice["loc"] == ("after", 2) and "j-a is named twice" in twice["msg"]
    assert refused([f"j-{i}" for i in range(MAX_AFTER + 1)])["loc"] == ("after",)
    assert spec(after=[f"j-{i}" for i in range(MAX_AFTER)]).after[-1] == f"j-{MAX_AFTER - 1}"


def test_after_is_not_part_of_the_loss_curve():
    alone = spec()
    assert spec(after=["j-a"]).config_hash() == alone.config_hash()
    assert spec(after=["j-a"]).to_json()["after"] == ["j-a"] and alone.to_json()["after"] == []
