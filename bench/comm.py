"""The primer's communication levers, measured: bytes per step by strategy and
gradient compression against the formulas, steps/s, and the comm time that
prefetch hides.

    .venv/bin/python -m bench.comm [--steps 10] [--world-sizes 2,3,4]

One local Ray cluster; for each world size N = 2..4 one `WorkerGroup`, which
trains every configuration in turn (rank 0's metrics). Writes its section of
docs/benchmarks.md and the plot docs/comm_bytes.png. Takes about a minute and
a half on 2 idle cores.
"""

from __future__ import annotations

import statistics
import sys

import ray

from bench.report import Figure, Goal, cli, load, pyplot, save_plot
from workers.engine.comm import comm_theory_bytes
from workers.engine.compression import wire_bytes_per_value
from workers.cluster.group import WorkerGroup
from workers.schema import ModelSpec

MODEL = {"n_layers": 4, "d_model": 128, "n_heads": 4, "seq_len": 64}
WORLD_SIZES = (2, 3, 4)
COMPRESSIONS = ("none", "bf16", "int8")
PREFETCH_DEPTHS = (0, 1, 2)
WARMUP = 2


def job(steps: int, strategy: str, compression: str = "none", prefetch: int = 0) -> dict:
    return {
        "model": MODEL,
        "data": {"source": "builtin"},
        "train": {"steps": steps, "global_batch_size": 12, "lr": 3e-3},
        "sharding": {"strategy": strategy, "grad_compression": compression,
                     "prefetch_forward": prefetch, "prefetch_backward": prefetch},
    }


def runs_for(n: int) -> list[tuple[str, str, int]]:
    """(strategy, compression, prefetch depth) measured at world size n."""
    runs = [(s, c, 0) for s in ("full_shard", "shard_grad_op") for c in COMPRESSIONS]
    runs.append(("no_shard", "none", 0))
    if n == 4:  # hybrid needs shard groups of 2+: a 2 x 2 mesh
        runs += [("hybrid_shard", c, 0) for c in COMPRESSIONS]
    runs += [("full_shard", "none", d) for d in PREFETCH_DEPTHS if d]
    return runs


def summarise(metrics: list[dict]) -> dict:
    steady = metrics[WARMUP:]
    return {
        "bytes": statistics.mean(m["comm_bytes"] for m in steady),
        "theory": steady[0]["comm_bytes_theory"],
        "rs_bytes": statistics.mean(m["comm_bytes_by_op"].get("reduce_scatter", 0) for m in steady),
        "steps_per_s": 1.0 / statistics.median(m["step_time_s"] for m in steady),
        "comm_s": statistics.median(m["comm_time_s"] for m in steady),
        "exposed_s": statistics.median(m["exposed_comm_s"] for m in steady),
        "loss": metrics[-1]["loss"],
    }


def measure(steps: int, sizes: tuple[int, ...]) -> dict[tuple[int, str, str, int], dict]:
    results = {}
    for n in sizes:
        with WorkerGroup(n) as group:
            for strategy, compression, prefetch in runs_for(n):
                metrics = group.train(job(steps, strategy, compression, prefetch))[0]
                results[n, strategy, compression, prefetch] = row = summarise(metrics)
                row["load"] = load()
                print(f"N={n} {strategy} {compression} prefetch={prefetch}: "
                      f"{row['bytes'] / 1e6:.3f} MB/step (theory {row['theory'] / 1e6:.3f}), "
                      f"{row['steps_per_s']:.2f} steps/s", file=sys.stderr)
    return results


def theory_line(strategy: str, compression: str, n: int, params: int) -> float:
    mesh = (n, 1) if strategy == "no_shard" else (n,)
    return comm_theory_bytes(strategy, mesh, 4 * params, 4 * params,
                             reduce_scatter_ratio=wire_bytes_per_value(compression, 4) / 4)


