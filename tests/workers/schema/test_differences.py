"""Where jobs' specs differ, by dotted field, each spec's value."""

from __future__ import annotations

from workers.schema.differences import Difference, spec_differences


def test_only_the_fields_that_differ_each_specs_value_in_order():
    a = {"train": {"lr": 0.1, "steps": 10}, "init": None, "labels": {"team": "x"}, "after": []}
    b = {"train": {"lr": 0.2, "steps": 10}, "init": {"uri": "u", "job": None}, "labels": {},
         "after": ["j-1"]}
    c = {"train": {"lr": 0.1, "steps": 10}, "init": None, "labels": {"team": "x"}, "after": []}
    assert spec_differences([a, b, c]) == [
        Difference("train.lr", (0.1, 0.2, 0.1)),
        Difference("labels.team", ("x", None, "x")),
        Difference("after", ([], ["j-1"], [])),  # a list is one value
        Difference("init", (None, {"uri": "u", "job": None}, None)),  # a section unset: whole
    ]


def test_the_same_specs_or_one_spec_have_no_difference():
    spec = {"train": {"lr": 0.1}, "model": {"n_layers": 2}}
    assert spec_differences([spec, dict(spec)]) == [] and spec_differences([spec]) == []
