"""The `brigade` commands that talk to a running service through the client:
submit, jobs, get, status, events, metrics, logs, wait, cancel, suspend,
resume, delete, checkpoints. Each read command takes `--output
table|json|yaml`."""

from __future__ import annotations

import csv
import json
import sys
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Annotated

import httpx
import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from api import cli_metrics as metric_columns
from api.cli_output import Output, OutputFormat, emit, or_dash, plain, when
from api.client import BrigadeClient, BrigadeError
from api.profiles import ProfileError, local_admin_key, resolve
from api.schemas import JobProgress, JobPublic
from service.states import JobState

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
Follow = Annotated[bool, typer.Option("--follow", "-f", help="follow until the job ends")]

PROFILE: dict[str, str | None] = {"name": None}  # `brigade --profile NAME ...` (cli.py sets it)


class MetricsFormat(str, Enum):
    csv = "csv"
    jsonl = "jsonl"


def register_job_commands(app: typer.Typer) -> None:
    for command in (submit, jobs, get, status, events, metrics, logs, wait, cancel, suspend,
                    resume, delete, checkpoints):
        app.command()(command)


def submit(
    spec_file: Annotated[Path, typer.Argument(help="job spec, YAML or JSON ('-': stdin)")],
    idempotency_key: Annotated[
        str | None, typer.Option(help="a retry with the same key makes no second job")
    ] = None,
    follow: Follow = False,
    url: Url = None,
    key: Key = None,
) -> None:
    """Submit a job; prints its id. With -f, follow it to its end (exit
    status 0 if it succeeds, 1 otherwise)."""
    spec = _load_spec(spec_file)
    with _client(url, key) as client:
        job = client.submit(spec, idempotency_key=idempotency_key)
        typer.echo(f"submitted {job.name}: {job.state.value}", err=True)
        typer.echo(job.id)
        if follow:
            _end_with(_follow_with_progress(client, job.id), job.id)


def jobs(
    state: Annotated[list[str] | None, typer.Option(help="only jobs in this state (repeatable)")] = None,
    tenant: Annotated[str | None, typer.Option(help="the admin: only this tenant's jobs")] = None,
    sweep: Annotated[str | None, typer.Option(help="only this sweep's trials")] = None,
    limit: int = 50,
    offset: int = 0,
    output: Output = OutputFormat.table,
    url: Url = None,
    key: Key = None,
) -> None:
    """List jobs, newest first (the admin: every tenant's): kind, state,
    world size, step of steps, latest loss."""
    with _client(url, key) as client:
        page = client.jobs(state=state, limit=limit, offset=offset, tenant=tenant, sweep=sweep)
    emit(page, output, lambda: (
        ("ID", "TENANT", "NAME", "KIND", "STATE", "WORKERS", "STEP", "LOSS", "CREATED"),
        [(j.id, j.tenant, j.name, j.spec.kind, j.state.value, or_dash(j.workers),
          f"{j.step}/{j.spec.train.steps}",  # a prepare job's steps: its files
          "-" if j.latest_loss is None else f"{j.latest_loss:.4g}", when(j.created_at))
         for j in page.items]))
    if output is OutputFormat.table and page.total > page.offset + len(page.items):
        typer.echo(f"({page.total} in all; --offset {page.offset + len(page.items)} for more)", err=True)


def get(job_id: JobId, output: Output = OutputFormat.json, url: Url = None, key: Key = None) -> None:
    """One job (JSON unless asked otherwise)."""
    with _client(url, key) as client:
        job = client.get(job_id)
    emit(job, output, lambda: (("FIELD", "VALUE"), [
        (name, or_dash(value)) for name, value in plain(job).items() if name != "spec"]))


