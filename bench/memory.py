"""Per-rank memory of `full_shard` against the primer's 16 B/param / N, its
peak against that plus the largest unit plus activations, and of building the
model against 4 B/param / N plus the largest unit.

    .venv/bin/python -m bench.memory [--world-sizes 1,2,3,4]

For each world size N, N spawned processes (a gloo group on 127.0.0.1) build
the same GPT with FSDP2 `full_shard` and AdamW, train two steps, then run one
more forward and backward so that every gradient exists, and each rank counts

- its sharded state, exactly: the numel x element size of its local shard of
  every parameter, every gradient and every optimizer state tensor (AdamW's
  exp_avg and exp_avg_sq; its per-parameter `step` scalars are counted
  apart). The primer's 16 B/param is 4 (fp32 param) + 4 (grad) + 4 + 4 (the
  two moments); summed over the ranks this is 16 x P exactly;
- the process's peak RSS growth: the highest VmHWM (reset through
  /proc/self/clear_refs at every phase) over two engine steps and a third
  forward and backward, minus the RSS just before the Trainer is built. The
  baseline comes after the imports, the process group and two steps of a
  one-layer Trainer (what a process allocates once, whatever its model:
  shown apart), so growth is what this model's training adds. It is held
  against workers/engine/memory.py's theory: 16 B/param / N + the largest FSDP unit
  gathered and its unsharded gradient + the activations autograd saves for
  the rank's micro-batch (counted on the whole model in this process). The
  phases' peaks (batch, forward, backward, optimizer step, zero_grad) come
  from hooks on the engine's model and optimizer, so `train_step` runs as
  it is;
- the build's peak RSS growth: the process's high-water mark (VmHWM, reset
  through /proc/self/clear_refs just before) over its RSS before the build,
  once for the sharded build the engine does (workers/engine/build.py: meta device,
  fully_shard, to_empty, each parameter generated whole and cut to its
  shard), against 4 B/param / N (its fp32 shard) plus the largest FSDP unit
  (4 B/param of it); and once the way every rank built before: the whole
  model on the CPU, then sharded.
"""

from __future__ import annotations

import os
import statistics
import sys

from bench.ranks import rank_group, report, spawn_ranks
from bench.report import Figure, Goal, cli, load, pyplot, save_plot

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


def status_bytes(*keys: str) -> dict[str, int]:
    with open("/proc/self/status") as f:
        return {k: int(v.split()[0]) * 1024 for k, _, v in (line.partition(":") for line in f)
                if k in keys}


class PhaseProfile:
    """Per-phase peak RSS of the engine's own step: at each mark, the
    high-water mark since the last (VmHWM, then reset through clear_refs 5)
    and the RSS left, both over the RSS at the start (`base`). The marks are
    hooks on the engine's model and optimizer, so `Trainer.train_step` runs
    as it is: its batch and forward, backward (with the loss and the gradient
    clipping), the optimizer step, then zero_grad and the loss all-reduce."""

    def __init__(self):
        from workers.engine.memory import limit_allocator_slack

        limit_allocator_slack()  # as the Trainer will: the heaps' free memory given back first
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        self.base = rss_bytes()
        self.step = 0
        self.phases: list[tuple[int, str, int, int]] = []  # step, phase, peak, RSS left

    def mark(self, phase: str) -> None:
        now = status_bytes("VmHWM", "VmRSS")
        self.phases.append((self.step, phase, now["VmHWM"] - self.base, now["VmRSS"] - self.base))
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    def watch(self, trainer) -> None:
        trainer.model.register_forward_pre_hook(lambda *_: self.mark("batch"), prepend=True)
        trainer.model.register_forward_hook(lambda *_: self.mark("forward"))
        trainer.optimizer.register_step_pre_hook(lambda *_: self.mark("backward"))
        trainer.optimizer.register_step_post_hook(lambda *_: self.mark("optimizer step"))

    def peak(self) -> int:
        return max(peak for _, _, peak, _ in self.phases)  # growth: over `base`


