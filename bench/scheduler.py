"""One admission pass over a long queue, timed: what `Scheduler.admit` costs
the supervisor's loop, with the preemption choice for the first waiting job.

    .venv/bin/python -m bench.scheduler [--queued 10000] [--running 500] [--tenants 50] [--reps 5]

Made-up jobs: tenants with weights 1..3 and quotas, priorities 0..3, sizes 1..8
(a third elastic), a quarter needing gpus; the cluster has a third of its
capacity free, so some hundreds start and the rest wait, each with a reason.
Prints the median and best time over the repetitions, and the same pass
over shorter queues (a tenth, a quarter, half) for the plot docs/scheduler.png.
"""

from __future__ import annotations

import random
import statistics
import sys
import time

from bench.report import Figure, cli, load, pyplot, save_plot
from service.scheduling import (
    Capacity,
    Demand,
    PreemptionPolicy,
    QueuedJob,
    Quota,
    Resources,
    RunningJob,
    Scheduler,
    TenantPolicy,
)


def made_up(queued: int, running: int, tenants: int, seed: int = 0):
    rng = random.Random(seed)
    names = [f"t{i}" for i in range(tenants)]
    policy = {name: TenantPolicy(name, Quota(max_workers=rng.choice([None, 64, 128]),
                                             max_running_jobs=rng.choice([None, 20])),
                                 weight=rng.choice([1, 2, 3])) for name in names}

    def demand() -> Demand:
        low = rng.randint(1, 8)
        sizes = range(low, low + rng.choice([0, 0, 4]) + 1)
        gpu = rng.choice([0.0, 0.0, 0.0, 1.0])
        return Demand(rng.randint(0, 3), tuple(sizes), Resources(rng.choice([1.0, 2.0]), gpu))

    live = []
    for i in range(running):
        d = demand()
        live.append(RunningJob(f"r{i}", rng.choice(names), d.min_workers, d,
                               steps_since_checkpoint=rng.randint(0, 500)))
    queue = [QueuedJob(f"q{i}", rng.choice(names), float(i), demand()) for i in range(queued)]
    held = Resources.total(job.holds for job in live)
    total = held.times(1.5)
    return queue, live, policy, Capacity(total, total - held)


def measure(queued: int, running: int, tenants: int, reps: int) -> dict:
    queue, live, policy, capacity = made_up(queued, running, tenants)
    attained = {name: float(i) for i, name in enumerate(policy)}
    scheduler, preemption = Scheduler(), PreemptionPolicy()
    admit_s, preempt_s = [], []
    before = load()
    for _ in range(reps):
        start = time.perf_counter()
        decision = scheduler.admit(queue, live, policy, capacity, attained)
        admit_s.append(time.perf_counter() - start)
        by_id = {job.id: job for job in queue}
        start = time.perf_counter()
        for job_id in decision.needs_room:
            if preemption.select_victims(by_id[job_id], live, capacity, policy).victims:
                break
        preempt_s.append(time.perf_counter() - start)
    return {"queued": queued, "admit_s": admit_s, "preempt_s": preempt_s,
            "start": len(decision.start), "waiting": len(decision.waiting),
            "needs_room": len(decision.needs_room), "capacity": capacity, "load": (before, load())}


def add_args(parser) -> None:
    parser.add_argument("--queued", type=int, default=None, help="default 10000 (--quick 2000)")
    parser.add_argument("--running", type=int, default=500)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--reps", type=int, default=None, help="default 5 (--quick 2)")


def run(args) -> Figure:
    queued = args.queued or (2000 if args.quick else 10_000)
    reps = args.reps or (2 if args.quick else 5)
    sizes = sorted({max(1, queued // 10), max(1, queued // 4), max(1, queued // 2), queued})
    results = {n: measure(n, args.running, args.tenants, reps) for n in sizes}
    for n, r in results.items():
        print(f"{n} queued: admit median {statistics.median(r['admit_s']) * 1e3:.1f} ms",
              file=sys.stderr)
    main_run = results[queued]
    cap = main_run["capacity"]
    admit_ms = statistics.median(main_run["admit_s"]) * 1e3
    lines = [
        f"`Scheduler.admit` (`service/scheduling/`) over made-up jobs: {args.tenants} tenants with "
        f"weights 1..3 and quotas, {args.running} running jobs, priorities 0..3, sizes 1..8 (a "
        "third elastic), a quarter needing gpus; the cluster has a third of its capacity free "
        f"({cap.free.cpu:g} of {cap.total.cpu:g} cpu, {cap.free.gpu:g} of {cap.total.gpu:g} gpu). "
        "Then the preemption policy's choice of victims for the waiting jobs it offers, until one "
        f"finds room. One process, {reps} repetitions, median and best. These are the calls the "
        "supervisor's admission pass makes (`service/run/scheduling_pass.py`); the pass also reads the "
        "store and Ray's capacity, which this figure leaves out.",
        "",
        "| queued jobs | start / wait | admit: median (ms) | best (ms) | preemption choice: median (ms) "
        "| load before / after |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for n, r in results.items():
        lines.append(
            f"| {n:,} | {r['start']} / {r['waiting']} | {statistics.median(r['admit_s']) * 1e3:.1f} "
            f"| {min(r['admit_s']) * 1e3:.1f} | {statistics.median(r['preempt_s']) * 1e3:.1f} "
            f"| {r['load'][0]:.2f} / {r['load'][1]:.2f} |")
    png = plot(results, args.png_dir / "scheduler.png")
    small = results[sizes[0]]
    growth = admit_ms / (statistics.median(small["admit_s"]) * 1e3)
    lines += [
        "",
        f"From {sizes[0]:,} to {queued:,} queued jobs ({queued / sizes[0]:.0f}x) the pass takes "
        f"{growth:.1f}x as long. No goal has been set for it; at the supervisor's default poll "
        f"interval (0.5 s) one pass over {queued:,} jobs takes {admit_ms / 500:.0%} of it.",
        "",
        f"![admission pass time vs queue length]({png})",
    ]
    return Figure(
        name="scheduler", title="Scheduler: one admission pass over 10,000 queued jobs",
        command=f".venv/bin/python -m bench.scheduler --queued {queued} --running {args.running} "
                f"--tenants {args.tenants} --reps {reps}",
        body="\n".join(lines) + "\n",
        headline=f"admit over {queued:,} queued: median {admit_ms:.0f} ms",
        goals=[],
        pngs=[png],
    )


def plot(results: dict, path) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ns = sorted(results)
    ax.plot(ns, [statistics.median(results[n]["admit_s"]) * 1e3 for n in ns], "o-",
            label="admit (median)")
    ax.plot(ns, [statistics.median(results[n]["preempt_s"]) * 1e3 for n in ns], "s--",
            label="preemption choice (median)")
    ax.set_xlabel("queued jobs")
    ax.set_ylabel("ms per pass")
    ax.set_title("One scheduling pass vs queue length", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return save_plot(fig, path)


if __name__ == "__main__":
    cli("scheduler", __doc__, add_args, run)
