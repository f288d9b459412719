"""Recovery in place's device path, by hand, where a GPU is lent (CI has none):

    python -m bench.gpu_in_place --out gpu_in_place.json [--allow-cpu]

One process, a world of one (NCCL runs one rank a GPU): trains a tiny job
straight through; then again, capturing an in-memory snapshot every 5 steps
(device -> pinned host buffers, workers/engine/snapshot.py), stopped at step
12, the process group abandoned (NCCL's communicator aborted first, the path a
survivor of a lost peer takes: workers/engine/distributed.py
`abandon_process_group`), a new group formed in the same process, a trainer
built from the snapshot of step 10 (host -> device) and trained to the end.
Checks that the backend is NCCL, that the snapshot's buffers are pinned, and
that steps 11..20 after the restore follow the straight run; times the
capture, the abort and re-form, and the restore. `--allow-cpu` runs the same
on the CPU with gloo (what this machine can check; the figures are then not
the GPU's). Writes every figure to one JSON file; prints it.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.gpu_check import write_report

TINY = {
    "model": {"n_layers": 2, "d_model": 64, "n_heads": 4, "seq_len": 64},
    "data": {"source": "builtin"},
    "train": {"steps": 20, "global_batch_size": 16, "seed": 0, "lr": 3e-3, "warmup_steps": 5},
    "checkpoint": {"every_steps": 0, "memory_every_steps": 5},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="gpu_in_place.json")
    parser.add_argument("--allow-cpu", action="store_true", help="run on the CPU (gloo) too")
    args = parser.parse_args()
    import torch

    from workers.engine.distributed import abandon_process_group, init_single_process
    from workers.engine.trainer import Trainer
    from workers.schema import JobSpec

    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        print("no CUDA device: nothing to check (--allow-cpu runs the CPU path)", file=sys.stderr)
        return 2
    spec = JobSpec.model_validate(TINY)
    report: dict = {"torch": torch.__version__, "cuda": cuda,
                    "device": torch.cuda.get_device_name(0) if cuda else "cpu"}
    checks: dict[str, bool] = {}

    report["backend"] = init_single_process(timeout_s=120)
    straight = [row["loss"] for row in Trainer(spec).run()]
    abandon_process_group()

    init_single_process(timeout_s=120)
    trainer = Trainer(spec)
    taken = []
    trainer.run(stop_after=12, on_snapshot=lambda snapshot: taken.append(snapshot.step))
    snapshot = next(kept for kept in trainer.snapshots if kept.step == 10)
    payload = snapshot.payload()
    report["snapshots_taken_at"] = taken
    report["snapshot_bytes"] = payload.nbytes
    report["capture_s"] = snapshot.capture_s
    pinned = [t.is_pinned() for t in payload.tensors.values()] if cuda else []
    checks["backend is nccl on a CUDA device" if cuda else "backend is gloo on the CPU"] = (
        report["backend"] == ("nccl" if cuda else "gloo"))
    if cuda:
        checks["the snapshot's host buffers are pinned"] = bool(pinned) and all(pinned)

    started = time.perf_counter()
    abandon_process_group()  # NCCL: the communicator aborted, then destroyed
    init_single_process(timeout_s=120)
    report["abort_and_reform_s"] = time.perf_counter() - started
    started = time.perf_counter()
    restored = Trainer(spec, restore=payload, snapshots=trainer.snapshots)
    report["restore_build_s"] = time.perf_counter() - started
    del trainer
    after = restored.run()
    abandon_process_group()
    got = {row["step"]: row["loss"] for row in after}
    worst = max(abs(got[s] - straight[s - 1]) / max(abs(straight[s - 1]), 1e-12) for s in got)
    report["restored_steps"] = [min(got), max(got)]
    report["restored_max_rel_diff"] = worst
    report["restored_bitwise"] = all(got[s] == straight[s - 1] for s in got)
    checks["trained on from step 10 after the re-form"] = min(got) == 11 and max(got) == 20
    checks["the restored run follows the straight curve (1e-6)"] = worst < 1e-6

    return write_report(report, checks, args.out)


if __name__ == "__main__":
    sys.exit(main())
