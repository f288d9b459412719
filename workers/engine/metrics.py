"""Per-step metrics, each beside the primer's theory where one exists (and
the FLOPs' beside the device's peak: model FLOPs utilisation).

The names are a contract: the API serves exactly these keys.
"""

from __future__ import annotations

import resource
from dataclasses import asdict, dataclass

import torch

from workers.spec import JobSpec
from workers.spec.adapter import job_state_bytes


@dataclass(kw_only=True)
class StepMetrics:
    step: int  # 1-based: the optimizer step just taken
    loss: float
    lr: float
    tokens_per_s: float  # global tokens of the step / step time
    step_time_s: float
    peak_mem_bytes: int
    mem_theory_bytes: int  # params, grads and the optimizer's state per rank (AdamW: 16 B/param / N)
    comm_bytes: int  # what this rank's FSDP collectives moved in the step
    comm_bytes_theory: float  # 3(N-1)/N x S (FSDP), 2(N-1)/N x S (DDP), ...
    comm_bytes_by_op: dict  # op name -> bytes (a compressed reduce-scatter counts its wire bytes)
    collectives: int
    comm_time_s: float | None  # collectives in flight (CPU/gloo; None on GPUs: see workers/engine/comm.py)
    exposed_comm_s: float | None  # the part the training thread waited for
    # model FLOPs utilisation: the model's training FLOPs a token (workers/spec/flops.py),
    # what this rank achieved (its share of the global batch's FLOPs / step time),
    # and that over its device's peak (workers/engine/peak_flops.py; None where unknown)
    flops_per_token: float
    flops_per_s: float
    mfu: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def mem_theory_bytes(job: JobSpec, num_params: int, shard_degree: int) -> int:
    """The model state of one rank: fp32 params and grads (8 B/param) and the
    job's optimizer's state (its descriptor's count, workers/spec/recipes.py:
    AdamW and Adam 8 B/param, SGD 4 with momentum and 0 without), sharded
    `shard_degree` ways; with an adapter, the frozen base at its dtype and the
    adapters' state (workers/spec/adapter.py). `num_params` is one
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
