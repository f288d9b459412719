"""A mixture of token datasets (`data.mix`): which member each sample of
each global batch comes from, and the samples themselves.

The schedule is global, never a rank's: batch b's member counts are an
apportionment of the global batch to the members by their weights, each
carrying what earlier batches gave it, so after n samples member k has
drawn within one sample of n x weight_k / sum(weights) (Hamilton's largest
remainders on the deficits, in exact integers: no float drift over a long
run). Which positions of the batch get which member is a seeded
permutation of the positions, a function of (seed, b) only. So the member
and the member's own sample index of every position of every batch depend
on (seed, weights, global batch, b, position) only: the same at any world
size, and a resume at another one draws the same batches.

Each member keeps its own cursor (the samples drawn from it so far); the
cursors before batch b follow from the cursors before b - 1, so the
schedule steps forward from the nearest batch it knows, and a checkpoint
carries the cursors where it was saved (`MixtureSource.cursors`,
`resume_at`), so a resume steps from there, not from batch 0.

Member k's sample i is its source's sample i, its windows drawn by the
job's seed as a lone dataset's are: a mixture of one member reads exactly
what `data.uri` of that dataset reads. Torch-free.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from fractions import Fraction
from math import lcm
from typing import Protocol

import numpy as np

from workers.datasets.order import mix64

MIX_SEED_SALT = 0x0B1E_D5A1  # the positions' permutation is not the members' window order
KNOWN_EVERY = 256  # cursors kept every this many batches (the rest are stepped to)
PLANS_KEPT = 4  # batch plans kept: the step's, the read-ahead's, and a spare


class Member(Protocol):
    def sample(self, index: int) -> np.ndarray: ...


class MixSchedule:
    """The members' cursors before each global batch, and each position's
    (member, member's sample index)."""

    def __init__(self, weights: Sequence[float], global_batch: int, seed: int):
        if not weights or any(w <= 0 for w in weights):
            raise ValueError(f"mixture weights must be > 0, got {list(weights)}")
        exact = [Fraction(w) for w in weights]  # a float's exact value
        scale = lcm(*(f.denominator for f in exact))
        self.units = [int(f * scale) for f in exact]  # integer weights, the same proportions
        self.total = sum(self.units)
        self.global_batch, self.seed = global_batch, seed
        self._known: dict[int, tuple[int, ...]] = {0: (0,) * len(weights)}
        self._known_batches = [0]  # sorted keys of _known
        self._plans: dict[int, list[tuple[int, int]]] = {}
        self._lock = threading.Lock()  # the read-ahead thread and the step may both ask

    @property
    def members(self) -> int:
        return len(self.units)

    def shares(self) -> list[float]:
        """Each member's share of the samples (its weight over their sum)."""
        return [u / self.total for u in self.units]

    # -- counts ------------------------------------------------------------------

    def counts(self, cursors: Sequence[int]) -> list[int]:
        """How many samples of the next batch each member gives, after `cursors`.

        The deficit of member k after n samples, in units of 1/total samples,
        is units_k x (n + B) - cursors_k x total once the batch is drawn: each
        member gets the whole samples of its deficit, none below zero, and the
        rest go one each by the largest remainder (the lower member on a tie)."""
        n, batch, total = sum(cursors), self.global_batch, self.total
        deficits = [u * (n + batch) - c * total for u, c in zip(self.units, cursors, strict=True)]
        counts = [max(0, d // total) for d in deficits]
        while sum(counts) > batch:  # only where members ran ahead: take from the most ahead
            k = min((d - c * total, k) for k, (d, c) in enumerate(zip(deficits, counts, strict=True))
                    if c > 0)[1]
            counts[k] -= 1
        by_remainder = sorted(range(self.members), key=lambda k: (counts[k] * total - deficits[k], k))
        for k in by_remainder[: batch - sum(counts)]:
            counts[k] += 1
        return counts

    def cursors_before(self, batch: int) -> tuple[int, ...]:
        """Samples drawn from each member before global batch `batch`."""
        if batch < 0:
            raise ValueError(f"batch {batch} < 0")
        with self._lock:
            start = self._known_batches[bisect.bisect_right(self._known_batches, batch) - 1]
            cursors = self._known[start]
            for b in range(start, batch):
                cursors = tuple(c + n for c, n in zip(cursors, self.counts(cursors), strict=True))
                if (b + 1) % KNOWN_EVERY == 0:
                    self._remember(b + 1, cursors)
            self._remember(batch, cursors)
            return cursors

    def resume_at(self, batch: int, cursors: Sequence[int]) -> None:
        """The cursors before `batch`, as a checkpoint carried them."""
        cursors = tuple(int(c) for c in cursors)
        if len(cursors) != self.members or sum(cursors) != batch * self.global_batch:
            raise ValueError(f"cursors {list(cursors)} are not those of {self.members} members "
                             f"before batch {batch} of {self.global_batch} samples")
        with self._lock:
            self._remember(batch, cursors)

    def _remember(self, batch: int, cursors: tuple[int, ...]) -> None:
        if batch not in self._known:
            bisect.insort(self._known_batches, batch)
        self._known[batch] = cursors
        # Beyond the regular marks, keep only the latest few batches.
        extra = [b for b in self._known_batches if b % KNOWN_EVERY and b != batch]
        for b in extra[:-PLANS_KEPT]:
            del self._known[b]
            self._known_batches.remove(b)

    # -- positions ---------------------------------------------------------------

    def plan(self, batch: int) -> list[tuple[int, int]]:
        """(member, the member's sample index) of each position of global batch `batch`."""
        with self._lock:
            cached = self._plans.get(batch)
        if cached is not None:
            return cached
        cursors = self.cursors_before(batch)
        counts = self.counts(cursors)
        first = batch * self.global_batch
        salt = self.seed ^ MIX_SEED_SALT
        order = sorted(range(self.global_batch), key=lambda j: (mix64(salt, first + j), j))
        member_at = [0] * self.global_batch
        slots = iter(order)
        for k, count in enumerate(counts):
            for _ in range(count):
                member_at[next(slots)] = k
        drawn = list(cursors)  # each member's next sample, handed out in position order
        plan = []
        for k in member_at:
            plan.append((k, drawn[k]))
            drawn[k] += 1
        with self._lock:
            self._plans[batch] = plan
            for old in sorted(self._plans)[:-PLANS_KEPT]:
                del self._plans[old]
        return plan


class MixtureSource:
    """Global sample `index` of a mixture: batch index // B, position index % B,
    drawn from the member the schedule names at that member's own index."""

    def __init__(self, members: Sequence[Member], names: Sequence[str], weights: Sequence[float],
                 global_batch: int, seed: int):
        self.members, self.names = list(members), list(names)
        self.schedule = MixSchedule(weights, global_batch, seed)

    def sample(self, index: int) -> np.ndarray:
        batch, position = divmod(index, self.schedule.global_batch)
        member, member_index = self.schedule.plan(batch)[position]
        return self.members[member].sample(member_index)

    def cursors(self, next_sample: int) -> list[int]:
        """Each member's cursor where the job's cursor is `next_sample` (a batch boundary)."""
        return list(self.schedule.cursors_before(next_sample // self.schedule.global_batch))

    def resume_at(self, next_sample: int, cursors: Sequence[int]) -> None:
        self.schedule.resume_at(next_sample // self.schedule.global_batch, cursors)

    def samples_seen(self, next_sample: int) -> dict[str, int]:
        """Samples drawn from each member before the job's cursor, by name."""
        return dict(zip(self.names, self.cursors(next_sample), strict=True))

    def close(self) -> None:
        for member in self.members:
            close = getattr(member, "close", None)
            if close is not None:
                close()
