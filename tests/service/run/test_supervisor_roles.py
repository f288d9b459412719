"""Two supervisors on one Postgres database and the session's Ray cluster, in
one process: the first leads and runs a job, the second follows (serving
reads: who leads, the job's workers) and takes over when the first stops,
reattaching to the running group (restarts 0) and carrying out a cancel sent
to the other replica. The real-process failover tests (SIGKILL, SIGSTOP) are
tests/e2e/test_replicas.py's."""

from __future__ import annotations

import time

import pytest

from service.settings import Settings
from service.states import JobState as S
from service.store import JobStore
from service.supervisor import Supervisor
from tests.postgres import fresh_database
from workers.schema import JobSpec

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]
# The handover here is a clean stop (the lease given up), not a lease running out: a lease
# long enough that the first leader keeps it on a loaded machine. (With 1.5 s, one fresh-clone
# run saw the job not train within 180 s and the lease lost near the end of that wait; the
# cause of the stall was not found: docs/testing.md.)
LEASE_S = 5.0
SPEC = JobSpec.model_validate({
    "name": "long", "workers": 1, "resources_per_worker": {"cpu": 1},
    "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
    "train": {"steps": 100_000, "global_batch_size": 4},  # trains until cancelled
    "checkpoint": {"every_steps": 1000},
})


@pytest.fixture
def database():
    with fresh_database("brigade_roles") as url:
        yield url


def replica(name: str, url: str, data_dir) -> Supervisor:
    settings = Settings(data_dir=str(data_dir), database_url=url, admin_key="test-admin-key",
                        secret="test-secret", replica_name=name, lease_s=LEASE_S, poll_interval_s=0.1,
                        rank_pool_size=0, export_on_success="")
    store = JobStore(url)
    store.migrate()
    return Supervisor(settings, store)


def wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return found


def test_a_follower_takes_over_and_reattaches_to_the_running_job(database, tmp_path):
    a, b = replica("a", database, tmp_path / "a"), replica("b", database, tmp_path / "b")
    try:
        a.start()
        b.start()
        assert a.views.role() == {"role": "leader", "leader": "a", "replica": "a"}
        assert b.views.role() == {"role": "follower", "leader": "a", "replica": "b"}
        job, _ = b.requests.submit("admin", SPEC, None)  # an API write on the follower: the leader admits it
        wait_for(lambda: (j := a.store.get_job(job.id)).state is S.RUNNING and j.step >= 2,
                 180, "the job to train")
        seen = b.views.workers("admin", job.id)  # a follower asks the ranks themselves
        assert [w["rank"] for w in seen] == [0] and seen[0]["pid"]
        a.stop()  # detaches its runner (the group trains on) and gives the lease up
        wait_for(lambda: b.leadership.is_leader, 2 * LEASE_S, "b to lead")
        wait_for(lambda: any("reattached" in e.reason and e.replica == "b"
                             for e in b.store.events(job.id)), 60, "b to reattach")
        step = b.store.get_job(job.id).step
        wait_for(lambda: b.store.get_job(job.id).step > step, 60, "training to go on")
        assert b.views.workers("admin", job.id)[0]["pid"] == seen[0]["pid"]  # the same rank process
        a.requests.cancel("admin", job.id)  # sent to the replica that no longer leads
        done = wait_for(lambda: (j := b.store.get_job(job.id)).state is S.CANCELLED and j, 60,
                        "the cancel")
        assert done.restarts == 0
        replicas = {e.replica for e in b.store.events(job.id)}
        assert replicas == {"a", "b"}, replicas
    finally:
        a.stop()
        b.stop()
        a.store.dispose()
        b.store.dispose()
