"""`brigade train`: run one engine config straight on Ray, without the
service: no store, no queue, one JSON line of metrics per step. A developer's
tool for the engine; jobs for the service go through `brigade submit`."""

from __future__ import annotations

import json
from pathlib import Path

import typer
import yaml


def train(
    config_file: Path = typer.Argument(..., exists=True, dir_okay=False, help="engine config YAML"),
    workers: int = typer.Option(1, "--workers", "-n", help="ranks (world size)"),
    cpus_per_worker: float = typer.Option(1.0, help="CPUs reserved per rank"),
    ray_address: str = typer.Option(None, envvar="BRIGADE_RAY_ADDRESS", help="an existing Ray cluster"),
) -> None:
    """Run one engine config on Ray and print one JSON line of metrics per step."""
    config = yaml.safe_load(config_file.read_text()) or {}
    if not isinstance(config, dict):
        typer.echo("error: the job config must be a mapping of sections", err=True)
        raise typer.Exit(2)
    _connect(ray_address)
    raise typer.Exit(_run(config, workers, cpus_per_worker))


def _connect(address: str | None) -> None:
    import ray

    if address:
        ray.init(address=address)
    else:
        # A cluster of our own on this machine; Ray keeps its token auth on.
        ray.init(address="local", include_dashboard=False)


def _run(config: dict, workers: int, cpus_per_worker: float) -> int:
    from workers.config import ConfigError
    from workers.errors import WorkerGroupError
    from workers.group import WorkerGroup

    try:
        with WorkerGroup(workers, cpus_per_worker=cpus_per_worker) as group:
            typer.echo(f"worker group: {workers} ranks, backend {group.backend}, "
                       f"rendezvous {group.rendezvous[0]}:{group.rendezvous[1]}", err=True)
            run = group.start_training(config)
            seen = 0
            while (result := run.wait(timeout_s=1.0)) is None:
                seen = _print_new(run.progress(), seen)
            _print_new(result[0], seen)
    except (ConfigError, WorkerGroupError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        return 1
    return 0


def _print_new(metrics: list[dict], seen: int) -> int:
    for m in metrics[seen:]:
        typer.echo(json.dumps(m))
    return max(seen, len(metrics))
