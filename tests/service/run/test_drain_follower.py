"""The runner's drain follower (service/run/drains.py) without Ray: a real
store (SQLite and Postgres: tests/service/conftest.py) and a group whose `move` is scripted. A drain of a node the
job's ranks run on moves them in place (a `moved` event); one that cannot
be made with nothing changed preempts the job (it checkpoints and waits in
the queue); one that broke the group is the caller's failure; a node
without the job's ranks, or a drain already handled, changes nothing."""

from __future__ import annotations

import pytest

from service.run.drains import DrainFollower
from service.states import JobState as S
from service.store import JobStore
from workers.cluster.errors import WorkerGroupError
from workers.cluster.group_status import GroupStatus
from workers.cluster.in_place import CannotMove, CannotRecover
from workers.cluster.move import Move
from workers.cluster.node_view import NodeView
from workers.cluster.rank_info import RankInfo
from workers.schema import JobSpec

NODES = ["node-a" + "0" * 50, "node-b" + "0" * 50, "node-c" + "0" * 50]


def running_job(store: JobStore) -> str:
    spec = JobSpec.model_validate({"name": "d", "workers": 2,
                                   "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
                                   "train": {"steps": 50, "global_batch_size": 4}})
    job, _ = store.create_job(tenant="acme", name="d", spec=spec)
    store.transition(job.id, S.STARTING, expect=S.QUEUED, workers=2, attempt=1, reason="admitted")
    store.transition(job.id, S.RUNNING, expect=S.STARTING, reason="started")
    store.update_job(job.id, step=12)
    return job.id


class Group:
    def __init__(self, outcome, nodes=(0, 1)):
        self.node_infos = [RankInfo(node_id=NODES[n], node_ip=f"10.0.0.{n}", pid=100 + r)
                           for r, n in enumerate(nodes)]
        self.outcome, self.moves = outcome, []

    def move(self, ranks, avoid):
        self.moves.append((ranks, avoid))
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome

    def status(self):
        return GroupStatus(state="running")


def follower(store, job_id, drains) -> DrainFollower:
    return DrainFollower(job_id, store, lambda: drains, lambda: None)


def drain(node: str, address: str, deadline: float | None, reason: str | None) -> NodeView:
    return NodeView(node_id=node, address=address, alive=True, draining=True,
                    drain_deadline=deadline, drain_reason=reason)


DRAIN = {NODES[1]: drain(NODES[1], "10.0.0.1", 1_900_000_000.0, "preemption: spot")}


def moved_events(store, job_id):
    return [e for e in store.events(job_id) if e.kind == "moved"]


def test_ranks_on_a_draining_node_move_in_place_once(store):
    job_id = running_job(store)
    group = Group(Move(ranks=[1], step=13, seconds=1.5, now="rank 1 (node 10.0.0.2)"))
    drains = follower(store, job_id, DRAIN)
    assert drains.check(group) == group.outcome
    assert group.moves == [([1], {NODES[1]})]
    [event] = moved_events(store, job_id)
    assert event.detail == {"ranks": [1], "node": NODES[1], "address": "10.0.0.1",
                            "reason": "preemption: spot", "deadline": 1_900_000_000.0, "step": 13,
                            "seconds": 1.5, "in_place": True, "outcome": "rank 1 (node 10.0.0.2)"}
    assert "moved in place" in event.reason and "going on from step 13" in event.reason
    assert store.get_job(job_id).state is S.RUNNING
    assert drains.check(group) is None and len(group.moves) == 1  # handled once
    drains.new_attempt()
    drains.check(group)
    assert len(group.moves) == 2  # a new attempt on the same node acts again


def test_no_capacity_elsewhere_preempts_the_job_to_checkpoint_and_wait(store):
    job_id = running_job(store)
    group = Group(CannotMove("no capacity outside the draining node(s) for 1 rank(s)"))
    assert follower(store, job_id, DRAIN).check(group) is None
    job = store.get_job(job_id)
    assert (job.state, job.preemptions) == (S.PREEMPTING, 1)
    assert store.events(job_id)[-1].reason == "node 10.0.0.1 draining: no capacity elsewhere"
    [event] = moved_events(store, job_id)
    assert event.detail["in_place"] is False and event.detail["step"] == 12
    assert event.detail["outcome"].startswith("no capacity elsewhere")


def test_a_move_that_broke_the_group_is_a_failure(store):
    job_id = running_job(store)
    error = follower(store, job_id, DRAIN).check(Group(CannotRecover("rank 0 did not answer")))
    assert isinstance(error, WorkerGroupError) and "rank 0 did not answer" in str(error)
    assert store.get_job(job_id).state is S.RUNNING  # the caller fails the attempt
    [event] = moved_events(store, job_id)
    assert "restarts from its last committed checkpoint" in event.detail["outcome"]


@pytest.mark.parametrize("drains", [{}, {NODES[2]: drain(NODES[2], "10.0.0.2", None, None)}])
def test_a_drain_elsewhere_changes_nothing(store, drains):
    job_id = running_job(store)
    group = Group(CannotRecover("never asked"))
    assert follower(store, job_id, drains).check(group) is None
    assert group.moves == [] and moved_events(store, job_id) == []


def test_every_rank_on_draining_nodes_moves_through_the_queue(store):
    job_id = running_job(store)
    group = Group(CannotMove("every rank runs on a draining node: none stays to hold the snapshots"),
                  nodes=(1, 1))
    follower(store, job_id, DRAIN).check(group)
    assert group.moves == [([0, 1], {NODES[1]})]
    assert store.get_job(job_id).state is S.PREEMPTING
    [event] = moved_events(store, job_id)
    assert event.detail["ranks"] == [0, 1] and "moving through the queue" in event.detail["outcome"]
