"""What the `brigade` commands that talk to a running service share: the
options that say which service and key (`--url`, `--key`, and the profile
`brigade --profile` chose), a client connected with them whose errors end
the command with an exit status, a job's argument, a spec file read, and a
job followed to its end under a progress bar."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import httpx
import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from api.client import BrigadeClient, BrigadeError
from api.profiles import ProfileError, local_admin_key, local_data_dir, resolve
from api.schemas.jobs import JobProgress
from service.states import JobState
from workers.schema.spec_yaml import load_spec_yaml

# No [brackets] in help: rich takes them for markup and drops them.
Url = Annotated[str | None, typer.Option(
    "--url", envvar="BRIGADE_URL", show_default=False,
    help="the Brigade API (default: the profile's, else that of a `brigade serve` in this "
         "directory, else http://127.0.0.1:8000)")]
Key = Annotated[str | None, typer.Option(
    "--key", envvar="BRIGADE_API_KEY", show_default=False,
    help="API key (default: the profile's, else the admin key of a `brigade serve` in this "
         "directory)")]
JobId = Annotated[str, typer.Argument(help="a job id (see `brigade jobs`)")]

PROFILE: dict[str, str | None] = {"name": None}  # `brigade --profile NAME ...` (api.cli.main sets it)


@contextmanager
def connect(url: str | None, key: str | None) -> Iterator[BrigadeClient]:
    """A client of the service that `url` and `key` name (else the profile's, else those
    of a `brigade serve` in this directory). A profile that cannot be read exits 2; an
    error the service answers, or a service out of reach, exits 1 with its message."""
    try:
        connection = resolve(url, key, PROFILE["name"])
        client = BrigadeClient(connection.url, connection.key or local_admin_key())
    except ProfileError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    try:
        with client:
            yield client
    except BrigadeError as e:
        typer.echo(f"error: {e.message} (HTTP {e.status})", err=True)
        if e.status == 401:
            typer.echo(key_hint(sent=bool(connection.key or local_admin_key())), err=True)
        raise typer.Exit(1) from None
    except httpx.TransportError as e:
        typer.echo(f"error: cannot reach Brigade at {client.url}: {e}", err=True)
        typer.echo(REACH_HINT, err=True)
        raise typer.Exit(1) from None


REACH_HINT = ("hint: start one here with `brigade serve` (`make serve` in a checkout of Brigade), "
              "or point at a running one with --url URL (or BRIGADE_URL, or a profile saved by "
              "`brigade login --url URL --key KEY`)")


def key_hint(*, sent: bool) -> str:
    """How to give the CLI a key, after a 401: the ways it looks for one."""
    ways = ("--key KEY, or BRIGADE_API_KEY=KEY, or a profile saved once with `brigade login --url "
            "URL --key KEY`; the admin key of a `brigade serve` is the file admin_key in its data "
            "dir, read when you run the CLI in the directory it was started in (or with "
            "BRIGADE_DATA_DIR set to its data dir)")
    if sent:
        return f"hint: the service does not know the key sent (rotated?); give another: {ways}"
    return (f"hint: no API key was given, and there is no {local_data_dir() / 'admin_key'}; "
            f"give one: {ways}")


def load_spec(path: Path) -> dict:
    """A spec file (YAML or JSON; '-': stdin) as a mapping; exit 2 where it cannot be
    read or is none."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
        spec = load_spec_yaml(text)  # JSON is YAML too; 1e-08 a number
    except (OSError, yaml.YAMLError) as e:
        typer.echo(f"error: cannot read the job spec {path}: {e}", err=True)
        raise typer.Exit(2) from None
    if not isinstance(spec, dict):
        typer.echo(f"error: {path}: a job spec is a mapping (model, train, ...)", err=True)
        raise typer.Exit(2)
    return spec


def follow_with_progress(client: BrigadeClient, job_id: str, after_id: int = 0) -> JobProgress:
    """Print the job's log lines after `after_id` as they come, under a bar of its steps,
    until it ends: its last progress (exit 1 if the stream ends first)."""
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    final = None
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(job_id, total=None)
        for event in client.follow(job_id, after_id):
            if isinstance(event, JobProgress):
                final = event
                bar.update(task, completed=event.step, total=event.steps,
                           description=f"{job_id} {event.state.value}")
            else:  # stdout; on a terminal rich shows it above the bar
                typer.echo(event.line)
    if final is None:  # the stream ended without an end event (server gone)
        typer.echo("error: the log stream ended before the job did", err=True)
        raise typer.Exit(1)
    return final


def end_with(final: JobProgress, job_id: str) -> None:
    """Say how the job ended; exit 0 if it succeeded, else 1."""
    typer.echo(f"{job_id}: {final.state.value} at step {final.step}", err=True)
    raise typer.Exit(0 if final.state is JobState.SUCCEEDED else 1)
