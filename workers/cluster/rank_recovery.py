"""A rank's half of recovery in place and of moves (workers/cluster/in_place.py,
replace.py, move.py), mixed into the rank actor (workers/cluster/rank_actor.py
`RankActor`): the snapshots it keeps (its own, and one peer's copy), leaving a
broken group (its connections shut: workers/engine/group_sockets.py) or a
group that moves, and joining the next one from the snapshot the group's plan
names. The actor's `train` calls these; the group calls the public ones."""

from __future__ import annotations

import logging
import queue
from typing import Any

import ray

from workers.cluster.snapshot_peer import REJOIN_TIMEOUT_S, Rejoin, SnapshotSender
from workers.engine import distributed
from workers.engine.group_sockets import GroupSockets

logger = logging.getLogger(__name__)


class RecoveringRank:
    """What of a rank actor keeps its snapshots and changes its process group."""

    # the rank actor's, used here
    rank: int
    _state: str
    _trainer: Any
    _training: tuple | None
    _generation: int

    def _init_recovery(self) -> None:
        # A move asked for (a drain, workers/cluster/replace.py `move_in_place`): at the next
        # step boundary every rank snapshots and leaves the process group; a moving rank
        # first hands its snapshot to `_move_holder`, a surviving rank (None: it stays).
        self._move_requested = False
        self._move_holder: Any = None
        # The rank that keeps this rank's snapshot copy, the copies this rank keeps for
        # others (by rank), this rank's own latest snapshots (kept across a broken group),
        # and the next group to join.
        self._peer: Any = None
        self._held: dict[int, Any] = {}
        self._own: list = []  # this rank's own snapshots, newest first (workers/engine/snapshot.py)
        self._sender = SnapshotSender(self)
        self._sockets = GroupSockets()  # its groups' connections, shut when it leaves a broken one
        self._backend: str | None = None  # its process group's, once it joined one
        self._rejoin: queue.Queue[Rejoin] = queue.Queue()

    def _setup(self, addr: str, port: int, timeout_s: float, join_timeout_s: float | None) -> str:
        raise NotImplementedError  # the rank actor's: join a process group

    def request_move(self, holder: Any = None) -> None:
        """Some ranks of this group move to other nodes: at the next step
        boundary (the ranks agree on which) every rank snapshots in memory and
        leaves the process group, to join the next one from that step. A
        moving rank (`holder`: a staying rank's actor) first hands its
        snapshot to `holder`, from which its replacement takes it."""
        self._move_holder = holder
        self._move_requested = True

    def _move_out(self) -> None:
        """The ranks stopped to move: hand this rank's snapshot of the step to
        its holder (a moving rank), then leave the group."""
        holder, self._move_holder, self._move_requested = self._move_holder, None, False
        if holder is not None and self._trainer.snapshot is not None:
            self._peer = holder
            self._sender.send(self._trainer.snapshot)
            if not self._sender.flush():
                raise RuntimeError(f"rank {self.rank}: its snapshot did not reach the rank holding "
                                   "it for the move in time")
        self._leave_group(broken=False)

    def _learn_peers_sockets(self) -> None:
        """Gloo: every rank's group listeners, gathered once the groups are
        made, so that leaving a broken group ends this rank's connections
        with each peer (`_leave_group`)."""
        import torch.distributed as dist

        if self._backend != "gloo":
            return  # NCCL: its communicators are aborted instead
        everyone: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, self._sockets.listeners())
        self._sockets.learn(everyone)

    def _leave_group(self, broken: bool = True) -> None:
        """Leave the process group: keep this rank's latest snapshot, drop the
        trainer (its model is bound to the group) and abandon the group. A
        broken one (a peer is gone) has its connections shut down first: a
        peer waiting in a collective with this rank fails at once, also one of
        a tensor-parallel mesh whose groups outlive the trainer
        (workers/engine/group_sockets.py). A move's (every rank leaves at the
        same step boundary) is left as it is: its last collective may still
        be ending on a peer."""
        self._state = "recovering"
        trainer = getattr(self, "_trainer", None)
        self._trainer = None  # none until the next group's is built
        if trainer is not None and trainer.snapshots:
            self._own = list(trainer.snapshots)
        del trainer
        if broken and self._backend == "gloo":  # NCCL's communicators are aborted instead
            shut = self._sockets.shut()
            logger.info("rank %d: leaving the broken group, %d of its connections shut", self.rank, shut)
        distributed.abandon_process_group()

    def _join_next_group(self) -> Any:
        """Wait for the group's plan (`rejoin`), fetch this rank's snapshot of
        the plan's step (its own, or from the rank that holds its copy) and
        join the new process group; the snapshot's payload, to restore."""
        self._state = "recovering"
        try:
            plan = self._rejoin.get(timeout=REJOIN_TIMEOUT_S)
        except queue.Empty:
            raise RuntimeError(f"rank {self.rank}: no new process group within "
                               f"{REJOIN_TIMEOUT_S:g} s of losing a peer") from None
        if plan.source is None:
            own = [snapshot for snapshot in self._own if snapshot.step == plan.step]
            if not own:
                raise RuntimeError(f"rank {self.rank}: asked to restore its own snapshot of step "
                                   f"{plan.step}, holds {[s.step for s in self._own]}")
            payload = own[0].payload()
        else:
            payload = ray.get(plan.source.held_snapshot.remote(self.rank, plan.step),
                              timeout=REJOIN_TIMEOUT_S)
            if payload is None:
                raise RuntimeError(f"rank {self.rank}: the peer holding its copy has no snapshot "
                                   f"of step {plan.step}")
        self._peer = plan.peer
        self._setup(plan.addr, plan.port, plan.timeout_s, plan.join_timeout_s)
        self._state = "running"
        return payload

    def rejoin(self, plan: Rejoin) -> None:
        """The group's next process group and the step to restore (a
        surviving rank waiting in `train` picks it up)."""
        self._rejoin.put(plan)

    def training(self) -> tuple | None:
        """(spec, checkpoint target, stop_after, stop_signals) of the latest `train` call;
        None before one."""
        return self._training

    def set_peer(self, peer: Any) -> None:
        """The rank actor that holds this rank's snapshot copies."""
        self._peer = peer

    def hold_snapshot(self, rank: int, payload: Any) -> int:
        """Keep rank `rank`'s snapshot copy (replacing its previous one); its step."""
        self._held[rank] = payload
        return payload.step

    def held_snapshot(self, rank: int, step: int) -> Any:
        """Rank `rank`'s snapshot copy of `step`, or None where this rank holds another."""
        payload = self._held.get(rank)
        return payload if payload is not None and payload.step == step else None

    def holdings(self) -> dict:
        """The steps of the snapshots this rank holds: its own and its peers'
        (workers/cluster/in_place.py `Holdings`), whether it waits to rejoin,
        the step its training had reached (None before it built one), and the
        step of its own copy on its way to its peer (`sending`, None when none)."""
        trainer = getattr(self, "_trainer", None)
        own = trainer.snapshots if trainer is not None and trainer.snapshots else self._own
        return {"rank": self.rank, "own": tuple(snapshot.step for snapshot in own),
                "held": {rank: p.step for rank, p in self._held.items()},
                "state": self._state, "generation": self._generation,
                "step": trainer.step if trainer is not None else None,
                "sending": self._sender.in_flight}
