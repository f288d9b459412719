"""`brigade sweep ...`: submit a sweep (and follow it), see its trials, its
best parameters, list, cancel and delete sweeps. Each command takes
`--output table|json|yaml`; json and yaml print the API's own JSON."""

from __future__ import annotations

import time
from typing import Annotated

import typer
import yaml

from api.cli.jobs import labels_given, relabelled, say_labels
from api.cli.output import (
    Output,
    OutputFormat,
    emit,
    number,
    or_dash,
    plain,
    print_table,
    when,
)
from api.cli.remote import Key, Url, connect, load_spec
from api.cli.spec_file import FileOption, SpecArgument, SubmitCommand, spec_path
from api.client import BrigadeClient
from api.schemas.sweeps import SweepPublic, TrialPublic
from service.states import SweepState

SweepId = Annotated[str, typer.Argument(help="a sweep id (see `brigade sweep list`)")]
POLL_S = 1.0

sweep = typer.Typer(no_args_is_help=True, help=(
    "Sweeps: trials of one job spec over a search space, run as jobs under your quota, "
    "the losing ones pruned early."))


@sweep.command(cls=SubmitCommand)
def submit(
    spec_file: SpecArgument = None,
    file: FileOption = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="a retry with the same key makes no second sweep")
    ] = None,
    follow: Annotated[bool, typer.Option(
        "--follow", "-F", help="print each trial's changes until the sweep ends")] = False,
    output: Output = OutputFormat.table,
    url: Url = None,
    key: Key = None,
) -> None:
    """Submit a sweep spec (the argument, or -f FILE); prints its id. With -F
    (--follow), print each trial's state and step as they change until the
    sweep ends (exit status 0 if it succeeds, 1 otherwise). The old spelling
    of follow, a bare -f, still works."""
    spec = load_spec(spec_path(spec_file, file, follow))
    with connect(url, key) as client:
        found = client.submit_sweep(spec, idempotency_key=idempotency_key)
        typer.echo(f"submitted sweep {found.name}: {found.state.value}", err=True)
        if output is OutputFormat.table:
            typer.echo(found.id)
        if follow:
            found = _follow(client, found)
    if output is not OutputFormat.table:
        emit(found, output)
    if follow:
        _end_with(found)


@sweep.command()
def status(sweep_id: SweepId, output: Output = OutputFormat.table, url: Url = None,
           key: Key = None) -> None:
    """A sweep's state and its trials: number, job, state, step, objective (a
    pruned trial's: at the step it was pruned at), that step, its job's last
    loss (as `brigade jobs` shows it), its parameters; then the best trial."""
    with connect(url, key) as client:
        found = client.sweep(sweep_id)
    if output is not OutputFormat.table:
        emit(found, output)
        return
    counts = found.counts
    typer.echo(f"sweep {found.id} ({found.name}, tenant {found.tenant}): {found.state.value}, "
               f"{counts.total}/{found.spec.trial_budget} trials ({_counted(counts)})")
    for line in (found.waiting, found.error):
        if line:
            typer.echo(line)
    typer.echo(f"objective: {_objective(found)}; a pruned trial's, the value it was pruned on")
    print_table(("TRIAL", "JOB", "STATE", "STEP", "OBJECTIVE", "PRUNED AT", "LAST LOSS", "PARAMS"),
                [(t.number, or_dash(t.job), t.state.value, or_dash(t.step), number(t.objective),
                  or_dash(t.pruned_step), number(t.last_loss), _params(t.params))
                 for t in found.trials])
    for t in found.trials:
        if t.error:
            typer.echo(f"trial {t.number}: {t.error}")
    best = found.best
    typer.echo("best: -" if best is None else
               f"best: trial {best.number}, job {or_dash(best.job)}, "
               f"{found.objective.metric} {number(best.objective)}: {_params(best.params)}")


@sweep.command()
def best(sweep_id: SweepId, output: Output = OutputFormat.yaml, url: Url = None,
         key: Key = None) -> None:
    """The best trial so far: its parameters as YAML, its job and objective
    (exit status 1 while no trial has an objective)."""
    with connect(url, key) as client:
        found = client.sweep(sweep_id)
    if found.best is None:
        typer.echo(f"error: sweep {found.id} ({found.state.value}): no trial has an objective yet",
                   err=True)
        raise typer.Exit(1)
    best = found.best
    shown = {"sweep": found.id, "job": best.job, "trial": best.number,
             "metric": found.objective.metric, "mode": found.objective.mode,
             "objective": best.objective, "params": best.params}
    if output is OutputFormat.json:
        emit(shown, output)
    else:  # table or yaml: YAML reads as both
        typer.echo(yaml.safe_dump(plain(shown), sort_keys=False, allow_unicode=True).rstrip())


