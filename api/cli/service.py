"""The `brigade` commands about the service rather than one job: cluster,
usage, and login (a saved profile)."""

from __future__ import annotations

from typing import Annotated

import httpx
import typer

from api.cli.output import Output, OutputFormat, emit
from api.cli.remote import Key, Url, connect
from api.client import BrigadeClient, BrigadeError
from api.profiles import DEFAULT_PROFILE, save_profile

# `brigade usage`'s phase columns (worker-seconds): the phases a platform team asks about first
MAIN_PHASES = (("training",), ("starting",), ("checkpoint_stall",), ("recovering", "lost"))


def register_service_commands(app: typer.Typer) -> None:
    for command in (cluster, usage, login):
        app.command()(command)


def cluster(output: Output = OutputFormat.table, url: Url = None, key: Key = None) -> None:
    """Capacity, what active jobs hold, and your queued jobs' places in line."""
    with connect(url, key) as client:
        found = client.cluster()

    def table():
        rows = [(f"{name}", f"{found.usage.get(name, 0):g} of {total:g} held")
                for name, total in sorted(found.capacity.items())]
        rows += [("running jobs", found.running_jobs), ("queued jobs", found.queued_jobs)]
        rows += [(f"queued #{q.position}", f"{q.id} ({q.name})") for q in found.queue]
        return ("RESOURCE", "STATE"), rows

    emit(found, output, table)


def usage(
    window: Annotated[float, typer.Option("--window", min=1, help="the last this many seconds")] = 86400.0,
    tenant: Annotated[str | None, typer.Option(help="the admin: only this tenant")] = None,
    output: Output = OutputFormat.table,
    url: Url = None,
    key: Key = None,
) -> None:
    """Usage per tenant over a window: worker-, cpu- and gpu-seconds, cost
    (worker-hours x each flavor's price at the time) in all and per flavor,
    goodput and the main phases' worker-seconds, jobs by final state,
    preemptions suffered (a tenant sees its own; the admin also the cluster, as "*")."""
    with connect(url, key) as client:
        report = client.usage(window_s=window, tenant=tenant)
    shown = [*report.tenants, *([report.cluster] if report.cluster else [])]
    emit(report, output, lambda: (
        ("TENANT", "WORKER-S", "COST", "FLAVORS (COST/WORKER-S)", "CPU-S", "GPU-S", "GOODPUT",
         "TRAINING", "STARTING", "CKPT-STALL", "RECOVERING+LOST", "JOBS", "PREEMPTIONS"),
        [(u.tenant, f"{u.worker_seconds:.0f}", f"{u.cost:.2f}",
          ",".join(f"{name}={f.cost:.2f}/{f.worker_seconds:.0f}"
                    for name, f in sorted(u.flavors.items())) or "-",
          f"{u.cpu_seconds:.0f}", f"{u.gpu_seconds:.0f}",
          "-" if u.goodput is None else f"{u.goodput:.0%}",
          *(f"{sum(u.phases.get(p, 0.0) for p in names):.0f}" for names in MAIN_PHASES),
          ",".join(f"{state}={n}" for state, n in sorted(u.jobs.items())) or "-", u.preemptions)
         for u in shown]))


def login(
    url: Annotated[str, typer.Option("--url", help="the Brigade API")],
    key: Annotated[str, typer.Option("--key", prompt=True, hide_input=True, help="your API key")],
    profile: Annotated[str, typer.Option(help="save under this name")] = DEFAULT_PROFILE,
    default: Annotated[bool, typer.Option(help="make it the default profile")] = True,
    check: Annotated[bool, typer.Option(help="check the URL and key first")] = True,
) -> None:
    """Save a URL and key as a profile (a file only you can read) that the
    CLI and `BrigadeClient()` use; environment variables override it."""
    if check:
        try:
            with BrigadeClient(url, key) as client:
                client.jobs(limit=1)
        except BrigadeError as e:
            typer.echo(f"error: {url} refused the key: {e.message} (HTTP {e.status})", err=True)
            raise typer.Exit(1) from None
        except httpx.TransportError as e:
            typer.echo(f"error: cannot reach Brigade at {url}: {e}", err=True)
            raise typer.Exit(1) from None
    path = save_profile(profile, url, key, make_default=default)
    typer.echo(f"saved profile {profile!r} ({url}) in {path}", err=True)
