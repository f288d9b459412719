"""A worker group of a flavor asks Ray for its labels on every bundle
(`bundle_label_selector`, one selector a bundle), the group's own and a
move's; a group of no flavor asks for none. No cluster: the selectors are
what `_reserve` and `move._reserve` hand `placement_group`."""

from __future__ import annotations

from workers.cluster.group import WorkerGroup


def test_every_bundle_carries_the_flavors_labels():
    group = WorkerGroup(3, label_selector={"brigade.io/pool": "a"})
    assert group.bundle_selectors(3) == [{"brigade.io/pool": "a"}] * 3
    selectors = group.bundle_selectors(2)
    selectors[0]["x"] = "y"  # each bundle's own dict: changing one changes no other
    assert selectors[1] == group.label_selector == {"brigade.io/pool": "a"}


def test_a_group_of_no_flavor_asks_for_no_labels():
    assert WorkerGroup(2).bundle_selectors(2) is None
    assert WorkerGroup(2, label_selector={}).bundle_selectors(2) is None
