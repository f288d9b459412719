"""Each optimizer's state per rank against the memory theory its descriptor
gives (workers/schema/recipes.py), its peak RSS and its step time.

    .venv/bin/python -m bench.optimizers [--world-sizes 1,2,4] [--optimizers adamw,sgd]

For each registered optimizer of `OPTIMIZERS` (each as the `train` fields that
choose it) and world size N, N spawned processes (a gloo group on 127.0.0.1)
build bench/memory.py's GPT with FSDP2 `full_shard`, train three engine steps
(`Trainer.train_step`), then run one more forward and backward so that every
gradient exists, and each rank counts

- its sharded state, exactly: numel x element size of its local shard of
  every parameter, every gradient and every optimizer state tensor (the
  per-parameter `step` scalars apart), against the engine's
  `mem_theory_bytes` metric: 8 B/param / N of fp32 params and grads plus the
  optimizer's own count (AdamW and Adam 8 B/param / N, SGD's momentum 4, none
  without);
- its peak RSS growth over the baseline bench/memory.py takes (after the
  imports, the process group and a one-layer Trainer's two steps), against
  workers/engine/memory.py's `peak_theory` (that state + the largest unit
  gathered and its gradient + the activations autograd saves);
- the median time of steps 2 and 3 (the optimizer's state exists from step 1 on);
- what the optimizer's own collectives moved in step 3 (Muon's and Adafactor's
  gathers of whole matrices and Muon's broadcasts of its results,
  workers/engine/whole_matrix.py: the metric's `optimizer_*` ops) against
  what it says they should (`comm_bytes_per_step`).

Then the whole-matrix optimizers' exactness, on the tests' tiny GPT (8 steps,
a global batch of 12): the largest loss difference from one process at world
sizes 2 and 3, against the one that a one-ulp nudge of one process's gradient
makes (every element of every other gradient one ulp up, before each step),
for AdamW beside them. A sharded gradient differs from one process's in its
last bits (the reduction's order): the nudge is the size of that difference,
so it shows how much an optimizer amplifies it.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from bench.memory import (
    MODEL,
    QUICK_MODEL,
    PhaseProfile,
    activations,
    job,
    local_bytes,
    one_off_growth,
    optimizer_state_bytes,
)
from bench.ranks import rank_group, report, spawn_ranks
from bench.report import Figure, Goal, cli, load

MB = 1e6
# The optimizers compared, each as the train fields that choose it. An
# optimizer added to Brigade adds its entry here (and reruns this figure).
OPTIMIZERS: dict[str, dict] = {
    "adamw": {},
    "adam": {"optimizer": "adam"},
    "sgd": {"optimizer": "sgd", "momentum": 0.9, "nesterov": True},
    "sgd (no momentum)": {"optimizer": "sgd"},
    "muon": {"optimizer": "muon"},
    "adafactor": {"optimizer": "adafactor"},
}
# The exactness runs: the tests' tiny GPT (tests/workers/engine_spec.py), 8 steps.
EXACT_MODEL = {"n_layers": 2, "d_model": 48, "n_heads": 4, "seq_len": 32, "vocab_size": 256}
EXACT_STEPS = 8
EXACT = {"adamw": {"warmup_steps": 2}, "muon": {"optimizer": "muon", "warmup_steps": 2},
         "adafactor": {"optimizer": "adafactor", "lr": 0.01, "warmup_steps": 2}}


def spec_of(model: dict, train: dict):
    from workers.schema import JobSpec

    raw = job(model)
    raw["train"] = raw["train"] | train
    return JobSpec.model_validate(raw)


def rank_main(rank: int, world_size: int, port: int, model: dict, train: dict, result: str) -> None:
    import torch

    import torch.distributed as dist
    import torch.nn.functional as F

    from workers.engine.trainer import Trainer

    with rank_group(rank, world_size, port):
        spec = spec_of(model, train)
        warm_up = one_off_growth(spec)
        dist.barrier()
        profile = PhaseProfile()
        trainer = Trainer(spec)
        profile.mark("build (Trainer)")
        times, optimizer_bytes = [], 0
        for step in (1, 2, 3):
            profile.step = step
            start = time.perf_counter()
            metrics = trainer.train_step()
            times.append(time.perf_counter() - start)
            optimizer_bytes = sum(v for op, v in metrics.comm_bytes_by_op.items()
                                  if op.startswith("optimizer_"))
            profile.mark("step")
        x, y = trainer.batches.next_batch()  # a fourth forward and backward: every gradient exists
        F.cross_entropy(trainer.model(x).float().flatten(0, 1), y.flatten()).backward()
        profile.mark("backward")

        params = list(trainer.model.parameters())
        state, step_bytes = optimizer_state_bytes(trainer.optimizer)
        row = {"rank": rank, "num_params": trainer.num_params, "warm_up": warm_up,
               "growth": profile.peak(), "theory": metrics.mem_theory_bytes,
               "param_bytes": sum(local_bytes(p)[1] for p in params),
               "grad_bytes": sum(local_bytes(p.grad)[1] for p in params if p.grad is not None),
               "optim_bytes": state, "optim_step_bytes": step_bytes,
               "step_s": statistics.median(times[1:]), "optimizer_comm": optimizer_bytes,
               "optimizer_comm_theory": getattr(trainer.optimizer, "comm_bytes_per_step", 0.0)}
        row["state_bytes"] = row["param_bytes"] + row["grad_bytes"] + state
        trainer.batches.close()
        report(row, result)


def run_world(world_size: int, model: dict, train: dict) -> list[dict]:
    return spawn_ranks(rank_main, world_size, model, train, prefix="optimizers")


def exact_rank(rank: int, world_size: int, port: int, train: dict, nudge: bool,
               result: str) -> None:
    """EXACT_STEPS engine steps of the tiny GPT; with `nudge`, every other
    element of each gradient one ulp up before each optimizer step."""
    import torch

    from workers.engine.trainer import Trainer
    from workers.schema import JobSpec

    with rank_group(rank, world_size, port):
        spec = JobSpec.model_validate({
            "model": EXACT_MODEL, "data": {"source": "synthetic"},
            "train": {"steps": EXACT_STEPS, "global_batch_size": 12, "lr": 3e-3} | train,
            "checkpoint": {"every_steps": 0}})
        trainer = Trainer(spec)

        def one_ulp_up(optimizer, args, kwargs) -> None:
            for p in trainer.model.parameters():
                g = p.grad.to_local().view(-1)
                g[::2] = torch.nextafter(g[::2], torch.full_like(g[::2], float("inf")))

        if nudge:
            trainer.optimizer.register_step_pre_hook(one_ulp_up)
        losses = [trainer.train_step().loss for _ in range(EXACT_STEPS)]
        trainer.batches.close()
        if rank == 0:
            Path(result).write_text(json.dumps(losses))


def exact_losses(world_size: int, train: dict, nudge: bool = False) -> list[float]:
    return spawn_ranks(exact_rank, world_size, train, nudge, prefix="exact")


def exactness(quick: bool) -> tuple[list[str], dict[str, dict[str, float]]]:
    """Each EXACT optimizer's largest loss difference from one process: nudged,
    and at world sizes 2 and 3 (2 alone with --quick)."""
    sizes = (2,) if quick else (2, 3)
    found: dict[str, dict[str, float]] = {}
    rows = []
    for name, train in EXACT.items():
        reference = exact_losses(1, train)
        runs = {"nudge": exact_losses(1, train, nudge=True),
                **{f"N={n}": exact_losses(n, train) for n in sizes}}
        found[name] = {k: max(abs(a - b) for a, b in zip(losses, reference, strict=True))
                       for k, losses in runs.items()}
        rows.append(f"| {name} | `{json.dumps(train)}` | {reference[0] - reference[-1]:.3f} | "
                    + " | ".join(f"{v:.1e}" for v in found[name].values()) + " |")
    head = ("| optimizer | train | loss fallen over the 8 steps | one process nudged one ulp | "
            + " | ".join(f"world size {n}" for n in sizes) + " |")
    return [head, "|" + " --- |" * (3 + 1 + len(sizes)), *rows], found


def gathers(ranks: list[dict]) -> str:
    """The optimizer's own gathers in a step, theory / measured (max rank), or "-"."""
    big = max(ranks, key=lambda r: r["optimizer_comm"])
    if not big["optimizer_comm_theory"]:
        return "-"
    return f"{big['optimizer_comm_theory'] / MB:.2f} / {big['optimizer_comm'] / MB:.2f}"


