"""What a worker group answers its driver when polled (`WorkerGroup.status`):
a frozen value, read by the job's runner (service/run/runner.py), whose
`lifecycle.decide` turns how the group ended into the job's next state.

A lost, failed or hung rank is not a status: the poll raises it
(workers/cluster/errors.py), naming the rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

GroupState = Literal["running", "done", "preempted"]


@dataclass(frozen=True, kw_only=True)
class GroupStatus:
    # "done": every rank finished the job (or the run's stop_after);
    # "preempted": every rank stopped, checkpointed, after a preemption notice (SIGTERM)
    state: GroupState
    steps: int = 0  # rank 0's metrics rows so far
    step: int | None = None  # rank 0's training step (None before its trainer is built)
    # preempted: which ranks got SIGTERM (by rank), and what that did, where, at which step
    sigterm_ranks: list[int] = field(default_factory=list)
    reason: str | None = None
