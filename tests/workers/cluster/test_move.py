"""Moving ranks while training goes on (workers/cluster/move.py), on the
session's real Ray cluster of one node: the node avoided is none here (a
drain of a real node is tests/e2e/test_drains.py's), so this is the
mechanism alone: the moving rank hands its snapshot of the step the ranks
agreed on to a staying rank, a new process takes its place in a placement
group of its own, and every rank goes on from that step: no step redone,
the uninterrupted curve bitwise, the staying rank's process kept."""

from __future__ import annotations

import uuid

import pytest
import ray
from ray.util import placement_group_table

from tests.waiting import alive, wait_until
from workers.cluster.group import WorkerGroup
from workers.cluster.in_place import CannotMove
from workers.cluster.placed import moved_placement_groups

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

STEPS = 60
JOB = {
    "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
    "data": {"source": "synthetic"},
    "train": {"steps": STEPS, "global_batch_size": 4, "lr": 3e-3},
    "checkpoint": {"every_steps": 0, "memory_every_steps": 7},
}


def rank_step(group: WorkerGroup, rank: int) -> int:
    try:
        return ray.get(group.actors[rank].status.remote(), timeout=10)["step"] or 0
    except Exception:
        return 0


@pytest.fixture(scope="module")
def straight(fork_pool):
    """The uninterrupted run's rank-0 rows."""
    with WorkerGroup(2, pool=fork_pool) as group:
        return group.train(JOB)[0]


def test_a_moved_rank_goes_on_from_the_step_reached_and_nothing_is_redone(fork_pool, straight):
    prefix = f"move-{uuid.uuid4().hex[:6]}"
    with WorkerGroup(2, pool=fork_pool, name_prefix=prefix) as group:
        run = group.start_training(JOB)
        assert wait_until(lambda: rank_step(group, 0) >= 10, 120)
        staying, moving = group.node_infos[0].pid, group.node_infos[1].pid
        reached = rank_step(group, 1)
        move = group.move([1], avoid=set())
        assert move.ranks == [1] and move.step >= reached
        assert group.node_infos[0].pid == staying and alive(staying)
        assert group.node_infos[1].pid != moving
        assert wait_until(lambda: not alive(moving), 30)
        # The moved rank runs in a placement group of its own, found by name on a reattach,
        # and a driver that reattaches puts a replacement of that rank there, not in the
        # bundle it left.
        [(moved_pg, ranks)] = moved_placement_groups(prefix)
        assert ranks == [1] and placement_group_table(moved_pg)["state"] == "CREATED"
        assert group.placed_in(1) == (moved_pg, 0)
        found = WorkerGroup.reclaim(prefix, 2)  # a view only: not shut down
        assert found.placed_in(1)[0].id == moved_pg.id and found.placed_in(1)[1] == 0
        assert found.placed_in(0)[0].id == group.placed_in(0)[0].id
        per_rank = run.wait(timeout_s=300)
        rows = run.progress()
    assert per_rank is not None
    assert [m["step"] for m in rows] == list(range(1, STEPS + 1))
    assert [m["loss"] for m in rows] == [m["loss"] for m in straight]
    # The step after the move starts from the move's step: none redone.
    assert rows[move.step].get("resumed_from") == move.step
    assert all(rows[s - 1]["step"] == s for s in range(1, move.step + 1))
    assert moved_placement_groups(prefix) == [] or wait_until(
        lambda: moved_placement_groups(prefix) == [], 10)  # removed with the group


def test_a_move_with_no_capacity_changes_nothing(fork_pool, straight):
    # Bundles no node can hold: the move is refused before any rank stops.
    with WorkerGroup(2, pool=fork_pool, name_prefix=f"nomove-{uuid.uuid4().hex[:6]}") as group:
        run = group.start_training(JOB)
        assert wait_until(lambda: rank_step(group, 0) >= 3, 120)
        group.cpus_per_worker = 10_000
        pids = [info.pid for info in group.node_infos]
        with pytest.raises(CannotMove, match="no capacity outside the draining node"):
            group.move([1], avoid=set(), placement_wait_s=2)
        group.cpus_per_worker = 1
        assert [info.pid for info in group.node_infos] == pids
        assert run.wait(timeout_s=300) is not None
        rows = run.progress()
    # Trained on undisturbed: every step once, the uninterrupted curve bitwise.
    assert [m["loss"] for m in rows] == [m["loss"] for m in straight]
