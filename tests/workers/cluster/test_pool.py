"""RankPool on the session's real local Ray cluster: warm rank processes
that serve one group each, are killed with it, and leave nothing behind."""

from __future__ import annotations

import pytest
import ray

from tests.workers.cluster.test_worker_group import assert_nothing_left, tiny_job, unique_prefix
from workers.cluster.group import WorkerGroup
from workers.cluster.pool import RankPool

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

WARM_WITHIN_S = 90.0  # two processes importing torch on a busy 2-core machine


@pytest.fixture
def pool():
    """One warm process a node, refilled at once (no delay after a take)."""
    prefix = unique_prefix()
    pool = RankPool(1, name_prefix=prefix, refill_delay_s=0).start()
    assert pool.wait_warm(WARM_WITHIN_S), pool.warm()
    yield pool
    pool.shutdown()
    assert_nothing_left(prefix)


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_a_pooled_process_serves_one_group_and_dies_with_it(pool):
    """The group takes the one warm process (rank 0) and starts rank 1 cold; both
    are forked from the node's fork server; both train; once the group ends the
    pooled process is dead, and the next group gets a new one."""
    name = unique_prefix()
    [node] = pool.warm()
    server = pool.fork_servers.launch(node)
    with WorkerGroup(2, pool=pool, name_prefix=name) as group:
        assert group.pooled_ranks == [0]
        first = [info.pid for info in group.node_infos]
        assert [_parent(pid) for pid in first] == [server["pid"]] * 2
        per_rank = group.train(tiny_job(2))
        assert [len(rows) for rows in per_rank] == [2, 2]
        pooled = ray.get(group.actors[0].timeline.remote())
        assert pooled["engine_imported"] < group.timeline["start"]  # imported while pooled
    assert_nothing_left(name, first)  # the group's cold rank, and both processes
    assert pool.wait_warm(WARM_WITHIN_S)
    with WorkerGroup(1, pool=pool, name_prefix=unique_prefix()) as again:
        assert again.pooled_ranks == [0]
        assert again.node_infos[0].pid not in first
    assert pool.handed_out == 2


def test_a_pooled_process_refuses_a_second_group(pool):
    [node] = pool.warm()
    actor = pool.take(node)
    try:
        ray.get(actor.assign.remote("group-a", 0, 1, 1))
        assert ray.get(actor.assignment.remote()) == ("group-a", 0)
        with pytest.raises(ray.exceptions.RayTaskError, match="serves one group"):
            ray.get(actor.assign.remote("group-b", 0, 1, 1))
        assert ray.get(actor.assignment.remote()) == ("group-a", 0)
    finally:
        ray.kill(actor, no_restart=True)


def test_a_group_with_pooled_ranks_is_found_again_by_name(pool):
    """A control plane that restarts reattaches to a detached group whose ranks
    came from the pool (they carry the pool's names, not the group's)."""
    name = unique_prefix()
    group = WorkerGroup(1, pool=pool, name_prefix=name, detached=True).start()
    try:
        assert group.pooled_ranks == [0]
        assert WorkerGroup.reclaim(name, 1)._actors == [None]  # not by the group's own names
        found = WorkerGroup.attach(name, 1, pool_prefix=pool.name_prefix)
        assert [i.pid for i in found.node_infos] == [i.pid for i in group.node_infos]
    finally:
        WorkerGroup.reclaim(name, 1, pool_prefix=pool.name_prefix).shutdown()
    assert_nothing_left(name, [i.pid for i in group.node_infos])


def test_a_new_pool_clears_what_a_crashed_one_left_idle(pool):
    """Idle processes of the same prefix (a control plane that died) are killed at
    start; one that serves a group is left to it."""
    [node] = pool.warm()
    serving = pool.take(node)
    ray.get(serving.assign.remote("group-a", 0, 1, 1))
    assert pool.wait_warm(WARM_WITHIN_S)  # an idle one again, besides the one serving
    idle_pids = [ray.get(a.pid.remote()) for actors in pool._warm.values() for a in actors]
    successor = RankPool(0, name_prefix=pool.name_prefix).start()  # kills at start, fills none
    try:
        assert_nothing_left(pool.name_prefix + "-never", idle_pids)  # the idle pids are gone
        assert ray.get(serving.assignment.remote(), timeout=30) == ("group-a", 0)
    finally:
        successor.shutdown()
        ray.kill(serving, no_restart=True)


def test_a_replacements_take_refills_soon_and_a_starts_take_after_the_delay():
    """A job's start holds the refill back (its ranks have the CPUs first); a
    lost rank's replacement only for a second: the next fault may come before
    the delay is over."""
    prefix = unique_prefix()
    pool = RankPool(1, name_prefix=prefix, refill_delay_s=600).start()
    taken = []
    try:
        assert pool.wait_warm(WARM_WITHIN_S), pool.warm()
        [node] = pool.warm()
        taken.append(pool.take(node, replacing=True))
        assert pool.wait_warm(WARM_WITHIN_S), pool.warm()  # refilled within the 600 s delay
        taken.append(pool.take(node))
        assert not pool.wait_warm(5.0) and pool.warm().get(node, 0) == 0  # held back
    finally:
        for actor in taken:
            ray.kill(actor, no_restart=True)
        pool.shutdown()
    assert_nothing_left(prefix)
