"""The `brigade` commands that talk to a running service through the client:
submit, jobs, get, status, events, metrics, logs, wait, cancel, suspend,
resume, delete, checkpoints. Each read command takes `--output
table|json|yaml`. What they share with the other commands (the options, the
client, following a job) is `api.cli.remote`'s."""

from __future__ import annotations

import csv
import json
import sys
from collections import deque
from datetime import UTC, datetime
from enum import Enum
from typing import Annotated

import typer

from api.cli import metric_columns
from api.cli.output import (
    Output,
    OutputFormat,
    emit,
    number,
    or_dash,
    plain,
    trial_objective,
    when,
)
from api.cli.remote import JobId, Key, Url, connect, end_with, follow_with_progress, load_spec
from api.cli.spec_file import FileOption, SpecArgument, SubmitCommand, spec_path
from api.client import BrigadeError
from api.schemas.jobs import JobProgress, JobPublic
from service.states import JobState
from workers.schema.labels import parse_label

Follow = Annotated[bool, typer.Option("--follow", "-f", "-F", help="follow until the job ends")]
FollowSubmitted = Annotated[bool, typer.Option(
    "--follow", "-F", help="follow the job to its end (exit 0 if it succeeds, 1 otherwise)")]


class MetricsFormat(str, Enum):
    csv = "csv"
    jsonl = "jsonl"


def register_job_commands(app: typer.Typer) -> None:
    app.command(cls=SubmitCommand)(submit)
    for command in (jobs, label, get, status, events, metrics, logs, wait, cancel, suspend,
                    resume, delete, checkpoints):
        app.command()(command)


def submit(
    spec_file: SpecArgument = None,
    file: FileOption = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="a retry with the same key makes no second job")
    ] = None,
    follow: FollowSubmitted = False,
    url: Url = None,
    key: Key = None,
) -> None:
    """Submit a job spec (the argument, or -f FILE); prints its id. With -F
    (--follow), follow it to its end (exit status 0 if it succeeds, 1
    otherwise). The old spelling of follow, a bare -f, still works."""
    spec = load_spec(spec_path(spec_file, file, follow))
    with connect(url, key) as client:
        job = client.submit(spec, idempotency_key=idempotency_key)
        typer.echo(f"submitted {job.name}: {job.state.value}", err=True)
        typer.echo(job.id)
        if follow:
            end_with(follow_with_progress(client, job.id), job.id)


def jobs(
    state: Annotated[list[str] | None, typer.Option(help="only jobs in this state (repeatable)")] = None,
    tenant: Annotated[str | None, typer.Option(help="the admin: only this tenant's jobs")] = None,
    sweep: Annotated[str | None, typer.Option(help="only this sweep's trials")] = None,
    label: Annotated[list[str] | None, typer.Option(
        help="only jobs labelled key=value (repeatable: every one)")] = None,
    limit: int = 50,
    offset: int = 0,
    output: Output = OutputFormat.table,
    url: Url = None,
    key: Key = None,
) -> None:
    """List jobs, newest first (the admin: every tenant's): kind, state,
    world size, step of steps, latest loss; where some are sweeps' trials,
    each trial's objective as `brigade sweep status` shows it (a pruned
    trial's at its pruning step, named so)."""
    with connect(url, key) as client:
        page = client.jobs(state=state, limit=limit, offset=offset, tenant=tenant, sweep=sweep,
                           label=label)
    emit(page, output, lambda: _jobs_table(page.items))
    if output is OutputFormat.table and page.total > page.offset + len(page.items):
        typer.echo(f"({page.total} in all; --offset {page.offset + len(page.items)} for more)", err=True)