def exact_goals(found: dict[str, dict[str, float]] | None) -> list[Goal]:
    if found is None:
        return []
    adafactor = max(v for k, v in found["adafactor"].items() if k != "nudge")
    muon = max(v for k, v in found["muon"].items() if k != "nudge")
    return [Goal("Adafactor sharded = one process (within 1e-5)", f"{adafactor:.1e}",
                 adafactor <= 1e-5),
            Goal("Muon sharded = one process within what a one-ulp nudge of one process's "
                 "gradient moves it (x2)", f"{muon:.1e} against {found['muon']['nudge']:.1e}",
                 muon <= 2 * found["muon"]["nudge"])]


WHOLE_MATRIX_NOTE = (
    "Muon and Adafactor (workers/engine/whole_matrix.py) compute each update on the whole "
    "matrix, never on a shard. Muon's momentum is sharded like its matrix (4 B/param / N on "
    "the blocks' matrices, AdamW's 8 on the rest); once a step each matrix's momentum is "
    "gathered whole ((N-1)/N of its fp32 bytes), torch's Newton-Schulz runs on it on one "
    "rank (the matrices dealt out by size, so each rank runs about 1/N of the iterations), "
    "which broadcasts the bf16 result (its bytes, received by each other rank: the "
    "collectives' column counts both), and every rank keeps its piece. Adafactor gathers each "
    "parameter and its gradient (twice (N-1)/N of the model's bytes a step) and runs torch's "
    "update on the whole tensor; its factored moments, a row and a column vector per matrix "
    "and a full one per vector, are held whole on every rank (so that part does not shrink "
    "with N; it is small). Beyond the state, a step holds transiently one whole matrix at a "
    "time: Muon's momentum and its bf16 iterates, Adafactor's parameter, gradient, variance "
    "estimate and update (the peak theory leaves these out: they come after backward has "
    "freed the activations). Muon's extra step time over AdamW's is its "
    "Newton-Schulz: bf16 matrix products, slow on these CPUs (no bf16 instructions), a 1/N share "
    "of them on each rank.")
