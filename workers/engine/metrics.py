"""What a step's metrics are measured with, each beside the primer's theory
where one exists (and the FLOPs' beside the device's peak: model FLOPs
utilisation). The row they go in, its keys and their types, is the job's
metrics row (`workers.schema.metrics_row.MetricRow`): the trainer writes it,
the API serves it.
"""

from __future__ import annotations

import resource

import torch

from workers.schema import JobSpec
from workers.schema.adapter import job_state_bytes


def mem_theory_bytes(job: JobSpec, num_params: int, shard_degree: int) -> int:
    """The model state of one rank: fp32 params and grads (8 B/param) and the
    job's optimizer's state (its descriptor's count, workers/schema/recipes.py:
    AdamW and Adam 8 B/param, SGD 4 with momentum and 0 without), sharded
    `shard_degree` ways; with an adapter, the frozen base at its dtype and the
    adapters' state (workers/schema/adapter.py). `num_params` is one
    tensor-parallel rank's piece of the model."""
    return int(job_state_bytes(job, num_params, shard_degree, job.parallelism.tp))


def achieved_flops(flops_per_token: float, tokens: int, step_time_s: float,
                   world_size: int) -> float:
    """FLOP/s of one rank: the step's model FLOPs (every rank's: `tokens` is
    the global batch's) over its time, shared evenly by the `world_size` ranks
    (data- and tensor-parallel alike)."""
    return flops_per_token * tokens / step_time_s / world_size


class PeakMemory:
    """Peak device memory of a step on GPUs; the process's peak RSS on CPUs
    (the OS tracks no per-step CPU peak, so that one only grows)."""

    def __init__(self, device: torch.device):
        self.device = device

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
