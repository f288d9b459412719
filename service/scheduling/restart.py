"""Restart after a failure: whether a job that lost its workers restarts from
its latest checkpoint, after how long, or fails. The one restart policy: the
job runner's decisions (`service.run.lifecycle`) and its wait before a restart
both read it.

The rule, in order:

- Failures and preemptions are counted apart: being preempted is not the
  job's fault and never uses up `max_restarts`.
- A job whose failures keep happening on the same node (more than
  `max_same_node` in a row, the latest included) fails, naming the node: a bad
  machine should not be retried forever. Only on a cluster of more than one
  node: on a single node every failure is "on the same node", and the rule
  would stop a job sooner than `max_restarts` says.
- A job with more failures than `max_restarts` fails.
- Otherwise it restarts after `base_backoff_s * 2 ** (failures - 1)`,
  capped at `max_backoff_s` (10 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_BACKOFF_S = 10.0
MAX_SAME_NODE = 3  # failures in a row on one node (of a multi-node cluster) before giving up


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
    def __init__(self, base_backoff_s: float = 0.5, max_backoff_s: float = MAX_BACKOFF_S,
                 max_same_node: int = MAX_SAME_NODE):
        self.base_backoff_s, self.max_backoff_s = base_backoff_s, max_backoff_s
        self.max_same_node = max_same_node

    def backoff_s(self, restarts: int) -> float:
        """How long a job waits before restart number `restarts` (1, 2, ...)."""
        return min(self.max_backoff_s, self.base_backoff_s * 2 ** max(0, restarts - 1))

    def decide(self, failures: Sequence[Failure], preemptions: int, max_restarts: int,
               *, multi_node: bool = True) -> RestartDecision:
        """`failures`: every failure so far, oldest first, the latest last;
        `multi_node`: whether the cluster has more than one live node."""
        if not failures:
            raise ValueError("decide() is asked after a failure: `failures` must not be empty")
        latest, count = failures[-1], len(failures)
        preempted = f"; {preemptions} preemptions not counted" if preemptions else ""
        streak = _same_node_streak(failures) if multi_node else 0
        if streak > self.max_same_node:
            rank = f"rank {latest.rank}" if latest.rank is not None else "a rank"
            return RestartDecision(False, 0.0, (
                f"{rank} failed on node {latest.node} {streak} times in a row (more than "
                f"{self.max_same_node}); giving up: {latest.error}"))
        if count > max_restarts:
            return RestartDecision(False, 0.0, (
                f"failed {count} times, more than max_restarts {max_restarts}{preempted}: "
                f"{latest.error}"))
        backoff = self.backoff_s(count)
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
