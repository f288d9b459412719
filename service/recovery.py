"""What a job runner does about faults: whether a failed group restarts
(`RestartPolicy`, with the node and rank that failed), after how long, and
what an interruption cost once the job trains again (recovery time, lost
steps), as metrics of the first step of the new attempt.

Failures and preemptions are counted apart (`job.restarts`,
`job.preemptions`); a preemption never uses up `max_restarts`.

The same-node rule (fail a job whose failures keep happening on one node)
only applies on a cluster of more than one node: on a single node every
failure is "on the same node", and the rule would stop a job sooner than
`max_restarts` says.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import ray

from service.scheduling.restart import Failure, RestartDecision, RestartPolicy
from service.states import JobState as S
from workers.errors import RankError

logger = logging.getLogger(__name__)
MAX_BACKOFF_S = 10.0
MAX_SAME_NODE = 3  # failures in a row on one node (of a multi-node cluster) before giving up
INTERRUPTIONS = {S.RESTARTING: "restart", S.PREEMPTING: "preemption"}
RECOVERY_FIELDS = ("recovered_from", "recovery_s", "lost_steps")  # on an attempt's first row


def backoff_s(restarts: int, base_s: float) -> float:
    """How long a job waits before restart number `restarts` (1, 2, ...)."""
    return min(MAX_BACKOFF_S, base_s * 2 ** max(0, restarts - 1))


def alive_nodes() -> int:
    try:
        return sum(1 for node in ray.nodes() if node["Alive"])
    except Exception:  # Ray unreachable: do not let the rule stop the job on a guess
        return 1


class FailureHistory:
    """One job's failures, as one runner saw them (node, rank, error), for the
    restart policy. A runner started after a control-plane restart knows the
    count (`job.restarts`) but not the nodes of the earlier ones: they count,
    without a node."""

    def __init__(self, base_backoff_s: float = 0.5):
        self.base_backoff_s = base_backoff_s
        self._seen: list[Failure] = []
        self._where: tuple[str | None, int | None] = (None, None)

    def note(self, exc: BaseException, group=None) -> None:
        """Where the failure about to be decided on happened: the rank a
        `RankError` names, and its node from the group's `node_infos`."""
        rank = exc.rank if isinstance(exc, RankError) else None
        node = None
        infos = getattr(group, "node_infos", None) or []
        if rank is not None and rank < len(infos):
            node = infos[rank].get("node_id") or infos[rank].get("node_ip")
        self._where = (node, rank)

    def decide(self, error: str, restarts: int, preemptions: int, max_restarts: int,
               nodes: int | None = None) -> RestartDecision:
        """Restart or fail after this failure; `restarts` is the job's count
        of failures before it; `nodes`: the cluster's live nodes (asked of
        Ray when not given)."""
        node, rank = self._where
        self._where = (None, None)
        self._seen.append(Failure(error=error, node=node, rank=rank))
        known = self._seen[-(restarts + 1):]
        earlier = [Failure(error="(an earlier failure)")] * (restarts + 1 - len(known))
        multi_node = (alive_nodes() if nodes is None else nodes) > 1
        policy = RestartPolicy(
            base_backoff_s=self.base_backoff_s, max_backoff_s=MAX_BACKOFF_S,
            max_same_node=MAX_SAME_NODE if multi_node else 10**9,
        )
        return policy.decide(earlier + known, preemptions, max_restarts)


@dataclass
class Interruption:
    """An attempt that follows a failure or a preemption: when the old one
    stopped (the event that said so) and the last step it was seen to take."""

    kind: str  # "restart" | "preemption"
    since: float  # epoch seconds
    last_step: int

    @classmethod
    def before(cls, store, job) -> Interruption | None:
        """The interruption the job's current attempt recovers from, if any:
        its latest RESTARTING or PREEMPTING event since it last ran."""
        if not job.step:
            return None
        for event in reversed(store.events(job.id)):
            if event.to_state is S.RUNNING and event.from_state is not S.RUNNING:
                return None  # it ran since: nothing to recover from
            if event.to_state in INTERRUPTIONS and event.from_state is not event.to_state:
                return cls(INTERRUPTIONS[event.to_state], event.time.timestamp(), job.step)
        return None

    def measure(self, first_row: dict) -> dict:
        """What to add to the first metrics row of the new attempt."""
        resumed_from = int(first_row.get("resumed_from", first_row["step"] - 1))
        ended = float(first_row.get("wall_time") or time.time())
        return {
            "recovery_s": max(0.0, ended - self.since),
            "lost_steps": max(0, self.last_step - resumed_from),
            "recovered_from": self.kind,
        }
