"""Rank processes: one forked from the node's fork server against one started
cold, by the CPU the machine spends on it and the time until it has torch and
the engine imported, interleaved in one run.

    .venv/bin/python -m bench.rank_start [--reps 6]

A local Ray cluster and a rank pool of size 0 (its fork server only:
workers/cluster/fork_host.py). Each trial starts one rank actor as the worker group
does (`workers.cluster.pool.start_rank_actor`), forked (through the server's
launcher: the runtime_env a cold CPU rank gets) or cold (as Ray starts any
worker), and waits for its `preload` (torch and the engine imported). The
CPU is the whole machine's (/proc/stat, user + system) from the actor's
creation to 3 s after it is ready, less the idle rate measured before the
trials: it counts the launcher, Ray's worker set-up, the raylet's own work
and any worker Ray starts to replace one it handed out, not only the rank's
process. Trials alternate cold and forked; medians over the repetitions.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from bench.report import Figure, cli, load

SETTLE_S = 3.0  # after ready: what Ray does for the start (a replacement worker) is counted


def machine_cpu_s() -> float:
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    user, nice, system = (int(x) for x in fields[:3])
    irq, softirq = int(fields[5]), int(fields[6])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def idle_rate(seconds: float) -> float:
    """CPU-s per second the machine spends with no trial running."""
    start, t0 = machine_cpu_s(), time.monotonic()
    time.sleep(seconds)
    return (machine_cpu_s() - start) / (time.monotonic() - t0)


def trial(mode: str, pool, node: str, baseline: float) -> dict:
    import ray

    from workers.cluster.pool import start_rank_actor

    env = pool.runtime_env(node) if mode == "forked" else None
    cpu0, t0 = machine_cpu_s(), time.monotonic()
    actor = start_rank_actor(node_id=node, num_cpus=0,
                             **({"runtime_env": env} if env else {})).remote(0, 1, 1)
    pid = ray.get(actor.preload.remote())
    ready_s = time.monotonic() - t0
    time.sleep(SETTLE_S)
    elapsed = time.monotonic() - t0
    cpu = machine_cpu_s() - cpu0 - baseline * elapsed
    with open(f"/proc/{pid}/stat") as f:
        parent = int(f.read().rsplit(")", 1)[1].split()[1])
    ray.kill(actor, no_restart=True)
    time.sleep(2.0)  # its end, outside the next trial's count
    return {"mode": mode, "ready_s": ready_s, "cpu_s": cpu, "parent": parent}


def add_args(parser) -> None:
    parser.add_argument("--reps", type=int, default=None, help="trials per mode (default 6, --quick 2)")


def run(args) -> Figure:
    import ray

    from workers.cluster.pool import RankPool

    reps = args.reps or (2 if args.quick else 6)
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    pool = RankPool(0, name_prefix=f"bench-rank-start-{os.getpid()}").start()
    try:
        if not pool.wait_warm(180):
            raise RuntimeError("the fork server did not come up within 180 s")
        [node] = [n for n in ray.nodes() if n["Alive"]]
        node_id = node["NodeID"]
        server_pid = pool.fork_servers.launch(node_id)["pid"]
        time.sleep(5)  # Ray's own start settles
        before = load()
        baseline = idle_rate(5.0)
        rows = [trial(mode, pool, node_id, baseline)
                for _ in range(reps) for mode in ("cold", "forked")]
        after = load()
    finally:
        pool.shutdown()
        ray.shutdown()
    for row in rows:
        print(row, file=sys.stderr)
    by = {mode: [r for r in rows if r["mode"] == mode] for mode in ("cold", "forked")}
    forked_from_server = all(r["parent"] == server_pid for r in by["forked"])
    med = {mode: {key: statistics.median(r[key] for r in by[mode]) for key in ("ready_s", "cpu_s")}
           for mode in by}
    cpu_ratio = med["forked"]["cpu_s"] / med["cold"]["cpu_s"]
    ready_ratio = med["forked"]["ready_s"] / med["cold"]["ready_s"]
    lines = [
        __doc__.split("\n\n", 2)[2].strip(),
        "",
        f"Idle machine rate before the trials: {baseline:.2f} CPU-s/s (subtracted). "
        f"Every forked rank's parent was the fork server: {'yes' if forked_from_server else 'NO'}.",
        "",
        "| rank process | CPU-s to ready (median) | min / max | ready after (s, median) | min / max |",
        "| --- | --- | --- | --- | --- |",
    ]
    for mode in ("cold", "forked"):
        cpu = [r["cpu_s"] for r in by[mode]]
        ready = [r["ready_s"] for r in by[mode]]
        lines.append(f"| {mode} | {med[mode]['cpu_s']:.2f} | {min(cpu):.2f} / {max(cpu):.2f} "
                     f"| {med[mode]['ready_s']:.2f} | {min(ready):.2f} / {max(ready):.2f} |")
    lines += [
        "",
        f"Forked / cold, same run: CPU {cpu_ratio:.2f}x, time to ready {ready_ratio:.2f}x. "
        "What is left of a forked start: Ray's worker set-up for a runtime_env (`setup_worker.py`, "
        "which imports Ray), the worker's own import of Ray and its connection to the raylet; "
        "torch and the engine come with the fork.",
    ]
    return Figure(
        name="rank_start", title="Rank processes: forked from the fork server vs started cold",
        command=f".venv/bin/python -m bench.rank_start --reps {reps}",
        body="\n".join(lines) + "\n",
        headline=(f"CPU to a ready rank: forked {med['forked']['cpu_s']:.2f} CPU-s vs cold "
                  f"{med['cold']['cpu_s']:.2f} ({cpu_ratio:.2f}x); ready in "
                  f"{med['forked']['ready_s']:.2f} s vs {med['cold']['ready_s']:.2f} s "
                  f"({ready_ratio:.2f}x)"),
        goals=[],
        load_before=before, load_after=after,
    )


if __name__ == "__main__":
    cli("rank_start", __doc__, add_args, run)
