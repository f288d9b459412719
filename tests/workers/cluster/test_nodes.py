"""workers/cluster/nodes.py without a cluster: what a NodeView says of a
node's resources, and a process that has not joined a cluster told so. Its
reads and drains on a cluster of `ray start` nodes, `ray drain-node`'s drains
among them, are tests/e2e/test_cluster_nodes.py's (one cluster for the nodes'
module and the API's)."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys

import pytest

from workers.cluster.node_view import DrainNotCancellableError, NodeView, UnknownNodeError


def test_a_node_view_is_frozen_and_says_what_is_used():
    node = NodeView(node_id="ab" * 28, address="10.0.0.7", alive=True, draining=True,
                    drain_deadline=1_800_000_000.5, drain_reason="preemption: spot",
                    labels={"pool": "spot"}, resources_total={"CPU": 8.0, "GPU": 1.0},
                    resources_available={"CPU": 3.0})
    assert node.resources_used == {"CPU": 5.0, "GPU": 1.0}  # nothing available: all of it taken
    gone = dataclasses.replace(node, alive=False, draining=False, resources_available={})
    assert gone.resources_used == {"CPU": 0.0, "GPU": 0.0}  # a node gone holds nothing
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.draining = False  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(node)) == node
    for error in (UnknownNodeError("n1"), DrainNotCancellableError("n1")):  # cross processes
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
    assert str(DrainNotCancellableError("n1")).startswith("node n1: Ray cannot cancel a drain")


def test_a_process_that_has_not_joined_a_cluster_is_told_so():
    """The API answers this error with a 503: Ray's to say, not a 500."""
    done = subprocess.run(
        [sys.executable, "-c", "from workers.cluster.nodes import ClusterUnreachableError, "
         "draining_nodes\ntry:\n    draining_nodes()\nexcept ClusterUnreachableError as e:\n"
         "    print('refused:', e)"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "refused: not connected to Ray"