def one_off_growth(spec) -> int:
    """What a process allocates once, before any model of its own: two steps
    of a one-layer, d_model 16 Trainer (the code's first run, FSDP's lazy
    init, gloo's buffers, the data corpus). Taken before the baseline, so
    outside "growth"; returned to be shown."""
    import gc

    from workers.engine.trainer import Trainer

    before = rss_bytes()
    # n_kv_heads and ffn_dim unset: a Llama's follow the tiny width (a GPT reads neither)
    tiny = spec.model_copy(update={"model": spec.model.model_copy(update={
        "n_layers": 1, "d_model": 16, "n_heads": 2, "n_kv_heads": None, "ffn_dim": None})})
    trainer = Trainer(tiny)
    trainer.train_step(), trainer.train_step()
    trainer.batches.close()
    del trainer
    gc.collect()
    return rss_bytes() - before


def measure_build(spec, world_size: int, how: str) -> int:
    """Peak RSS growth of the sharded build (`how` "sharded"), or of the
    whole-model build it replaced ("whole"); each in a process of its own
    (the C allocator keeps what one build freed for the next)."""
    import gc

    import torch

    from workers.engine.build import build_sharded
    from workers.models import build_model
    from workers.engine.sharding import build_mesh, shard_model

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


def rank_main(rank: int, world_size: int, port: int, model: dict, only_whole_build: bool,
              result: str) -> None:
    import torch

    import torch.distributed as dist
    import torch.nn.functional as F

    from workers.schema import JobSpec
    from workers.engine.trainer import Trainer

    with rank_group(rank, world_size, port):
        dist.barrier()
        spec = JobSpec.model_validate(job(model))
        if only_whole_build:
            report({"build_whole": measure_build(spec, world_size, "whole")}, result)
            return
        builds = {"build_sharded": measure_build(spec, world_size, "sharded")}
        warm_up = one_off_growth(spec)
        dist.barrier()
        profile = PhaseProfile()
        trainer = Trainer(spec)
        profile.mark("build (Trainer)")
        profile.watch(trainer)
        for step in (1, 2):  # AdamW's state exists from step 1 on
            profile.step = step
            metrics = trainer.train_step()
            profile.mark("zero_grad, loss all-reduce")
        profile.step = 3  # a third forward and backward: every gradient exists for the count
        x, y = trainer.batches.next_batch()
        logits = trainer.model(x)
        F.cross_entropy(logits.float().flatten(0, 1), y.flatten()).backward()
        profile.mark("backward")

        params = [p for p in trainer.model.parameters()]
        row = {"rank": rank, "rss_before": profile.base, **builds, "warm_up": warm_up,
               "largest_unit": spec.model.param_count().largest_unit(spec.sharding.blocks_per_unit),
               "growth": profile.peak(), "phases": profile.phases,
               "engine_peak_mem_bytes": metrics.peak_mem_bytes,
               "engine_mem_theory_bytes": metrics.mem_theory_bytes,
               "num_params": trainer.num_params}
        row["param_numel"], row["param_bytes"] = map(sum, zip(*(local_bytes(p) for p in params), strict=True))
        row["grad_bytes"] = sum(local_bytes(p.grad)[1] for p in params if p.grad is not None)
        row["grads_missing"] = sum(p.grad is None for p in params)
        moments, step_bytes = optimizer_state_bytes(trainer.optimizer)
        row["optim_bytes"], row["optim_step_bytes"] = moments, step_bytes
        row["state_bytes"] = row["param_bytes"] + row["grad_bytes"] + moments
        report(row, result)


def optimizer_state_bytes(optimizer) -> tuple[int, int]:
    """This rank's bytes of the optimizer's state tensors: (its moments and
    buffers, its `step` scalars)."""
    import torch

    state = step = 0
    for per_param in optimizer.state.values():
        for key, value in per_param.items():
            if torch.is_tensor(value):
                if key == "step":
                    step += local_bytes(value)[1]
                else:
                    state += local_bytes(value)[1]
    return state, step


def run_world(world_size: int, model: dict, only_whole_build: bool = False) -> list[dict]:
    return spawn_ranks(rank_main, world_size, model, only_whole_build, prefix="memory")


