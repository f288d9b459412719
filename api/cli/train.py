"""`brigade train`: run one job spec (the YAML `brigade submit` takes)
straight on Ray, without the service: no store, no queue, one JSON line of
metrics per step. A developer's tool for the engine; jobs for the service go
through `brigade submit`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from workers.schema.spec_yaml import load_spec_yaml

if TYPE_CHECKING:
    from workers.schema import JobSpec


def train(
    spec_file: Path = typer.Argument(..., exists=True, dir_okay=False, help="job spec YAML"),
    workers: int = typer.Option(None, "--workers", "-n",
                                help="ranks (world size); default: the spec's largest"),
    cpus_per_worker: float = typer.Option(None, help="CPUs per rank; default: the spec's"),
    ray_address: str = typer.Option(None, envvar="BRIGADE_RAY_ADDRESS", help="an existing Ray cluster"),
) -> None:
    """Run one job spec on Ray and print one JSON line of metrics per step."""
    from pydantic import ValidationError

    from workers.schema import JobSpec, SpecError, explain

    raw = load_spec_yaml(spec_file.read_text()) or {}
    try:
        spec = JobSpec.model_validate(raw)
        if spec.model.config_uri is not None:  # an operator's own file: no tenant prefix here
            from workers.schema.hf_config import resolve_config_uri

            spec = resolve_config_uri(spec, spec.model.config_uri)
    except (ValidationError, SpecError) as e:
        typer.echo(f"error: {explain(e, JobSpec)}", err=True)
        raise typer.Exit(2) from None
    _connect(ray_address)
    size = workers or spec.world_sizes()[0]
    raise typer.Exit(_run(spec, size, cpus_per_worker or spec.resources_per_worker.cpu))


def _connect(address: str | None) -> None:
    import ray

    if address:
        ray.init(address=address)
    else:
        # A cluster of our own on this machine; Ray keeps its token auth on.
        ray.init(address="local", include_dashboard=False)


def _run(spec: JobSpec, workers: int, cpus_per_worker: float) -> int:
    from workers.cluster.errors import WorkerGroupError
    from workers.cluster.group import WorkerGroup
    from workers.schema import SpecError, explain

    try:
        with WorkerGroup(workers, cpus_per_worker=cpus_per_worker,
                         tp_size=spec.parallelism.tp) as group:
            assert group.rendezvous is not None  # entering the group started it: ranks have met
            addr, port = group.rendezvous
            typer.echo(f"worker group: {workers} ranks, backend {group.backend}, "
                       f"rendezvous {addr}:{port}", err=True)
            run = group.start_training(spec)
            seen = 0
            while (result := run.wait(timeout_s=1.0)) is None:
                seen = _print_new(run.progress(), seen)
            _print_new(result[0], seen)
    except SpecError as e:
        typer.echo(f"error: {explain(e)}", err=True)
        return 2
    except (WorkerGroupError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        return 1
    return 0


def _print_new(metrics: list[dict], seen: int) -> int:
    for m in metrics[seen:]:
        typer.echo(json.dumps(m))
    return max(seen, len(metrics))
