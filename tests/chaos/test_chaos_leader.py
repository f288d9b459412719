"""Chaos: the leading replica of the control plane lost. Three `brigade serve`
replicas on one Postgres database and one Ray head of this module's own
(tests/e2e/replica_harness.py); the leader SIGKILLed with its process group
(`kill_leader`): two in turn mid-run, and one while a job recovers from a lost
rank; and the leader SIGSTOPped past its lease, then woken: it takes no action
(no event or audit row of its from then on) and says it follows. Another
replica leads within BRIGADE_LEASE_S + 5 s, and every job ends SUCCEEDED on
the loss curve of the uninterrupted run, bitwise, with no restart the leader's
loss caused and nothing of it left on the cluster.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime

import pytest
from chaos_harness import (
    ENV,
    STEPS,
    PidWatch,
    RayProbe,
    assert_nothing_left,
    chaos_spec,
    kill_leader,
    metrics,
    wait_for,
)

from tests.postgres import fresh_database
from tests.e2e.replica_harness import (
    FAILOVER_S,
    LEASE_S,
    Replica,
    Replicas,
    query,
    ray_head,
    written_by_since,
)

# alone (make test's second phase, docs/testing.md): another replica leads within the lease + 5 s of the leader's loss
pytestmark = [pytest.mark.timeout(480), pytest.mark.alone]


@pytest.fixture(scope="module")
def head():
    with ray_head(num_cpus=4, dashboard=True) as nodes:
        yield nodes


@pytest.fixture(scope="module")
def replicas(head, tmp_path_factory):
    with fresh_database() as url:
        group = Replicas(tmp_path_factory.mktemp("leader"), head, url, n=3, env=ENV)
        try:
            yield group.start()
        finally:
            group.stop()


@pytest.fixture(autouse=True)
def whole_deployment(replicas):
    """Each scenario finds all three replicas: one that failed midway does not
    leave the next with a replica short (or none)."""
    yield
    replicas.restore()


@pytest.fixture(scope="module")
def probe(head, replicas):
    p = RayProbe(address=head.address, token=head.token)
    yield p
    p.close()


@pytest.fixture(scope="module")
def reference(replicas):
    """The uninterrupted run, submitted first; it trains through the first scenario's
    leader kills, which must not interrupt it either."""
    job = replicas[0].submit(chaos_spec("reference"))

    def losses() -> dict[int, float]:
        leader = replicas.leader()
        done = wait_for(leader, job["id"], lambda j: j["state"] == "SUCCEEDED", every_s=0.5)
        assert done["restarts"] == 0 and done["preemptions"] == 0, done
        return {row["step"]: row["loss"] for row in metrics(leader, job["id"])}

    cached: dict = {}
    return lambda: cached.setdefault("losses", losses())


def failover(replicas: Replicas) -> Replica:
    """The leader killed; another leads in time: the one lost (`.start()` brings it back)."""
    old, new, seconds = kill_leader(replicas)
    assert seconds <= FAILOVER_S, f"{new.name} led {seconds:.1f} s after {old.name} was killed"
    return old


def comes_back(replicas: Replicas, old: Replica) -> None:
    """The lost replica started again (its pod replaced): a follower of the new leader."""
    leader = replicas.leader()
    old.start()
    assert replicas.leader() is leader


def ranks(watch: PidWatch, leader, timeout_s: float = 30) -> list[int]:
    """The job's rank pids as `leader` lists them, once it does (a new leader, after reattaching)."""
    watch.server = leader
    deadline = time.monotonic() + timeout_s
    while not (pids := watch.sample()):
        assert leader.job(watch.job_id)["step"] < STEPS, "the job ended before the leader's loss"
        assert time.monotonic() < deadline, f"{leader.name} lists no ranks of {watch.job_id}"
        time.sleep(0.2)
    return sorted(pids)


def reattached(watch: PidWatch, leader, times: int, timeout_s: float = 60) -> list[int] | None:
    """Once the job's events say its group was reattached `times` times (each new
    leader's reconcile), the rank pids the leader lists, or None where the job
    ended meanwhile: its ranks train on without a leader, and on a fast run they
    may finish the last steps before the new leader looks (that the same ranks
    went on is then told by no restart, no new pid and the curve)."""
    deadline = time.monotonic() + timeout_s
    while sum("reattached to worker group" in e["reason"]
              for e in leader.get(f"/v1/jobs/{watch.job_id}/events")) < times:
        assert time.monotonic() < deadline, f"{leader.name} never reattached to {watch.job_id}'s group"
        time.sleep(0.2)
    watch.server = leader
    pids = watch.sample()
    return sorted(pids) if pids else None


