"""A runner's eye on the cluster's drains: a node that Ray drains (a spot
reclaim's notice, the autoscaler's, an operator's `ray drain-node`) is
gone by its deadline, so a job with ranks there moves them first.

At each poll of a running group (`DrainFollower.check`):
- in place, where the job takes in-memory snapshots on two or more ranks
  (workers/cluster/move.py): the ranks on the node are replaced by new ones
  elsewhere and training goes on from the step it reached: a `moved` event
  (service/store/move_event.py), nothing redone;
- where that cannot be done with nothing changed (no capacity outside the
  draining nodes, one rank, no snapshots, every rank on draining nodes): the
  job is preempted, so it checkpoints at its next step boundary, gives its
  workers back and waits in the queue, where the scheduling pass places it
  on nodes that do not drain (and says "draining: no capacity elsewhere"
  while none has room);
- a move that broke the group on the way: a failure, restarted from disk
  as any other.
A drain is handled once per node and attempt.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from service.observability import metrics as service_metrics
from service.states import JobState as S
from service.store.errors import JobNotFound, UnexpectedState
from service.store.move_event import MOVED, Moved
from workers.cluster.errors import WorkerGroupError
from workers.cluster.in_place import CannotMove, CannotRecover
from workers.cluster.move import Move

if TYPE_CHECKING:
    from service.store import JobRecord, JobStore
    from workers.cluster.group_status import GroupStatus
    from workers.cluster.node_view import NodeView
    from workers.cluster.rank_info import RankInfo

logger = logging.getLogger(__name__)


class MovableGroup(Protocol):
    node_infos: list[RankInfo]

    def move(self, ranks: list[int], avoid: set[str]) -> Move: ...
    def status(self) -> GroupStatus: ...


def _finished(group: MovableGroup) -> bool:
    try:
        return group.status().state == "done"
    except Exception:  # noqa: BLE001  # a rank lost or failed: not finished
        return False


class DrainFollower:
    """Moves a job's ranks off the nodes that drain, once per node and attempt."""

    def __init__(self, job_id: str, store: JobStore, draining: Callable[[], dict[str, NodeView]],
                 confirm_leading: Callable[[], None]):
        self.job_id, self.store = job_id, store
        self._draining, self._confirm_leading = draining, confirm_leading
        self._handled: set[str] = set()  # node ids whose drain this attempt acted on

    def new_attempt(self) -> None:
        self._handled.clear()

    def check(self, group: MovableGroup) -> Move | WorkerGroupError | None:
        """Act on the drains of nodes the group's ranks run on: the move made
        in place, the error where a move broke the group (the caller fails
        the attempt), or None (no drain there, or moving through the queue)."""
        drains = self._draining()
        fresh = {node_id: drain for node_id, drain in drains.items() if node_id not in self._handled}
        by_node: dict[str, list[int]] = {}
        for rank, info in enumerate(group.node_infos):
            if info.node_id in fresh:
                by_node.setdefault(info.node_id, []).append(rank)
        if not by_node:
            return None
        seen = time.monotonic()
        self._handled.update(by_node)
        job = self._job()
        if job.state is not S.RUNNING:  # stopping already: what it does next is its own
            return None
        self._confirm_leading()
        try:
            move = group.move(sorted(r for ranks in by_node.values() for r in ranks),
                              avoid=set(drains))
        except CannotMove as why:  # nothing changed: through a checkpoint and the queue
            self._through_disk(job.step, by_node, fresh, str(why), seen)
            return None
        except CannotRecover as why:
            if _finished(group):  # the move came at the last step: nothing to move
                return None
            self._record(by_node, fresh, step=job.step, seconds=time.monotonic() - seen,
                         in_place=False, outcome=f"the move failed ({why}): the job restarts "
                                                 "from its last committed checkpoint")
            return WorkerGroupError(f"moving off draining node(s) failed: {why}")
        self._record(by_node, fresh, step=move.step, seconds=move.seconds, in_place=True,
                     outcome=move.now)
        service_metrics.observe_recovery_event(in_place=True, seconds=move.seconds)
        return move

    def _through_disk(self, step: int, by_node: dict[str, list[int]], drains: dict[str, NodeView],
                      why: str, seen: float) -> None:
        """Preempt the job: it checkpoints at its next step boundary and goes
        back to the queue, from which it starts again on nodes that do not drain."""
        first = drains[min(by_node)]
        no_room = why.startswith("no capacity")
        outcome = ("no capacity elsewhere: checkpointing, then waiting in the queue" if no_room
                   else f"{why}: checkpointing, then moving through the queue")
        self._record(by_node, drains, step=step, seconds=time.monotonic() - seen,
                     in_place=False, outcome=outcome)
        job = self._job()
        with contextlib.suppress(UnexpectedState):  # stopping meanwhile: that stop checkpoints it
            self.store.transition(
                self.job_id, S.PREEMPTING, expect=S.RUNNING,
                reason=f"node {first.address} draining: "
                       + ("no capacity elsewhere" if no_room else f"{why}; moving through a checkpoint"),
                preemptions=job.preemptions + 1)

    def _job(self) -> JobRecord:
        job = self.store.get_job(self.job_id)
        if job is None:
            raise JobNotFound(self.job_id)
        return job

    def _record(self, by_node: dict[str, list[int]], drains: dict[str, NodeView], *,
                step: int, seconds: float, in_place: bool, outcome: str) -> None:
        for node_id, ranks in sorted(by_node.items()):
            drain = drains[node_id]
            moved = Moved.made(ranks=ranks, node=node_id, address=drain.address,
                               # Ray says why only in a gone node's record: a drain made
                               # outside Brigade has no reason while the node lives
                               reason=drain.drain_reason or "draining",
                               deadline=drain.drain_deadline, step=step,
                               seconds=seconds, in_place=in_place, outcome=outcome)
            sentence = moved.sentence()
            self.store.note(self.job_id, sentence, kind=MOVED, detail=moved.detail())
            self.store.append_log(self.job_id, [sentence])
            logger.info("job %s: %s", self.job_id, sentence)
