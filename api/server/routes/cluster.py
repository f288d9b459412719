"""The cluster as the control plane sees it: capacity, usage (in all and per
flavor) and the queue; its nodes, with the ranks on each, and a node's drain
(the admin's).

A drain (`POST /v1/cluster/nodes/{node_id}/drain`) is Ray's: the same call as
`ray drain-node`, with a deadline and a reason; the leader then moves the
jobs with ranks there. Ray cannot take a drain back, so `DELETE` of it is
refused with a 409 that says so."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response

from api.schemas.cluster import (
    ClusterPublic,
    FlavorUsePublic,
    NodeDrain,
    NodePublic,
    NodeRank,
    NodeResources,
    NodesPublic,
    QueuedJob,
)
from api.server.audit import Audit
from api.server.deps import CurrentTenant, DrainsDep, ViewsDep, require_admin
from api.server.errors import not_found
from api.server.routes.jobs import ERRORS
from service.store.tenants import ADMIN_TENANT
from workers.cluster.node_view import NodeView

router = APIRouter(prefix="/v1/cluster", tags=["cluster"], responses=ERRORS)

_NODE_ID = re.compile(r"^[0-9a-f]{56}$")  # Ray's: 28 bytes, in hex
RESOURCES = {"CPU": "cpu", "GPU": "gpu", "memory": "memory"}  # Ray's names -> the API's


@router.get("")
def cluster_status(tenant: CurrentTenant, views: ViewsDep) -> ClusterPublic:
    """Other tenants' queued jobs count, but are not named (the admin sees them all).
    `flavors`: each flavor's nodes, capacity and what active jobs hold there."""
    status = views.cluster_status()
    queue = status["queue"]
    own = [QueuedJob(id=q["id"], name=q["name"], position=place, waiting=q["waiting"],
                     expected_start=q["expected_start"][0],
                     expected_start_reason=q["expected_start"][1])
           for place, q in enumerate(queue, start=1) if tenant in (ADMIN_TENANT, q["tenant"])]
    flavors = [FlavorUsePublic(flavor=use.flavor, nodes=use.nodes,
                               capacity=dict(use.capacity.items()), usage=dict(use.used.items()),
                               free=dict(use.free.items()), workers=use.workers, jobs=use.jobs,
                               workers_of_no_flavor=use.workers_of_no_flavor)
               for use in views.flavor_use()]
    return ClusterPublic(capacity=status["capacity"], usage=status["usage"],
                         running_jobs=status["running_jobs"], queued_jobs=len(queue), queue=own,
                         flavors=flavors)


@router.get("/nodes")
def cluster_nodes(tenant: CurrentTenant, views: ViewsDep) -> NodesPublic:
    """Every node, the live first; the ranks on each are every job's for the
    admin, the caller's own jobs' for a tenant (other tenants' are left out)."""
    return NodesPublic(nodes=[node_public(node, ranks) for node, ranks in views.nodes(tenant)])


def _node_id(node_id: Annotated[str, Path(max_length=64, description="Ray's hex id of the node")]
             ) -> str:
    if not _NODE_ID.match(node_id):
        raise not_found("node", node_id)
    return node_id


NodeId = Annotated[str, Depends(_node_id)]


@router.post("/nodes/{node_id}/drain", status_code=202, dependencies=[Depends(require_admin)])
def drain_node(node_id: NodeId, drains: DrainsDep, views: ViewsDep, audit: Audit,
               body: NodeDrain | None = None) -> NodePublic:
    """Ask Ray to drain the node (`ray drain-node`'s call): it goes in
    `deadline_s` seconds, and the jobs with ranks on it move before then.
    Refused (409) for the head node and a node that is gone."""
    body = body or NodeDrain()
    drains.drain(node_id, deadline_s=body.deadline_s, reason=body.reason, by=ADMIN_TENANT)
    audit("node.drain", target=node_id, deadline_s=body.deadline_s, reason=body.reason)
    node, ranks = next(((n, r) for n, r in views.nodes(ADMIN_TENANT) if n.node_id == node_id))
    return node_public(node, ranks)


@router.delete("/nodes/{node_id}/drain", status_code=204, response_class=Response,
               dependencies=[Depends(require_admin)])
def cancel_drain(node_id: NodeId, drains: DrainsDep) -> Response:
    """Refused (409): Ray cannot take a drain back (404 for an unknown node)."""
    drains.cancel(node_id)
    return Response(status_code=204)  # not reached while Ray has no such call


def node_public(node: NodeView, ranks: list[dict]) -> NodePublic:
    def ours(resources: dict[str, float]) -> dict[str, float]:
        return {api: resources.get(name, 0.0) for name, api in RESOURCES.items()}

    deadline = (datetime.fromtimestamp(node.drain_deadline, UTC)
                if node.drain_deadline is not None else None)
    return NodePublic(
        node_id=node.node_id, address=node.address, alive=node.alive, head=node.is_head,
        draining=node.draining, drain_deadline=deadline, drain_reason=node.drain_reason,
        labels=node.labels, flavor=node.flavor,
        resources=NodeResources(total=ours(node.resources_total), used=ours(node.resources_used)),
        ranks=[NodeRank(**r) for r in ranks],
    )