@sweep.command("list")
def list_sweeps(
    state: Annotated[list[str] | None, typer.Option(help="only sweeps in this state (repeatable)")] = None,
    tenant: Annotated[str | None, typer.Option(help="the admin: only this tenant's sweeps")] = None,
    label: Annotated[list[str] | None, typer.Option(
        help="only sweeps labelled key=value (repeatable: every one)")] = None,
    limit: int = 50,
    output: Output = OutputFormat.table,
    url: Url = None,
    key: Key = None,
) -> None:
    """List sweeps, newest first (the admin: every tenant's): state, trials
    by state, the best objective, labels."""
    with connect(url, key) as client:
        page = client.sweeps(state=state, limit=limit, tenant=tenant, label=label)
    emit(page, output, lambda: (
        ("ID", "TENANT", "NAME", "STATE", "TRIALS", "OBJECTIVE", "BEST", "LABELS", "CREATED"),
        [(s.id, s.tenant, s.name, s.state.value, f"{s.counts.total}/{s.spec.trial_budget}",
          f"{s.objective.metric} ({s.objective.mode})",
          "-" if s.best is None else number(s.best.objective),
          ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) or "-", when(s.created_at))
         for s in page.sweeps]))


@sweep.command("label")
def label_sweep(
    sweep_id: SweepId,
    labels: Annotated[list[str] | None, typer.Argument(help="key=value to set")] = None,
    remove: Annotated[list[str] | None, typer.Option(help="a label's key to remove (repeatable)")] = None,
    note: Annotated[str | None, typer.Option(help="the sweep's note ('' removes it)")] = None,
    url: Url = None,
    key: Key = None,
) -> None:
    """Set labels on a sweep (key=value; the others kept), remove some (--remove
    KEY), or set its note (--note); prints its labels and note. The trials it
    makes from then on carry them; those made already keep theirs (`brigade
    label` changes a job's)."""
    given = labels_given(labels)
    with connect(url, key) as client:
        found = client.sweep(sweep_id)
        found = client.update_sweep(sweep_id, labels=relabelled(found.labels, given, remove),
                                    **({} if note is None else {"note": note or None}))
    say_labels(found.labels, found.note)


@sweep.command()
def cancel(sweep_id: SweepId, output: Output = OutputFormat.table, url: Url = None,
           key: Key = None) -> None:
    """Cancel a sweep and its live trials (a finished sweep stays as it is)."""
    with connect(url, key) as client:
        found = client.cancel_sweep(sweep_id)
    if output is OutputFormat.table:
        typer.echo(f"{found.id}: {found.state.value}")
    else:
        emit(found, output)


@sweep.command()
def delete(sweep_id: SweepId, url: Url = None, key: Key = None) -> None:
    """Delete a finished sweep with its trials' jobs."""
    with connect(url, key) as client:
        client.delete_sweep(sweep_id)
    typer.echo(f"{sweep_id}: deleted", err=True)


def _follow(client: BrigadeClient, found: SweepPublic) -> SweepPublic:
    """Poll the sweep until it ends, printing each trial's change (state,
    step, objective) and the sweep's own; returns its final view."""
    seen: dict[int, tuple] = {}
    state = None
    while True:
        for trial in found.trials:
            now = (trial.state, trial.job, trial.step, trial.objective)
            if seen.get(trial.number) != now:
                seen[trial.number] = now
                typer.echo(_trial_line(trial, found.objective.metric), err=True)
        if found.state != state:
            state = found.state
            typer.echo(f"sweep {found.id}: {found.state.value} ({_counted(found.counts)})", err=True)
        if found.state.is_terminal:
            return found
        time.sleep(POLL_S)
        found = client.sweep(found.id)


def _objective(found: SweepPublic) -> str:
    """The objective in words: `loss (min)`, `loss, smoothed (ema 0.8) (min)`."""
    o = found.objective
    smoothed = f", smoothed (ema {o.ema_factor:g})" if o.smoothing == "ema" and o.ema_factor else ""
    return f"{o.metric}{smoothed} ({o.mode})"


def _trial_line(trial: TrialPublic, metric: str) -> str:
    parts = [f"trial {trial.number}", or_dash(trial.job), trial.state.value]
    if trial.step is not None:
        parts.append(f"step {trial.step}")
    if trial.pruned_step is not None:
        parts.append(f"pruned at step {trial.pruned_step} on objective {number(trial.objective)}")
    elif trial.objective is not None:
        parts.append(f"objective {number(trial.objective)}")
    if trial.last_loss is not None and trial.last_loss != trial.objective:
        parts.append(f"last loss {number(trial.last_loss)}")
    if trial.error:
        parts.append(f"error: {trial.error}")
    return "  ".join(parts)


def _end_with(found: SweepPublic) -> None:
    """Say how the sweep ended and its best; exit 0 if it succeeded, else 1."""
    best = found.best
    if best is not None:
        typer.echo(f"best: trial {best.number}, job {or_dash(best.job)}, "
                   f"{found.objective.metric} {number(best.objective)}: {_params(best.params)}",
                   err=True)
    typer.echo(f"sweep {found.id}: {found.state.value}" + (f": {found.error}" if found.error else ""),
               err=True)
    raise typer.Exit(0 if found.state is SweepState.SUCCEEDED else 1)


def _counted(counts) -> str:
    shown = [f"{n} {state.lower()}" for state, n in plain(counts).items() if state != "total" and n]
    return ", ".join(shown) or "none yet"


def _params(params: dict) -> str:
    return " ".join(f"{name}={number(v) if isinstance(v, float) else v}"
                    for name, v in params.items())
