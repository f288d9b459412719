"""A node counts in one flavor's capacity only: the one `GET /v1/cluster/nodes`
shows it of (the flavor with the most of its labels, then the first by name),
never in two; and each live node's flavor, by id, as the scheduling pass reads
it for the ranks of jobs without a flavor. A made-up cluster: no Ray."""

from __future__ import annotations

import pytest

import service.run.ray_cluster as ray_cluster

FLAVORS = {"a100": {"gpu": "a100"}, "a100-spot": {"gpu": "a100", "market": "spot"},
           "cpu": {"pool": "cpu"}, "zone-b": {"zone": "b"}}
NODES = [  # (id, labels, CPUs, CPUs free)
    ("n-a100", {"gpu": "a100"}, 8.0, 8.0),
    ("n-spot", {"gpu": "a100", "market": "spot"}, 4.0, 1.0),  # a100-spot's: the most labels
    ("n-cpu-b", {"pool": "cpu", "zone": "b"}, 2.0, 2.0),  # cpu's and zone-b's: first by name
    ("n-plain", {}, 16.0, 16.0),
]


@pytest.fixture
def cluster(monkeypatch):
    nodes = [{"NodeID": node_id, "Alive": True, "Labels": labels,
              "Resources": {"CPU": cpu, "GPU": 0.0}} for node_id, labels, cpu, _ in NODES]
    free = {node_id: {"CPU": avail} for node_id, _, _, avail in NODES}
    monkeypatch.setattr(ray_cluster.ray, "nodes", lambda: nodes)
    monkeypatch.setattr(ray_cluster.ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray_cluster, "draining_nodes", dict)
    monkeypatch.setattr(ray_cluster.ray._private.state.state, "available_resources_per_node",
                        lambda: free)


def test_a_node_of_several_flavors_counts_once_in_the_one_it_is_shown_of(cluster):
    amounts = ray_cluster.flavor_capacities(FLAVORS)
    assert {name: (a["cpu"], a["free_cpu"]) for name, a in amounts.items()} == {
        "a100": (8.0, 8.0), "a100-spot": (4.0, 1.0), "cpu": (2.0, 2.0), "zone-b": (0.0, 0.0)}
    # every flavored node counted once: the flavors' totals add up to those nodes'
    assert sum(a["cpu"] for a in amounts.values()) == 8.0 + 4.0 + 2.0
    assert {name: a["nodes"] for name, a in amounts.items()} == {
        "a100": 1, "a100-spot": 1, "cpu": 1, "zone-b": 0}


def test_each_live_nodes_flavor_by_id(cluster):
    assert ray_cluster.node_flavors(FLAVORS) == {"n-a100": "a100", "n-spot": "a100-spot",
                                                 "n-cpu-b": "cpu"}
    assert ray_cluster.node_flavors({}) == {}
    # what a flavor put is checked against: each live node's labels, by a name a person reads
    assert ray_cluster.live_node_labels()["n-spot (?)"] == {"gpu": "a100", "market": "spot"}


def test_no_cluster_no_flavors_of_nodes(monkeypatch):
    monkeypatch.setattr(ray_cluster.ray, "is_initialized", lambda: False)
    assert ray_cluster.node_flavors(FLAVORS) == {}
    assert ray_cluster.live_node_labels() == {}
