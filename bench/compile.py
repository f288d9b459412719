"""`train.compile`: steps/s compiled vs eager after the warm-up, and what the
compilation costs at start-up.

    .venv/bin/python -m bench.compile [--rounds 2] [--steps 10]

Each run is one job on N = 2 spawned processes (a gloo group on 127.0.0.1,
one thread each) through the engine's `Trainer`: build, `warm_up` (with
`train.compile`: every block compiled by inductor, workers/engine/compilation.py;
eager: nothing to do), `WARM_STEPS` steps not timed, then `--steps` timed steps
(`Trainer.train_step`); steps/s is 1 / the median step time, the slower rank's,
beside the median CPU time a step takes the rank's process (less moved by other
jobs on the same cores).
Every compiled run gets an empty inductor cache (`TORCHINDUCTOR_CACHE_DIR`), so
its compile time is a fresh machine's, not a cache hit. Eager and compiled runs
alternate, `--rounds` times, in one run; the ratio is each round's, and the
losses of both modes are compared step by step.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.ranks import rank_group, report, spawn_ranks
from bench.report import OUT, Figure, Goal, cli, load

MODEL = {"n_layers": 4, "d_model": 256, "n_heads": 8, "seq_len": 256, "vocab_size": 256}
QUICK_MODEL = {"n_layers": 2, "d_model": 48, "n_heads": 4, "seq_len": 32, "vocab_size": 256}
WORLD_SIZE, GLOBAL_BATCH, WARM_STEPS = 2, 8, 3
LOSS_TOLERANCE = 1e-4  # what tests/workers/engine/test_compile.py holds the curves to


def spec_of(model: dict, steps: int, compiled: bool):
    from workers.schema import JobSpec

    return JobSpec.model_validate({
        "workers": WORLD_SIZE, "model": model, "data": {"source": "synthetic"},
        "train": {"steps": steps, "global_batch_size": GLOBAL_BATCH, "lr": 1e-3,
                  "compile": compiled},
        "checkpoint": {"every_steps": 0},
    })


def rank_main(rank: int, world_size: int, port: int, model: dict, steps: int, compiled: bool,
              result: str) -> None:
    import torch

    from workers.engine.trainer import Trainer

    with rank_group(rank, world_size, port, timeout_s=900):
        start = time.perf_counter()
        trainer = Trainer(spec_of(model, WARM_STEPS + steps, compiled))
        built = time.perf_counter()
        trainer.warm_up()
        warmed = time.perf_counter()
        rows, cpu = [], []
        for _ in range(WARM_STEPS + steps):
            before = time.process_time()  # this process's CPU time: all its threads, gloo's too
            rows.append(trainer.train_step())
            cpu.append(time.process_time() - before)
        trainer.batches.close()
        row = {"rank": rank, "num_params": trainer.num_params, "build_s": built - start,
               "compile_s": warmed - built, "losses": [r.loss for r in rows],
               "step_s": statistics.median(r.step_time_s for r in rows[WARM_STEPS:]),
               "cpu_s": statistics.median(cpu[WARM_STEPS:])}
        report(row, result)


def run_job(model: dict, steps: int, compiled: bool) -> dict:
    """One job; the slower rank's figures."""
    OUT.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="compile-cache-", dir=OUT))
    previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)  # the ranks inherit it: an empty cache
    try:
        ranks = spawn_ranks(rank_main, WORLD_SIZE, model, steps, compiled, prefix="compile")
    finally:
        if previous is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR")
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous
        shutil.rmtree(cache, ignore_errors=True)
    return {"num_params": ranks[0]["num_params"], "losses": ranks[0]["losses"],
            **{k: max(r[k] for r in ranks) for k in ("build_s", "compile_s", "step_s", "cpu_s")}}


def add_args(parser) -> None:
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per run")


def run(args) -> Figure:
    model = QUICK_MODEL if args.quick else MODEL
    rounds, steps = (1, 3) if args.quick else (args.rounds, args.steps)
    table, ratios, cpu_ratios, compile_s, worst_loss = [], [], [], [], 0.0
    params = 0
    for i in range(1, rounds + 1):
        got = {}
        for mode, compiled in (("eager", False), ("compiled", True)):
            before = load()
            got[mode] = job = run_job(model, steps, compiled)
            params = job["num_params"]
            print(f"round {i} {mode}: step {job['step_s']:.4f} s, compile {job['compile_s']:.1f} s",
                  file=sys.stderr)
            table.append(f"| {i} | {mode} | {job['build_s']:.2f} | "
                         f"{job['compile_s']:.1f} | {job['step_s'] * 1e3:.1f} | "
                         f"{1 / job['step_s']:.2f} | {job['cpu_s'] * 1e3:.1f} | "
                         f"{before:.2f} / {load():.2f} |")
        ratios.append(got["eager"]["step_s"] / got["compiled"]["step_s"])
        cpu_ratios.append(got["eager"]["cpu_s"] / got["compiled"]["cpu_s"])
        compile_s.append(got["compiled"]["compile_s"])
        worst_loss = max(worst_loss, max(abs(a - b) for a, b in zip(
            got["eager"]["losses"], got["compiled"]["losses"], strict=True)))
    ratio, compile_med = statistics.median(ratios), statistics.median(compile_s)
    cpu_ratio = statistics.median(cpu_ratios)
    body = [
        "GPT " + ", ".join(f"{k} {v}" for k, v in model.items()) + f": {params:,} params. "
        f"FSDP2 `full_shard`, fp32, a global batch of {GLOBAL_BATCH} on synthetic tokens; "
        f"N = {WORLD_SIZE} spawned processes on these 2 cores (gloo), one thread each; the same "
        "job with `train: {compile: false}` and `{compile: true}`. *Compile* is `Trainer.warm_up`, "
        "what the service shows as the start-up phase \"compile\" (inductor, an empty cache: a "
        f"fresh machine's); step time is the median of {steps} steps after {WARM_STEPS} untimed "
        "ones, the slower rank's; CPU time per step is the rank process's (all its threads, "
        "gloo's included), which other jobs on these cores slow less than the wall clock. "
        "Compiled / eager is each round's ratio, the median over "
        f"{rounds} round(s), in brackets every round's.",
        "",
        "| round | mode | build (s) | compile (s) | step time (ms) | steps/s | CPU time per step (ms) "
        "| load before / after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *table,
        "",
        f"Compiled / eager steps/s: **{ratio:.2f}x** [{', '.join(f'{r:.2f}' for r in ratios)}]; "
        f"by CPU time per step **{cpu_ratio:.2f}x** [{', '.join(f'{r:.2f}' for r in cpu_ratios)}]; "
        f"compile time at start-up {compile_med:.1f} s (median); losses of the two modes differ "
        f"by at most {worst_loss:.1e} over {WARM_STEPS + steps} steps.",
        "",
    ]
    return Figure(
        name="compile", title="Compile: steps/s compiled vs eager, compile time at start-up",
        command=f".venv/bin/python -m bench.compile --rounds {args.rounds} --steps {args.steps}"
                + (" --quick" if args.quick else ""),
        body="\n".join(body),
        headline=f"compiled {ratio:.2f}x eager steps/s ({cpu_ratio:.2f}x by CPU time per step) "
                 f"after a {compile_med:.0f} s compile at start-up; losses within {worst_loss:.0e}",
        goals=[Goal(f"compiled losses = eager's within {LOSS_TOLERANCE:g}",
                    f"at most {worst_loss:.1e} apart", worst_loss <= LOSS_TOLERANCE)],
    )


if __name__ == "__main__":
    cli("compile", __doc__, add_args, run)
