"""What is asked of a node: a drain, the admin's (`POST
/v1/cluster/nodes/{id}/drain`), made as `ray drain-node` makes it
(workers/cluster/nodes.py). The leader's loop sees the node draining at its
next look (woken now) and moves the jobs that have ranks there. Taking a
drain back is refused: Ray cannot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from service.log_text import printable
from workers.cluster.node_view import DrainNotCancellableError, UnknownNodeError
from workers.cluster.nodes import NodeView, cluster_nodes, drain_node

logger = logging.getLogger(__name__)


class NodeDrains:
    def __init__(self, *, wake: Callable[[], None]):
        """`wake`: the leader's loop looks again now (it follows the drains)."""
        self._wake = wake

    def drain(self, node_id: str, *, deadline_s: float, reason: str, by: str) -> NodeView:
        """Ask Ray to drain the node, to go in `deadline_s` seconds; the node as
        it is then (draining). UnknownNodeError, DrainRefusedError: no drain."""
        drain_node(node_id, deadline_s=deadline_s, reason=reason)
        logger.info("node %s draining within %gs, asked by %s: %s", node_id, deadline_s, by,
                    printable(reason, 200))
        self._wake()
        return self.node(node_id)

    def cancel(self, node_id: str) -> None:
        """Refused, always (DrainNotCancellableError): Ray 2.x cannot take a
        drain back. An unknown node is UnknownNodeError, as for a drain."""
        self.node(node_id)
        raise DrainNotCancellableError(node_id)

    @staticmethod
    def node(node_id: str) -> NodeView:
        node = next((n for n in cluster_nodes() if n.node_id == node_id), None)
        if node is None:
            raise UnknownNodeError(node_id)
        return node
