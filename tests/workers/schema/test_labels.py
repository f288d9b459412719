"""Labels and a note in the job's spec: the limits each is held to, and a
sweep's trials inheriting the sweep's labels over the base's."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from workers.schema import JobSpec, SweepSpec, trial_spec
from workers.schema.labels import parse_label

BASE = {"model": {"n_layers": 1}, "train": {"steps": 2}}


def sweep(**extra) -> SweepSpec:
    return SweepSpec.model_validate({"name": "sw", "base": BASE | {"labels": {"team": "nlp", "base": "1"}},
                                     "space": {"train.lr": {"loguniform": [1e-4, 1e-2]}},
                                     "objective": {"metric": "loss"}, "max_trials": 2, **extra})


def test_a_sweeps_trials_carry_its_labels_over_the_bases():
    spec = trial_spec(sweep(labels={"team": "cv", "study": "lr"}), {"train.lr": 1e-3}, 0)
    assert spec.labels == {"team": "cv", "base": "1", "study": "lr"}
    assert trial_spec(sweep(), {"train.lr": 1e-3}, 1).labels == {"team": "nlp", "base": "1"}


def test_more_labels_than_a_job_may_have_are_refused_at_the_sweep():
    with pytest.raises(ValidationError, match="labels: the trials would have 17 labels"):
        sweep(labels={f"k{i}": "v" for i in range(15)})


@pytest.mark.parametrize("labels, note, where", [
    ({"-lead": "x"}, None, "labels.-lead.[key]"),
    ({"k" * 64: "x"}, None, "labels"),
    ({"k": "v" * 129}, None, "labels.k"),
    ({"k": "tab\there"}, None, "labels.k"),
    ({}, "n\x00", "note"),
])
def test_a_label_or_note_out_of_bounds_is_refused_where_it_is(labels, note, where):
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate(BASE | {"labels": labels, "note": note})
    assert ".".join(str(p) for p in refused.value.errors()[0]["loc"]).startswith(where)


def test_a_label_is_key_equals_value():
    assert parse_label("a=b=c") == ("a", "b=c") and parse_label("a=") == ("a", "")
    for bad in ("a", "=b", ""):
        with pytest.raises(ValueError):
            parse_label(bad)
