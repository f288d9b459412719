"""`brigade flavors` (the admin key): the resource flavors, each a kind of
node named by the Ray node labels it has, with its price per worker-hour;
`brigade flavors put NAME --label k=v [--label ...] [--price P]` makes or
replaces one, `brigade flavors rm NAME` deletes one (refused while a job
asks for it). A job asks for a flavor by `resources_per_worker.flavor`."""

from __future__ import annotations

from typing import Annotated

import typer

from api.cli.output import Output, OutputFormat, emit
from api.cli.remote import Key, Url, connect

flavors = typer.Typer(invoke_without_command=True,
                      help="Resource flavors: kinds of node by their labels (the admin key).")


@flavors.callback()
def list_flavors(ctx: typer.Context, output: Output = OutputFormat.table, url: Url = None,
                 key: Key = None) -> None:
    """Every flavor: its labels, price per worker-hour and description."""
    if ctx.invoked_subcommand is not None:
        return
    with connect(url, key) as client:
        found = client.flavors()
    emit(found, output, lambda: (
        ("NAME", "LABELS", "PRICE/WORKER-HOUR", "DESCRIPTION"),
        [(f.name, ",".join(f"{k}={v}" for k, v in sorted(f.labels.items())),
          f"{f.price_per_worker_hour:g}", f.description or "-") for f in found.items]))


@flavors.command()
def put(
    name: Annotated[str, typer.Argument(help="the flavor's name, a short slug (a100, cpu-spot)")],
    label: Annotated[list[str], typer.Option(
        "--label", "-l", help="a node label K=V of the flavor's nodes (repeat for more)")],
    price: Annotated[float, typer.Option("--price", min=0,
                                         help="price per worker-hour")] = 0.0,
    description: Annotated[str, typer.Option(help="what the nodes are")] = "",
    output: Output = OutputFormat.table,
    url: Url = None,
    key: Key = None,
) -> None:
    """Make the flavor, or replace its labels, price and description."""
    labels = {}
    for pair in label:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            typer.echo(f"error: --label {pair!r} is not K=V", err=True)
            raise typer.Exit(2)
        labels[k] = v
    with connect(url, key) as client:
        flavor = client.put_flavor(name, labels, price, description)
    emit(flavor, output, lambda: (
        ("NAME", "LABELS", "PRICE/WORKER-HOUR"),
        [(flavor.name, ",".join(f"{k}={v}" for k, v in sorted(flavor.labels.items())),
          f"{flavor.price_per_worker_hour:g}")]))


@flavors.command()
def rm(name: Annotated[str, typer.Argument(help="the flavor's name")], url: Url = None,
       key: Key = None) -> None:
    """Delete the flavor (refused while an unfinished job asks for it)."""
    with connect(url, key) as client:
        client.delete_flavor(name)
    typer.echo(f"deleted flavor {name}")
