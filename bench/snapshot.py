"""In-memory snapshots (workers/engine/snapshot.py): what a capture and an async
disk save hold the train loop, against a plain memcpy of the rank's state, and
a rank's peak memory with snapshots on, against its theory.

    .venv/bin/python -m bench.snapshot [--reps 6] [--world-sizes 1,2]

Each world size runs in its own spawned processes (a gloo group on 127.0.0.1,
one compute thread each: `bench.ranks`), the memory benchmark's GPT and batch
(bench/memory.py), AdamW. In each rank:

1. memory: two steps of the engine's `train_step` with snapshots off, then two
   with a capture after each (`Snapshot.capture`, its buffers allocated by a
   first capture before) while the rank holds a peer's payload: the next
   rank's, pickled as Ray pickles it (protocol 5, each tensor's bytes out of
   band: `SnapshotPayload.__reduce__`), written to a file (what Ray's object
   store holds) and read back into one buffer of this process, the payload's
   tensors views into it (what a receiver maps). Peak RSS growth (VmHWM, reset
   through /proc/self/clear_refs) over the RSS before the Trainer was built,
   against bench/memory.py's theory (16 B/param / N + the largest unit +
   activations: workers/engine/memory.py `peak_theory`) + the own snapshot +
   the peer's; and the same peak with snapshots off;
2. per repetition, interleaved so that the machine's noise hits all alike: a
   train step; a plain memcpy of the rank's state (`copy_` of every tensor a
   capture copies, into buffers allocated and touched once); a capture; an
   async disk save (`TrainerCheckpoints.save(blocking=False)`: its
   `checkpoint_stall_s`, what the loop is held; the write then waited for, off
   the measurement);
3. building, taking turns: `Trainer(spec)` (the seeded init of every
   parameter), `Trainer(spec, restore=payload)` (no init: `RestoredLater`,
   then `restore`) and `Trainer(spec)` then `restore` (the init the restore
   overwrites: what `RestoredLater` saves).

Ratios are medians of the per-repetition ratios, and best / best. Writes its
section of docs/benchmarks.md.
"""

from __future__ import annotations

import gc
import os
import pickle
import statistics
import sys
import time
from pathlib import Path

from bench.memory import MODEL, QUICK_MODEL, activations, one_off_growth, rss_bytes, status_bytes
from bench.memory import job as memory_job
from bench.ranks import rank_group, report, spawn_ranks
from bench.report import Figure, Goal, cli, load

COMMAND = ".venv/bin/python -m bench.snapshot"
MB = 1e6
COPY_GOAL, MEMORY_GOAL = 1.5, 1.2
BUILDS = ("init", "restore", "init_then_restore")


def job(model: dict) -> dict:
    return memory_job(model) | {"checkpoint": {"every_steps": 0, "keep_last": 1, "async": True}}


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_growth(base: int) -> int:
    return status_bytes("VmHWM")["VmHWM"] - base


class StateCopy:
    """A plain memcpy of what a capture copies: the same tensors, `copy_`d
    into CPU buffers allocated and touched once."""

    def __init__(self, trainer) -> None:
        from workers.engine.snapshot import captured_tensors

        self.trainer = trainer
        self.buffers = {k: t.detach().clone() for k, t in captured_tensors(trainer).items()}

    def copy(self) -> float:
        from workers.engine.snapshot import captured_tensors

        start = time.perf_counter()
        sources = captured_tensors(self.trainer)  # a capture reads them afresh too
        for key, buffer in self.buffers.items():
            buffer.copy_(sources[key])
        return time.perf_counter() - start


