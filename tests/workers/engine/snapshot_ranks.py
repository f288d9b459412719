"""What the ranks of test_snapshot.py run (module-level, so that ranks spawned
by `tests.checkpoints.ckpt_harness.run_ranks` import it).

`recover_in_place`: recovery in place, as the rank actors will do it, in the
same processes: an uninterrupted run for reference; a run that captures a
snapshot every 2 steps and stops short (a rank "lost"); then the group is
destroyed and a new one formed (a new store), and every rank builds a new
Trainer restored from its snapshot and trains to the end: once from the
payload as it is (the rank's own), once from its pickled bytes (as a peer
holds it, Ray's copy), and with gradient compression once more without the
residuals (what restoring them buys). Rank 0 writes what it saw as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

from tests.workers.engine_spec import engine_job

STEPS, LOST_AFTER, EVERY = 8, 5, 2  # the last snapshot before the loss: step 4


def spec(world_size: int, sharding: dict):
    return engine_job(STEPS, workers=world_size, data={"source": "synthetic"},
                      sharding=sharding, checkpoint={"memory_every_steps": EVERY})


def _new_group(rank: int, world_size: int, store: str) -> None:
    dist.destroy_process_group()
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=60))


def _losses(rows: list[dict]) -> list[float]:
    return [row["loss"] for row in rows]


def recover_in_place(rank: int, world_size: int, out: str, sharding: dict) -> None:
    from workers.engine.trainer import Trainer

    job = spec(world_size, sharding)
    reference = Trainer(job)
    seen: dict = {"reference": _losses(reference.run()), "digests": reference.state_digests()}

    first = Trainer(job)
    pickled: list[bytes] = []

    def send(snapshot) -> None:  # what the rank actor does, in its sending thread
        with snapshot.lend() as payload:
            pickled.append(pickle.dumps(payload))

    seen["first"] = _losses(first.run(stop_after=LOST_AFTER, on_snapshot=send))
    assert first.snapshot is not None
    payload = first.snapshot.payload()
    seen["snapshot_step"], seen["sent_steps"] = payload.step, [pickle.loads(b).step for b in pickled]
    seen["residuals"] = sum(1 for k in payload.tensors if k[0] == "residual")
    seen["nbytes"] = payload.nbytes

    variants = {"own": payload, "pickled": pickle.loads(pickled[-1])}
    if seen["residuals"]:
        variants["no_residuals"] = dataclasses.replace(
            payload, tensors={k: v for k, v in payload.tensors.items() if k[0] != "residual"})
    for i, (name, held) in enumerate(variants.items()):
        _new_group(rank, world_size, f"{out}/store-{i}")
        restored = Trainer(job, restore=held)
        seen[f"{name}_resumed_from"] = restored.resumed_from
        rows = restored.run()
        seen[f"{name}_steps"] = [row["step"] for row in rows]
        seen[name] = _losses(rows)
        seen[f"{name}_digests"] = restored.state_digests()
    if rank == 0:
        Path(f"{out}/seen.json").write_text(json.dumps(seen))
