"""A recovery, as a job's event records it (`JobStore.record_recovery`): ranks
of a running job were lost and the others kept their processes. Either a
replacement joined and training went on from the in-memory snapshot (in
place: the job's `recoveries` counts it, its `restarts` do not), or that did
not work and the job fell back to a whole-group restart from its last
committed checkpoint (the RESTARTING that follows counts it, as any restart).

The event is neither a state change nor a plain note: its `kind` is
"recovery", from and to the job's current state, its `reason` the sentence
below and its `detail` the `Recovery`'s fields (the API serves both; goodput
reads `seconds` back as time lost to `recovering`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

from service.log_text import printable
from service.store.records import EventRecord

RECOVERY = "recovery"  # the event's kind
REASON_LENGTH = 512  # the caller's reason, cut to this many characters


@dataclass(frozen=True, kw_only=True)
class Recovery:
    """What a recovery's event holds in its `detail`."""

    ranks: list[int]  # the ranks lost (and replaced, in place), sorted
    from_step: int  # the step training had reached when they were lost
    to_step: int | None  # the snapshot's step training went on from; None: not in place
    seconds: float  # from the loss seen to training going on (or to giving up, not in place)
    in_place: bool  # True: recovered in place; False: fell back to a whole-group restart
    reason: str  # in place: what was lost and why; not in place: why it fell back

    @classmethod
    def made(cls, *, ranks: Iterable[int], from_step: int, to_step: int | None, seconds: float,
             in_place: bool, reason: str) -> Recovery:
        """Checked and made plain: `seconds` finite (a negative one, clocks
        apart, is 0), the ranks sorted once each, the reason one printable line."""
        seconds = float(seconds)
        if not math.isfinite(seconds):
            raise ValueError(f"a recovery's seconds must be finite, not {seconds!r}")
        return cls(ranks=sorted({int(rank) for rank in ranks}), from_step=int(from_step),
                   to_step=None if to_step is None else int(to_step),
                   seconds=max(0.0, seconds), in_place=bool(in_place),
                   reason=printable(reason, REASON_LENGTH))

    @classmethod
    def of(cls, event: EventRecord) -> Recovery | None:
        """The recovery an event records, or None (another kind, or a detail
        this version cannot read)."""
        if event.kind != RECOVERY or not isinstance(event.detail, dict):
            return None
        try:
            return cls.made(**{name: event.detail[name] for name in _FIELDS})
        except (KeyError, TypeError, ValueError):
            return None

    def detail(self) -> dict[str, Any]:
        return asdict(self)

    def sentence(self) -> str:
        """The event's reason: what was lost, at which step, and what became of it."""
        lost = f"{_ranks(self.ranks)} lost at step {self.from_step}"
        if self.in_place:
            snapshot = "" if self.to_step is None else f" of step {self.to_step}"
            return (f"{lost} ({self.reason}): recovered in place from the in-memory snapshot"
                    f"{snapshot} in {self.seconds:.1f} s")
        return (f"{lost}: fell back to a whole-group restart from the last committed "
                f"checkpoint after {self.seconds:.1f} s: {self.reason}")


_FIELDS = tuple(field.name for field in fields(Recovery))


def _ranks(ranks: list[int]) -> str:
    if not ranks:
        return "a rank"
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return f"ranks {', '.join(str(rank) for rank in ranks[:-1])} and {ranks[-1]}"
