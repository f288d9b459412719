"""The cluster's nodes as Ray's GCS knows them, which of them are draining
(a node that `ray drain-node`, the autoscaler or a KubeRay preStop hook said
will go, with its deadline), and the drain itself.

A drain is the GCS autoscaler state service's DrainNode, the call `ray
drain-node` makes (`GcsClient.drain_node`). Ray kills nothing at the
deadline (the caller, or the cloud, does): until then the node runs what it
runs, and once nothing runs there its raylet exits. Ray 2.x cannot cancel a
drain (it has no call for it): a draining node stays draining until it leaves
the cluster.

Ray answers which nodes drain and their deadlines (`get_draining_nodes`) but
not, while the node lives, why: the reason and its message reach the node's
death record only (`death_info`, once it is gone). So `drain_node` also
keeps its reason in the GCS's key-value store (namespace `brigade`, key
`drain/<node id>`), beside its deadline, where every replica reads it; a
drain made outside Brigade shows its reason once the node is gone, and none
before. A kept reason whose deadline is not Ray's (a later drain of the same
node) is not shown.

Called by the control plane on a connected driver. What it answers
(`NodeView`) and its refusals are Ray-free (workers/cluster/node_view.py):
the API names them without importing Ray.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import ray

# protobuf modules generated without type stubs: mypy sees none of their names
from ray.core.generated.autoscaler_pb2 import (  # type: ignore[attr-defined]
    DRAIN_NODE_REASON_PREEMPTION,
)
from ray.core.generated.common_pb2 import NodeDeathInfo  # type: ignore[attr-defined]
from ray.core.generated.gcs_pb2 import GcsNodeInfo, NodeSnapshot  # type: ignore[attr-defined]

from workers.cluster.node_view import (
    ClusterUnreachableError,
    DrainRefusedError,
    NodeView,
    UnknownNodeError,
)

__all__ = ["ClusterUnreachableError", "DrainRefusedError", "NodeView", "UnknownNodeError",
           "cluster_nodes", "drain_node", "draining_nodes"]

DRAIN_NAMESPACE = "brigade"
DRAIN_KEY = "drain/"  # + the node's hex id: {"reason", "deadline_ms"}
GCS_TIMEOUT_S = 10.0
# The death records of a drained node, as they read
DEATH_REASONS = {NodeDeathInfo.AUTOSCALER_DRAIN_PREEMPTED: "preemption",
                 NodeDeathInfo.AUTOSCALER_DRAIN_IDLE: "idle termination"}


def cluster_nodes() -> list[NodeView]:
    """Every node the GCS knows, the dead ones too: the live first, then by
    address and id."""
    gcs = gcs_client()
    with _asking():
        infos = gcs.get_all_node_info(timeout=GCS_TIMEOUT_S)
        deadlines = _deadlines(gcs)
        kept = _kept_reasons(gcs, list(deadlines))
        available = ray._private.state.state.available_resources_per_node()
    views = [_view(info, deadlines, kept, available) for info in infos.values()]
    return sorted(views, key=lambda v: (not v.alive, v.address, v.node_id))


def draining_nodes() -> dict[str, NodeView]:
    """The nodes draining now, by id: one call to the GCS when none is (the
    leader asks every poll)."""
    gcs = gcs_client()
    with _asking():
        if not _deadlines(gcs):
            return {}
    return {view.node_id: view for view in cluster_nodes() if view.draining and view.alive}


def drain_node(node_id: str, *, deadline_s: float | None, reason: str) -> None:
    """Tell the GCS that the node will go in `deadline_s` seconds (None: no
    deadline), for `reason` (a preemption, the drain a busy node's raylet
    cannot reject: what `ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION`
    sends). Raises UnknownNodeError for no such node, DrainRefusedError for
    the head (its raylet accepts, then exits: the cluster's own node), a dead
    node, or Ray's refusal."""
    if deadline_s is not None and deadline_s < 0:
        raise ValueError(f"deadline_s must be >= 0, got {deadline_s}")
    gcs = gcs_client()
    node = next((n for n in cluster_nodes() if n.node_id == node_id), None)
    if node is None:
        raise UnknownNodeError(node_id)
    if node.is_head:
        raise DrainRefusedError(f"node {node_id} is the head node: Brigade does not drain it "
                                f"(its raylet would exit, and the cluster's GCS with it)")
    if not node.alive:
        raise DrainRefusedError(f"node {node_id} is not alive: there is nothing to drain")
    deadline_ms = 0 if deadline_s is None else int(time.time() * 1000 + deadline_s * 1000)
    # Kept first: a poll between the two sees the drain with its reason, never without.
    with _asking():
        _keep_reason(gcs, node_id, f"preemption: {reason}", deadline_ms)
        accepted, why = gcs.drain_node(node_id, DRAIN_NODE_REASON_PREEMPTION, reason, deadline_ms,
                                       timeout=GCS_TIMEOUT_S)
    if not accepted:
        raise DrainRefusedError(f"Ray refused to drain node {node_id}: {why or 'no reason given'}")


def _keep_reason(gcs, node_id: str, reason: str, deadline_ms: int) -> None:
    gcs.internal_kv_put(f"{DRAIN_KEY}{node_id}".encode(),
                        json.dumps({"reason": reason, "deadline_ms": deadline_ms}).encode(),
                        True, namespace=DRAIN_NAMESPACE.encode(), timeout=GCS_TIMEOUT_S)


# -- reading the GCS -------------------------------------------------------------------


@contextmanager
def _asking() -> Iterator[None]:
    """Ray's failures to answer, as one error the API can tell apart (a 503)."""
    try:
        yield
    except (ray.exceptions.RpcError, ray.exceptions.RaySystemError, TimeoutError,
            ConnectionError) as e:
        raise ClusterUnreachableError(f"Ray's GCS did not answer: {type(e).__name__}: {e}") from e


def gcs_client():
    """This process's GCS client (a driver's or an actor's: it must have joined the cluster)."""
    if not ray.is_initialized():
        raise ClusterUnreachableError("not connected to Ray")
    return ray._private.worker.global_worker.gcs_client


def _deadlines(gcs) -> dict[str, int]:
    """{node hex id: drain deadline in epoch ms (0: none)} of the draining nodes."""
    return dict(gcs.get_draining_nodes(timeout=GCS_TIMEOUT_S))


def _kept_reasons(gcs, node_ids: list[str]) -> dict[str, dict]:
    """The reasons `drain_node` kept for these nodes, by id."""
    if not node_ids:
        return {}
    keys = [f"{DRAIN_KEY}{node}".encode() for node in node_ids]
    found = gcs.internal_kv_multi_get(keys, namespace=DRAIN_NAMESPACE.encode(),
                                      timeout=GCS_TIMEOUT_S)
    kept = {}
    for key, value in found.items():
        try:
            kept[key.decode().removeprefix(DRAIN_KEY)] = json.loads(value)
        except ValueError:
            continue
    return kept


def _view(info, deadlines: dict[str, int], kept: dict[str, dict],
          available: dict[str, dict[str, float]]) -> NodeView:
    """One GcsNodeInfo (protobuf) as a NodeView."""
    node_id = info.node_id.hex()
    alive = info.state == GcsNodeInfo.ALIVE
    draining = alive and (node_id in deadlines or info.state_snapshot.state == NodeSnapshot.DRAINING)
    deadline_ms = deadlines.get(node_id, 0)
    reason = None
    if draining:
        record = kept.get(node_id)
        if record is not None and record.get("deadline_ms") == deadline_ms:
            reason = record.get("reason")
    elif not alive and info.death_info.reason in DEATH_REASONS:  # drained, then gone
        message = info.death_info.reason_message
        reason = DEATH_REASONS[info.death_info.reason] + (f": {message}" if message else "")
    total = {name: float(value) for name, value in info.resources_total.items()}
    return NodeView(
        node_id=node_id, address=info.node_manager_address, alive=alive, draining=draining,
        drain_deadline=deadline_ms / 1000 if draining and deadline_ms else None,
        drain_reason=reason, is_head=info.is_head_node, labels=dict(info.labels),
        resources_total=total,
        resources_available={name: float(value)
                             for name, value in available.get(node_id, {}).items()}
        if alive else {},
    )
