"""`brigade nodes`: the cluster's nodes (their address, state, flavor, labels, CPUs
and GPUs used of total, and the jobs with ranks on each; a tenant sees its
own jobs only), and `brigade nodes drain NODE` (the admin key): ask Ray to
drain a node, named by its id or an unambiguous start of it, as `ray
drain-node` would; the jobs on it move off before the deadline."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from api.cli.output import Output, OutputFormat, emit
from api.cli.remote import Key, Url, connect
from api.client import BrigadeClient
from api.schemas.cluster import DEFAULT_DRAIN_DEADLINE_S, MAX_DRAIN_DEADLINE_S, NodePublic

SHORT_ID = 12  # a node id's first characters, as the table shows it
HIDDEN_LABELS = ("ray.io/node-id",)  # the node's id again

nodes = typer.Typer(invoke_without_command=True,
                    help="The cluster's nodes and the jobs on each; drain one (the admin key).")


@nodes.callback()
def list_nodes(ctx: typer.Context, output: Output = OutputFormat.table, url: Url = None,
               key: Key = None) -> None:
    """The cluster's nodes: address, state (a draining node with its deadline
    and reason), labels, CPUs and GPUs used of total, and the jobs with ranks
    on each (yours; the admin: every tenant's)."""
    if ctx.invoked_subcommand is not None:
        return
    with connect(url, key) as client:
        found = client.nodes()
    now = datetime.now(UTC)
    emit(found, output, lambda: (
        ("NODE", "ADDRESS", "STATE", "FLAVOR", "LABELS", "CPU", "GPU", "JOBS"),
        [(n.node_id[:SHORT_ID], n.address, state(n, now), n.flavor or "-", labels(n),
          used_of("cpu", n),
          used_of("gpu", n), jobs(n)) for n in found.nodes]))


@nodes.command()
def drain(
    node: Annotated[str, typer.Argument(help="a node id, or its first characters (see `brigade nodes`)")],
    deadline: Annotated[int, typer.Option(
        "--deadline", min=1, max=MAX_DRAIN_DEADLINE_S,
        help="seconds until the node goes")] = DEFAULT_DRAIN_DEADLINE_S,
    reason: Annotated[str | None, typer.Option(help="why, as the node's drain will say it")] = None,
    output: Output = OutputFormat.table,
    url: Url = None,
    key: Key = None,
) -> None:
    """Ask Ray to drain a node (the admin key): the jobs with ranks on it move
    elsewhere before the deadline. Ray cannot take a drain back."""
    with connect(url, key) as client:
        drained = client.drain_node(resolve(client, node), deadline_s=deadline, reason=reason)
    emit(drained, output, lambda: (
        ("NODE", "ADDRESS", "STATE", "JOBS"),
        [(drained.node_id, drained.address, state(drained, datetime.now(UTC)), jobs(drained))]))


def resolve(client: BrigadeClient, node: str) -> str:
    """The full id of the one node whose id starts with `node` (exit 1 for
    none, or for several)."""
    matches = [n.node_id for n in client.nodes().nodes if n.node_id.startswith(node.lower())]
    if len(matches) != 1:
        found = "no node" if not matches else f"{len(matches)} nodes"
        typer.echo(f"error: {found} with an id starting {node!r} (see `brigade nodes`)", err=True)
        raise typer.Exit(1)
    return matches[0]


def state(node: NodePublic, now: datetime) -> str:
    """"alive" (the head: "alive, head"), "dead", or "draining" with when and why."""
    if not node.alive:
        return "dead" + (f" ({node.drain_reason})" if node.drain_reason else "")
    if not node.draining:
        return "alive, head" if node.head else "alive"
    said = "draining"
    if node.drain_deadline is not None:
        left = (node.drain_deadline - now).total_seconds()
        said += f", goes in {_duration(left)}" if left > 0 else ", past its deadline"
    return said + (f" ({node.drain_reason})" if node.drain_reason else "")


def labels(node: NodePublic) -> str:
    shown = [f"{k}={v}" for k, v in sorted(node.labels.items()) if k not in HIDDEN_LABELS]
    return ",".join(shown) or "-"


def used_of(resource: str, node: NodePublic) -> str:
    total = node.resources.total.get(resource, 0.0)
    if not total or not node.alive:
        return "-"
    return f"{node.resources.used.get(resource, 0.0):g}/{total:g}"


def jobs(node: NodePublic) -> str:
    """Each job with ranks on the node, and which: "j-1 (0,1) j-2 (3)"."""
    ranks: dict[str, list[int]] = {}
    for placed in node.ranks:
        ranks.setdefault(placed.job, []).append(placed.rank)
    return " ".join(f"{job} ({','.join(map(str, sorted(r)))})" for job, r in ranks.items()) or "-"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
