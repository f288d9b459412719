"""Data mixtures (`data.mix`): how closely the schedule keeps each member
to its weight, what it costs a step, and what a resume costs with and
without the members' cursors in the checkpoint.

    .venv/bin/python -m bench.mixture [--quick] [--batches 100000] [--steps 40]

1. Fidelity: for a few weight sets and global batches, the schedule
   (workers/datasets/mixture.py) runs `--batches` global batches; the worst
   |samples drawn from member k - n x share_k| over every member and every
   batch boundary n, and the fewest and most samples a batch gave its
   smallest member, against share x B.
2. Cost per step: one process (world 1, gloo) trains bench/data.py's GPT on
   a 20 MB token set, then on a mixture of two 10 MB sets (3 : 1), the next
   batch read ahead in a thread as always; the data wait / step time of each
   (the steps after the first), and the schedule's own time for one batch
   (`MixSchedule.plan`, batch already unknown) at B = 8, 256 and 4096.
3. Resume: the members' cursors before batch 10^6 (B = 256, 3 members),
   stepped to from batch 0 (what a checkpoint without them would cost) and
   from the cursors a checkpoint carries.
"""

from __future__ import annotations

import shutil
import statistics
import time

from bench.data import MODEL, make_token_set
from bench.report import OUT, Figure, Goal, cli

WEIGHT_SETS = ([3, 1], [0.5, 0.3, 0.2], [1, 1, 1, 1, 1, 1, 1, 0.01])
BATCHES = (8, 256)
PLAN_BATCHES = (8, 256, 4096)
RESUME_AT = 1_000_000


def fidelity(weights: list[float], batch: int, batches: int) -> dict:
    from workers.datasets.mixture import MixSchedule

    schedule = MixSchedule(weights, batch, seed=0)
    shares, cursors = schedule.shares(), [0] * len(weights)
    smallest = min(range(len(weights)), key=lambda k: weights[k])
    worst, fewest, most = 0.0, batch, 0
    for b in range(1, batches + 1):
        counts = schedule.counts(cursors)
        cursors = [c + n for c, n in zip(cursors, counts, strict=True)]
        worst = max(worst, max(abs(c - s * b * batch) for c, s in zip(cursors, shares, strict=True)))
        fewest, most = min(fewest, counts[smallest]), max(most, counts[smallest])
    return {"worst": worst, "fewest": fewest, "most": most, "expected": shares[smallest] * batch}


def wait_run(data: dict, steps: int) -> dict:
    from workers.engine.distributed import destroy_process_group, init_single_process
    from workers.engine.trainer import Trainer
    from workers.schema import JobSpec

    spec = JobSpec.model_validate({"model": MODEL, "data": data, "checkpoint": {"every_steps": 0},
                                   "train": {"steps": steps, "global_batch_size": 8, "lr": 3e-3}})
    init_single_process(60.0)
    try:
        rows = Trainer(spec).run()[1:]
    finally:
        destroy_process_group()
    return {"ratio": sum(r["data_wait_s"] for r in rows) / sum(r["step_time_s"] for r in rows),
            "median_step_s": statistics.median(r["step_time_s"] for r in rows),
            "mix_tokens": rows[-1].get("mix_tokens")}


def plan_time(batch: int) -> float:
    """Seconds for one batch's plan, the cursors before it known (the common case)."""
    from workers.datasets.mixture import MixSchedule

    schedule = MixSchedule([0.5, 0.3, 0.2], batch, seed=0)
    times = []
    for b in range(1, 41):
        schedule.cursors_before(b)
        start = time.perf_counter()
        schedule.plan(b)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def resume_times(at: int) -> tuple[float, float]:
    from workers.datasets.mixture import MixSchedule

    weights = [0.5, 0.3, 0.2]
    start = time.perf_counter()
    cursors = MixSchedule(weights, 256, seed=0).cursors_before(at)
    stepped = time.perf_counter() - start
    resumed = MixSchedule(weights, 256, seed=0)
    start = time.perf_counter()
    resumed.resume_at(at, cursors)
    resumed.plan(at)
    carried = time.perf_counter() - start
    return stepped, carried


