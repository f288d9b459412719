"""Rank processes for the figures measured inside a process group: N spawned
processes on a free loopback port, each running `rank_main(rank, world_size,
port, *args, result)`, rank 0 writing what it measured to `result` as JSON.

    spawn_ranks(rank_main, world_size, *args, prefix="memory") -> what rank 0 wrote
    report(row, result)   in a rank: every rank's row, gathered; rank 0 writes them
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import OUT


def report(row: Any, result: str) -> None:
    """Every rank's `row`, gathered (a collective); rank 0 writes the list to
    `result`, what `spawn_ranks` returns."""
    import torch.distributed as dist

    rows: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(rows, row)
    if dist.get_rank() == 0:
        Path(result).write_text(json.dumps(rows))


def spawn_ranks(rank_main: Callable[..., None], world_size: int, *args: Any, prefix: str) -> Any:
    """Run `rank_main` on `world_size` spawned ranks; the JSON rank 0 wrote,
    its scratch folder (under bench/out/) removed whatever happened."""
    import torch.multiprocessing as mp

    from workers.engine.distributed import free_port

    OUT.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"{prefix}-ws{world_size}-", dir=OUT))
    try:
        result = workdir / "result.json"
        mp.start_processes(rank_main, args=(world_size, free_port(), *args, str(result)),
                           nprocs=world_size, start_method="spawn")
        return json.loads(result.read_text())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