def _jobs_table(items: list[JobPublic]) -> tuple[tuple[str, ...], list[tuple]]:
    """`brigade jobs`' table: an OBJECTIVE column where some job is a sweep's trial."""
    trials = any(j.trial is not None for j in items)
    header = ("ID", "TENANT", "NAME", "KIND", "STATE", "WORKERS", "STEP", "LOSS",
              *(("OBJECTIVE",) if trials else ()), "LABELS", "CREATED")
    rows = []
    for j in items:
        objective = () if not trials else ("-",) if j.trial is None else (
            trial_objective(j.trial.metric, j.trial.objective, j.trial.pruned_step),)
        rows.append((j.id, j.tenant, j.name, j.spec.kind, j.state.value, or_dash(j.workers),
                     f"{j.step}/{j.spec.train.steps}",  # a prepare job's steps: its files
                     number(j.latest_loss), *objective,
                     ",".join(f"{k}={v}" for k, v in sorted(j.labels.items())) or "-",
                     when(j.created_at)))
    return header, rows


def label(
    job_id: JobId,
    labels: Annotated[list[str] | None, typer.Argument(help="key=value to set")] = None,
    remove: Annotated[list[str] | None, typer.Option(help="a label's key to remove (repeatable)")] = None,
    note: Annotated[str | None, typer.Option(help="the job's note ('' removes it)")] = None,
    url: Url = None,
    key: Key = None,
) -> None:
    """Set labels on a job (key=value; the others kept), remove some (--remove KEY), or
    set its note (--note); prints the job's labels and note."""
    given = labels_given(labels)
    with connect(url, key) as client:
        job = client.get(job_id)
        job = client.update(job_id, labels=relabelled(job.labels, given, remove),
                            **({} if note is None else {"note": note or None}))
    say_labels(job.labels, job.note)


def labels_given(texts: list[str] | None) -> dict[str, str]:
    """`key=value` arguments as labels (a bad one: the command's usage error)."""
    try:
        return dict(parse_label(text) for text in texts or ())
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="LABELS") from None


def relabelled(current: dict[str, str], given: dict[str, str],
               remove: list[str] | None) -> dict[str, str] | None:
    """The labels after setting `given` and removing `remove`'s keys; None where unchanged."""
    changed = {**{k: v for k, v in current.items() if k not in set(remove or ())}, **given}
    return None if changed == current else changed


def say_labels(labels: dict[str, str], note: str | None) -> None:
    for name, value in sorted(labels.items()):
        typer.echo(f"{name}={value}")
    if note:
        typer.echo(f"note: {note}")


def get(job_id: JobId, output: Output = OutputFormat.json, url: Url = None, key: Key = None) -> None:
    """One job (JSON unless asked otherwise)."""
    with connect(url, key) as client:
        job = client.get(job_id)
    emit(job, output, lambda: (("FIELD", "VALUE"), [
        (name, or_dash(value)) for name, value in plain(job).items() if name != "spec"]))


def status(job_id: JobId, output: Output = OutputFormat.table, url: Url = None, key: Key = None) -> None:
    """Where a job is: state, step of steps, latest loss and model FLOPs
    utilisation (`mfu`; where the device's peak is unknown, as on a CPU, the
    model's FLOP/s per rank instead, labelled `flop/s`), why it waits or
    failed, restarts, recoveries in place and preemptions."""
    with connect(url, key) as client:
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
        "recoveries": job.recoveries,
        "preemptions": job.preemptions,
    }
    emit(found, output, lambda: (("FIELD", "VALUE"), [
        ("job", f"{job.id} ({job.name}, tenant {job.tenant})"),
        ("state", job.state.value),
        ("step", f"{job.step}/{job.spec.train.steps}"),
        ("loss", "-" if loss is None else f"{loss:.4f}"),
        _utilisation(mfu, flops_per_s),
        ("workers", or_dash(job.workers)),
        ("waiting", or_dash(job.waiting)),
        *([("expected start", _expected_start(job))] if job.state is JobState.QUEUED else []),
        ("error", or_dash(job.error)),
        ("restarts", job.restarts),
        ("recoveries", job.recoveries),
        ("preemptions", job.preemptions),
    ]))


def _expected_start(job) -> str:
    """A queued job's expected start as a local time and how far off, or why there is none."""
    if job.expected_start is None:
        return job.expected_start_reason or "-"
    when = job.expected_start.astimezone()
    wait = max(0.0, (job.expected_start - datetime.now(UTC)).total_seconds())
    return f"{when:%Y-%m-%d %H:%M:%S} (in {wait:.0f} s)"


