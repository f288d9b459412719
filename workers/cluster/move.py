"""Moving ranks off draining nodes, with training going on from the step it
reached: what a job does with a drain notice (a spot reclaim's, an
operator's `ray drain-node`) before the node goes.

    move = move_in_place(group, run, moving=[1], avoid={draining_node_id})

1. Bundles for the moving ranks are reserved first, in a placement group of
   their own (Ray places nothing on a draining node); where none are free
   within the wait, `CannotMove` says so and nothing has changed.
2. Every rank is asked to move: at the next step boundary (the ranks agree
   on which) each takes an in-memory snapshot of that step and leaves the
   process group; a moving rank first hands its snapshot to a staying rank
   (its peer, where that one stays).
3. The moving ranks' processes go, a replacement of each starts in the new
   bundles, and every rank joins a new process group restoring that step
   (workers/cluster/replace.py `go_on_without`): no step is redone.

A failure on the way raises `CannotRecover` too; by then the group may be
broken, and its owner restarts it from the last disk checkpoint, as for a
failed recovery in place.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ray
from ray.util import placement_group_table
from ray.util.placement_group import placement_group, remove_placement_group

from workers.cluster.in_place import CannotMove, peer_of
from workers.cluster.placed import moved_pg_name
from workers.cluster.rank_info import rank_where
from workers.cluster.replace import go_on_without, kill_ranks, survivors_recovering

WorkerGroup = Any  # workers/cluster/group.py's, passed in (this module is the group's)
TrainingRun = Any

PLACEMENT_WAIT_S = 10.0  # for the moving ranks' bundles outside the draining nodes


@dataclass(frozen=True)
class Move:
    """A move that worked: the ranks moved, the step every rank went on
    from, the seconds from the request to the new group formed, and where
    the ranks run now."""

    ranks: list[int]
    step: int
    seconds: float
    now: str


def move_in_place(group: WorkerGroup, run: TrainingRun, moving: list[int], avoid: set[str],
                  placement_wait_s: float = PLACEMENT_WAIT_S) -> Move:
    """Move the `moving` ranks of `group` (training `run`, with in-memory
    snapshots) to nodes not in `avoid`; CannotMove where it cannot and nothing
    changed, CannotRecover where it failed on the way (the group may be broken)."""
    started = time.monotonic()
    moving = sorted(set(moving))
    world = group.num_workers
    staying = [rank for rank in range(world) if rank not in moving]
    if not staying:
        raise CannotMove("every rank runs on a draining node: none stays to hold the snapshots")
    pg = _reserve(group, moving, avoid, placement_wait_s)
    try:
        node_ids = [info.node_id for info in group.node_infos]
        for rank in range(world):
            holder = _holder(rank, moving, staying, node_ids) if rank in moving else None
            group._actors[rank].request_move.remote(
                None if holder is None else group._actors[holder])
        gone: list[int] = []  # ranks found dead meanwhile: replaced as in a recovery
        holdings = survivors_recovering(group, gone)  # every rank out of the process group
        lost = sorted({*moving, *gone})
        kill_ranks(group, lost)
        for index, rank in enumerate(moving):
            group.place_rank(rank, pg, index)
        step = go_on_without(group, run, lost, holdings)
    except BaseException:
        _remove_unused(group, pg)
        raise
    now = ", ".join(rank_where(rank, group.node_infos) for rank in moving)
    return Move(ranks=moving, step=step, seconds=time.monotonic() - started, now=now)


def _holder(rank: int, moving: list[int], staying: list[int], node_ids: list[str]) -> int:
    """The staying rank that holds moving `rank`'s snapshot: its peer where
    that one stays, else a staying rank on another node, else any."""
    peer = peer_of(rank, node_ids)
    if peer is not None and peer not in moving:
        return peer
    elsewhere = [other for other in staying if node_ids[other] != node_ids[rank]]
    return (elsewhere or staying)[rank % len(elsewhere or staying)]


def _reserve(group: WorkerGroup, moving: list[int], avoid: set[str], wait_s: float) -> Any:
    """A placement group of one of the group's bundles for each of the
    `moving` ranks (in their order), ready, on none of the `avoid`ed nodes;
    CannotMove where Ray cannot place it in time. Its name says whose bundles
    they are (workers/cluster/placed.py `moved_placement_groups`), for a driver
    that reattaches to the group."""
    count = len(moving)
    name = moved_pg_name(group.name_prefix, time.time_ns(), moving) if group.name_prefix else ""
    pg = placement_group([dict(group.bundle) for _ in range(count)], strategy="PACK", name=name,
                         lifetime="detached" if group.detached else None,
                         bundle_label_selector=group.bundle_selectors(count))  # its flavor's nodes
    ready, _ = ray.wait([pg.ready()], timeout=wait_s)
    if not ready:
        remove_placement_group(pg)
        raise CannotMove(f"no capacity outside the draining node(s) for {count} rank(s) of "
                            f"{group.bundle} within {wait_s:g} s")
    on = set(placement_group_table(pg)["bundles_to_node_id"].values())
    if on & avoid:  # Ray does not place on a draining node; a drain that came meanwhile
        remove_placement_group(pg)
        raise CannotMove("the bundles reserved to move to are on a draining node too")
    return pg


def _remove_unused(group: WorkerGroup, pg: Any) -> None:
    """Remove the move's placement group unless a rank runs in it now."""
    if pg not in group._moved_pgs:  # PlacementGroup compares by id
        remove_placement_group(pg)
