"""Recovery in place, the plan: which rank holds whose snapshot, and which
step every rank of a group can restore once some of its ranks are lost.

Each rank keeps its own two latest in-memory snapshots (the newest and the
one before, in buffers used in turn) and sends a copy of each to one peer
(`peer_of`: the next rank on another node where there is one, else the next
rank), which keeps the latest it received. After a loss the plan takes the
newest step that every rank has somewhere alive (`plan_restore`).

Why two of its own: ranks capture at the same step but not at the same
instant, and a copy reaches the peer after its capture. A rank killed in the
middle of its capture of step s+m never had a whole state of s+m; its state
of s is with its holder. Every survivor may have captured s+m already, and
its copy of s sent to the dead rank (in a world of two, its only peer) is
gone with it: only its own previous snapshot still has s. With one own buffer
no order of capture and send survives a kill in that window.

Pure: no Ray, no torch. The worker group (workers/cluster/group.py) asks the
live ranks what they hold and carries the plan out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workers.cluster.errors import WorkerGroupError

if TYPE_CHECKING:
    from workers.schema import JobSpec


class CannotRecover(WorkerGroupError):
    """Recovery in place cannot work here (the reason says why): the job falls
    back to a whole-group restart from its last committed disk checkpoint."""


class CannotMove(CannotRecover):
    """A move off a draining node that cannot be made, found before anything
    changed (workers/cluster/move.py): the group trains on as it was."""


@dataclass(frozen=True)
class Holdings:
    """What one live rank holds: the steps of its own snapshots (its newest
    and the one before: none yet, empty) and, by rank, the step of each
    peer's snapshot it keeps."""

    rank: int
    own: tuple[int, ...] = ()
    held: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RestorePlan:
    """Every rank restores `step`; `sources[r]` is the rank whose process
    holds rank r's snapshot of it (r itself: its own)."""

    step: int
    sources: dict[int, int]


def in_place_for(spec: JobSpec, world_size: int) -> bool:
    """Whether a job recovers a lost rank in place: a training of more than one
    rank that takes in-memory snapshots (under tensor parallelism too: a
    survivor that leaves the broken group shuts its connections down, so a
    peer waiting on it in a mesh's collective wakes, workers/engine/
    group_sockets.py)."""
    return spec.kind == "train" and world_size > 1 and spec.checkpoint.memory_every_steps != 0


def peer_of(rank: int, node_ids: Sequence[str]) -> int | None:
    """The rank that holds `rank`'s snapshot copy: the next rank (in rank
    order, wrapping) on another node where there is one, else the next rank;
    None in a world of one."""
    world = len(node_ids)
    if world < 2:
        return None
    others = [(rank + k) % world for k in range(1, world)]
    elsewhere = [r for r in others if node_ids[r] != node_ids[rank]]
    return (elsewhere or others)[0]


def plan_restore(world_size: int, holdings: Sequence[Holdings]) -> RestorePlan:
    """The newest step whose snapshot of every rank of the world is held by a
    live rank (`holdings` are the live ranks'), and where each comes from; a
    rank's own copy is preferred to its holder's. CannotRecover where no step
    is held for every rank (a rank and its holder both lost, no snapshot
    taken yet), naming the ranks that have none."""
    live = {h.rank for h in holdings}
    if not live:
        raise CannotRecover("no rank of the group is left")
    where: dict[int, dict[int, int]] = {rank: {} for rank in range(world_size)}  # rank -> step -> source
    for h in holdings:
        for rank, step in h.held.items():
            if 0 <= rank < world_size:
                where[rank].setdefault(step, h.rank)
        for step in h.own:
            where[h.rank][step] = h.rank  # its own copy first
    common = set.intersection(*(set(steps) for steps in where.values()))
    if not common:
        bare = sorted(rank for rank, steps in where.items() if not steps)
        if bare:
            lost = sorted(set(range(world_size)) - live)
            raise CannotRecover(
                f"no live rank holds a snapshot of rank(s) {bare} (lost: {lost}; "
                "a rank and the peer that holds its copy both lost, or no snapshot taken yet)")
        steps = {rank: sorted(s) for rank, s in where.items()}
        raise CannotRecover(f"no snapshot step is held for every rank: {steps}")
    step = max(common)
    return RestorePlan(step=step, sources={rank: where[rank][step] for rank in range(world_size)})