def status(job_id: JobId, output: Output = OutputFormat.table, url: Url = None, key: Key = None) -> None:
    """Where a job is: state, step of steps, latest loss and model FLOPs
    utilisation (FLOP/s per rank where the device's peak is unknown), why it
    waits or failed, restarts and preemptions."""
    with _client(url, key) as client:
        job = client.get(job_id)
        latest = client.metrics(job_id, since_step=job.step) if job.step else []
    loss = latest[-1].loss if latest else None
    row = latest[-1] if latest else None
    flops_per_s, mfu = (row.flops_per_s, row.mfu) if row else (None, None)
    found = {
        "id": job.id, "tenant": job.tenant, "name": job.name, "state": job.state.value,
        "step": job.step, "steps": job.spec.train.steps, "loss": loss,
        "flops_per_s": flops_per_s, "mfu": mfu, "workers": job.workers,
        "waiting": job.waiting, "expected_start": job.expected_start,
        "expected_start_reason": job.expected_start_reason, "error": job.error,
        "restarts": job.restarts,
        "preemptions": job.preemptions,
    }
    emit(found, output, lambda: (("FIELD", "VALUE"), [
        ("job", f"{job.id} ({job.name}, tenant {job.tenant})"),
        ("state", job.state.value),
        ("step", f"{job.step}/{job.spec.train.steps}"),
        ("loss", "-" if loss is None else f"{loss:.4f}"),
        ("mfu", _utilisation(mfu, flops_per_s)),
        ("workers", or_dash(job.workers)),
        ("waiting", or_dash(job.waiting)),
        *([("expected start", _expected_start(job))] if job.state is JobState.QUEUED else []),
        ("error", or_dash(job.error)),
        ("restarts", job.restarts),
        ("preemptions", job.preemptions),
    ]))


def _expected_start(job) -> str:
    """A queued job's expected start as a local time and how far off, or why there is none."""
    if job.expected_start is None:
        return job.expected_start_reason or "-"
    when = job.expected_start.astimezone()
    wait = max(0.0, (job.expected_start - datetime.now(UTC)).total_seconds())
    return f"{when:%Y-%m-%d %H:%M:%S} (in {wait:.0f} s)"


def _utilisation(mfu: float | None, flops_per_s: float | None) -> str:
    """`41.2% (408 TFLOP/s per rank)`; on a device of unknown peak (a CPU) the FLOP/s alone."""
    if flops_per_s is None:
        return "-"
    rate = f"{metric_columns.flops(flops_per_s)} per rank"
    return rate if mfu is None else f"{metric_columns.percent(mfu)} ({rate})"


def events(job_id: JobId, output: Output = OutputFormat.table, url: Url = None, key: Key = None) -> None:
    """A job's state changes, oldest first, with their reasons."""
    with _client(url, key) as client:
        found = client.events(job_id)
    emit(found, output, lambda: (("TIME", "FROM", "TO", "WORKERS", "REASON"), [
        (when(e.time), e.from_state.value if e.from_state else "-", e.to_state.value,
         or_dash(e.workers), e.reason) for e in found]))


def metrics(
    job_id: JobId,
    since_step: Annotated[int, typer.Option(min=0, help="from this step on")] = 0,
    columns: Annotated[str | None, typer.Option(
        "--columns", help="the columns, comma-separated: any of a row's fields (`-o json` names "
        "them), or `all` (default: step, loss, eval_loss, lr, tokens_per_s, step_time_s, "
        "peak_mem_bytes)")] = None,
    format_: Annotated[MetricsFormat | None, typer.Option(
        "--format", case_sensitive=False, help="csv or jsonl: one row a step, for a file")] = None,
    output: Output = OutputFormat.table,
    url: Url = None,
    key: Key = None,
) -> None:
    """A job's metrics, one row a step: loss, eval loss, learning rate,
    tokens/s, step time and memory unless --columns says otherwise."""
    with _client(url, key) as client:
        rows = client.metrics(job_id, since_step=since_step)
    if format_ is MetricsFormat.jsonl:
        for row in rows:
            typer.echo(row.model_dump_json(exclude_none=True))
        return
    try:
        shown = metric_columns.chosen(columns or ("all" if format_ else None), rows)
    except metric_columns.UnknownColumn as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if format_ is MetricsFormat.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(shown)
        for row in rows:
            writer.writerow([_cell(getattr(row, name)) for name in shown])
        return
    emit(rows, output, lambda: ([metric_columns.header(c) for c in shown],
                                [tuple(metric_columns.cell(c, getattr(row, c)) for c in shown)
                                 for row in rows]))


