"""Loading never waits: the next step's batch is read and assembled in a
background thread while this step runs, one batch ahead.

The cursor stays the one of the batch handed out, not the one read ahead:
a checkpoint saves where training is, and a resume (or any `load_state_dict`)
drops the read-ahead batch. Sample i's tokens depend on (seed, i) only, so
reading ahead changes nothing a step sees; an error in the thread (a
DataError) is raised by the `next_batch` that wanted the batch.
"""

from __future__ import annotations

import copy
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from workers.engine.data import RankBatches


class BatchPrefetch:
    """A `RankBatches` whose next batch is read ahead in a thread."""

    def __init__(self, batches: RankBatches):
        self.batches = batches
        self.wait_s = 0.0  # how long the latest next_batch waited for its batch
        self._pool: ThreadPoolExecutor | None = None  # started by the first next_batch
        self._ahead: tuple[int, Future] | None = None

    def __getattr__(self, name: str) -> Any:  # rank, world_size, global_batch, source, ...
        return getattr(self.__dict__["batches"], name)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        cursor = self.batches.next_sample
        start = time.perf_counter()
        if self._ahead is not None and self._ahead[0] == cursor:
            batch = self._ahead[1].result()
        else:
            batch = self._batch_at(cursor)
        self.wait_s = time.perf_counter() - start
        self.batches.next_sample = cursor + self.batches.global_batch
        ahead = self.batches.next_sample
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch-prefetch")
        self._ahead = (ahead, self._pool.submit(self._batch_at, ahead))
        return batch

    def _batch_at(self, cursor: int) -> tuple[torch.Tensor, torch.Tensor]:
        at = copy.copy(self.batches)
        at.next_sample = cursor
        return at.next_batch()

    def state_dict(self) -> dict:
        return self.batches.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self._ahead = None
        self.batches.load_state_dict(state)

    def close(self) -> None:
        """Stop reading ahead (a later next_batch starts again)."""
        self._ahead = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
