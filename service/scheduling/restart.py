"""Restart after a failure: whether a job that lost its workers restarts from
its latest checkpoint, after how long, or fails.

The rule, in order:

- Failures and preemptions are counted apart: being preempted is not the
  job's fault and never uses up `max_restarts`.
- A job whose failures keep happening on the same node (more than
  `max_same_node` in a row, the latest included) fails, naming the node: a bad
  machine should not be retried forever.
- A job with more failures than `max_restarts` fails.
- Otherwise it restarts after `base_backoff_s * 2 ** (failures - 1)`,
  capped at `max_backoff_s`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Failure:
    """One failure of the job's worker group (not a preemption)."""

    error: str
    node: str | None = None  # where the failing rank ran, where known
    rank: int | None = None


@dataclass(frozen=True)
class RestartDecision:
    restart: bool
    backoff_s: float
    reason: str


class RestartPolicy:
    def __init__(self, base_backoff_s: float = 0.5, max_backoff_s: float = 60.0,
                 max_same_node: int = 3):
        self.base_backoff_s, self.max_backoff_s = base_backoff_s, max_backoff_s
        self.max_same_node = max_same_node

    def decide(self, failures: Sequence[Failure], preemptions: int,
               max_restarts: int) -> RestartDecision:
        """`failures`: every failure so far, oldest first, the latest last."""
        if not failures:
            raise ValueError("decide() is asked after a failure: `failures` must not be empty")
        latest, count = failures[-1], len(failures)
        preempted = f"; {preemptions} preemptions not counted" if preemptions else ""
        streak = _same_node_streak(failures)
        if streak > self.max_same_node:
            rank = f"rank {latest.rank}" if latest.rank is not None else "a rank"
            return RestartDecision(False, 0.0, (
                f"{rank} failed on node {latest.node} {streak} times in a row (more than "
                f"{self.max_same_node}); giving up: {latest.error}"))
        if count > max_restarts:
            return RestartDecision(False, 0.0, (
                f"failed {count} times, more than max_restarts {max_restarts}{preempted}: "
                f"{latest.error}"))
        backoff = min(self.max_backoff_s, self.base_backoff_s * 2 ** (count - 1))
        return RestartDecision(True, backoff, (
            f"restart {count} of {max_restarts} from the latest checkpoint in {backoff:g} s"
            f"{preempted}: {latest.error}"))


def _same_node_streak(failures: Sequence[Failure]) -> int:
    """How many of the latest failures, counting back, happened on the latest one's node."""
    node = failures[-1].node
    if node is None:
        return 0
    streak = 0
    for failure in reversed(failures):
        if failure.node != node:
            break
        streak += 1
    return streak
