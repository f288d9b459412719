"""Run the engine without Ray: one process, or under torchrun.

    python -m workers.local --config job.yaml            # one process
    torchrun --nproc-per-node 2 -m workers.local --config job.yaml

Rank 0 prints one JSON line of metrics per step. The same `Trainer` runs in
the Ray rank actors; this path is for debugging and for measuring our overhead.
"""

from __future__ import annotations

import argparse
import json
import sys

import yaml

from workers.config import ConfigError, JobConfig
from workers.distributed import destroy_process_group, init_from_env, init_single_process


def load_config(path: str | None, overrides: list[str]) -> JobConfig:
    raw: dict = {}
    if path:
        with open(path) as f:
            raw = yaml.safe_load(f) or {}
    for item in overrides:  # section.field=value, value parsed as YAML
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        if not name or not _:
            raise ConfigError(f"--set {item!r}: expected section.field=value")
        raw.setdefault(section, {})[name] = yaml.safe_load(value)
    return JobConfig.from_dict(raw)


def run_single_process(config: JobConfig, timeout_s: float = 60.0) -> list[dict]:
    """Train `config` in this process as a world of one; returns the metrics."""
    from workers.trainer import train_rank

    init_single_process(timeout_s)
    try:
        return train_rank(config)
    finally:
        destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.local", description=__doc__)
    parser.add_argument("--config", help="job config YAML (sections: model, data, sharding, optim, train)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    parser.add_argument("--timeout", type=float, default=60.0, help="process-group timeout (s)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, args.set)
    except (ConfigError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    from workers.trainer import train_rank
    import torch.distributed as dist

    init_from_env(args.timeout)
    try:
        def emit(metrics: dict) -> None:
            if dist.get_rank() == 0:
                print(json.dumps(metrics), flush=True)

        train_rank(config, on_step=emit)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
