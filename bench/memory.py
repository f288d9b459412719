"""Per-rank memory of `full_shard` against the primer's 16 B/param / N, and
of building the model against 4 B/param / N plus the largest unit.

    .venv/bin/python -m bench.memory [--world-sizes 1,2,3,4]

For each world size N, N spawned processes (a gloo group on 127.0.0.1) build
the same GPT with FSDP2 `full_shard` and AdamW, train one step, then run one
more forward and backward so that every gradient exists, and each rank counts

- its sharded state, exactly: the numel x element size of its local shard of
  every parameter, every gradient and every optimizer state tensor (AdamW's
  exp_avg and exp_avg_sq; its per-parameter `step` scalars are counted
  apart). The primer's 16 B/param is 4 (fp32 param) + 4 (grad) + 4 + 4 (the
  two moments); summed over the ranks this is 16 x P exactly;
- the process's peak RSS growth: `ru_maxrss` at the end minus the RSS just
  before the model was built. It holds the state above plus what a step
  needs besides it (activations, one FSDP unit all-gathered at a time, gloo's
  buffers, the allocator's slack): CPUs have no per-step allocator peak like
  `torch.cuda.max_memory_allocated`, and RSS only grows;
- the build's peak RSS growth: the process's high-water mark (VmHWM, reset
  through /proc/self/clear_refs just before) over its RSS before the build,
  once for the sharded build the engine does (workers/build.py: meta device,
  fully_shard, to_empty, each parameter generated whole and cut to its
  shard), against 4 B/param / N (its fp32 shard) plus the largest FSDP unit
  (4 B/param of it); and once the way every rank built before: the whole
  model on the CPU, then sharded.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench.report import OUT, Figure, Goal, cli, load, pyplot, save_plot

MODEL = {"n_layers": 8, "d_model": 512, "n_heads": 8, "seq_len": 128, "vocab_size": 256}
QUICK_MODEL = {"n_layers": 2, "d_model": 256, "n_heads": 4, "seq_len": 64, "vocab_size": 256}
MB = 1e6


def job(model: dict) -> dict:
    return {"model": model, "data": {"source": "builtin"}, "sharding": {"strategy": "full_shard"},
            "train": {"global_batch_size": 12, "steps": 100, "lr": 3e-3}}


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def build_growth(build) -> int:
    """Peak RSS growth while `build()` runs: the high-water mark, reset just
    before (Linux: clear_refs 5), over the RSS before it."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = rss_bytes()
    kept = build()
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    del kept
    return hwm - before


def measure_build(spec, world_size: int, how: str) -> int:
    """Peak RSS growth of the sharded build (`how` "sharded"), or of the
    whole-model build it replaced ("whole"); each in a process of its own
    (the C allocator keeps what one build freed for the next)."""
    import gc

    import torch

    from workers.build import build_sharded
    from workers.models import build_model
    from workers.sharding import build_mesh, shard_model

    mesh = build_mesh(spec.sharding, world_size, "cpu")

    def sharded(spec=spec):
        return build_sharded(spec, torch.device("cpu"), lambda m: shard_model(m, spec.sharding, mesh))

    def whole(spec=spec):
        torch.manual_seed(spec.train.seed)
        model = build_model(spec.model)  # every rank held the whole model
        shard_model(model, spec.sharding, mesh)
        return model

    # A tiny model through both first: what the first build loads once (code,
    # the allocator's arenas) is not the model's.
    tiny = spec.model_copy(update={"model": spec.model.model_copy(
        update={"n_layers": 1, "d_model": 16, "n_heads": 2})})
    sharded(tiny), whole(tiny)
    gc.collect()
    growth = build_growth(sharded if how == "sharded" else whole)
    gc.collect()
    return growth


def local_bytes(t) -> tuple[int, int]:
    """(numel, bytes) of this rank's shard of a tensor or DTensor."""
    from torch.distributed.tensor import DTensor

    local = t.to_local() if isinstance(t, DTensor) else t
    return local.numel(), local.numel() * local.element_size()


