"""A move, as a job's event records it (`JobStore.note` with kind "moved"):
ranks of a running job ran on a node that drains (a spot reclaim's notice,
an operator's `ray drain-node`), and they were moved before its deadline.
Either in place (`in_place`: the ranks on the node replaced by new ones
elsewhere, training going on from the step it reached) or, where that could
not be done, through a disk checkpoint (`in_place` False: the job checkpoints,
gives its workers back and waits in the queue for capacity elsewhere).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from service.log_text import printable

MOVED = "moved"  # the event's kind
TEXT_LENGTH = 512


@dataclass(frozen=True, kw_only=True)
class Moved:
    """What a move's event holds in its `detail`."""

    ranks: list[int]  # the ranks that ran on the draining node, sorted
    node: str  # the draining node's id
    address: str  # its address
    reason: str  # the drain's reason, as Ray has it (e.g. "preemption: spot")
    deadline: float | None  # epoch seconds by which the node goes; None: no deadline
    step: int  # the step training went on from (in place), or was checkpointed at
    seconds: float  # from the drain seen to training going on elsewhere (or to giving up)
    in_place: bool  # True: moved in place; False: through a disk checkpoint and the queue
    outcome: str  # where the ranks run now, or why the move went through the disk

    @classmethod
    def made(cls, *, ranks: Iterable[int], node: str, address: str, reason: str,
             deadline: float | None, step: int, seconds: float, in_place: bool,
             outcome: str) -> Moved:
        seconds = float(seconds)
        if not math.isfinite(seconds):
            raise ValueError(f"a move's seconds must be finite, not {seconds!r}")
        return cls(ranks=sorted({int(rank) for rank in ranks}), node=str(node),
                   address=str(address), reason=printable(reason, TEXT_LENGTH),
                   deadline=None if deadline is None else float(deadline), step=int(step),
                   seconds=max(0.0, seconds), in_place=bool(in_place),
                   outcome=printable(outcome, TEXT_LENGTH))

    def detail(self) -> dict[str, Any]:
        return asdict(self)

    def sentence(self, now: float | None = None) -> str:
        """The event's reason: which node drains, why and by when, and what the job did."""
        ranks = (f"rank {self.ranks[0]}" if len(self.ranks) == 1
                 else "ranks " + ", ".join(str(rank) for rank in self.ranks))
        node = f"node {self.address} ({self.node[:12]}) draining ({self.reason}"
        if self.deadline is not None:
            left = self.deadline - (time.time() if now is None else now)
            node += f", deadline in {max(0.0, left):.0f} s"
        node += ")"
        if self.in_place:
            return (f"{node}: {ranks} moved in place in {self.seconds:.1f} s, going on from "
                    f"step {self.step}; now on {self.outcome}")
        return f"{node}: {ranks} to move through a checkpoint at step {self.step}: {self.outcome}"
