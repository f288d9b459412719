"""What the ranks of test_compile.py run (module-level, so that ranks spawned by
`tests.checkpoints.ckpt_harness.run_ranks` import it).

`compiled_and_eager`: the engine's Trainer trains the tiny GPT eagerly and with
`train.compile`, plain and with int8 gradients (whose error feedback the
warm-up must leave empty), and rank 0 writes each run's losses, and how long
the compiled runs' warm-ups took.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.workers.engine_spec import engine_job

RUNS = {"eager": {}, "int8": {"sharding": {"grad_compression": "int8"}}}


def compiled_and_eager(rank: int, world_size: int, out: str, steps: int) -> None:
    from workers.engine.trainer import Trainer

    found: dict = {}
    for name, sections in RUNS.items():
        for compiled in (False, True):
            train = {"compile": compiled} | sections.get("train", {})
            trainer = Trainer(engine_job(steps, workers=world_size, data={"source": "synthetic"},
                                         **(sections | {"train": train})))
            start = time.perf_counter()
            found[f"{name}/warmed_up" + ("/compiled" if compiled else "")] = trainer.warm_up()
            found[f"{name}/warm_up_s" + ("/compiled" if compiled else "")] = time.perf_counter() - start
            key = f"{name}/compiled" if compiled else name
            found[key] = [row["loss"] for row in trainer.run()]
    if rank == 0:
        Path(f"{out}/losses.json").write_text(json.dumps(found))
