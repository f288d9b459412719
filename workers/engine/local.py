"""Run the engine without Ray: one process, or under torchrun.

    python -m workers.engine.local --config job.yaml            # one process
    torchrun --nproc-per-node 2 -m workers.engine.local --config job.yaml

The YAML is a job spec, the same as `POST /v1/jobs` takes (`workers.schema`).
Rank 0 prints one JSON line of metrics per step. The same `Trainer` runs in
the Ray rank actors; this path is for debugging and for measuring our overhead.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic import ValidationError

from workers.engine.distributed import destroy_process_group, init_from_env, init_single_process
from workers.schema import JobSpec, SpecError, explain
from workers.schema.spec_yaml import load_spec_yaml


def load_spec(path: str | None, overrides: list[str]) -> JobSpec:
    """The job spec in a YAML file, with `section.field=value` overrides (the
    value parsed as YAML); pydantic's errors name the field."""
    raw: dict[str, Any] = {}
    if path:
        with open(path) as f:
            loaded = load_spec_yaml(f.read()) or {}
        if not isinstance(loaded, dict):
            raise SpecError("spec", f"{path}: a job spec is a mapping, got {type(loaded).__name__}")
        raw = loaded
    for item in overrides:
        key, eq, value = item.partition("=")
        *parents, leaf = key.split(".")
        if not eq or not leaf:
            raise SpecError("--set", f"--set {item!r}: expected section.field=value")
        node = raw
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = load_spec_yaml(value)  # `--set train.lr=1e-3`: a number
    spec = JobSpec.model_validate(raw)
    if spec.model.config_uri is not None:  # an operator's own file: no tenant prefix here
        from workers.schema.hf_config import resolve_config_uri

        spec = resolve_config_uri(spec, spec.model.config_uri)
    return spec


def run_single_process(spec: JobSpec, timeout_s: float = 60.0) -> list[dict]:
    """Train `spec` in this process as a world of one; returns the metrics."""
    from workers.engine.trainer import train_rank

    init_single_process(timeout_s)
    try:
        return train_rank(spec)
    finally:
        destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.engine.local", description=__doc__)
    parser.add_argument("--config", help="a job spec YAML (what `brigade submit` takes)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    parser.add_argument("--timeout", type=float, default=60.0, help="process-group timeout (s)")
    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.config, args.set)
    except (ValidationError, SpecError) as e:
        print(f"error: {explain(e)}", file=sys.stderr)
        return 2

    import torch.distributed as dist

    from workers.engine.trainer import train_rank

    init_from_env(args.timeout)
    try:
        def emit(metrics: dict) -> None:
            if dist.get_rank() == 0:
                print(json.dumps(metrics), flush=True)

        train_rank(spec, on_step=emit)
    except SpecError as e:
        print(f"error: {explain(e)}", file=sys.stderr)
        return 2
    finally:
        destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
