"""The engine on a CUDA device, by hand, where one is lent (CI has none):

    python -m bench.gpu_check --out gpu_check.json

One process, a world of one (NCCL will not run two ranks on one GPU):
checks that the backend is picked from the device (nccl), that FSDP2 trains
on it, that a DCP checkpoint saved on it resumes on the same curve, that the
compressed reduce-scatter and bf16 mixed precision run there, compares the
curve with the same job on the CPU (gloo, in a subprocess), and times a
larger model. Writes every figure to one JSON file; prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

TINY = {
    "model": {"n_layers": 2, "d_model": 64, "n_heads": 4, "seq_len": 64},
    "data": {"source": "builtin"},
    "train": {"steps": 40, "global_batch_size": 16, "seed": 0, "lr": 3e-3, "warmup_steps": 5},
    "checkpoint": {"every_steps": 10, "keep_last": 2, "async": True},
}


def run(raw: dict, checkpoint_root: str | None = None, stop_after: int | None = None,
        job: str = "gpu-check") -> tuple[str, list[dict]]:
    """Train `raw` as a world of one; (backend, metrics per step)."""
    from checkpoints import CheckpointTarget
    from workers.engine.distributed import destroy_process_group, init_single_process
    from workers.schema import JobSpec
    from workers.engine.trainer import train_rank

    backend = init_single_process(timeout_s=120)
    target = None
    if checkpoint_root:
        target = CheckpointTarget(root=checkpoint_root, tenant="bench", job=job,
                                  secret="gpu-check-secret")
    try:
        return backend, train_rank(JobSpec.model_validate(raw), checkpoint=target,
                                   stop_after=stop_after)
    finally:
        destroy_process_group()


def with_(raw: dict, **sections) -> dict:
    out = json.loads(json.dumps(raw))
    for section, values in sections.items():
        out.setdefault(section, {}).update(values)
    return out


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def cpu_losses() -> list[float]:
    """The same tiny job on the CPU (gloo), in a process that sees no GPU."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    code = ("import json; from bench.gpu_check import run, TINY; "
            "b, m = run(TINY); print(json.dumps([b, [r['loss'] for r in m]]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=600, check=True)
    backend, losses = json.loads(out.stdout.strip().splitlines()[-1])
    assert backend == "gloo", backend
    return losses


def write_report(report: dict, checks: dict[str, bool], out: str) -> int:
    """The report with its checks, printed and written to `out`; the exit status
    (0: every check passed)."""
    report["checks"] = checks
    report["all_passed"] = all(checks.values())
    text = json.dumps(report, indent=1)
    print(text)
    with open(out, "w") as f:
        f.write(text)
    return 0 if report["all_passed"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="gpu_check.json")
    args = parser.parse_args()
    import torch

    report: dict = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    report["device"] = torch.cuda.get_device_name(0)
    checks: dict[str, bool] = {}

    backend, full = run(TINY)
    losses = [r["loss"] for r in full]
    report["backend"] = backend
    checks["backend is nccl on a CUDA device"] = backend == "nccl"
    checks["loss falls"] = losses[-1] < 0.8 * losses[0]
    report["loss_first_last"] = [losses[0], losses[-1]]
    report["exposed_comm_s_on_gpu"] = full[-1].get("exposed_comm_s")

    with tempfile.TemporaryDirectory() as root:
        uri = f"file://{root}"
        run(TINY, uri, stop_after=20)
        _, resumed = run(TINY, uri)
        got = {r["step"]: r["loss"] for r in resumed}
        worst = max(rel(got[s], losses[s - 1]) for s in got)
        report["resume_steps"] = [min(got), max(got)]
        report["resume_max_rel_diff"] = worst
        checks["resumed from step 20 on the same curve (1e-5)"] = min(got) == 21 and worst < 1e-5

    _, int8 = run(with_(TINY, sharding={"grad_compression": "int8"}))
    report["int8_final_loss_rel"] = rel(int8[-1]["loss"], losses[-1])
    checks["int8 reduce-scatter within 2% of the final loss"] = report["int8_final_loss_rel"] < 0.02

    _, bf16 = run(with_(TINY, sharding={"param_dtype": "bfloat16", "reduce_dtype": "float32"}))
    report["bf16_final_loss_rel"] = rel(bf16[-1]["loss"], losses[-1])
    checks["bf16 mixed precision trains (final loss within 5%)"] = report["bf16_final_loss_rel"] < 0.05

    cpu = cpu_losses()
    report["gpu_vs_cpu_max_rel_diff"] = max(rel(g, c) for g, c in zip(losses, cpu, strict=True))
    checks["GPU curve within 1e-3 of the CPU curve"] = report["gpu_vs_cpu_max_rel_diff"] < 1e-3

    big = {"model": {"n_layers": 8, "d_model": 1024, "n_heads": 16, "seq_len": 512,
                     "vocab_size": 256},
           "data": {"source": "synthetic"},
           "train": {"steps": 30, "global_batch_size": 32, "lr": 3e-3},
           "sharding": {"param_dtype": "bfloat16", "reduce_dtype": "float32"}}
    start = time.perf_counter()
    _, big_rows = run(big)
    report["big_model_wall_s"] = time.perf_counter() - start
    timed = big_rows[10:]
    report["big_model_tokens_per_s_median"] = sorted(r["tokens_per_s"] for r in timed)[len(timed) // 2]
    report["big_model_peak_mem_bytes"] = max(r["peak_mem_bytes"] for r in big_rows)
    report["big_model_mem_theory_bytes"] = big_rows[-1].get("mem_theory_bytes")

    return write_report(report, checks, args.out)


if __name__ == "__main__":
    sys.exit(main())
