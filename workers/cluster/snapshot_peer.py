"""A rank's side of the snapshot copies its peer holds, and the plan a rank
follows to join its group's next process group (recovery in place,
workers/cluster/in_place.py).

The train loop captures its snapshot at a step boundary (workers/engine/
snapshot.py) and hands it to the `SnapshotSender`, whose thread sends a copy
to the peer rank's actor while training goes on: Ray copies the payload
into its object store while the snapshot is lent, so the next capture waits for
that copy and never overwrites buffers still being read (`Snapshot.lend`).
One send at a time: a snapshot taken while the previous one is still waiting
to go replaces it in the queue (the peer wants the newest). The ranks capture
the next snapshot only once every rank's latest copy has arrived (`delivered`,
agreed on by the train loop: workers/engine/trainer.py `Trainer.run`).
Each copy's time, from Ray's copy to the peer's answer, is kept: the
quickest (`handover_s`) is what the train loop counts, beside the capture's,
when it settles an automatic snapshot interval.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

import ray

logger = logging.getLogger(__name__)
REJOIN_TIMEOUT_S = 120.0  # a surviving rank's wait for its group's next process group
SEND_TIMEOUT_S = 60.0  # a copy's way to the peer


@dataclass(frozen=True)
class Rejoin:
    """What a rank needs to join its group's next process group: the
    rendezvous, the step every rank restores, where this rank's snapshot of
    it is (`source`: the actor holding its copy; None: its own), and the
    peer that holds its copies from now on."""

    addr: str
    port: int
    step: int
    source: Any  # a rank actor handle, or None
    peer: Any  # a rank actor handle, or None (a world of one)
    timeout_s: float
    join_timeout_s: float | None = None


class _Rank(Protocol):
    rank: int
    _peer: Any


class SnapshotSender:
    """Sends a rank's latest snapshot to its peer, in the background."""

    def __init__(self, rank: _Rank):
        self._rank = rank
        self._cond = threading.Condition()
        self._pending: Any = None  # a lease on the newest snapshot not yet sent
        self.in_flight: int | None = None  # the step of the copy on its way (None: none is)
        self._failed = False  # the latest copy did not reach the peer
        self._quickest_s: float | None = None  # the quickest copy that reached the peer
        self._thread: threading.Thread | None = None

    def send(self, snapshot: Any) -> None:
        """Queue `snapshot` for the peer (the train loop's `on_snapshot`, on its
        thread): it is lent at once (its next capture waits for the copy), and
        a lent one not sent yet is given back, replaced by this newer one."""
        lease = snapshot.lend()
        with self._cond:
            replaced, self._pending = self._pending, lease
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="snapshot-peer", daemon=True)
                self._thread.start()
            self._cond.notify_all()  # the sender thread, and any flush waiting
        if replaced is not None:
            replaced.release()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None:
                    self._cond.wait()
                lease, self._pending = self._pending, None
                self.in_flight = lease.payload.step
            peer = self._rank._peer
            try:
                if peer is None:
                    continue
                began = time.perf_counter()
                try:
                    ref = ray.put(lease.payload)  # Ray's copy: the snapshot may be captured again
                finally:
                    lease.release()
                ray.get(peer.hold_snapshot.remote(self._rank.rank, ref), timeout=SEND_TIMEOUT_S)
                took = time.perf_counter() - began
                self._quickest_s = took if self._quickest_s is None else min(self._quickest_s, took)
                self._failed = False
            except Exception as e:  # the peer gone: the group's recovery deals with it
                self._failed = True
                logger.warning("rank %d: snapshot copy to its peer failed: %s: %s", self._rank.rank,
                               type(e).__name__, e)
            finally:
                lease.release()  # released once (a second release does nothing)
                with self._cond:
                    self.in_flight = None
                    self._cond.notify_all()

    def delivered(self) -> bool:
        """Whether the latest snapshot queued is with the peer: nothing waits
        to go or is on its way, and the last copy sent arrived."""
        with self._cond:
            return self._pending is None and self.in_flight is None and not self._failed

    def new_training(self) -> None:
        """A training from its start (not a rank rejoining its group): its
        copies' times are its own, of its model's size."""
        self._quickest_s = None

    def handover_s(self) -> float | None:
        """The quickest copy to the peer so far, in seconds: Ray's copy of the
        payload, the call and the peer's unpickling and keeping it (None before
        one arrived). The quickest, as a copy's cost: the first ones also pay
        for the object store's and the call's first use."""
        return self._quickest_s

    def flush(self, timeout_s: float = SEND_TIMEOUT_S) -> bool:
        """Wait until every snapshot queued has gone to the peer (or failed to);
        whether that happened within `timeout_s`."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and self.in_flight is None,
                                       timeout=timeout_s)
