"""Ray path vs torchrun vs one process: the same job, steps/s and wall time.

    .venv/bin/python -m bench.overhead [--steps 40] [--workers 2]

Each mode runs in its own process tree, one after another, with one thread
per rank. Steady-state steps/s is 1 / median step time after a warm-up; wall
time includes start-up (Ray cluster and actors, torchrun's processes).
Prints a markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

JOB = {
    "model": {"n_layers": 4, "d_model": 128, "n_heads": 4, "seq_len": 128},
    "data": {"source": "builtin"},
    "sharding": {"strategy": "full_shard"},
    "train": {"global_batch": 8},
}
WARMUP = 5
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def job(steps: int) -> dict:
    return JOB | {"train": JOB["train"] | {"steps": steps}}


def steady_steps_per_s(metrics: list[dict]) -> float:
    return 1.0 / statistics.median(m["step_time_s"] for m in metrics[WARMUP:])


def metrics_from(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def run_local(config_path: str, workers: int) -> tuple[list[dict], float]:
    from workers.distributed import free_port

    cmd = [sys.executable, "-m", "workers.local", "--config", config_path]
    if workers > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(workers),
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m",
               "workers.local", "--config", config_path]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, check=True)
    return metrics_from(out.stdout), time.perf_counter() - start


def run_ray(config_path: str, workers: int) -> tuple[list[dict], float]:
    cmd = [sys.executable, "-m", "api.cli", "train", config_path, "--workers", str(workers)]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, check=True)
    return metrics_from(out.stdout), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job(args.steps), f)
    rows = {}
    for name, fn, n in [
        ("one process", run_local, 1),
        (f"torchrun x{args.workers}", run_local, args.workers),
        (f"Brigade on Ray x{args.workers}", run_ray, args.workers),
    ]:
        metrics, wall = fn(f.name, n)
        rows[name] = (steady_steps_per_s(metrics), wall, metrics[-1]["loss"])
        print(f"{name}: {rows[name][0]:.2f} steps/s, wall {wall:.1f} s", file=sys.stderr)
    torchrun = rows[f"torchrun x{args.workers}"][0]
    print(f"\nMachine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; job: {json.dumps(job(args.steps))}\n")
    print("| mode | steps/s (median after warm-up) | vs torchrun | wall incl. start-up (s) | final loss |")
    print("| --- | --- | --- | --- | --- |")
    for name, (sps, wall, loss) in rows.items():
        print(f"| {name} | {sps:.2f} | {sps / torchrun:.3f}x | {wall:.1f} | {loss:.4f} |")


if __name__ == "__main__":
    main()
