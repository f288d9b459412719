"""Tensor parallelism, measured: TP's bytes per step against its formula
(workers/engine/tensor_parallel.py) and the whole step's against FSDP's plus TP's,
and steps/s at tp 1 vs tp 2 at world size 2.

    .venv/bin/python -m bench.tensor_parallel [--steps 10] [--world-sizes 2,4] [--rounds 3]

One local Ray cluster; for each world size one `WorkerGroup` (a bundle per
TP group), which trains every layout in turn (rank 0's metrics): at N = 2
(dp 2, tp 1), (dp 1, tp 2), and tp 2 with activation checkpointing and with
bf16 parameters; at N = 4 (dp 2, tp 2) and (dp 4, tp 1). Steps/s of tp 1 vs
tp 2 at N = 2: the median of rounds of the two back to back. Writes its section of
docs/benchmarks.md. Takes about a minute on 2 idle cores.
"""

from __future__ import annotations

import statistics
import sys

import ray

from bench.report import Figure, Goal, cli, load
from workers.cluster.group import WorkerGroup
from workers.schema import JobSpec
from workers.engine.tensor_parallel import tp_comm_theory_bytes

MODEL = {"family": "llama", "n_layers": 4, "d_model": 256, "n_heads": 8, "n_kv_heads": 4,
         "ffn_dim": 688, "seq_len": 128, "vocab_size": 256}
GLOBAL_BATCH = 8
WARMUP = 2
# (label, tp, sharding overrides), by world size
RUNS: dict[int, list[tuple[str, int, dict]]] = {
    2: [("tp 1 (dp 2)", 1, {}), ("tp 2 (dp 1)", 2, {}),
        ("tp 2, activation checkpointing", 2, {"activation_checkpointing": True}),
        ("tp 2, bf16 params", 2, {"param_dtype": "bfloat16"})],
    4: [("tp 2 (dp 2)", 2, {}), ("tp 1 (dp 4)", 1, {})],
}


def job(steps: int, tp: int, sharding: dict) -> dict:
    return {"workers": {"min": 1, "max": 4}, "model": MODEL, "data": {"source": "builtin"},
            "train": {"steps": steps, "global_batch_size": GLOBAL_BATCH, "lr": 3e-3},
            "sharding": sharding, "parallelism": {"tp": tp}, "checkpoint": {"every_steps": 0}}


