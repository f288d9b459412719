"""Rank processes for the figures measured inside a process group: N spawned
processes on a free loopback port, each running `rank_main(rank, world_size,
port, *args, result)`, rank 0 writing what it measured to `result` as JSON.

    spawn_ranks(rank_main, world_size, *args, prefix="memory") -> what rank 0 wrote
    with rank_group(rank, world_size, port): ...   in a rank: the process group
                          (gloo on loopback, one compute thread), destroyed after
    report(row, result)   in a rank: every rank's row, gathered; rank 0 writes them
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.report import OUT


@contextmanager
def rank_group(rank: int, world_size: int, port: int, timeout_s: float = 600) -> Iterator[None]:
    """This rank in the group of `world_size` on loopback `port`, computing on
    one thread (the ranks share the machine's cores); the group destroyed after."""
    import torch

    from workers.engine.distributed import LOOPBACK, Rendezvous, destroy_process_group, init_process_group

    torch.set_num_threads(1)
    init_process_group(Rendezvous(master_addr=LOOPBACK, master_port=port, rank=rank,
                                  world_size=world_size, timeout_s=timeout_s))
    try:
        yield
    finally:
        destroy_process_group()


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
