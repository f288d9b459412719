"""A stop that a rank's training thread reads for itself at a step boundary.

`request_stop`, an actor call, lands on the rank's second thread: on a loaded
machine its way there (the caller's and the rank's Ray threads, then the
interpreter's lock the training thread holds between its torch calls) took 2
to 26 ms, against tiny steps of 10 to 30 ms, so several steps could begin
before it landed. Here the driver writes a key in the cluster's GCS key-value
store (a synchronous write, under Ray's token like every GCS call) and rank
0's training thread asks for it after each step, one GCS round trip, before
the ranks agree on the largest stop (`Trainer.run`): a stop written before a
step ends stops the ranks at that step's boundary, whatever else runs.

The key is the rank actor's id (unique for the life of the cluster), so a key
left behind by a process that died names no other; the rank clears it at the
start and end of each training, so a stop meant for one training never stops
the next on the same process.
"""

from __future__ import annotations

import logging
import time

from workers.cluster.nodes import GCS_TIMEOUT_S, gcs_client

logger = logging.getLogger(__name__)

NAMESPACE = b"brigade-stop"
# A rank that could not ask (the GCS restarting) leaves the GCS alone this long;
# the actor call `request_stop`, sent beside every signal, still reaches it.
QUIET_AFTER_ERROR_S = 10.0


def _key(actor_id: str) -> bytes:
    return f"stop/{actor_id}".encode()


def signal(actor_id: str) -> None:
    """Tell the rank whose actor id this is to stop at its next step boundary.
    Raises what the GCS raises: the caller sends `request_stop` too."""
    gcs_client().internal_kv_put(_key(actor_id), b"1", True, namespace=NAMESPACE, timeout=GCS_TIMEOUT_S)


def clear(actor_id: str) -> None:
    """Forget a stop for this actor (before and after one training of it)."""
    try:
        gcs_client().internal_kv_del(_key(actor_id), False, namespace=NAMESPACE, timeout=GCS_TIMEOUT_S)
    except Exception as e:  # the next training clears it again before it begins
        logger.warning("clearing the stop signal of actor %s: %s", actor_id, e)


class StopWatch:
    """Rank 0's side: `asked()` after every step, on the training thread."""

    def __init__(self, actor_id: str):
        self.actor_id = actor_id
        self._quiet_until = 0.0

    def asked(self) -> bool:
        if time.monotonic() < self._quiet_until:
            return False
        try:
            return gcs_client().internal_kv_exists(_key(self.actor_id), namespace=NAMESPACE,
                                             timeout=GCS_TIMEOUT_S)
        except Exception as e:
            logger.warning("asking the GCS for a stop signal: %s (not again for %gs)",
                           e, QUIET_AFTER_ERROR_S)
            self._quiet_until = time.monotonic() + QUIET_AFTER_ERROR_S
            return False
