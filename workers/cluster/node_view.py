"""A node of the cluster as the control plane sees it (`NodeView`, read by
workers/cluster/nodes.py from Ray's GCS), and why a drain is refused: frozen
values and exceptions with no Ray in them, so the API answers with them and
the control plane's tests build them by hand."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from workers.schema.flavor import flavor_of_node

CANNOT_CANCEL = ("Ray cannot cancel a drain (Ray 2.x has no call for it): the node stays "
                 "draining until it leaves the cluster")


class UnknownNodeError(LookupError):
    """No node of the cluster has this id."""

    def __init__(self, node_id: str):
        super().__init__(f"node {node_id[:80]!r} not found")
        self.node_id = node_id

    def __reduce__(self):
        return type(self), (self.node_id,)


class ClusterUnreachableError(ConnectionError):
    """Ray's GCS did not answer (or this process has not joined the cluster)."""


class DrainRefusedError(RuntimeError):
    """The node cannot be drained: the head, a dead node, or Ray said no."""


@dataclass(frozen=True, kw_only=True)
class NodeView:
    node_id: str  # Ray's hex id
    address: str  # the node's IP, as Ray names it
    alive: bool
    draining: bool = False
    drain_deadline: float | None = None  # epoch seconds; None: draining with no deadline, or not
    drain_reason: str | None = None  # "preemption: <message>"; None where Ray does not say
    is_head: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    resources_total: dict[str, float] = field(default_factory=dict)
    resources_available: dict[str, float] = field(default_factory=dict)
    # the resource flavor whose labels are all among the node's (the control plane's to
    # say: `with_flavor`); None: of no flavor
    flavor: str | None = None

    def with_flavor(self, flavors: Mapping[str, Mapping[str, str]]) -> NodeView:
        """This node with its flavor among `flavors` (name -> labels)."""
        return replace(self, flavor=flavor_of_node(flavors, self.labels))

    @property
    def resources_used(self) -> dict[str, float]:
        """What is taken of each resource now (total less available; none on a node gone)."""
        if not self.alive:
            return dict.fromkeys(self.resources_total, 0.0)
        return {name: max(0.0, total - self.resources_available.get(name, 0.0))
                for name, total in self.resources_total.items()}


class DrainNotCancellableError(RuntimeError):
    """A drain cannot be taken back: Ray has no call for it."""

    def __init__(self, node_id: str):
        super().__init__(f"node {node_id}: {CANNOT_CANCEL}")
        self.node_id = node_id

    def __reduce__(self):
        return type(self), (self.node_id,)
