"""A flavor's labels as Ray would take them on a node, and which flavor a
node is of: the one whose labels it has, the most specific where several
match, none where none does."""

from __future__ import annotations

import pytest

from workers.cluster.node_view import NodeView
from workers.schema.flavor import FLAVOR_NAME, flavor_of_node, label_problem, labels_problem

FLAVORS = {"a100": {"gpu": "a100"}, "a100-b": {"gpu": "a100", "zone": "b"},
           "cpu": {"kind": "cpu"}}


@pytest.mark.parametrize(("key", "value"), [
    ("gpu", "a100"), ("brigade.io/gpu", "A100_80GB"), ("ray.io/accelerator-type", "H100"),
    ("a", "b"), ("k" * 63, "v" * 63), ("x.y.z/k", "1.2-3"),
])
def test_ray_labels_pass(key, value):
    assert label_problem(key, value) is None


@pytest.mark.parametrize(("key", "value"), [
    ("", "a"), ("-gpu", "a"), ("gpu-", "a"), ("my@label", "a"), ("k" * 64, "a"),
    ("/gpu", "a"), ("gpu", ""), ("gpu", "-a100"), ("gpu", "a100-"), ("gpu", "in(a,b)"),
    ("gpu", "!a100"), ("gpu", "v" * 64), ("gpu", 5), (5, "a"), ("a b", "c"),
])
def test_what_ray_would_refuse_is_refused_naming_the_label(key, value):
    assert label_problem(key, value) is not None


def test_a_flavor_has_one_to_eight_labels():
    assert labels_problem({}) == "a flavor needs at least one label"
    assert "at most 8" in labels_problem({f"k{i}": "v" for i in range(9)})
    assert labels_problem({"gpu": "a100"}) is None


@pytest.mark.parametrize(("name", "ok"), [
    ("a100", True), ("h100-spot", True), ("a", True), ("a" * 32, True), ("a" * 33, False),
    ("A100", False), ("-a", False), ("a-", False), ("a_b", False), ("", False),
])
def test_a_flavor_name_is_a_short_slug(name, ok):
    assert bool(FLAVOR_NAME.fullmatch(name)) is ok


@pytest.mark.parametrize(("labels", "flavor"), [
    ({"gpu": "a100"}, "a100"),
    ({"gpu": "a100", "zone": "b", "other": "x"}, "a100-b"),  # the most specific
    ({"gpu": "h100"}, None),
    ({"kind": "cpu", "ray.io/node-id": "ab"}, "cpu"),
    ({}, None),
])
def test_a_node_is_of_the_flavor_whose_labels_it_has(labels, flavor):
    assert flavor_of_node(FLAVORS, labels) == flavor
    node = NodeView(node_id="n", address="127.0.0.1", alive=True, labels=labels)
    assert node.with_flavor(FLAVORS).flavor == flavor
