"""What the job page's curves are drawn from, read once: each job's metric
columns, kept per job (the latest `size` jobs asked for) and extended by the
rows written since the last read, so a running job polled every 2 s costs
its new rows, not all of them. A new attempt (a restart, a resume) may
replace rows from its checkpoint on: the job's columns are then read again."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

# What the job page draws; a metric a row lacks (eval_loss before evals run) is left out.
NUMBERS = ("loss", "eval_loss", "lr", "tokens_per_s", "step_time_s", "peak_mem_bytes",
           "mem_theory_bytes", "comm_bytes", "comm_bytes_theory", "resumed_from", "flops_per_s",
           "mfu")
TEXTS = ("recovered_from",)


@dataclass
class JobColumns:
    attempt: int
    steps: list[int] = field(default_factory=list)
    values: dict[str, list[float | None]] = field(default_factory=lambda: {n: [] for n in NUMBERS})
    recovered_from: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class SeriesCache:
    def __init__(self, size: int = 16):
        self._size = size
        self._jobs: OrderedDict[str, JobColumns] = OrderedDict()
        self._lock = threading.Lock()

    def columns(self, store, job) -> JobColumns:
        """The job's columns up to its latest row (read from the store as needed).
        The caller reads them under the returned object's `lock`."""
        with self._lock:
            cached = self._jobs.get(job.id)
            if cached is None or cached.attempt != job.attempt:
                cached = JobColumns(attempt=job.attempt)
                self._jobs[job.id] = cached
            self._jobs.move_to_end(job.id)
            while len(self._jobs) > self._size:
                self._jobs.popitem(last=False)
        with cached.lock:
            since = cached.steps[-1] + 1 if cached.steps else 0
            for row in store.metric_columns(job.id, NUMBERS, TEXTS, since_step=since):
                cached.steps.append(row[0])
                for name, value in zip(NUMBERS, row[1:], strict=False):
                    cached.values[name].append(value)
                cached.recovered_from.append(row[-1])
        return cached
