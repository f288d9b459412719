"""`brigade sweep ...`: submit a sweep (and follow it), see its trials, its
best parameters, list, cancel and delete sweeps. Each command takes
`--output table|json|yaml`; json and yaml print the API's own JSON."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
import yaml

from api.cli_jobs import Key, Url, _client, _load_spec
from api.cli_output import Output, OutputFormat, emit, or_dash, plain, print_table, when
from api.client import BrigadeClient
from api.sweep_json import FINAL_SWEEP_STATES, SweepPublic, TrialPublic

SweepId = Annotated[str, typer.Argument(help="a sweep id (see `brigade sweep list`)")]
POLL_S = 1.0

sweep = typer.Typer(no_args_is_help=True, help=(
    "Sweeps: trials of one job spec over a search space, run as jobs under your quota, "
    "the losing ones pruned early."))


@sweep.command()
def submit(
    spec_file: Annotated[Path, typer.Argument(help="sweep spec, YAML or JSON ('-': stdin)")],
    idempotency_key: Annotated[
        str | None, typer.Option(help="a retry with the same key makes no second sweep")
    ] = None,
    follow: Annotated[bool, typer.Option(
        "--follow", "-f", help="print each trial's changes until the sweep ends")] = False,
    output: Output = OutputFormat.table,
    url: Url = None,
    key: Key = None,
) -> None:
    """Submit a sweep; prints its id. With -f, print each trial's state and
    step as they change until the sweep ends (exit status 0 if it succeeds,
    1 otherwise)."""
    spec = _load_spec(spec_file)
    with _client(url, key) as client:
        found = client.submit_sweep(spec, idempotency_key=idempotency_key)
        typer.echo(f"submitted sweep {found.name}: {found.state}", err=True)
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
    """A sweep's state and its trials: number, job, state, objective, the
    step it was pruned at, its parameters; then the best trial."""
    with _client(url, key) as client:
        found = client.sweep(sweep_id)
    if output is not OutputFormat.table:
        emit(found, output)
        return
    counts = found.counts
    typer.echo(f"sweep {found.id} ({found.name}, tenant {found.tenant}): {found.state}, "
               f"{counts.total}/{found.spec.trial_budget} trials ({_counted(counts)})")
    for line in (found.waiting, found.error):
        if line:
            typer.echo(line)
    metric = f"{found.objective.metric} ({found.objective.mode})"
    print_table(("TRIAL", "JOB", "STATE", "STEP", metric.upper(), "PRUNED AT", "PARAMS"),
                [(t.number, or_dash(t.job), t.state, or_dash(t.step), _number(t.objective),
                  or_dash(t.pruned_step), _params(t.params)) for t in found.trials])
    for t in found.trials:
        if t.error:
            typer.echo(f"trial {t.number}: {t.error}")
    best = found.best
    typer.echo("best: -" if best is None else
               f"best: trial {best.number}, job {or_dash(best.job)}, "
               f"{found.objective.metric} {_number(best.objective)}: {_params(best.params)}")


@sweep.command()
def best(sweep_id: SweepId, output: Output = OutputFormat.yaml, url: Url = None,
         key: Key = None) -> None:
    """The best trial so far: its parameters as YAML, its job and objective
    (exit status 1 while no trial has an objective)."""
    with _client(url, key) as client:
        found = client.sweep(sweep_id)
    if found.best is None:
        typer.echo(f"error: sweep {found.id} ({found.state}): no trial has an objective yet",
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
    limit: int = 50,
    output: Output = OutputFormat.table,
    url: Url = None,
    key: Key = None,
) -> None:
    """List sweeps, newest first (the admin: every tenant's): state, trials
    by state, the best objective."""
    with _client(url, key) as client:
        page = client.sweeps(state=state, limit=limit, tenant=tenant)
    emit(page, output, lambda: (
        ("ID", "TENANT", "NAME", "STATE", "TRIALS", "OBJECTIVE", "BEST", "CREATED"),
        [(s.id, s.tenant, s.name, s.state, f"{s.counts.total}/{s.spec.trial_budget}",
          f"{s.objective.metric} ({s.objective.mode})",
          "-" if s.best is None else _number(s.best.objective), when(s.created_at))
         for s in page.sweeps]))


@sweep.command()
def cancel(sweep_id: SweepId, output: Output = OutputFormat.table, url: Url = None,
           key: Key = None) -> None:
    """Cancel a sweep and its live trials (a finished sweep stays as it is)."""
    with _client(url, key) as client:
        found = client.cancel_sweep(sweep_id)
    if output is OutputFormat.table:
        typer.echo(f"{found.id}: {found.state}")
    else:
        emit(found, output)


@sweep.command()
def delete(sweep_id: SweepId, url: Url = None, key: Key = None) -> None:
    """Delete a finished sweep with its trials' jobs."""
    with _client(url, key) as client:
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
            typer.echo(f"sweep {found.id}: {found.state} ({_counted(found.counts)})", err=True)
        if found.state in FINAL_SWEEP_STATES:
            return found
        time.sleep(POLL_S)
        found = client.sweep(found.id)


def _trial_line(trial: TrialPublic, metric: str) -> str:
    parts = [f"trial {trial.number}", or_dash(trial.job), trial.state]
    if trial.step is not None:
        parts.append(f"step {trial.step}")
    if trial.objective is not None:
        parts.append(f"{metric} {_number(trial.objective)}")
    if trial.pruned_step is not None:
        parts.append(f"pruned at step {trial.pruned_step}")
    if trial.error:
        parts.append(f"error: {trial.error}")
    return "  ".join(parts)


def _end_with(found: SweepPublic) -> None:
    """Say how the sweep ended and its best; exit 0 if it succeeded, else 1."""
    best = found.best
    if best is not None:
        typer.echo(f"best: trial {best.number}, job {or_dash(best.job)}, "
                   f"{found.objective.metric} {_number(best.objective)}: {_params(best.params)}",
                   err=True)
    typer.echo(f"sweep {found.id}: {found.state}" + (f": {found.error}" if found.error else ""),
               err=True)
    raise typer.Exit(0 if found.state == "SUCCEEDED" else 1)


def _counted(counts) -> str:
    shown = [f"{n} {state.lower()}" for state, n in plain(counts).items() if state != "total" and n]
    return ", ".join(shown) or "none yet"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _params(params: dict) -> str:
    return " ".join(f"{name}={_number(v) if isinstance(v, float) else v}"
                    for name, v in params.items())