def logs(
    job_id: JobId,
    follow: Follow = False,
    tail: Annotated[int | None, typer.Option(min=1, help="only the last N lines")] = None,
    url: Url = None,
    key: Key = None,
) -> None:
    """Print a job's whole log (or its last --tail N lines); with -f, follow
    it with a progress bar of steps (exit status 0 if the job succeeds, 1
    otherwise)."""
    with _client(url, key) as client:
        lines = client.all_logs(job_id)
        shown = deque(lines, maxlen=tail) if tail else lines
        after_id = 0
        for line in shown:
            typer.echo(line.line)
            after_id = line.id
        if follow:
            _end_with(_follow_with_progress(client, job_id, after_id), job_id)


def wait(
    job_id: JobId,
    timeout: Annotated[float, typer.Option(min=0, help="give up after this many seconds")] = 86400.0,
    url: Url = None,
    key: Key = None,
) -> None:
    """Wait for a job to end: exit status 0 if it succeeded, 1 otherwise."""
    with _client(url, key) as client:
        try:
            job = client.wait(job_id, timeout_s=timeout, poll_s=1.0)
        except TimeoutError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1) from None
    _end_with(JobProgress(state=job.state, step=job.step, steps=job.spec.train.steps), job_id)


def cancel(job_id: JobId, url: Url = None, key: Key = None) -> None:
    """Cancel a job (a job cancelled already stays so)."""
    with _client(url, key) as client:
        _say_state(client.cancel(job_id))


def suspend(job_id: JobId, url: Url = None, key: Key = None) -> None:
    """Checkpoint a running job, then stop it until `brigade resume`."""
    with _client(url, key) as client:
        _say_state(client.suspend(job_id))


def resume(
    job_id: JobId,
    workers: Annotated[int | None, typer.Option(min=1, help="resume at this world size")] = None,
    url: Url = None,
    key: Key = None,
) -> None:
    """Queue a suspended job again, from its latest checkpoint."""
    with _client(url, key) as client:
        _say_state(client.resume(job_id, workers=workers))


def delete(job_id: JobId, url: Url = None, key: Key = None) -> None:
    """Delete a finished job with its history, checkpoints and exports."""
    with _client(url, key) as client:
        client.delete(job_id)
    typer.echo(f"{job_id}: deleted", err=True)


def checkpoints(job_id: JobId, output: Output = OutputFormat.table, url: Url = None,
                key: Key = None) -> None:
    """A job's committed checkpoints."""
    with _client(url, key) as client:
        found = client.checkpoints(job_id)
    emit(found, output, lambda: (("STEP", "WORLD SIZE", "BYTES", "CREATED", "URI"),
                                 [(c.step, c.world_size, c.bytes, when(c.created_at), c.uri)
                                  for c in found]))


@contextmanager
def _client(url: str | None, key: str | None) -> Iterator[BrigadeClient]:
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
        raise typer.Exit(1) from None
    except httpx.TransportError as e:
        typer.echo(f"error: cannot reach Brigade at {client.url}: {e}", err=True)
        raise typer.Exit(1) from None


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


def _follow_with_progress(client: BrigadeClient, job_id: str, after_id: int = 0) -> JobProgress:
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


def _end_with(final: JobProgress, job_id: str) -> None:
    """Say how the job ended; exit 0 if it succeeded, else 1."""
    typer.echo(f"{job_id}: {final.state.value} at step {final.step}", err=True)
    raise typer.Exit(0 if final.state is JobState.SUCCEEDED else 1)


def _say_state(job: JobPublic) -> None:
    typer.echo(f"{job.id}: {job.state.value}")


def _cell(value) -> str:
    """A CSV cell: nested values as JSON, none as empty."""
    if value is None:
        return ""
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else str(value)