def plot(results: dict, params: int, path, sizes: tuple[int, ...]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = {"full_shard": "tab:blue", "shard_grad_op": "tab:orange", "no_shard": "tab:green"}
    styles = {"none": "-", "bf16": "--", "int8": ":"}
    markers = {"none": "o", "bf16": "s", "int8": "^"}
    ns = list(sizes)
    for strategy, colour in colours.items():
        for compression in COMPRESSIONS if strategy != "no_shard" else ("none",):
            label = f"{strategy}, {compression}"
            theory = [theory_line(strategy, compression, n, params) / 1e6 for n in ns]
            measured = [results[n, strategy, compression, 0]["bytes"] / 1e6 for n in ns]
            ax.plot(ns, theory, styles[compression], color=colour, alpha=0.6)
            if strategy == "no_shard":  # the same bytes as shard_grad_op, none: drawn hollow
                ax.plot(ns, measured, "o", ms=11, mfc="none", color=colour, label=label)
            else:
                ax.plot(ns, measured, markers[compression], color=colour, label=label)
    ax.set_xticks(ns)
    ax.set_xlabel("world size N")
    ax.set_ylabel("MB per step per rank")
    ax.set_title(f"Bytes/step, measured (markers) vs the primer's formulas (lines), S = {params:,} params")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    return save_plot(fig, path)


def section(results: dict, params: int, steps: int, png: str, sizes: tuple[int, ...]) -> str:
    model = ", ".join(f"{k} {v}" for k, v in MODEL.items())
    lines = [
        "Gloo on CPU; N ranks as Ray actors on these 2 cores (oversubscribed at N = 3, 4). "
        f"Model: GPT {model}, {params:,} params (S = {4 * params / 1e6:.2f} MB fp32), global batch 12, "
        f"built-in corpus, {steps} steps per run; rank 0's metrics, steady state after {WARMUP} "
        "warm-up steps (median step time). The load column is the 1-minute load average when "
        "each configuration finished.",
        "",
        "Theory (`workers/engine/comm.py`): full_shard (2 + R)(N-1)/N x S, shard_grad_op (1 + R)(N-1)/N x S, "
        "no_shard 2(N-1)/N x S, where R is the reduce-scatter's wire bytes per fp32 byte: 1, "
        "bf16 1/2, int8 (1 + 4/256)/4 = 0.254 (a scale per 256 values). hybrid_shard (2 x 2): "
        "the same within a shard group plus an uncompressed all-reduce of the shard across groups.",
        "",
        "### Bytes per step vs the formulas",
        "",
        "| N | strategy | compression | MB/step measured | theory | measured / theory | "
        "reduce-scatter MB | steps/s | final loss | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (n, strategy, compression, prefetch), r in results.items():
        if prefetch:
            continue
        lines.append(
            f"| {n} | {strategy} | {compression} | {r['bytes'] / 1e6:.3f} | {r['theory'] / 1e6:.3f} | "
            f"{r['bytes'] / r['theory']:.3f} | {r['rs_bytes'] / 1e6:.3f} | {r['steps_per_s']:.2f} | "
            f"{r['loss']:.4f} | {r['load']:.2f} |"
        )
    ratios = {
        c: [results[n, s, c, 0]["rs_bytes"] / results[n, s, "none", 0]["rs_bytes"]
            for n in sizes for s in ("full_shard", "shard_grad_op")]
        for c in ("bf16", "int8")
    }
    lines += [
        "",
        "Reduce-scatter bytes vs uncompressed, over every N and sharded strategy: bf16 "
        f"{min(ratios['bf16']):.4f}-{max(ratios['bf16']):.4f}x, int8 "
        f"{min(ratios['int8']):.4f}-{max(ratios['int8']):.4f}x. Here the ranks share one "
        "machine's loopback, so bytes are cheap and int8's encode/decode is CPU work on the same "
        "cores: its steps/s says little about a network-bound cluster.",
        "",
        f"![bytes per step vs N]({png})",
        "",
        "### Prefetch: comm time and the part of it exposed",
        "",
        "full_shard, no compression. `comm_time_s`: collectives in flight; `exposed_comm_s`: the "
        "part the training thread waited for (blocking calls, async issue, `Work.wait()`). Depth 0 "
        "is FSDP's implicit prefetch, where every gloo all-gather blocks (exposed = total); depth "
        "d > 0 sets explicit `set_modules_to_{forward,backward}_prefetch` d units ahead and issues "
        "the unshards async, so gloo's thread gathers while this one computes.",
        "",
        "Times are one run's: with N ranks on 2 cores, the ranks and gloo's threads contend for "
        "the CPU and steps/s moves between runs (at N = 4 by up to a third); bytes do not move.",
        "",
        "| N | prefetch depth | comm time / step (ms) | exposed (ms) | exposed / comm | steps/s "
        "| load |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n in sizes:
        for d in PREFETCH_DEPTHS:
            r = results[n, "full_shard", "none", d]
            lines.append(
                f"| {n} | {d} | {1e3 * r['comm_s']:.1f} | {1e3 * r['exposed_s']:.1f} | "
                f"{r['exposed_s'] / r['comm_s']:.2f} | {r['steps_per_s']:.2f} | {r['load']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def add_args(parser) -> None:
    parser.add_argument("--steps", type=int, default=None, help="default 10 (--quick: 6)")
    parser.add_argument("--world-sizes", default=None, help="default 2,3,4 (--quick: 2)")


def run(args) -> Figure:
    steps = args.steps or (6 if args.quick else 10)
    sizes = tuple(int(n) for n in (args.world_sizes or ("2" if args.quick else "2,3,4")).split(","))
    params = ModelSpec(**MODEL).num_params()
    ray.init(address="local", num_cpus=max(sizes), include_dashboard=False)
    try:
        results = measure(steps, sizes)
    finally:
        ray.shutdown()
    png = plot(results, params, args.png_dir / "comm_bytes.png", sizes)
    ratios = [r["bytes"] / r["theory"] for (n, s, c, d), r in results.items() if not d]
    worst = max(abs(x - 1) for x in ratios)
    return Figure(
        name="comm", title="Communication: bytes per step vs the formulas",
        command=f".venv/bin/python -m bench.comm --steps {steps} "
                f"--world-sizes {','.join(map(str, sizes))}",
        body=section(results, params, steps, png, sizes),
        headline=f"measured / theory bytes {min(ratios):.3f}-{max(ratios):.3f} over "
                 f"{len(ratios)} configurations, N = {','.join(map(str, sizes))}",
        goals=[Goal("bytes/step = the formula (within 1%)", f"worst off by {worst:.1%}",
                    worst <= 0.01)],
        pngs=[png],
    )


if __name__ == "__main__":
    cli("comm", __doc__, add_args, run)