def add_args(parser) -> None:
    parser.add_argument("--world-sizes", default="1,2,3,4")


def activations(model: dict, sizes: list[int]) -> dict[int, int]:
    """The activation term at each N: what autograd saves in one forward of
    the rank's micro-batch (the largest share), counted on the whole model in
    this process (workers/engine/memory.py)."""
    from workers.engine.memory import saved_activation_bytes
    from workers.schema import JobSpec

    spec = JobSpec.model_validate(job(model))
    micro = {n: -(-spec.train.per_rank_batch(n) // spec.train.accumulation_steps(n)) for n in sizes}
    counted = {b: saved_activation_bytes(spec, b) for b in sorted(set(micro.values()))}
    return {n: counted[micro[n]] for n in sizes} | {-n: micro[n] for n in sizes}


def run(args) -> Figure:
    from workers.engine.memory import MMAP_THRESHOLD_BYTES, peak_theory
    from workers.schema import JobSpec

    model = QUICK_MODEL if args.quick else MODEL
    spec = JobSpec.model_validate(job(model))
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
              f"{r0['growth'] / MB:.1f} MB", file=sys.stderr)
    params = results[sizes[0]]["ranks"][0]["num_params"]
    theory = {n: 16 * params / n for n in sizes}
    acts = activations(model, sizes)
    peak = {n: peak_theory(spec, n, acts[n]) for n in sizes}
    lines = [
        "GPT " + ", ".join(f"{k} {v}" for k, v in model.items()) + f": P = {params:,} params, "
        f"16 x P = {16 * params / MB:.1f} MB. FSDP2 `full_shard`, fp32 params and gradients, "
        "AdamW, a global batch of 12 (12 / N sequences per rank); N spawned processes on these "
        "2 cores (gloo), one thread each. Two kinds of figure, not to be confused:",
        "",
        "- **sharded state** (exact, counted): the sum over this rank's local shards of numel x "
        "element size for params, grads and AdamW's exp_avg and exp_avg_sq — what 16 B/param / N "
        "predicts. AdamW's `step` scalars (one per parameter tensor, on every rank) are listed "
        "apart.",
        "- **peak RSS growth** (measured by the OS): the highest VmHWM over two engine steps "
        "(`Trainer.train_step`, from building the Trainer on) and a third forward and backward, "
        "minus the RSS just before the Trainer was built. That baseline is taken after the "
        "imports, the process group and two steps of a one-layer, d_model 16 Trainer (the code's "
        "first run, FSDP's lazy init, gloo's buffers, the data corpus: what a process allocates "
        "once, whatever its model; shown apart as *one-off*), so growth is what this model's "
        "training adds. On CPU there is no per-step peak like CUDA's `max_memory_allocated` "
        "(the engine's `peak_mem_bytes` metric on CPU is the process's whole `ru_maxrss`).",
        "",
        "| N | 16 x P / N (MB) | sharded state, max rank (MB) | max / theory | sum over ranks / "
        "16 x P | of which params / grads / optim (MB, max rank) | `step` scalars (B) "
        "| peak RSS growth, ranks min-max (MB) | RSS growth / (16 x P / N) | load before / after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    worst = 0.0
    for n in sizes:
        ranks = results[n]["ranks"]
        big = max(ranks, key=lambda r: r["state_bytes"])
        total = sum(r["state_bytes"] for r in ranks)
        growth = [r["growth"] for r in ranks]
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
    unit = results[sizes[0]]["ranks"][0]["largest_unit"]
    per_token = acts[sizes[0]] / (acts[-sizes[0]] * model["seq_len"] * model["n_layers"]
                                  * model["d_model"] * 4)
    peak_worst = max(max(r["growth"] for r in results[n]["ranks"]) / peak[n].total for n in sizes)
    lines += [
        "",
        "Uneven shards (N = 3, where a dimension does not divide) put a few more rows on the "
        "first ranks: hence max rank / theory slightly above 1 there, while the sum over ranks "
        "is 16 x P exactly.",
        "",
        "**The peak against its theory** (workers/engine/memory.py, `peak_theory`): 16 B x P / N + "
        f"the largest FSDP unit ({unit:,} params, a block) gathered in fp32 and its unsharded "
        f"fp32 gradient, 2 x 4 B x {unit:,} = {peak[sizes[0]].unit_bytes / MB:.1f} MB "
        "(what any ZeRO-3 holds for the unit it computes; FSDP2's flat buffers for the "
        "collectives and its one-unit backward prefetch are not counted, and show in the "
        "ratio) + the activations: every byte autograd saves for backward in one forward of "
        "the rank's micro-batch, counted with `saved_tensors_hooks` on the whole model in one "
        "process (each storage once, the parameters' not; the embedding, the blocks, the "
        f"final norm, the logits and the loss: {per_token:.1f} x d_model fp32 values per token "
        "per block). "
        "The three never peak together (gradients fill as activations are freed): the sum "
        "bounds what a step can need.",
        "",
        "| N | micro-batch | 16 x P / N (MB) | + unit (MB) | + activations (MB) | theory (MB) "
        "| one-off, outside growth (MB, max rank) | peak RSS growth, ranks min-max (MB) "
        "| worst rank / theory |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n in sizes:
        growth = [r["growth"] for r in results[n]["ranks"]]
        t = peak[n]
        lines.append(
            f"| {n} | {acts[-n]} | {t.state_bytes / MB:.1f} | {t.unit_bytes / MB:.1f} "
            f"| {t.activation_bytes / MB:.1f} | {t.total / MB:.1f} "
            f"| {max(r['warm_up'] for r in results[n]['ranks']) / MB:.0f} "
            f"| {min(growth) / MB:.0f}-{max(growth) / MB:.0f} | {max(growth) / t.total:.2f}x |")
    between = {n: next(left for step, phase, _, left in max(
        results[n]["ranks"], key=lambda r: r["growth"])["phases"] if (step, phase) == (3, "batch"))
        - 12 * params / n for n in sizes}
    png = plot(results, theory, {n: peak[n].total for n in sizes}, params,
               args.png_dir / "memory.png")
    lines += [
        "",
        "**Where the peak comes from**: each rank's peak RSS growth (VmHWM, reset at every mark) "
        "and the RSS left at the phase's end, over the baseline, through the engine's own "
        "`train_step` (marks are hooks on its model and optimizer), for the rank with the "
        "highest peak:",
        "",
        *profile_table(results, sizes),
        "",
        "Step 1 has no AdamW state yet (it is made by its optimizer step); from step 2 on a "
        "step's forward starts from params + moments (12 B x P / N, the gradients set to None) "
        "and adds the activations and one gathered unit at a time; backward frees the "
        "activations as it fills the gradients, so its peak is early in it, with the last "
        "block's unit gathered, its gradient, the reduce-scatter's buffer and the next unit "
        "prefetched. AdamW on CPU runs its per-parameter loop by default (foreach is the "
        "default only on GPUs), so its temporaries are one parameter's size; the optimizer "
        "step's peak is the moments themselves at step 1. Between steps a rank keeps "
        + ", ".join(f"{between[n] / MB:.0f}" for n in sizes)
        + f" MB (N = {', '.join(map(str, sizes))}) over its params and moments (12 B x P / N; "
        "step 3's batch row): blocks under the allocator's threshold (below) that the heap "
        "keeps for reuse, among them every activation of d_model's width at these "
        "micro-batches; with FSDP2's buffers, that is what the peak has over its theory.",
        "",
        "**The C allocator** (workers/engine/memory.py, `limit_allocator_slack`, called as the "
        "Trainer starts): glibc raises its mmap threshold to the largest block freed so far "
        "(up to 32 MiB), so after the first step the activations and gathered units lived in "
        "the heap, and what one step freed stayed there in pieces the next could not reuse: "
        "before the engine fixed the threshold, peak RSS growth was 941 / 696 / 476 / 508 MB "
        "at N = 1..4 in this section's previous run (its baseline before the build, without "
        "the warm-up), 2.2x the theory at N = 4. The threshold is "
        f"now fixed at {MMAP_THRESHOLD_BYTES >> 20} MiB: every block above it is mapped on "
        "its own and unmapped when freed. Measured apart (one process, this model, steps "
        "of batch 3 and 12): 128 KiB kept RSS lower still (455 against 516 MB at N = 2) but "
        "cost 35% and 18% of step time in the fresh mappings' page faults; at 4 MiB the "
        "step time was the default's within 1%. `MALLOC_ARENA_MAX=1` changed nothing: the "
        "slack was in one heap, not spread over threads' arenas.",
        "",
        f"![per-rank memory vs N]({png})",
        "",
    ]
    build_lines, build_worst = build_table(results, sizes, params)
    lines += build_lines
    n_last = sizes[-1]
    growth_last = max(r["growth"] for r in results[n_last]["ranks"])
    return Figure(
        name="memory", title="Memory: per-rank state vs 16 B/param / N",
        command=f".venv/bin/python -m bench.memory --world-sizes {args.world_sizes}"
                + (" --quick" if args.quick else ""),
        body="\n".join(lines) + "\n",
        headline=f"sharded state / (16 P / N): within {worst:.2%} at N = {args.world_sizes}; "
                 f"peak RSS growth at most {peak_worst:.2f}x (16 B/param / N + the largest unit "
                 f"+ activations); at N={n_last} {growth_last / MB:.0f} MB vs "
                 f"{peak[n_last].total / MB:.0f} MB; building: at most {build_worst:.2f}x "
                 "4 B/param / N + the largest unit",
        goals=[Goal("per-rank sharded state = 16 B/param / N (within 1%)",
                    f"worst max-rank / theory off by {worst:.2%}", worst <= 0.01),
               Goal("peak RSS growth per rank <= 1.5x (16 B/param / N + the largest unit "
                    "+ activations) at every N",
                    f"worst rank {peak_worst:.2f}x", peak_worst <= 1.5),
               Goal("peak RSS growth while building <= 1.25x (4 B/param / N + the largest unit)",
                    f"worst rank {build_worst:.2f}x", build_worst <= 1.25)],
        pngs=[png],
    )


def profile_table(results: dict, sizes: list[int]) -> list[str]:
    """One row per phase, one column pair (peak, RSS left) per N."""
    worst = {n: max(results[n]["ranks"], key=lambda r: r["growth"]) for n in sizes}
    phases = [(step, phase) for step, phase, _, _ in worst[sizes[0]]["phases"]]
    lines = ["| step | phase | " + " | ".join(f"N = {n}: peak / left (MB)" for n in sizes) + " |",
             "| --- | --- |" + " --- |" * len(sizes)]
    for i, (step, phase) in enumerate(phases):
        cells = []
        for n in sizes:
            _, _, top, left = worst[n]["phases"][i]
            cells.append(f"{top / MB:.0f} / {left / MB:.0f}")
        lines.append(f"| {step or ''} | {phase} | " + " | ".join(cells) + " |")
    return lines


def build_table(results: dict, sizes: list[int], params: int) -> tuple[list[str], float]:
    """The build's rows: the sharded build against 4 B/param / N plus the
    largest unit, beside the whole-model build it replaced."""
    unit = results[sizes[0]]["ranks"][0]["largest_unit"]
    lines = [
        "**Building the model** (workers/engine/build.py): each rank builds on the meta device, "
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


def plot(results: dict, theory: dict, peak: dict, params: int, path) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ns = sorted(results)
    fine = [1 + i / 20 for i in range(20 * (max(ns) - 1) + 1)]
    ax.plot(fine, [16 * params / n / MB for n in fine], "-", color="tab:blue", alpha=0.6,
            label="16 B x P / N (primer)")
    ax.plot(ns, [max(r["state_bytes"] for r in results[n]["ranks"]) / MB for n in ns], "o",
            color="tab:blue", label="sharded state, max rank (exact count)")
    ax.plot(ns, [peak[n] / MB for n in ns], "--", color="tab:green", marker="^",
            label="16 B x P / N + the largest unit + activations (workers/engine/memory.py)")
    growth = {n: [r["growth"] / MB for r in results[n]["ranks"]] for n in ns}
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