def rank_main(rank: int, world_size: int, port: int, model: dict, result: str,
              only_whole_build: bool = False) -> None:
    import torch

    torch.set_num_threads(1)
    import torch.distributed as dist
    import torch.nn.functional as F

    from workers.distributed import LOOPBACK, Rendezvous, destroy_process_group, init_process_group
    from workers.spec import JobSpec
    from workers.trainer import Trainer

    init_process_group(Rendezvous(master_addr=LOOPBACK, master_port=port, rank=rank,
                                  world_size=world_size, timeout_s=600))
    try:
        dist.barrier()
        spec = JobSpec.model_validate(job(model))
        if only_whole_build:
            rows = [None] * world_size
            dist.all_gather_object(rows, {"build_whole": measure_build(spec, world_size, "whole")})
            if rank == 0:
                Path(result).write_text(json.dumps(rows))
            return
        builds = {"build_sharded": measure_build(spec, world_size, "sharded")}
        dist.barrier()
        rss_before = rss_bytes()
        trainer = Trainer(spec)
        metrics = trainer.train_step()  # AdamW's state exists from here on
        x, y = trainer.batches.next_batch()
        logits = trainer.model(x)
        F.cross_entropy(logits.float().flatten(0, 1), y.flatten()).backward()

        params = [p for p in trainer.model.parameters()]
        row = {"rank": rank, "rss_before": rss_before, **builds,
               "largest_unit": spec.model.param_count().largest_unit(spec.sharding.blocks_per_unit),
               "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
               "engine_peak_mem_bytes": metrics.peak_mem_bytes,
               "engine_mem_theory_bytes": metrics.mem_theory_bytes,
               "num_params": trainer.num_params}
        row["param_numel"], row["param_bytes"] = map(sum, zip(*(local_bytes(p) for p in params), strict=True))
        row["grad_bytes"] = sum(local_bytes(p.grad)[1] for p in params if p.grad is not None)
        row["grads_missing"] = sum(p.grad is None for p in params)
        moments = step_bytes = 0
        for state in trainer.optimizer.state.values():
            for key, value in state.items():
                if torch.is_tensor(value):
                    if key == "step":
                        step_bytes += local_bytes(value)[1]
                    else:
                        moments += local_bytes(value)[1]
        row["optim_bytes"], row["optim_step_bytes"] = moments, step_bytes
        row["state_bytes"] = row["param_bytes"] + row["grad_bytes"] + moments
        rows = [None] * world_size
        dist.all_gather_object(rows, row)
        if rank == 0:
            Path(result).write_text(json.dumps(rows))
    finally:
        destroy_process_group()


def run_world(world_size: int, model: dict, only_whole_build: bool = False) -> list[dict]:
    import torch.multiprocessing as mp

    from workers.distributed import free_port

    OUT.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"memory-ws{world_size}-", dir=OUT))
    try:
        result = workdir / "result.json"
        mp.start_processes(rank_main, args=(world_size, free_port(), model, str(result),
                                            only_whole_build),
                           nprocs=world_size, start_method="spawn")
        return json.loads(result.read_text())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def add_args(parser) -> None:
    parser.add_argument("--world-sizes", default="1,2,3,4")