def send(payload, path: Path) -> None:
    """What Ray does with a payload sent to a peer: pickle it (the tensors out
    of band) and put the bytes in its store: here a file."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(payload, protocol=5, buffer_callback=buffers.append)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        for b in buffers:
            view = memoryview(b).cast("B")
            f.write(len(view).to_bytes(8, "little"))
            f.write(view)


def receive(path: Path):
    """A peer's payload as a receiver holds it: the bytes read once into one
    buffer, the tensors views into it (no second copy)."""
    data = bytearray(os.path.getsize(path))
    with open(path, "rb") as f:
        f.readinto(data)
    view = memoryview(data)
    n = int.from_bytes(view[:8], "little")
    head, at, buffers = view[8:8 + n], 8 + n, []
    while at < len(view):
        size = int.from_bytes(view[at:at + 8], "little")
        buffers.append(view[at + 8:at + 8 + size])
        at += 8 + size
    return pickle.loads(head, buffers=buffers)


def rank_main(rank: int, world_size: int, port: int, model: dict, reps: int, result: str) -> None:
    import torch.distributed as dist

    from checkpoints import CheckpointTarget
    from workers.engine.checkpointing import TrainerCheckpoints
    from workers.engine.snapshot import Snapshot, restore
    from workers.engine.trainer import Trainer
    from workers.schema import JobSpec

    scratch = Path(result).parent
    with rank_group(rank, world_size, port):
        spec = JobSpec.model_validate(job(model))
        row: dict = {"rank": rank, "one_off": one_off_growth(spec)}
        dist.barrier()
        base = rss_bytes()
        trainer = Trainer(spec)
        for _ in range(2):  # AdamW's state exists from step 1 on
            trainer.train_step()
        reset_peak()
        for _ in range(2):
            trainer.train_step()
        row["peak_off"] = peak_growth(base)

        snapshot = Snapshot(trainer.device)
        snapshot.capture(trainer)  # allocates its buffers
        send(snapshot.payload(), scratch / f"payload-{rank}")
        dist.barrier()
        held = receive(scratch / f"payload-{(rank + 1) % world_size}")
        row["own_bytes"], row["peer_bytes"] = snapshot.nbytes, held.nbytes
        reset_peak()
        for _ in range(2):
            trainer.train_step()
            snapshot.capture(trainer)
        row["peak_on"] = peak_growth(base)

        target = CheckpointTarget(root=f"file://{scratch}/ckpt", tenant="bench",
                                  job=f"ws{world_size}", secret="bench-secret")
        saves = TrainerCheckpoints(target, spec, model=trainer.model, optimizer=trainer.optimizer,
                                   train_state=trainer.state, mesh_shape=tuple(trainer.mesh.shape))
        state = StateCopy(trainer)
        row["state_bytes"] = sum(b.nbytes for b in state.buffers.values())
        trainer.train_step()
        saves.save(blocking=False)  # the first allocates its staging copy
        saves.checkpointer.wait()
        rows = []
        for _ in range(reps):
            rep: dict = {}
            dist.barrier()
            rep["step_s"] = trainer.train_step().step_time_s
            dist.barrier()
            rep["memcpy_s"] = state.copy()
            dist.barrier()
            start = time.perf_counter()
            snapshot.capture(trainer)
            rep["capture_s"] = time.perf_counter() - start
            dist.barrier()
            out = saves.save(blocking=False)
            if "checkpoint_error" in out:
                raise RuntimeError(out["checkpoint_error"])
            rep["hold_s"] = out["checkpoint_stall_s"]
            saves.checkpointer.wait()
            rows.append(rep)
            if rank == 0:
                print(f"ws{world_size}: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in rep.items()),
                      file=sys.stderr, flush=True)
        saves.close()
        row["reps"] = rows

        payload = snapshot.payload()
        builds: dict[str, list[float]] = {how: [] for how in BUILDS}
        for i in range(len(BUILDS) * max(2, reps // 2)):
            how = BUILDS[i % len(BUILDS)]
            gc.collect()
            dist.barrier()
            start = time.perf_counter()
            if how == "init":
                built = Trainer(spec)
            elif how == "init_then_restore":  # what a restore without RestoredLater would cost
                built = Trainer(spec)
                restore(built, payload)
            else:
                built = Trainer(spec, restore=payload)
            builds[how].append(time.perf_counter() - start)
            built.batches.close()
            del built
        row["build_s"] = builds
        report(row, result)


FINDINGS = """
What the figures leave out:

- The async disk save's staging copy is not in the memory table (`every_steps` 0 there): it is
  another copy of the rank's state (12 B/param / N with AdamW), kept while the checkpointer
  lives, so a rank that saves asynchronously and snapshots holds state + staging + own + peer's.
  The disk save could write from the snapshot's buffers instead (a capture at the save's step,
  lent to the writer as to a peer): not done.
- The peer's payload is held as a receiver on another node holds it once Ray has copied it
  (its bytes in memory once, the tensors views into them); on one node Ray's object store holds
  that copy in shared memory, outside the rank's own heap.
- CPU only: on a GPU a capture copies device to pinned host memory asynchronously and waits
  once; that path is not measured here.