EXACTNESS_NOTE = (
    "**Exactness.** The update is torch's own on the unsharded matrix, bit for bit, at "
    "world sizes 1 to 3 (tests/workers/engine/test_whole_matrix.py); torch's Muon handed "
    "FSDP2's DTensor shards lands 4-5e-4 from it after two steps on a 22 x 12 matrix (2% of "
    "the update), torch's Adafactor raises on them. What a sharded run's loss can still "
    "differ by comes from the gradient: a sharded gradient's sum runs in another order, so "
    "its last bits differ from one process's. AdamW and Adafactor carry that through "
    "unchanged; Muon's Newton-Schulz runs in bfloat16 (torch's), whose rounding turns "
    "last-bit differences into bf16-sized ones that its iteration then amplifies. The "
    "table: the largest loss difference from one process over 8 steps (lr 3e-3; Adafactor "
    "1e-2), with one process's gradient nudged one ulp up on every other element before "
    "each step, and at world sizes 2 and 3 (FSDP `full_shard`).")


def add_args(parser) -> None:
    parser.add_argument("--world-sizes", default="1,2,4")
    parser.add_argument("--optimizers", default=",".join(OPTIMIZERS),
                        help=f"of: {', '.join(OPTIMIZERS)}")


def run(args) -> Figure:
    from workers.engine.memory import peak_theory

    model = QUICK_MODEL if args.quick else MODEL
    sizes = [int(n) for n in args.world_sizes.split(",")]
    names = [n for n in args.optimizers.split(",") if n]
    acts = activations(model, sizes)
    rows, worst_state, worst_peak = [], 0.0, 0.0
    params = 0
    found: dict[str, dict[str, float]] | None = None
    for name in names:
        train = OPTIMIZERS[name]
        spec = spec_of(model, train)
        for n in sizes:
            before = load()
            ranks = run_world(n, model, train)
            after = load()
            params = ranks[0]["num_params"]
            big = max(ranks, key=lambda r: r["state_bytes"])
            theory = big["theory"]  # the metric: the same on every rank
            optim_theory = theory - 8 * params / n
            ratio = big["state_bytes"] / theory
            worst_state = max(worst_state, abs(ratio - 1))
            peak = peak_theory(spec, n, acts[n]).total
            growth = max(r["growth"] for r in ranks)
            worst_peak = max(worst_peak, growth / peak)
            print(f"{name} N={n}: state {big['state_bytes'] / MB:.2f} MB vs {theory / MB:.2f} MB, "
                  f"growth {growth / MB:.0f} MB vs {peak / MB:.0f} MB", file=sys.stderr)
            rows.append(
                f"| {name} | {n} | {theory / MB:.2f} | {big['state_bytes'] / MB:.2f} | {ratio:.4f} "
                f"| {optim_theory / MB:.2f} / {big['optim_bytes'] / MB:.2f} "
                f"| {big['optim_step_bytes']} | {peak / MB:.0f} | {growth / MB:.0f} "
                f"| {growth / peak:.2f}x | {statistics.median(r['step_s'] for r in ranks):.3f} "
                f"| {gathers(ranks)} | {before:.2f} / {after:.2f} |")
    lines = [
        "GPT " + ", ".join(f"{k} {v}" for k, v in model.items()) + f": P = {params:,} params. "
        "FSDP2 `full_shard`, fp32, a global batch of 12; N spawned processes on these 2 cores "
        "(gloo), one thread each; each optimizer as `train` sets it ("
        + "; ".join(f"{name}: `{json.dumps(t) if t else 'the default'}`"
                    for name, t in OPTIMIZERS.items() if name in names) + "). "
        "*Theory* is the engine's `mem_theory_bytes` metric, 8 B/param / N of params and grads "
        "plus the optimizer's state as its descriptor counts it (workers/schema/recipes.py); "
        "*measured* is the exact count of this rank's local shards of params, grads and the "
        "optimizer's state tensors (its `step` scalars apart), the rank holding most. The peak "
        "is bench/memory.py's: peak RSS growth over the baseline, against `peak_theory` "
        "(that state + the largest unit gathered and its gradient + the activations). The "
        "step time is only comparable between rows run at a like load (its last column): "
        "these 2 cores are shared, and one thread a rank leaves an optimizer's elementwise "
        "update a small part of a step.",
        "",
        "| optimizer | N | state theory (MB) | measured, max rank (MB) | measured / theory "
        "| of which optimizer state: theory / measured (MB) | `step` scalars (B) "
        "| peak theory (MB) | peak RSS growth, max rank (MB) | growth / peak theory "
        "| step time, median rank (s) | optimizer's collectives per step: theory / measured "
        "(MB, max rank) | load before / after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        WHOLE_MATRIX_NOTE,
        "",
    ]
    if {"muon", "adafactor"} <= set(names):
        table, found = exactness(args.quick)
        lines += [EXACTNESS_NOTE, "", *table, ""]
    return Figure(
        name="optimizers", title="Optimizers: state per rank vs the memory theory, step time",
        command=f".venv/bin/python -m bench.optimizers --world-sizes {args.world_sizes}"
                + (f" --optimizers {args.optimizers}" if names != list(OPTIMIZERS) else "")
                + (" --quick" if args.quick else ""),
        body="\n".join(lines),
        headline=f"{', '.join(names)}: measured state / theory within {worst_state:.2%} at "
                 f"N = {args.world_sizes}; peak RSS growth at most {worst_peak:.2f}x its theory",
        goals=[*exact_goals(found),
               Goal("each optimizer's per-rank state = its theory (within 1%)",
                    f"worst off by {worst_state:.2%}", worst_state <= 0.01),
               Goal("peak RSS growth per rank <= 1.5x its theory, every optimizer",
                    f"worst {worst_peak:.2f}x", worst_peak <= 1.5)],
    )


if __name__ == "__main__":
    cli("optimizers", __doc__, add_args, run)
