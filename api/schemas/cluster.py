"""The cluster as a tenant sees it (`GET /v1/cluster`,
`api.server.routes.cluster`): capacity, what active jobs hold (in all and
on each flavor's nodes), and the caller's queued jobs with their place in line; its nodes (`GET
/v1/cluster/nodes`) with the ranks on each, and a node's drain (the admin's)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.base import Public

DEFAULT_DRAIN_DEADLINE_S = 600
MAX_DRAIN_DEADLINE_S = 7 * 24 * 3600


class QueuedJob(Public):
    id: str
    name: str
    position: int  # 1: the next to start
    waiting: str | None = None  # why it did not start at the latest scheduling pass
    expected_start: datetime | None = None  # see JobPublic
    expected_start_reason: str | None = None


class FlavorUsePublic(Public):
    """One flavor's nodes, what they hold and what active jobs hold of it. A
    node of several flavors counts in one only: the one `GET
    /v1/cluster/nodes` shows it of."""

    flavor: str
    nodes: int  # its live, not draining nodes
    capacity: dict[str, float]  # "cpu", "gpu": what they hold
    usage: dict[str, float]  # what active jobs' workers hold there
    free: dict[str, float]  # what no active job holds there (no more than Ray has free now)
    workers: int  # ranks of active jobs there: the flavor's jobs', and jobs' of no flavor
    jobs: int  # active jobs with ranks there
    workers_of_no_flavor: int  # of `workers`: ranks of jobs that asked for no flavor


class ClusterPublic(Public):
    capacity: dict[str, float]  # "cpu", "gpu": the live nodes' totals
    usage: dict[str, float]  # what active jobs hold
    running_jobs: int  # active jobs (holding workers), every tenant's
    queued_jobs: int  # queued jobs, every tenant's
    queue: list[QueuedJob]  # the caller's own queued jobs, with their place in line
    flavors: list[FlavorUsePublic] = Field(default_factory=list)  # each flavor's, by name


class NodeRank(Public):
    job: str  # the job's id
    rank: int


class NodeResources(Public):
    total: dict[str, float]  # "cpu", "gpu", "memory" (bytes): the node's
    used: dict[str, float]  # what is taken of them now (by Brigade's ranks or anything else)


class NodePublic(Public):
    """A node of the cluster (`GET /v1/cluster/nodes`), as Ray's GCS has it."""

    node_id: str  # Ray's hex id
    address: str  # its IP
    alive: bool
    head: bool = False  # the cluster's head node (never drained by Brigade)
    draining: bool  # told it will go (`ray drain-node`, the autoscaler, a KubeRay preStop hook)
    drain_deadline: datetime | None = None  # when it goes; None: no deadline, or not draining
    # "preemption: <message>" for a drain made through Brigade; Ray says why a drain made
    # elsewhere only once the node is gone (its death record)
    drain_reason: str | None = None
    labels: dict[str, str]
    flavor: str | None = None  # the resource flavor whose labels it has (`GET /v1/flavors`)
    resources: NodeResources
    ranks: list[NodeRank]  # the ranks of active jobs on it (a tenant's: its own jobs' only)


class NodesPublic(Public):
    nodes: list[NodePublic]


class NodeDrain(BaseModel):
    """`POST /v1/cluster/nodes/{node_id}/drain`: the node goes in `deadline_s`."""

    model_config = ConfigDict(extra="forbid")

    deadline_s: Annotated[int, Field(ge=1, le=MAX_DRAIN_DEADLINE_S)] = DEFAULT_DRAIN_DEADLINE_S
    reason: Annotated[str, Field(min_length=1, max_length=200,
                                 pattern=r"^[^\x00-\x1f\x7f]*$")] = "drained by the admin"