- The automatic interval is 1 here: a step takes seconds on these cores and a capture tens of
  milliseconds (the rule: capture_s / (k x step_s) <= 0.02).
"""


def med(values) -> float:
    return statistics.median(values)


def ratio(rows: list[dict], ours: str, floor: str = "memcpy_s") -> tuple[float, float]:
    """(median of per-rep ours / floor, best / best): <= 1 is as fast as the floor."""
    return (med(r[ours] / r[floor] for r in rows),
            min(r[ours] for r in rows) / min(r[floor] for r in rows))


def add_args(parser) -> None:
    parser.add_argument("--reps", type=int, default=None, help="default 6 (--quick: 2)")
    parser.add_argument("--world-sizes", default=None, help="default 1,2 (--quick: 1)")


def run(args) -> Figure:
    from workers.engine.memory import peak_theory
    from workers.engine.snapshot import automatic_interval
    from workers.schema import JobSpec

    model = QUICK_MODEL if args.quick else MODEL
    reps = args.reps or (2 if args.quick else 6)
    world_sizes = args.world_sizes or ("1" if args.quick else "1,2")
    sizes = [int(n) for n in world_sizes.split(",")]
    results = {}
    for n in sizes:
        before = load()
        results[n] = {"ranks": spawn_ranks(rank_main, n, model, reps, prefix="snapshot"),
                      "load": (before, load())}
    spec = JobSpec.model_validate(job(model))
    acts = activations(model, sizes)
    theory = {n: peak_theory(spec, n, acts[n]).total for n in sizes}

    lines = [
        "GPT " + ", ".join(f"{k} {v}" for k, v in model.items())
        + f" ({spec.model.num_params() / 1e6:.1f} M params), bench/memory.py's job: FSDP2 "
        "`full_shard`, fp32, AdamW, a global batch of 12; N spawned processes on these 2 cores "
        f"(gloo), one compute thread each; {reps} repetitions. A snapshot holds params + "
        "exp_avg + exp_avg_sq (12 B/param / N) and the scalars (`step`, the train state).",
        "",
        "### What a capture and an async save hold the train loop, against a memcpy", "",
        "memcpy: `copy_` of the tensors a capture copies into buffers allocated once, their list "
        "read afresh as a capture reads it. Capture: `Snapshot.capture` (the same copies, the "
        "optimizer's hyper-parameters, the train state). Async hold: the `checkpoint_stall_s` of "
        "`TrainerCheckpoints.save(blocking=False)`, `checkpoint.async`'s default now (FSDP's "
        "`get_state_dict` and the staging copy into buffers kept between saves: "
        "checkpoints/staging.py); the write is waited for after, off the measurement. Per "
        "rank (the slowest rank's median).",
        "",
        "| N | rank's state | train step | memcpy | capture | capture / memcpy: median "
        "| best / best | async hold | hold / memcpy: median | best / best | automatic interval |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    capture_worst = hold_worst = 0.0
    for n in sizes:
        ranks = results[n]["ranks"]
        cap = max((ratio(r["reps"], "capture_s") for r in ranks), key=lambda x: x[0])
        hold = max((ratio(r["reps"], "hold_s") for r in ranks), key=lambda x: x[0])
        capture_worst, hold_worst = max(capture_worst, cap[0]), max(hold_worst, hold[0])
        slow = max(ranks, key=lambda r: med(x["capture_s"] for x in r["reps"]))
        step_s = med(x["step_s"] for x in slow["reps"])
        capture_s = med(x["capture_s"] for x in slow["reps"])

        def ms(key: str, rank: dict = slow) -> str:
            return f"{med(x[key] for x in rank['reps']) * 1e3:.1f} ms"

        lines.append(
            f"| {n} | {slow['state_bytes'] / MB:.0f} MB | {step_s:.2f} s | {ms('memcpy_s')} "
            f"| {ms('capture_s')} | {cap[0]:.2f}x | {cap[1]:.2f}x | {ms('hold_s')} "
            f"| {hold[0]:.2f}x | {hold[1]:.2f}x | {automatic_interval(capture_s, step_s)} "
            f"({capture_s / step_s:.2%} of a step) |")
    lines += [
        "",
        "### A rank's peak memory with snapshots on", "",
        "Peak RSS growth over the RSS before the Trainer was built (bench/memory.py's baseline: "
        "after the imports, the group and a one-layer warm-up), over two steps each: snapshots "
        "off; then a capture after each step while the rank holds the next rank's payload as a "
        "receiver does (read once into one buffer, the tensors views into it: "
        "`SnapshotPayload.__reduce__` pickles them out of band, as Ray does). Theory: "
        "workers/engine/memory.py's `peak_theory` (16 B/param / N + the largest unit + the "
        "activations; bench/memory.py holds the measured peak within 1.29-1.5x of it) + the "
        "own snapshot + the peer's. The increment is what turning snapshots on added to the "
        "peak, against own + peer.",
        "",
        "| N | theory, off (MB) | own + peer (MB) | peak growth off / on, max rank (MB) "
        "| on / (theory + own + peer) | goal <= 1.2x | increment / (own + peer) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    memory_worst = 0.0
    for n in sizes:
        ranks = results[n]["ranks"]
        worst = max(ranks, key=lambda r: r["peak_on"] / (theory[n] + r["own_bytes"] + r["peer_bytes"]))
        copies = worst["own_bytes"] + worst["peer_bytes"]
        on = worst["peak_on"] / (theory[n] + copies)
        memory_worst = max(memory_worst, on)
        lines.append(
            f"| {n} | {theory[n] / MB:.0f} | {worst['own_bytes'] / MB:.0f} + "
            f"{worst['peer_bytes'] / MB:.0f} | {worst['peak_off'] / MB:.0f} / "
            f"{worst['peak_on'] / MB:.0f} | {on:.2f}x | {verdict(on <= MEMORY_GOAL)} "
            f"| {(worst['peak_on'] - worst['peak_off']) / copies:.2f}x |")
    lines += [
        "",
        "### Building a trainer that a snapshot restores", "",
        "`Trainer(spec)` fills every parameter from its own seeded generator (the whole "
        "parameter generated, this rank's piece kept: workers/engine/build.py); "
        "`Trainer(spec, restore=payload)` builds without filling (`RestoredLater`) and copies "
        "the payload in (`restore`: the parameters and, made afresh, the optimizer's state); "
        "init then restore is what the restore would cost without skipping the init it "
        "overwrites. Medians, rank 0, taking turns.",
        "",
        "| N | build with init (a fresh start) | build, init skipped, + restore "
        "| build with init + restore | skipped / not |",
        "| --- | --- | --- | --- | --- |",
    ]
    for n in sizes:
        b = {how: med(v) for how, v in results[n]["ranks"][0]["build_s"].items()}
        lines.append(f"| {n} | {b['init']:.2f} s | {b['restore']:.2f} s "
                     f"| {b['init_then_restore']:.2f} s "
                     f"| {b['restore'] / b['init_then_restore']:.2f}x |")
    lines += ["", FINDINGS.strip()]
    lines += ["", "Load average (1 min) per world size: " + ", ".join(
        f"{n}: {results[n]['load'][0]:.2f} before, {results[n]['load'][1]:.2f} after"
        for n in sizes) + "."]

    return Figure(
        name="snapshot",
        title="In-memory snapshots: capture and async-save hold vs a memcpy, memory per rank",
        command=f"{COMMAND} --reps {reps} --world-sizes {world_sizes}"
                + (" --quick" if args.quick else ""),
        body="\n".join(lines) + "\n",
        headline=(f"capture / memcpy at most {capture_worst:.2f}x, async hold / memcpy at most "
                  f"{hold_worst:.2f}x; peak RSS growth with snapshots at most {memory_worst:.2f}x "
                  "(theory + own + peer's)"),
        goals=[Goal(f"capture <= {COPY_GOAL}x a memcpy of the rank's state (median of per-rep "
                    "ratios, worst rank)", f"{capture_worst:.2f}x", capture_worst <= COPY_GOAL),
               Goal(f"async save's hold <= {COPY_GOAL}x a memcpy of the rank's state (median of "
                    "per-rep ratios, worst rank)", f"{hold_worst:.2f}x", hold_worst <= COPY_GOAL),
               Goal(f"peak RSS growth with snapshots <= {MEMORY_GOAL}x (theory + own snapshot + "
                    "a peer's)", f"{memory_worst:.2f}x", memory_worst <= MEMORY_GOAL)],
    )


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


if __name__ == "__main__":
    cli("snapshot", __doc__, add_args, run)
