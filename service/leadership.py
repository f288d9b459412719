"""Which replica of the control plane leads: a lease row in the database
(`service.store.leases`) with an expiry on the database's clock and a
fencing token that rises at every change of holder.

Every replica serves the API; only the one holding the lease runs the
control loop (admission, runners, reconcile). `Leadership` tries to take the
lease every `lease_s / 3` while it follows and renews it as often while it
leads. A leader that has not renewed within `lease_s` of its last successful
renewal (measured on its own monotonic clock from before that renewal was
sent, so never later than the database's expiry) stops leading by itself:
it cannot tell whether it was deposed while the database is out of reach.

It is also the fence of the leader's writes (`JobStore.fenced`): `check`
runs inside each write transaction and refuses it (`Deposed`) unless the row
still names this replica with this term's token, so a leader that wakes from
a stop after another took over writes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy.orm import Session

from service.store.errors import Deposed
from service.store.leases import CONTROL_PLANE, LeaseStore

logger = logging.getLogger(__name__)


class Leadership:
    """`on_gained(token)` and `on_lost(reason)` run once per term, on the
    lease's own thread (or on the thread whose write found it deposed): they
    must return quickly (start or stop work elsewhere)."""

    def __init__(self, leases: LeaseStore, replica: str, lease_s: float, *,
                 name: str = CONTROL_PLANE,
                 on_gained: Callable[[int], None] | None = None,
                 on_lost: Callable[[str], None] | None = None):
        if lease_s <= 0:
            raise ValueError(f"a lease lasts more than 0 s, got {lease_s}")
        self.leases, self.replica, self.lease_s, self.name = leases, replica, lease_s, name
        self.on_gained, self.on_lost = on_gained, on_lost
        self._lock = threading.Lock()
        self._token: int | None = None  # this term's fencing token; None: following
        self._deadline = 0.0  # monotonic: the term ends here unless renewed before
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._call: threading.Thread | None = None  # a lease statement still running (hung)

    # -- what others ask ----------------------------------------------------------

    @property
    def token(self) -> int | None:
        """This term's fencing token; None while following (or once the term
        ran out, even before the lease's thread has noticed)."""
        with self._lock:
            if self._token is not None and time.monotonic() < self._deadline:
                return self._token
            return None

    @property
    def is_leader(self) -> bool:
        return self.token is not None

    def holder(self) -> str | None:
        """The replica holding the lease, as the database says (None: no one)."""
        found = self.leases.holder(self.name)
        return None if found is None else found.holder

    def check(self, session: Session) -> None:
        """The fence (`service.store.store.Fence`): in a write's transaction,
        `Deposed` unless this replica leads with this term's token. A refusal
        ends the term at once."""
        token = self.token
        if token is None:
            self._lose(self._token, "its lease ran out before it could renew it")
            raise Deposed(self.replica, "it holds no lease")
        try:
            self.leases.check(session, self.name, self.replica, token)
        except Deposed as e:
            self._lose(token, str(e))
            raise

    # -- the term -----------------------------------------------------------------

    def start(self) -> Leadership:
        """Try the lease once now (a lone replica leads from its start), then
        keep trying or renewing on a thread of its own."""
        self.acquire()
        self._thread = threading.Thread(target=self._run, name="leadership", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop trying and renewing; give the lease up if held (another
        replica takes it at once, not a lease later). `on_lost` is not called:
        the caller is stopping everything anyway."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            token, self._token = self._token, None
        if token is not None:
            try:
                self.leases.release(self.name, self.replica, token)
            except Exception as e:  # it runs out by itself
                logger.warning("could not give the leader lease up: %s", e)

    def acquire(self) -> bool:
        """One try at the lease (while following): whether this replica leads now."""
        if self.is_leader:
            return True
        sent = time.monotonic()
        token = self._within(self.lease_s, lambda: self.leases.acquire(
            self.name, self.replica, self.lease_s))
        if token is None or self._stopping.is_set():
            return False
        with self._lock:
            self._token, self._deadline = token, sent + self.lease_s
        logger.info("replica %s leads the control plane (lease token %d)", self.replica, token)
        if self.on_gained is not None:
            self.on_gained(token)
        return True

    def renew(self) -> bool:
        """One renewal (while leading): whether the term goes on. A renewal
        the database refuses (another holds the lease) ends the term; one that
        fails otherwise (the database out of reach) ends it only once its
        deadline has passed."""
        token = self._token
        if token is None:
            return False
        sent = time.monotonic()
        left = self._deadline - sent
        if left <= 0:
            self._lose(token, f"could not renew its lease within {self.lease_s:g} s")
            return False
        renewed = self._within(left, lambda: self.leases.renew(
            self.name, self.replica, token, self.lease_s))
        if renewed is True:
            with self._lock:
                if self._token == token:
                    self._deadline = sent + self.lease_s
            return True
        if renewed is False:
            self._lose(token, "another replica holds the lease")
            return False
        if time.monotonic() >= self._deadline:
            self._lose(token, f"could not renew its lease within {self.lease_s:g} s")
            return False
        return True  # a failed try: the next one may still make it in time

    def step_down(self, reason: str) -> None:
        """Stop leading now (the lease runs out by itself unless renewed)."""
        self._lose(self._token, reason)

    # -- internals ----------------------------------------------------------------

    def _run(self) -> None:
        every = self.lease_s / 3
        while not self._stopping.is_set():
            if self._token is not None:
                ok = self.renew()
                wait = every if ok else min(every, 1.0)
                if self._token is not None:  # never wait past the deadline
                    wait = max(0.0, min(wait, self._deadline - time.monotonic()))
            else:
                self.acquire()
                wait = every
            self._stopping.wait(wait)

    def _lose(self, token: int | None, reason: str) -> None:
        """End the term of `token` (once) and say why."""
        with self._lock:
            if token is None or self._token != token:
                return
            self._token = None
        logger.warning("replica %s stops leading the control plane: %s", self.replica, reason)
        if self.on_lost is not None:
            self.on_lost(reason)

    def _within(self, timeout_s: float, call: Callable):
        """`call()`'s answer, or None if it fails or has not answered within
        `timeout_s` (a database that stopped answering must not hold the
        term past its deadline). One call at a time: while an earlier one
        hangs, none more is made."""
        if self._call is not None and self._call.is_alive():
            return None
        answer: list = []

        def run() -> None:
            try:
                answer.append(call())
            except Exception as e:
                logger.warning("leader lease: %s: %s", type(e).__name__, e)

        self._call = threading.Thread(target=run, name="leadership-call", daemon=True)
        self._call.start()
        self._call.join(timeout_s)
        return answer[0] if answer else None
