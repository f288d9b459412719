"""A job's metrics row, described once: every key a row may hold, its type
and what it means. The engine writes rows of these keys (one a training
step; a dataset's preparation, one a file), the job runner adds the
attempt's start-up and recovery figures to its first row, the store keeps
them as JSON, and the API serves them as this model (`GET
/v1/jobs/{id}/metrics`, `api.schemas`), the client and the CLI parse them with
it; goodput and recovery name the groups of keys they read (below).

A row travels as a plain dict (from the ranks through Ray, in a
checkpoint's manifest, in the store's JSON column) holding only the keys
that were written: `MetricRow.as_dict()` is that dict. Served, a key a row
lacks is null.

Torch-free pydantic, beside the job's schema: the API and the lean client
import it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class MetricRow(BaseModel):
    """One training step, as the ranks measured it (see docs/engine.md, Per-step metrics)."""

    # Built from the store's rows (dicts) or records (attributes); a key of no field
    # (a row's transport marks) is left out.
    model_config = ConfigDict(from_attributes=True, extra="ignore")

    step: int
    loss: float | None = None
    lr: float | None = None
    tokens_per_s: float | None = None
    step_time_s: float | None = None
    peak_mem_bytes: int | None = None
    # params, grads and the optimizer's state per rank, by the memory theory (AdamW: 16 B/param / N)
    mem_theory_bytes: int | None = None
    comm_bytes: int | None = None  # what this rank's collectives moved in the step
    comm_bytes_theory: float | None = None  # 3(N-1)/N x S (FSDP), 2(N-1)/N x S (DDP), ...
    # op name -> bytes (a compressed reduce-scatter counts its wire bytes)
    comm_bytes_by_op: dict[str, int] | None = None
    collectives: int | None = None
    # collectives in flight, and the part the training thread waited for
    # (CPU/gloo; None on GPUs: see workers/engine/comm.py)
    comm_time_s: float | None = None
    exposed_comm_s: float | None = None
    # model FLOPs utilisation (workers/schema/flops.py, workers/engine/peak_flops.py): the
    # training FLOPs a token, one rank's FLOP/s, and that over its device's peak
    # (None where the peak is unknown: a CPU without BRIGADE_PEAK_FLOPS)
    flops_per_token: float | None = None
    flops_per_s: float | None = None
    mfu: float | None = None
    # checkpoints: the step saved on this step, or why the save failed (training goes on)
    checkpoint_step: int | None = None
    checkpoint_error: str | None = None
    checkpoint_failures: int | None = None  # failed saves so far in this attempt
    checkpoint_stall_s: float | None = None  # how long the save held training (async: its staging)
    # the first step of an attempt: where it resumed, and (after a failure or
    # a preemption) what the interruption cost
    resumed_from: int | None = None
    recovered_from: str | None = None  # "restart" | "preemption" | "recovery" | "move"
    recovery_s: float | None = None  # from the failure seen (or the notice) to this step's end
    lost_steps: int | None = None  # steps taken before the interruption and taken again
    # ... and the seconds its start-up phases took, launch to this step's end (service/run/launch.py)
    startup: dict[str, float] | None = None
    wall_time: float | None = None  # when the step ended, Unix seconds (the ranks' clock)
    # data: how long the step waited for its batch (read ahead while the step before ran)
    data_wait_s: float | None = None
    # eval steps (every eval.every_steps): the validation loss over a fixed set of samples
    eval_loss: float | None = None
    eval_perplexity: float | None = None
    eval_s: float | None = None  # the seconds the evaluation took (after the step, apart from it)
    # a mixture (data.mix), by member name (the last part of its uri): the tokens
    # trained on from each member so far, and (eval steps) each member's held-out loss
    mix_tokens: dict[str, int] | None = None
    mix_eval_loss: dict[str, float | None] | None = None
    # a dataset's preparation (kind 'prepare'): one row a file, `step` = files done
    file: str | None = None  # the file's name
    tokens: int | None = None
    documents: int | None = None
    shards: int | None = None  # token shards written from it
    file_s: float | None = None  # seconds it took

    def as_dict(self) -> dict[str, Any]:
        """The row as it travels and is stored: the keys written, and only those."""
        return self.model_dump(exclude_unset=True)


def row_fields(*names: str) -> tuple[str, ...]:
    """`names`, each checked to be a key of the row (a typo, or a key renamed
    here, fails at import, not in a reader that finds nothing)."""
    unknown = [name for name in names if name not in MetricRow.model_fields]
    if unknown:
        raise ValueError(f"not keys of a metrics row: {', '.join(unknown)}")
    return names


# When a step ended and where its seconds went: what goodput's phase intervals
# read of each row (service/observability/goodput.py; a caller may load just these).
TIMING_FIELDS = row_fields("wall_time", "step_time_s", "data_wait_s", "eval_s", "checkpoint_stall_s")
# What an interruption cost, on the first row of the attempt after it (service/run/recovery.py).
RECOVERY_FIELDS = row_fields("recovered_from", "recovery_s", "lost_steps")
