"""The `brigade` commands that talk to a running service through the client:
submit, jobs, get, logs, cancel, suspend, resume, checkpoints."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated

import httpx
import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from api.client import DEFAULT_URL, BrigadeClient, BrigadeError
from api.schemas import JobProgress, JobPublic
from service.settings import Settings
from service.states import JobState

Url = Annotated[str, typer.Option("--url", envvar="BRIGADE_URL", help="the Brigade API")]
Key = Annotated[str | None, typer.Option(
    "--key", envvar="BRIGADE_API_KEY", show_default=False,
    help="API key [default: the admin key of a `brigade serve` in this directory]")]
JobId = Annotated[str, typer.Argument(help="a job id (see `brigade jobs`)")]


def register_job_commands(app: typer.Typer) -> None:
    for command in (submit, jobs, get, logs, cancel, suspend, resume, checkpoints):
        app.command()(command)


def submit(
    spec_file: Annotated[Path, typer.Argument(help="job spec, YAML or JSON ('-': stdin)")],
    idempotency_key: Annotated[
        str | None, typer.Option(help="a retry with the same key makes no second job")
    ] = None,
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """Submit a job; prints its id."""
    spec = _load_spec(spec_file)
    with _client(url, key) as client:
        job = client.submit(spec, idempotency_key=idempotency_key)
    typer.echo(f"submitted {job.name}: {job.state.value}", err=True)
    typer.echo(job.id)


def jobs(
    state: Annotated[list[str] | None, typer.Option(help="only jobs in this state (repeatable)")] = None,
    limit: int = 50,
    offset: int = 0,
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """List jobs, newest first."""
    with _client(url, key) as client:
        page = client.jobs(state=state, limit=limit, offset=offset)
    rows = [(j.id, j.name, j.state.value, _or_dash(j.workers), j.step, _when(j.created_at))
            for j in page.items]
    _table(("ID", "NAME", "STATE", "WORKERS", "STEP", "CREATED"), rows)
    if page.total > page.offset + len(page.items):
        typer.echo(f"({page.total} in all; --offset {page.offset + len(page.items)} for more)", err=True)


def get(job_id: JobId, url: Url = DEFAULT_URL, key: Key = None) -> None:
    """One job, as JSON."""
    with _client(url, key) as client:
        typer.echo(client.get(job_id).model_dump_json(indent=2))


def logs(
    job_id: JobId,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="follow until the job ends")] = False,
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """Print a job's log; with -f, follow it with a progress bar of steps
    (exit status 0 if the job succeeds, 1 otherwise)."""
    with _client(url, key) as client:
        if not follow:
            for line in client.logs(job_id):
                typer.echo(line.line)
            return
        final = _follow_with_progress(client, job_id)
    typer.echo(f"{job_id}: {final.state.value} at step {final.step}", err=True)
    raise typer.Exit(0 if final.state is JobState.SUCCEEDED else 1)


def cancel(job_id: JobId, url: Url = DEFAULT_URL, key: Key = None) -> None:
    """Cancel a job."""
    with _client(url, key) as client:
        _say_state(client.cancel(job_id))


def suspend(job_id: JobId, url: Url = DEFAULT_URL, key: Key = None) -> None:
    """Checkpoint a running job, then stop it until `brigade resume`."""
    with _client(url, key) as client:
        _say_state(client.suspend(job_id))


def resume(
    job_id: JobId,
    workers: Annotated[int | None, typer.Option(min=1, help="resume at this world size")] = None,
    url: Url = DEFAULT_URL,
    key: Key = None,
) -> None:
    """Queue a suspended job again, from its latest checkpoint."""
    with _client(url, key) as client:
        _say_state(client.resume(job_id, workers=workers))


def checkpoints(job_id: JobId, url: Url = DEFAULT_URL, key: Key = None) -> None:
    """A job's committed checkpoints."""
    with _client(url, key) as client:
        found = client.checkpoints(job_id)
    _table(("STEP", "WORLD SIZE", "BYTES", "CREATED", "URI"),
           [(c.step, c.world_size, c.bytes, _when(c.created_at), c.uri) for c in found])


@contextmanager
def _client(url: str, key: str | None) -> Iterator[BrigadeClient]:
    try:
        with BrigadeClient(url, key or _local_admin_key()) as client:
            yield client
    except BrigadeError as e:
        typer.echo(f"error: {e.message} (HTTP {e.status})", err=True)
        raise typer.Exit(1) from None
    except httpx.TransportError as e:
        typer.echo(f"error: cannot reach Brigade at {url}: {e}", err=True)
        raise typer.Exit(1) from None


def _local_admin_key() -> str | None:
    """BRIGADE_ADMIN_KEY, or the key a `brigade serve` here generated."""
    try:
        settings = Settings()
    except ValidationError:
        return None
    if settings.admin_key:
        return settings.admin_key
    path = settings.admin_key_file
    return path.read_text().strip() if path.is_file() else None


def _load_spec(path: Path) -> dict:
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
        spec = yaml.safe_load(text)  # JSON is YAML too
    except (OSError, yaml.YAMLError) as e:
        typer.echo(f"error: cannot read the job spec {path}: {e}", err=True)
        raise typer.Exit(2) from None
    if not isinstance(spec, dict):
        typer.echo(f"error: {path}: a job spec is a mapping (model, train, ...)", err=True)
        raise typer.Exit(2)
    return spec


def _follow_with_progress(client: BrigadeClient, job_id: str) -> JobProgress:
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    final = None
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(job_id, total=None)
        for event in client.follow(job_id):
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


def _say_state(job: JobPublic) -> None:
    typer.echo(f"{job.id}: {job.state.value}")


def _table(header: tuple, rows: list[tuple]) -> None:
    cells = [tuple(str(c) for c in row) for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _or_dash(value) -> str:
    return "-" if value is None else str(value)


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S}"
