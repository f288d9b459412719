"""The `brigade` command.

    brigade serve                 start Brigade on embedded defaults (a local Ray
                                  cluster); until the REST API lands it runs a
                                  demo training job and prints its progress
    brigade train job.yaml -n 2   run one job on the Ray cluster and print its metrics

The CLI never imports torch: the engine runs inside the rank actors.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
import yaml

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Brigade: FSDP2 training on Ray.")

DEMO_JOB = {
    "model": {"n_layers": 2, "d_model": 64, "n_heads": 4, "seq_len": 64},
    "data": {"source": "builtin"},
    "sharding": {"strategy": "full_shard"},
    "optim": {"lr": 3e-3, "warmup_steps": 10},
    "train": {"steps": 100, "global_batch": 8},
}


def _connect(address: str | None, num_cpus: int | None) -> None:
    import ray

    if address:
        ray.init(address=address)
    else:
        # A cluster of our own on this machine; Ray keeps its token auth on.
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False)


def _run(config: dict, workers: int, cpus_per_worker: float, pretty: bool) -> int:
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
                seen = _print_progress(run.progress(), seen, pretty)
            _print_progress(result[0], seen, pretty)
    except (ConfigError, WorkerGroupError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        return 1
    return 0


def _print_progress(metrics: list[dict], seen: int, pretty: bool) -> int:
    for m in metrics[seen:]:
        if pretty:
            typer.echo(
                f"step {m['step']:>4}  loss {m['loss']:.4f}  lr {m['lr']:.2e}  "
                f"{m['tokens_per_s']:,.0f} tok/s  comm {m['comm_bytes'] / 1e6:.2f} MB "
                f"(theory {m['comm_bytes_theory'] / 1e6:.2f})"
            )
        else:
            typer.echo(json.dumps(m))
    return max(seen, len(metrics))


@app.command()
def serve(
    ray_address: str = typer.Option(None, envvar="BRIGADE_RAY_ADDRESS", help="an existing Ray cluster"),
    workers: int = typer.Option(2, help="ranks of the demo job"),
    steps: int = typer.Option(DEMO_JOB["train"]["steps"], help="steps of the demo job"),
) -> None:
    """Start Brigade on embedded defaults. Until the REST API exists this runs a
    demo job: a tiny GPT on the built-in corpus, FSDP2 across Ray actors."""
    _connect(ray_address, num_cpus=max(workers, 2))
    started = time.perf_counter()
    config = DEMO_JOB | {"train": DEMO_JOB["train"] | {"steps": steps}}
    code = _run(config, workers, 1.0, pretty=True)
    typer.echo(f"demo job finished in {time.perf_counter() - started:.1f} s", err=True)
    raise typer.Exit(code)


@app.command()
def train(
    config_file: Path = typer.Argument(..., exists=True, dir_okay=False, help="job config YAML"),
    workers: int = typer.Option(1, "--workers", "-n", help="ranks (world size)"),
    cpus_per_worker: float = typer.Option(1.0, help="CPUs reserved per rank"),
    ray_address: str = typer.Option(None, envvar="BRIGADE_RAY_ADDRESS", help="an existing Ray cluster"),
) -> None:
    """Run one job on Ray and print one JSON line of metrics per step."""
    config = yaml.safe_load(config_file.read_text()) or {}
    if not isinstance(config, dict):
        typer.echo("error: the job config must be a mapping of sections", err=True)
        raise typer.Exit(2)
    _connect(ray_address, num_cpus=None)
    raise typer.Exit(_run(config, workers, cpus_per_worker, pretty=False))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
