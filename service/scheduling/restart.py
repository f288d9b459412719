"""Restart after a failure: whether a job that lost its workers restarts from
its latest checkpoint, after how long, or fails. The one restart policy: the
job runner's decisions (`service.run.lifecycle`) and its wait before a restart
both read it.

The rule, in order:

- Failures and preemptions are counted apart: being preempted is not the
  job's fault and never uses up `max_restarts`.
- Only the failures since the job last made progress count: an attempt that
  committed a checkpoint after its start, or took at least
  `reset_after_steps` (RESET_AFTER_STEPS, 20) steps after it, made progress,
  and its failure is the first of a new count (`made_progress`). So a job
  whose ranks are killed every few minutes by faults that are not its own
  trains on at the shortest backoff, however long it runs, while one that
  crashes as it starts, or before it saves, backs off and fails as before.
  The job's `restarts` still counts every restart.
- A job whose failures keep happening on the same node (more than
  `max_same_node` in a row, the latest included) fails, naming the node: a bad
  machine should not be retried forever. Only on a cluster of more than one
  node: on a single node every failure is "on the same node", and the rule
  would stop a job sooner than `max_restarts` says.
- A job with more failures than `max_restarts` fails: `max_restarts` bounds
  a crash loop, not the independent faults of a job that trains between them.
- Otherwise it restarts after `base_backoff_s * 2 ** (failures - 1)`,
  capped at `max_backoff_s` (10 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_BACKOFF_S = 10.0
MAX_SAME_NODE = 3  # failures in a row on one node (of a multi-node cluster) before giving up
# Steps an attempt takes after its start that make it progress (its failure counts afresh).
# Small beside any real run's length, large beside a crash loop's few steps per attempt.
RESET_AFTER_STEPS = 20


@dataclass(frozen=True)
class Failure:
    """One failure of the job's worker group (not a preemption)."""

    error: str
    node: str | None = None  # where the failing rank ran, where known
    rank: int | None = None


@dataclass(frozen=True)
class AttemptSteps:
    """The steps an attempt took, as its metrics rows say: it began after
    `resumed_from` (0: from scratch) and its newest is `last`."""

    resumed_from: int
    last: int


@dataclass(frozen=True)
class RestartDecision:
    restart: bool
    backoff_s: float
    reason: str


class RestartPolicy:
    def __init__(self, base_backoff_s: float = 0.5, max_backoff_s: float = MAX_BACKOFF_S,
                 max_same_node: int = MAX_SAME_NODE, reset_after_steps: int = RESET_AFTER_STEPS):
        self.base_backoff_s, self.max_backoff_s = base_backoff_s, max_backoff_s
        self.max_same_node, self.reset_after_steps = max_same_node, reset_after_steps

    def backoff_s(self, failures: int) -> float:
        """How long a job waits before restarting after its `failures`-th
        failure (1, 2, ...) since it last made progress."""
        return min(self.max_backoff_s, self.base_backoff_s * 2 ** max(0, failures - 1))

    def made_progress(self, steps: AttemptSteps | None, committed: int | None) -> bool:
        """Whether an attempt that failed made progress: a checkpoint was
        committed after its start (`committed`: the newest committed step
        when it failed), or it took `reset_after_steps` steps after it.
        `steps` None: its rows say nothing (it failed starting, or before its
        first step was read): none."""
        if steps is None:
            return False
        if committed is not None and committed > steps.resumed_from:
            return True
        return steps.last - steps.resumed_from >= self.reset_after_steps

    def decide(self, failures: Sequence[Failure], preemptions: int, max_restarts: int,
               *, multi_node: bool = True, before_progress: int = 0) -> RestartDecision:
        """`failures`: those since the job last made progress, oldest first,
        the latest last (the first of them may be that of an attempt that made
        progress); `before_progress`: how many came before (in the job's
        restarts, said in the reason, not counted); `multi_node`: whether the
        cluster has more than one live node."""
        if not failures:
            raise ValueError("decide() is asked after a failure: `failures` must not be empty")
        latest, count = failures[-1], len(failures)
        preempted = f"; {preemptions} preemptions not counted" if preemptions else ""
        since = (f" since its last progress ({count + before_progress} in all)"
                 if before_progress else "")
        streak = _same_node_streak(failures) if multi_node else 0
        if streak > self.max_same_node:
            rank = f"rank {latest.rank}" if latest.rank is not None else "a rank"
            return RestartDecision(False, 0.0, (
                f"{rank} failed on node {latest.node} {streak} times in a row (more than "
                f"{self.max_same_node}); giving up: {latest.error}"))
        if count > max_restarts:
            return RestartDecision(False, 0.0, (
                f"failed {count} times{since}, more than max_restarts {max_restarts}{preempted}: "
                f"{latest.error}"))
        backoff = self.backoff_s(count)
        return RestartDecision(True, backoff, (
            f"restart {count} of {max_restarts}{since} from the latest checkpoint in {backoff:g} s"
            f"{preempted}: {latest.error}"))


def _same_node_streak(failures: Sequence[Failure]) -> int:
    """How many of the latest failures, counting back, happened on the latest one's node
    (of those since the job last made progress: a node that lets it progress is not bad)."""
    node = failures[-1].node
    if node is None:
        return 0
    streak = 0
    for failure in reversed(failures):
        if failure.node != node:
            break
        streak += 1
    return streak