def add_args(parser) -> None:
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=40)


def run(args) -> Figure:
    batches = 2_000 if args.quick else args.batches
    steps = 6 if args.quick else args.steps
    resume_at = 20_000 if args.quick else RESUME_AT
    lines = ["### How closely each member keeps to its weight", "",
             f"{batches:,} global batches of the schedule, seed 0.", "",
             "| weights | B | worst \\|drawn - n x share\\| | smallest member a batch: fewest - most "
             "(share x B) |", "| --- | --- | --- | --- |"]
    worst_all = 0.0
    for weights in WEIGHT_SETS:
        for batch in BATCHES:
            f = fidelity(weights, batch, batches)
            worst_all = max(worst_all, f["worst"])
            lines.append(f"| {':'.join(f'{w:g}' for w in weights)} | {batch} | {f['worst']:.3f} samples "
                         f"| {f['fewest']} - {f['most']} ({f['expected']:.2f}) |")

    work = OUT / "mixture"
    shutil.rmtree(work, ignore_errors=True)
    try:
        one = make_token_set(work / "one", 20 << 20, sparse=False)
        a, b = make_token_set(work / "a", 10 << 20, sparse=False), make_token_set(work / "b", 10 << 20,
                                                                                   sparse=False)
        single = wait_run({"source": "tokens", "uri": one}, steps)
        mixed = wait_run({"source": "tokens", "mix": [{"uri": a, "weight": 3}, {"uri": b, "weight": 1}]},
                         steps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    plans = {batch: plan_time(batch) for batch in PLAN_BATCHES}
    stepped, carried = resume_times(resume_at)
    lines += ["", "### What a mixture costs a step", "",
              f"bench/data.py's GPT (4 layers, d_model 128, seq_len 128), a global batch of 8, {steps} "
              "steps in one process, file://.", "",
              "| data | data wait / step time | median step |", "| --- | --- | --- |",
              f"| one 20 MB token set | {single['ratio']:.2%} | {single['median_step_s'] * 1e3:.0f} ms |",
              f"| a mixture of two 10 MB sets, 3 : 1 | {mixed['ratio']:.2%} | "
              f"{mixed['median_step_s'] * 1e3:.0f} ms |", "",
              "Both read their next batch while the step runs: the wait is what compares (the step "
              "times move with the machine's load). "
              f"The mixture's last row: `mix_tokens` {mixed['mix_tokens']}. The schedule's own time "
              "for one batch (3 members; it runs in the read-ahead thread): "
              + ", ".join(f"B = {b}: {t * 1e6:,.0f} us" for b, t in plans.items()) + ".",
              "", "### A resume: the members' cursors carried, or stepped to", "",
              f"The cursors before batch {resume_at:,} (B = 256, 3 members): stepped to from batch 0 in "
              f"{stepped:.2f} s; from the cursors the checkpoint carries, with that batch's plan, in "
              f"{carried * 1e3:.2f} ms."]
    goal_wait = mixed["ratio"] <= 0.02
    return Figure(
        name="mixture", title="Data mixtures: each member's share, a step's cost, a resume",
        command=".venv/bin/python -m bench.mixture" + (" --quick" if args.quick else
                                                        f" --batches {args.batches} --steps {args.steps}"),
        body="\n".join(lines),
        headline=f"every member within {worst_all:.3f} samples of its weight's share over "
                 f"{batches:,} batches; data wait {mixed['ratio']:.2%} of step time mixed "
                 f"({single['ratio']:.2%} one set); a resume at batch {resume_at:,} "
                 f"{carried * 1e3:.1f} ms with the carried cursors, {stepped:.1f} s without",
        goals=[Goal("each member within 1 sample of n x its share, at every batch",
                    f"worst {worst_all:.3f}", worst_all < 1),
               Goal("a mixture's data wait <= 2% of step time", f"{mixed['ratio']:.2%}", goal_wait)],
    )


if __name__ == "__main__":
    cli("mixture", __doc__, add_args, run)