def run(args) -> Figure:
    model = QUICK_MODEL if args.quick else MODEL
    sizes = [int(n) for n in args.world_sizes.split(",")]
    results = {}
    for n in sizes:
        before = load()
        results[n] = {"ranks": run_world(n, model), "load": (before, load())}
        for rank, whole in zip(results[n]["ranks"], run_world(n, model, only_whole_build=True),
                               strict=True):
            rank.update(whole)
        r0 = results[n]["ranks"][0]
        print(f"N={n}: rank 0 state {r0['state_bytes'] / MB:.1f} MB, RSS growth "
              f"{(r0['maxrss'] - r0['rss_before']) / MB:.1f} MB", file=sys.stderr)
    params = results[sizes[0]]["ranks"][0]["num_params"]
    theory = {n: 16 * params / n for n in sizes}
    lines = [
        "GPT " + ", ".join(f"{k} {v}" for k, v in model.items()) + f": P = {params:,} params, "
        f"16 x P = {16 * params / MB:.1f} MB. FSDP2 `full_shard`, fp32 params and gradients, "
        "AdamW; N spawned processes on these 2 cores (gloo), one thread each. Two kinds of "
        "figure, not to be confused:",
        "",
        "- **sharded state** (exact, counted): the sum over this rank's local shards of numel x "
        "element size for params, grads and AdamW's exp_avg and exp_avg_sq — what 16 B/param / N "
        "predicts. AdamW's `step` scalars (one per parameter tensor, on every rank) are listed "
        "apart.",
        "- **peak RSS growth** (measured by the OS): the process's `ru_maxrss` after one step "
        "and a backward, minus its RSS just before the model was built. It includes the state "
        "plus activations, the all-gathered unit, gloo's buffers and allocator slack; on CPU there "
        "is no per-step peak like CUDA's `max_memory_allocated` (the engine's `peak_mem_bytes` "
        "metric on CPU is this `ru_maxrss`, never reset).",
        "",
        "| N | 16 x P / N (MB) | sharded state, max rank (MB) | max / theory | sum over ranks / "
        "16 x P | of which params / grads / optim (MB, max rank) | `step` scalars (B) "
        "| peak RSS growth, ranks min-max (MB) | RSS growth / theory | load before / after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    worst = 0.0
    for n in sizes:
        ranks = results[n]["ranks"]
        big = max(ranks, key=lambda r: r["state_bytes"])
        total = sum(r["state_bytes"] for r in ranks)
        growth = [r["maxrss"] - r["rss_before"] for r in ranks]
        ratio = big["state_bytes"] / theory[n]
        worst = max(worst, abs(ratio - 1))
        assert all(r["grads_missing"] == 0 for r in ranks), "a parameter had no gradient"
        lines.append(
            f"| {n} | {theory[n] / MB:.2f} | {big['state_bytes'] / MB:.2f} | {ratio:.4f} "
            f"| {total / (16 * params):.4f} | {big['param_bytes'] / MB:.2f} / "
            f"{big['grad_bytes'] / MB:.2f} / {big['optim_bytes'] / MB:.2f} "
            f"| {big['optim_step_bytes']} | {min(growth) / MB:.0f}-{max(growth) / MB:.0f} "
            f"| {statistics.median(growth) / theory[n]:.2f}x "
            f"| {results[n]['load'][0]:.2f} / {results[n]['load'][1]:.2f} |"
        )
    png = plot(results, theory, params, args.png_dir / "memory.png")
    build_lines, build_worst = build_table(results, sizes, params)
    other = {n: statistics.median(r["maxrss"] - r["rss_before"] - r["state_bytes"]
                                  for r in results[n]["ranks"]) for n in sizes}
    lines += [
        "",
        "Uneven shards (N = 3, where a dimension does not divide) put a few more rows on the "
        "first ranks: hence max rank / theory slightly above 1 there, while the sum over ranks "
        "is 16 x P exactly.",
        "",
        "Peak RSS growth minus the sharded state (median rank): "
        + ", ".join(f"N = {n}: {other[n] / MB:.0f} MB" for n in sizes)
        + f". From N = {sizes[0]} to {sizes[-1]} it goes {other[sizes[-1]] / other[sizes[0]]:.2f}x, "
        f"far from {sizes[0] / sizes[-1]:.2f}x: it is mostly not sharded state. The build holds "
        "only this rank's shards (below; the whole-model build it replaced held "
        f"{4 * params / MB:.0f} MB of fp32 params on every rank), a step all-gathers one "
        "FSDP unit at a time (and its gradient before the reduce-scatter), AdamW's foreach "
        "update makes temporaries of the shard's size, and the process allocates once what it "
        "imports and gloo's buffers; only the activations (12 / N samples per rank) shrink "
        "with N. The C allocator keeps freed memory, so RSS does not fall back after the peak. "
        "On CPU the sharding therefore shows in the exact count, and only partly in the "
        "process's peak; a GPU's allocator peak would be the figure to hold against 16 B/param "
        "/ N (none here).",
        "",
        f"![per-rank memory vs N]({png})",
        "",
        *build_lines,
    ]
    n_last = sizes[-1]
    growth_last = statistics.median(r["maxrss"] - r["rss_before"] for r in results[n_last]["ranks"])
    return Figure(
        name="memory", title="Memory: per-rank state vs 16 B/param / N",
        command=f".venv/bin/python -m bench.memory --world-sizes {args.world_sizes}"
                + (" --quick" if args.quick else ""),
        body="\n".join(lines) + "\n",
        headline=f"sharded state / (16 P / N): within {worst:.2%} at N = {args.world_sizes}; "
                 f"peak RSS growth at N={n_last}: "
                 f"{growth_last / MB:.0f} MB "
                 f"vs {theory[n_last] / MB:.0f} MB; building: at most {build_worst:.2f}x "
                 "4 B/param / N + the largest unit",
        goals=[Goal("per-rank sharded state = 16 B/param / N (within 1%)",
                    f"worst max-rank / theory off by {worst:.2%}", worst <= 0.01),
               Goal("peak RSS growth while building <= 1.25x (4 B/param / N + the largest unit)",
                    f"worst rank {build_worst:.2f}x", build_worst <= 1.25)],
        pngs=[png],
    )


def build_table(results: dict, sizes: list[int], params: int) -> tuple[list[str], float]:
    """The build's rows: the sharded build against 4 B/param / N plus the
    largest unit, beside the whole-model build it replaced."""
    unit = results[sizes[0]]["ranks"][0]["largest_unit"]
    lines = [
        "**Building the model** (workers/build.py): each rank builds on the meta device, "
        "`fully_shard`s, allocates only its own shards (`to_empty`) and fills them one "
        "parameter at a time (each generated whole from its own seeded generator, then cut to "
        "the rank's piece). Peak RSS growth per rank while building: the high-water mark "
        "(VmHWM, reset through `/proc/self/clear_refs` just before) over the RSS before, "
        "against 4 B x P / N (the rank's fp32 shard) + 4 B x the largest FSDP unit "
        f"({unit:,} params, {4 * unit / MB:.1f} MB); beside it, the same ranks building the "
        "whole model first and then sharding it, as every rank did before.",
        "",
        "| N | 4 B x P / N + unit (MB) | sharded build: peak RSS growth, ranks min-max (MB) "
        "| worst rank / theory | whole model, then shard (before; MB, max rank) |",
        "| --- | --- | --- | --- | --- |",
    ]
    worst = 0.0
    for n in sizes:
        ranks = results[n]["ranks"]
        theory = 4 * params / n + 4 * unit
        growth = [r["build_sharded"] for r in ranks]
        worst = max(worst, max(growth) / theory)
        lines.append(
            f"| {n} | {theory / MB:.1f} | {min(growth) / MB:.1f}-{max(growth) / MB:.1f} "
            f"| {max(growth) / theory:.2f}x | {max(r['build_whole'] for r in ranks) / MB:.1f} |")
    return lines, worst


def plot(results: dict, theory: dict, params: int, path) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ns = sorted(results)
    fine = [1 + i / 20 for i in range(20 * (max(ns) - 1) + 1)]
    ax.plot(fine, [16 * params / n / MB for n in fine], "-", color="tab:blue", alpha=0.6,
            label="16 B x P / N (primer)")
    ax.plot(ns, [max(r["state_bytes"] for r in results[n]["ranks"]) / MB for n in ns], "o",
            color="tab:blue", label="sharded state, max rank (exact count)")
    growth = {n: [(r["maxrss"] - r["rss_before"]) / MB for r in results[n]["ranks"]] for n in ns}
    med = [statistics.median(growth[n]) for n in ns]
    ax.errorbar(ns, med, yerr=[[m - min(growth[n]) for m, n in zip(med, ns, strict=True)],
                               [max(growth[n]) - m for m, n in zip(med, ns, strict=True)]],
                fmt="s", color="tab:orange", capsize=3, label="peak RSS growth (OS), ranks' range")
    ax.set_xticks(ns)
    ax.set_xlabel("world size N (full_shard)")
    ax.set_ylabel("MB per rank")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Per-rank memory, P = {params:,} params, fp32 + AdamW", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return save_plot(fig, path)


if __name__ == "__main__":
    cli("memory", __doc__, add_args, run)