def _utilisation(mfu: float | None, flops_per_s: float | None) -> tuple[str, str]:
    """The status row of what the model's FLOPs do: `mfu  41.2% (408 TFLOP/s per
    rank)`; on a device of unknown peak (a CPU) no utilisation can be said, and
    the row is the FLOP/s, labelled as such: `flop/s  3.13 GFLOP/s per rank`."""
    if flops_per_s is None:
        return "mfu", "-"
    rate = f"{metric_columns.flops(flops_per_s)} per rank"
    if mfu is None:
        return "flop/s", f"{rate} (no MFU: the device's peak is unknown)"
    return "mfu", f"{metric_columns.percent(mfu)} ({rate})"


def events(job_id: JobId, output: Output = OutputFormat.table, url: Url = None, key: Key = None) -> None:
    """A job's state changes, oldest first, with their reasons."""
    with connect(url, key) as client:
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
    with connect(url, key) as client:
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
    with connect(url, key) as client:
        lines = client.all_logs(job_id)
        shown = deque(lines, maxlen=tail) if tail else lines
        after_id = 0
        for line in shown:
            typer.echo(line.line)
            after_id = line.id
        if follow:
            end_with(follow_with_progress(client, job_id, after_id), job_id)


def wait(
    job_id: JobId,
    timeout: Annotated[float, typer.Option(min=0, help="give up after this many seconds")] = 86400.0,
    url: Url = None,
    key: Key = None,
) -> None:
    """Wait for a job to end: exit status 0 if it succeeded, 1 otherwise."""
    with connect(url, key) as client:
        try:
            job = client.wait(job_id, timeout_s=timeout, poll_s=1.0)
        except TimeoutError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1) from None
    end_with(JobProgress(state=job.state, step=job.step, steps=job.spec.train.steps), job_id)


def cancel(job_id: JobId, url: Url = None, key: Key = None) -> None:
    """Cancel a job. Exit status 0 once the job runs no further: being
    cancelled, cancelled, or ended before in any state (SUCCEEDED, FAILED,
    ...: nothing to cancel, said on stderr); 1 where the cancel could not be
    asked (no such job, a key refused, the service out of reach)."""
    with connect(url, key) as client:
        try:
            job = client.cancel(job_id)
        except BrigadeError as refused:
            if refused.status != 409:
                raise
            job = client.get(job_id)  # the service refuses to cancel a job that has ended
            if not job.state.is_terminal:
                raise
            typer.echo(f"{job_id} had ended {job.state.value}: nothing to cancel", err=True)
        _say_state(job)


def suspend(job_id: JobId, url: Url = None, key: Key = None) -> None:
    """Checkpoint a running job, then stop it until `brigade resume`."""
    with connect(url, key) as client:
        _say_state(client.suspend(job_id))


def resume(
    job_id: JobId,
    workers: Annotated[int | None, typer.Option(min=1, help="resume at this world size")] = None,
    url: Url = None,
    key: Key = None,
) -> None:
    """Queue a suspended job again, from its latest checkpoint."""
    with connect(url, key) as client:
        _say_state(client.resume(job_id, workers=workers))


def delete(job_id: JobId, url: Url = None, key: Key = None) -> None:
    """Delete a finished job with its history, checkpoints and exports."""
    with connect(url, key) as client:
        client.delete(job_id)
    typer.echo(f"{job_id}: deleted", err=True)


def checkpoints(job_id: JobId, output: Output = OutputFormat.table, url: Url = None,
                key: Key = None) -> None:
    """A job's committed checkpoints."""
    with connect(url, key) as client:
        found = client.checkpoints(job_id)
    emit(found, output, lambda: (("STEP", "WORLD SIZE", "BYTES", "CREATED", "URI"),
                                 [(c.step, c.world_size, c.bytes, when(c.created_at), c.uri)
                                  for c in found]))


def _say_state(job: JobPublic) -> None:
    typer.echo(f"{job.id}: {job.state.value}")


def _cell(value) -> str:
    """A CSV cell: nested values as JSON, none as empty."""
    if value is None:
        return ""
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else str(value)
