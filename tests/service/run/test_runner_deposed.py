"""A runner of a replica that another has deposed: its next write is refused
by the lease's token, and it lets go of the job quietly, its group left
training for the new leader to reattach to (never shut down or stopped)."""

from __future__ import annotations

import threading

import pytest

from service.leadership import Leadership
from service.run.runner import ControlPlane, JobRunner
from service.scheduling.restart import RestartPolicy
from service.states import JobState as S
from tests.service.run.test_runner import FakeCluster, FakeGroup, store, submit  # noqa: F401

LEASE = "runner-test"


@pytest.fixture
def leaders(store):  # noqa: F811
    """(the old leader, a function that makes another replica lead instead)."""
    old = Leadership(store.leases, "old", 30, name=LEASE)
    assert old.acquire()
    new = Leadership(store.leases, "new", 30, name=LEASE)

    def depose():
        store.leases.release(LEASE, "old", old._token)  # as if its lease ran out
        assert new.acquire()

    return old, depose


def run_as(old: Leadership, store, cluster: FakeCluster, job_id: str, group: FakeGroup):  # noqa: F811
    fenced = store.fenced(old)
    control = cluster.control()
    control = ControlPlane(**{**control.__dict__, "confirm_leading": fenced.check_fence})
    runner = JobRunner(job_id, store=fenced, launch=cluster.launch, control=control,
                       policy=RestartPolicy(base_backoff_s=0.5), poll_interval_s=0.0, attached=group)
    runner.detach = threading.Event()
    runner.run()
    assert cluster.ended == [job_id]
    return runner


def test_a_deposed_runner_writes_nothing_and_leaves_its_group_training(store, leaders):  # noqa: F811
    old, depose = leaders
    job_id = submit(store, state=S.RUNNING)
    cluster = FakeCluster()
    group = FakeGroup(cluster, [2, lambda g: depose(), 3, "done"])
    runner = run_as(old, store, cluster, job_id, group)
    assert runner.detach.is_set() and not group.shut_down and not group.stop_requested
    assert not old.is_leader
    job = store.get_job(job_id)
    assert (job.state, job.step) == (S.RUNNING, 2)  # the rows after the takeover: not written
    assert [r["step"] for r in store.metrics(job_id)] == [1, 2]


def test_a_deposed_runner_does_not_carry_out_a_cancel(store, leaders):  # noqa: F811
    old, depose = leaders

    def cancel_after_takeover(group):
        depose()
        store.transition(job_id, S.CANCELLING, reason="cancel requested by the user")

    job_id = submit(store, state=S.RUNNING)
    cluster = FakeCluster()
    group = FakeGroup(cluster, [1, cancel_after_takeover])
    run_as(old, store, cluster, job_id, group)
    assert not group.shut_down  # the new leader's runner kills it, not this one
    assert store.get_job(job_id).state is S.CANCELLING
