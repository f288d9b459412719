"""One admission pass over a long queue, timed: what `Scheduler.admit` costs
the supervisor's loop, with the preemption choice for the first waiting job.

    .venv/bin/python -m bench.scheduler [--queued 10000] [--running 500] [--tenants 50] [--reps 5]

Made-up jobs: tenants with weights 1..3 and quotas, priorities 0..3, sizes 1..8
(a third elastic), a quarter needing gpus; the cluster has a third of its
capacity free, so some hundreds start and the rest wait, each with a reason.
Prints the median and best time over the repetitions.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=500)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    queue, live, policy, capacity = made_up(args.queued, args.running, args.tenants)
    attained = {name: float(i) for i, name in enumerate(policy)}
    scheduler, preemption = Scheduler(), PreemptionPolicy()
    admit_s, preempt_s = [], []
    for _ in range(args.reps):
        start = time.perf_counter()
        decision = scheduler.admit(queue, live, policy, capacity, attained)
        admit_s.append(time.perf_counter() - start)
        by_id = {job.id: job for job in queue}
        start = time.perf_counter()
        for job_id in decision.needs_room:
            if preemption.select_victims(by_id[job_id], live, capacity, policy).victims:
                break
        preempt_s.append(time.perf_counter() - start)
    print(f"free: {capacity.free.cpu:g} of {capacity.total.cpu:g} cpu, "
          f"{capacity.free.gpu:g} of {capacity.total.gpu:g} gpu")
    print(f"admit: {args.queued} queued, {args.running} running, {args.tenants} tenants: "
          f"{len(decision.start)} start, {len(decision.waiting)} wait; "
          f"median {statistics.median(admit_s) * 1e3:.1f} ms, best {min(admit_s) * 1e3:.1f} ms")
    print(f"preemption for {len(decision.needs_room)} waits offered: "
          f"median {statistics.median(preempt_s) * 1e3:.1f} ms, best {min(preempt_s) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