def assert_transitions(server, job_id: str, expected: list[str]) -> None:
    """The job's states in order, without its notes (a new leader's reattachment
    is one), are `expected`; where not, every event is told with its reason."""
    events = server.get(f"/v1/jobs/{job_id}/events")
    states = [e["to_state"] for e in events if e["from_state"] != e["to_state"]]
    told = "\n".join(f"{e['from_state']} -> {e['to_state']}: {e['reason']}" for e in events)
    assert states == expected, f"{states} != {expected}; the events:\n{told}"


def finish(replicas: Replicas, probe, job_id: str, watch: PidWatch, reference) -> dict:
    leader = replicas.leader()
    done = wait_for(leader, job_id, lambda j: j["state"] in ("SUCCEEDED", "FAILED"), every_s=0.3)
    assert done["state"] == "SUCCEEDED" and done["error"] is None, done
    rows = metrics(leader, job_id)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert {r["step"]: r["loss"] for r in rows} == reference()  # every step's loss, bitwise
    assert_nothing_left(probe, job_id, watch.pids)
    return done


def test_two_leaders_killed_in_turn_mid_run(replicas, probe, reference):
    leader = replicas.leader()
    job = leader.submit(chaos_spec("leader2"))["id"]
    watch = PidWatch(leader, job)
    lost = []
    for n, at in enumerate((10, 25), start=1):  # the first leader, then the next: the third leads
        leader = replicas.leader()
        wait_for(leader, job, lambda j, at=at: j["state"] == "RUNNING" and j["step"] >= at)
        before = ranks(watch, leader)
        lost.append(failover(replicas))
        after = reattached(watch, replicas.leader(), n)
        assert after in (before, None), (after, before)  # the same rank processes, reattached
    done = finish(replicas, probe, job, watch, reference)
    for replica in lost:
        comes_back(replicas, replica)
    assert done["restarts"] == 0 and len(watch.pids) == 2, (done, watch.pids)
    assert_transitions(replicas.leader(), job, ["QUEUED", "STARTING", "RUNNING", "SUCCEEDED"])


def test_the_leader_killed_while_a_job_recovers_from_a_lost_rank(replicas, probe, reference):
    leader = replicas.leader()
    job = leader.submit(chaos_spec("leader-recovering", in_place=False))["id"]
    watch = PidWatch(leader, job)
    wait_for(leader, job, lambda j: j["state"] == "RUNNING" and j["step"] >= 15)
    os.kill(ranks(watch, leader)[0], signal.SIGKILL)
    wait_for(leader, job, lambda j: j["restarts"] == 1, every_s=0.02)  # RESTARTING: recovery begun
    comes_back(replicas, failover(replicas))  # the recovery is the new leader's to finish, once
    done = finish(replicas, probe, job, watch, reference)
    assert done["restarts"] == 1, done
    assert_transitions(replicas.leader(), job, ["QUEUED", "STARTING", "RUNNING", "RESTARTING",
                                                "STARTING", "RUNNING", "SUCCEEDED"])


def test_a_leader_stopped_past_its_lease_takes_no_action_when_woken(replicas, probe, reference):
    old = replicas.leader()
    job = old.submit(chaos_spec("leader-stopped"))["id"]
    watch = PidWatch(old, job)
    wait_for(old, job, lambda j: j["state"] == "RUNNING" and j["step"] >= 10)
    before = ranks(watch, old)

    stopped_at = datetime.now(UTC)
    old.pause()  # frozen mid-term, its connections open, until woken
    new = replicas.leader(timeout_s=FAILOVER_S + 5, other_than=old)
    assert reattached(watch, new, 1) in (before, None)  # the same rank processes, reattached
    queued = new.submit(chaos_spec("leader-stopped-queued"))["id"]  # admitted by the new leader
    queued_watch = PidWatch(new, queued)
    wait_for(new, queued, lambda j: j["state"] == "RUNNING")

    old.wake()  # it still thinks it leads until it finds its lease gone
    deadline = time.monotonic() + LEASE_S + 5
    while (said := old.readyz()).get("role") != "follower":
        assert time.monotonic() < deadline, f"the woken replica still says {said}"
        time.sleep(0.2)
    assert said["leader"] == new.name, said

    for job_id, watched in ((job, watch), (queued, queued_watch)):
        done = finish(replicas, probe, job_id, watched, reference)
        assert done["restarts"] == 0, done
        assert_transitions(new, job_id, ["QUEUED", "STARTING", "RUNNING", "SUCCEEDED"])
    assert len(watch.pids) == 2, watch.pids  # the first job's two ranks, never replaced
    launches = query(replicas.database_url, "SELECT attempt FROM jobs WHERE id = :id", id=queued)
    assert launches == [(1,)]
    assert written_by_since(replicas.database_url, old.name, stopped_at) == []
    assert replicas.leader() is new