def tp_theory(spec: JobSpec, world_size: int) -> float:
    sh, tp = spec.sharding, spec.parallelism.tp
    dp = spec.parallelism.dp_size(world_size)
    share = -(-GLOBAL_BATCH // dp)  # rank 0's share
    return tp_comm_theory_bytes(spec.model, tp, tokens=share * spec.model.seq_len,
                                act_bytes=2 if sh.param_dtype != "float32" else 4,
                                activation_checkpointing=sh.activation_checkpointing)


def summarise(metrics: list[dict], spec: JobSpec, world_size: int) -> dict:
    steady = metrics[WARMUP:]
    tp_bytes = [sum(v for op, v in m["comm_bytes_by_op"].items() if op.startswith("tp_"))
                for m in steady]
    return {
        "tp_bytes": statistics.mean(tp_bytes),
        "tp_theory": tp_theory(spec, world_size),
        "bytes": statistics.mean(m["comm_bytes"] for m in steady),
        "theory": steady[0]["comm_bytes_theory"],
        "steps_per_s": 1.0 / statistics.median(m["step_time_s"] for m in steady),
        "loss": metrics[-1]["loss"],
        "load": load(),
    }


SPEED_PAIR = ("tp 1 (dp 2)", "tp 2 (dp 1)")  # at N = 2, run again in alternation: steps/s


def speed_rounds(group: WorkerGroup, steps: int, rounds: int) -> list[float]:
    """tp 2 / tp 1 steps/s at N = 2, one ratio per round (tp 1 then tp 2, back to
    back, so both see about the same load)."""
    ratios = []
    for _ in range(rounds):
        rates = []
        for tp in (1, 2):
            steady = group.train(job(steps, tp, {}))[0][WARMUP:]
            rates.append(1.0 / statistics.median(m["step_time_s"] for m in steady))
        ratios.append(rates[1] / rates[0])
    return ratios


def measure(steps: int, sizes: tuple[int, ...], rounds: int) -> tuple[dict, list[float]]:
    results, ratios = {}, []
    for n in sizes:
        with WorkerGroup(n, tp_size=2) as group:
            if n == 2:
                ratios = speed_rounds(group, steps, rounds)
            for label, tp, sharding in RUNS[n]:
                raw = job(steps, tp, sharding)
                metrics = group.train(raw)[0]
                results[n, label] = row = summarise(metrics, JobSpec.model_validate(raw), n)
                print(f"N={n} {label}: TP {row['tp_bytes'] / 1e6:.3f} MB/step (theory "
                      f"{row['tp_theory'] / 1e6:.3f}), all {row['bytes'] / 1e6:.3f} (theory "
                      f"{row['theory'] / 1e6:.3f}), {row['steps_per_s']:.2f} steps/s",
                      file=sys.stderr)
    return results, ratios


def ratio(measured: float, theory: float) -> str:
    return f"{measured / theory:.4f}" if theory else "-"


def section(results: dict, steps: int, ratios: list[float]) -> str:
    params = JobSpec.model_validate(job(1, 1, {})).model.num_params()
    model = ", ".join(f"{k} {v}" for k, v in MODEL.items() if k != "family")
    lines = [
        f"Gloo on CPU; N ranks as Ray actors on these 2 cores (oversubscribed at N = 4). Model: "
        f"Llama {model}, {params:,} params, global batch {GLOBAL_BATCH} on the built-in corpus, "
        f"{steps} steps per layout; rank 0's metrics, steady state after {WARMUP} warm-up steps "
        "(median step time). The load column is the 1-minute load average when each layout "
        "finished.",
        "",
        "TP formula (`workers/engine/tensor_parallel.py`), per rank per step, n this rank's tokens, "
        "e the activations' bytes per value, f = (T-1)/T: f n e ((8 + 3 ac) L d + 4 d + V) "
        "for the activations (4 collectives a block forward and backward, the vocabulary-split "
        "embedding and head) plus 2 f e d per norm for the replicated norms' gradients. "
        "The step's theory is FSDP's formula over each rank's TP piece of the parameters plus "
        "TP's.",
        "",
        "| N | layout | TP MB/step | TP theory | TP measured / theory | all MB/step | all theory "
        "| all measured / theory | steps/s | final loss | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (n, label), r in results.items():
        lines.append(
            f"| {n} | {label} | {r['tp_bytes'] / 1e6:.3f} | {r['tp_theory'] / 1e6:.3f} | "
            f"{ratio(r['tp_bytes'], r['tp_theory'])} | {r['bytes'] / 1e6:.3f} | "
            f"{r['theory'] / 1e6:.3f} | {ratio(r['bytes'], r['theory'])} | "
            f"{r['steps_per_s']:.2f} | {r['loss']:.4f} | {r['load']:.2f} |")
    if ratios:
        one, two = results[2, SPEED_PAIR[0]], results[2, SPEED_PAIR[1]]
        lines += [
            "",
            f"At N = 2, tp 2 runs {statistics.median(ratios):.2f}x the steps/s of tp 1 (FSDP "
            f"over 2 ranks; the median of {len(ratios)} rounds of the two back to back: "
            f"{', '.join(f'{r:.2f}' for r in ratios)}) and moves "
            f"{two['bytes'] / one['bytes']:.2f}x its bytes. "
            "Both split the step's compute in two: FSDP by the batch, gathering every parameter "
            "twice a step and reduce-scattering the gradients (3 (N-1)/N x S, with the model); "
            "TP by the heads and the MLP width, moving activations (with the tokens a step, not "
            "the model) in 4 collectives a block each way, each on the critical path. With both "
            "ranks on one machine's 2 cores and loopback, the ratio says more about per-rank "
            "compute (TP's matmuls are half as wide, on the whole batch) and the number of "
            "collectives than about bytes, and it moves with the load; TP is meant for a layer "
            "too large for one device, within a node's fast links.",
        ]
    return "\n".join(lines) + "\n"


def add_args(parser) -> None:
    parser.add_argument("--steps", type=int, default=None, help="default 10 (--quick: 4)")
    parser.add_argument("--world-sizes", default=None, help="default 2,4 (--quick: 2)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="tp 1 vs tp 2 speed rounds at N = 2 (default 3, --quick: 1)")


def run(args) -> Figure:
    steps = args.steps or (4 if args.quick else 10)
    sizes = tuple(int(n) for n in (args.world_sizes or ("2" if args.quick else "2,4")).split(","))
    rounds = args.rounds or (1 if args.quick else 3)
    ray.init(address="local", num_cpus=max(sizes), include_dashboard=False)
    try:
        results, ratios = measure(steps, sizes, rounds)
    finally:
        ray.shutdown()
    tp_ratios = [r["tp_bytes"] / r["tp_theory"] for r in results.values() if r["tp_theory"]]
    all_ratios = [r["bytes"] / r["theory"] for r in results.values() if r["theory"]]
    worst = max(abs(x - 1) for x in tp_ratios + all_ratios)
    speed = (f"; steps/s at N = 2, tp 2 / tp 1: {statistics.median(ratios):.2f}x (median of "
             f"{len(ratios)})" if ratios else "")
    return Figure(
        name="tensor_parallel", title="Tensor parallelism: TP bytes per step vs the formula, tp 1 vs tp 2",
        command=f".venv/bin/python -m bench.tensor_parallel --steps {steps} "
                f"--world-sizes {','.join(map(str, sizes))} --rounds {rounds}",
        body=section(results, steps, ratios),
        headline=f"TP measured / theory {min(tp_ratios):.4f}-{max(tp_ratios):.4f} over "
                 f"{len(tp_ratios)} layouts{speed}",
        goals=[Goal("TP and step bytes = the formulas (within 2%)", f"worst off by {worst:.2%}",
                    worst <= 0.02)],
    )


if __name__ == "__main__":
    cli("tensor_parallel", __doc__, add_args, run)
