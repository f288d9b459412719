"""Replicas of `brigade serve` on one Postgres database and one Ray head
(tests/e2e/replica_harness.py: a `ray start --head` of this module's own, a
fresh database per test, real processes killed and stopped by signals):

- both replicas serve the whole API, and actions sent to a follower take
  effect; replicas started at the same instant migrate once (one of them runs
  every revision, its log says so; the other runs none);
- docs/deploy.md's "Rolling an upgrade", step by step: a new replica started
  beside them migrates nothing more and follows while the old ones serve and
  the leader keeps its term; an old follower stopped by SIGTERM; the leader
  drained last gives its lease up, and a new replica leads, reattached to the
  running job (no restart, no second launch), named by every replica's /readyz;
- the leader SIGKILLed mid-training and mid-save: another leads within
  BRIGADE_LEASE_S + 5 s, the running jobs keep their rank processes (restarts
  0, the same attempt), a job queued meanwhile is admitted, an action sent
  meanwhile takes effect, every metrics row and event once.

The leader SIGSTOPped past its lease, and more leader kills, are the chaos
suite's (tests/chaos/test_chaos_leader.py).
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
import time

import httpx
import pytest
from alembic.script import ScriptDirectory

from service.store.store import alembic_config
from tests.e2e.replica_harness import (
    FAILOVER_S,
    Replica,
    Replicas,
    query,
    ray_head,
    utc,
)
from tests.e2e.serve_harness import KEY, spec
from tests.postgres import fresh_database

# alone (make test's second phase, docs/testing.md): a leader renews its lease within two thirds of it
pytestmark = [pytest.mark.timeout(480), pytest.mark.alone]

LONG = 120  # steps of a job that outlasts a failover (~5 steps/s here)
SHORT = 20
SAVING = 200  # steps of a job that saves a checkpoint at each (up to ~7 steps/s): it outlasts a failover
# The rolling upgrade's replicas run with the lease of docs/deploy.md's Deployment
# (deploy/kuberay/brigade.yaml): nothing it proves waits for a lease to run out (the drained
# leader gives its lease up), and a short lease, the harness's for the kills' failovers, can
# run out on a loaded machine: a 3 s one did (no renewal through within 2 s), the successor's
# term ended, and the other new replica took over and reattached a second time.
DEPLOYED_LEASE_S = 10.0


@pytest.fixture(scope="module")
def head():
    with ray_head(num_cpus=4) as nodes:
        yield nodes


@contextlib.contextmanager
def deployment(head, tmp_path, **env: str):
    """Two replicas started together on a fresh database, stopped after."""
    with fresh_database() as url:
        group = Replicas(tmp_path, head, url, n=2, env=env)
        try:
            yield group.start()
        finally:
            group.stop()


@pytest.fixture
def replicas(head, tmp_path):
    """Two replicas with the harness's short lease (a kill's failover is quick)."""
    with deployment(head, tmp_path) as group:
        yield group


@pytest.fixture
def deployed(head, tmp_path):
    """Two replicas with the deployment's lease (DEPLOYED_LEASE_S)."""
    with deployment(head, tmp_path, BRIGADE_LEASE_S=str(DEPLOYED_LEASE_S)) as group:
        yield group


# -- what the database holds ------------------------------------------------------


def events(replicas: Replicas, job_id: str, notes: bool = False) -> list[tuple]:
    """(to_state, replica, time, reason) of each of the job's transitions (with
    `notes`: its notes, the events that change no state), oldest first."""
    rows = query(replicas.database_url, "SELECT from_state, to_state, replica, time, reason "
                 "FROM job_events WHERE job_id = :id ORDER BY id", id=job_id)
    return [(to, replica, utc(at), reason) for before, to, replica, at, reason in rows
            if (before == to) == notes]


def states(replicas: Replicas, job_id: str) -> list[str]:
    return [e[0] for e in events(replicas, job_id)]


def reattached_by(replicas: Replicas, job_id: str) -> list[str]:
    """Who wrote each of the job's notes, each of them a reattachment (a new leader's reconcile)."""
    notes = events(replicas, job_id, notes=True)
    assert all("reattached" in e[3] for e in notes), notes
    return [e[1] for e in notes]


def attempt(replicas: Replicas, job_id: str) -> int:
    return query(replicas.database_url, "SELECT attempt FROM jobs WHERE id = :id", id=job_id)[0][0]


def metric_rows(replicas: Replicas, job_id: str) -> list[tuple[int, int]]:
    """(step, attempt) of each metrics row, by step."""
    return query(replicas.database_url, "SELECT step, attempt FROM job_metrics WHERE job_id = :id "
                 "ORDER BY step", id=job_id)


def lease(replicas: Replicas) -> tuple[str | None, int]:
    """(holder, fencing token) of the control plane's lease row, read directly."""
    [(holder, token)] = query(replicas.database_url, "SELECT holder, token FROM leader_lease "
                              "WHERE name = 'control-plane'")
    return holder, token


# -- what the logs say ----------------------------------------------------------------

UPGRADE = re.compile(r"Running upgrade (\S*) -> (\S+?),")  # Alembic's line for each revision run


def revisions() -> list[tuple[str, str]]:
    """(from, to) of each of the store's revisions, oldest first ('' before the first)."""
    chain = list(reversed(list(ScriptDirectory.from_config(alembic_config()).walk_revisions())))
    return [(r.down_revision or "", r.revision) for r in chain]


def migrated_by(replica: Replica) -> list[tuple[str, str]]:
    """(from, to) of each revision the replica's log says it ran, in order."""
    text = "".join(log.read_text(errors="replace") for log in sorted(replica.data_dir.glob("serve-*.log")))
    return UPGRADE.findall(text)


# -- what the API says ----------------------------------------------------------------


def rank_pids(replica: Replica, job_id: str, timeout_s: float = 30) -> list[int]:
    """The job's rank pids as `replica` (the leader) knows them, once it lists them."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = sorted(w["pid"] for w in replica.get(f"/v1/jobs/{job_id}/workers") if w["pid"])
        if pids:
            return pids
        assert time.monotonic() < deadline, f"{replica.name} lists no ranks of {job_id}"
        time.sleep(0.2)


def post(replica: Replica, path: str, **body) -> dict:
    r = replica.http.post(path, json=body or None)
    assert r.status_code in (200, 201), f"{replica.name} {path}: {r.status_code} {r.text}"
    return r.json()


def followed_log(replica: Replica, job_id: str) -> tuple[int, str]:
    """Follow the job's log stream on `replica` to its end: (lines, last event)."""
    lines, last = 0, ""
    with httpx.stream("GET", f"{replica.url}/v1/jobs/{job_id}/logs", params={"follow": "true"},
                      headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as stream:
        assert stream.status_code == 200, stream.read()
        for line in stream.iter_lines():
            if line.startswith("event: "):
                last = line.removeprefix("event: ")
                lines += last == "log"
    return lines, last


def prometheus_leader(replica: Replica) -> float:
    text = httpx.get(f"{replica.url}/metrics", timeout=10).text
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith("brigade_leader")]
    assert values, "no brigade_leader gauge"
    return values[0]


def assert_kept_training(replicas: Replicas, leader: Replica, job_id: str, pids: list[int],
                         launched: int, term: int) -> None:
    """The job ran on to the end on the ranks it had: no restart, no second launch,
    every step's metrics row once from that attempt, every event once; reattached
    by the new leader, and at most once in each term since the old leader's (`term`,
    its lease token): a term that ran out on a loaded machine is followed by
    another, whose reconcile reattaches anew (each acquisition raises the token)."""
    done = leader.wait(job_id, lambda j: j["state"] == "SUCCEEDED", 240)
    assert done["restarts"] == 0 and done["preemptions"] == 0, done
    assert attempt(replicas, job_id) == launched
    steps = done["spec"]["train"]["steps"]
    assert metric_rows(replicas, job_id) == [(s, launched) for s in range(1, steps + 1)]
    assert states(replicas, job_id) == ["QUEUED", "STARTING", "RUNNING", "SUCCEEDED"]
    notes, terms = reattached_by(replicas, job_id), lease(replicas)[1] - term
    assert notes[:1] == [leader.name] and len(notes) <= terms, (notes, terms, replicas.log_tails())
    assert pids, "no ranks were seen"


# -- the tests ------------------------------------------------------------------------


def test_both_replicas_serve_the_api_and_a_followers_actions_take_effect(replicas, tmp_path):
    # Started at the same instant on an empty database: both up, migrated once (one
    # replica ran every revision, each once; the other, having waited for the
    # migrations' lock, found nothing to run), one leader.
    ran = {r.name: migrated_by(r) for r in replicas}
    assert sorted(map(len, ran.values())) == [0, len(revisions())], ran
    assert [steps for steps in ran.values() if steps] == [revisions()], ran
    assert query(replicas.database_url, "SELECT version_num FROM alembic_version") == [
        (revisions()[-1][1],)]
    leader = replicas.leader()
    follower = replicas.followers(leader)[0]
    said = follower.readyz()
    assert said["role"] == "follower" and said["leader"] == leader.name, said
    assert said["replica"] == follower.name
    assert leader.readyz()["leader"] == leader.name
    assert (prometheus_leader(leader), prometheus_leader(follower)) == (1.0, 0.0)

    # A tenant made on the follower is the leader's too.
    tenant = post(follower, "/v1/tenants", name="ha-acme", quota={"max_workers": 4})
    assert leader.get(f"/v1/tenants/{tenant['id']}")["name"] == "ha-acme"
    assert query(replicas.database_url, "SELECT replica FROM audit_events "
                 "WHERE action = 'tenant.create'") == [(follower.name,)]  # who wrote it

    # Submitted on the follower, run by the leader, read on either, its log followed on the follower.
    short = follower.submit(spec(SHORT, workers=1))["id"]
    long = follower.submit(spec(LONG * 10, workers=2))["id"]
    lines, last = followed_log(follower, short)
    assert last == "end" and lines > 0, (lines, last)
    assert leader.job(short)["state"] == follower.job(short)["state"] == "SUCCEEDED"
    assert leader.get(f"/v1/jobs/{short}/metrics") == follower.get(f"/v1/jobs/{short}/metrics")

    # Suspend, resume and cancel, each sent to the follower, each done by the leader.
    follower.wait(long, lambda j: j["state"] == "RUNNING" and j["step"] >= 2, 120)
    post(follower, f"/v1/jobs/{long}/suspend")
    suspended = follower.wait(long, lambda j: j["state"] == "SUSPENDED", 120)
    post(follower, f"/v1/jobs/{long}/resume")
    follower.wait(long, lambda j: j["state"] == "RUNNING" and j["step"] > suspended["step"], 120)
    post(follower, f"/v1/jobs/{long}/cancel")
    follower.wait(long, lambda j: j["state"] == "CANCELLED", 120)
    assert states(replicas, long) == ["QUEUED", "STARTING", "RUNNING", "SUSPENDING", "SUSPENDED",
                                      "QUEUED", "STARTING", "RUNNING", "CANCELLING", "CANCELLED"]
    # The leader launched it each time; each event names a replica of this deployment.
    by = {(e[0], e[1]) for e in events(replicas, long)}
    assert {r for s, r in by if s == "STARTING"} == {leader.name}, by
    assert {r for _, r in by} <= {leader.name, follower.name}, by
    # A replica started later beside them (an upgrade's new pod): test_a_rolling_upgrade's.


def start_beside(replicas: Replicas, name: str, watched: list[Replica]) -> tuple[Replica, list]:
    """Start one more replica of the deployment, reading the /readyz of each of
    `watched` all the while: (the new replica, each (name, status, answer) read)."""
    new = replicas.make(name)
    replicas.replicas.append(new)
    seen: list[tuple[str, int, dict]] = []
    started = threading.Event()

    def watch() -> None:
        while not started.is_set():
            for r in watched:
                try:
                    answer = httpx.get(f"{r.url}/readyz", timeout=10)
                    seen.append((r.name, answer.status_code, answer.json()))
                except httpx.HTTPError as e:
                    seen.append((r.name, 0, {"error": repr(e)}))
            started.wait(0.25)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        new.start()
    finally:
        started.set()
        watcher.join()
    return new, seen


def stop_gracefully(replica: Replica) -> int:
    """SIGTERM to the replica's server, as a rollout stops a pod: its exit status
    once it has gone (0 or SIGTERM's number: it ran its shutdown; -SIGTERM
    would be the signal's default, a death with no shutdown)."""
    replica.proc.send_signal(signal.SIGTERM)
    code = replica.proc.wait(timeout=60)
    replica.stop()  # whatever it left
    return code


def test_a_rolling_upgrade_as_docs_deploy_md_has_it(deployed):
    """docs/deploy.md's "Rolling an upgrade", its steps in its order, on two
    replicas with the deployment's lease. The suite has one version of Brigade,
    so the "new" replicas are of the same one: they find no migration to run
    (that one replica runs the migrations, once, under their lock, is
    test_both_replicas_serve_the_api's)."""
    replicas = deployed
    leader = replicas.leader()
    old_follower = replicas.followers(leader)[0]
    holder, term = lease(replicas)
    assert holder == leader.name
    version = query(replicas.database_url, "SELECT version_num FROM alembic_version")

    # 1. A new replica beside the old ones: it migrates nothing more, and follows;
    #    meanwhile the old ones answer and the leader keeps leading, in the same term.
    new, seen = start_beside(replicas, "r2", [leader, old_follower])
    assert new.readyz()["role"] == "follower" and new.readyz()["leader"] == leader.name
    assert migrated_by(new) == []
    assert query(replicas.database_url, "SELECT version_num FROM alembic_version") == version
    assert {r for r, _, _ in seen} == {leader.name, old_follower.name}, seen
    assert {(r, code, said.get("role"), said.get("leader")) for r, code, said in seen} == {
        (leader.name, 200, "leader", leader.name),
        (old_follower.name, 200, "follower", leader.name)}, seen
    assert lease(replicas) == (leader.name, term)

    # 2. Once it is ready, an old follower stopped (SIGTERM): it goes, the leader
    #    leads on in the same term. Then again: a second new replica, and only the old
    #    leader is left of the old ones.
    assert stop_gracefully(old_follower) in (0, signal.SIGTERM), old_follower.log_tail()
    assert replicas.leader() is leader and lease(replicas) == (leader.name, term)
    newer, _ = start_beside(replicas, "r3", [])
    assert newer.readyz()["role"] == "follower" and migrated_by(newer) == []

    # A job running on the old leader's watch, launched by it.
    job = newer.submit(spec(LONG, workers=2))["id"]
    leader.wait(job, lambda j: j["state"] == "RUNNING" and j["step"] >= 2, 120)
    pids = rank_pids(leader, job)
    launched = attempt(replicas, job)

    # 3. The leader drained last: stopped, it gives its lease up (the row names no
    #    one, or already its successor: not the old leader, left to run out); a new
    #    replica leads, reconciles and reattaches to the running job.
    assert stop_gracefully(leader) in (0, signal.SIGTERM), leader.log_tail()
    stopped = time.monotonic()
    assert lease(replicas)[0] in (None, new.name, newer.name), lease(replicas)
    successor = replicas.leader(timeout_s=DEPLOYED_LEASE_S + 5, other_than=leader)
    took = time.monotonic() - stopped
    # At a follower's next try (every third of the lease), not after the lease ran out.
    assert successor in (new, newer) and took < DEPLOYED_LEASE_S, f"{successor.name} led after {took:.1f} s"
    assert lease(replicas)[1] > term
    assert successor.job(job)["step"] < LONG, "the job ended before its leader was drained"
    others = [r for r in (new, newer) if r is not successor]
    assert [r.readyz()["leader"] for r in (new, newer)] == [successor.name] * 2
    assert [prometheus_leader(successor)] + [prometheus_leader(r) for r in others] == [1.0, 0.0]
    assert rank_pids(successor, job) == pids  # the same ranks: no restart
    assert_kept_training(replicas, successor, job, pids, launched, term)  # once launched, reattached


def test_the_leader_killed_mid_training_and_mid_save(replicas):
    leader = replicas.leader()
    survivor = replicas.followers(leader)[0]
    training = survivor.submit(spec(LONG, workers=2))["id"]
    # Saving at every step, synchronously: a kill lands mid-save more often than not.
    saving = survivor.submit(spec(SAVING, workers=1, checkpoint={"every_steps": 1, "keep_last": 2,
                                                                  "async": False}))["id"]
    leader.wait(training, lambda j: j["state"] == "RUNNING" and j["step"] >= 5, 120)
    leader.wait(saving, lambda j: j["state"] == "RUNNING"
                and (j["latest_checkpoint"] or {}).get("step", 0) >= 2, 120)
    pids = rank_pids(leader, training)
    launched = attempt(replicas, training)
    _, term = lease(replicas)

    leader.kill()
    killed = time.monotonic()
    step_at_kill = survivor.job(training)["step"]
    # Meanwhile, on the survivor: a job queued, an action asked.
    queued = survivor.submit(spec(SHORT, workers=1))["id"]
    post(survivor, f"/v1/jobs/{saving}/suspend")

    new = replicas.leader(timeout_s=FAILOVER_S + 5, other_than=leader)
    took = time.monotonic() - killed
    assert new is survivor and took <= FAILOVER_S, f"a new leader after {took:.1f} s"
    assert step_at_kill < LONG, "the job finished before its leader was killed"
    assert rank_pids(new, training) == pids  # reattached to the same ranks

    assert_kept_training(replicas, new, training, pids, launched, term)
    done = new.wait(queued, lambda j: j["state"] == "SUCCEEDED", 180)
    assert done["restarts"] == 0 and attempt(replicas, queued) == 1
    assert states(replicas, queued) == ["QUEUED", "STARTING", "RUNNING", "SUCCEEDED"]

    # The job killed mid-save: suspended on the ask sent meanwhile, then resumed from
    # a committed checkpoint, and on to the end with each step's row once.
    suspended = new.wait(saving, lambda j: j["state"] == "SUSPENDED", 120)
    at = suspended["latest_checkpoint"]["step"]
    post(new, f"/v1/jobs/{saving}/resume")
    done = new.wait(saving, lambda j: j["state"] == "SUCCEEDED", 240)
    assert done["restarts"] == 0, done
    rows = new.get(f"/v1/jobs/{saving}/metrics")
    assert [r["step"] for r in rows] == list(range(1, SAVING + 1))
    assert [r["resumed_from"] for r in rows if r["resumed_from"]] == [at], rows
    assert states(replicas, saving) == ["QUEUED", "STARTING", "RUNNING", "SUSPENDING", "SUSPENDED",
                                        "QUEUED", "STARTING", "RUNNING", "SUCCEEDED"]
    assert [e[1] for e in events(replicas, saving) if e[0] == "SUSPENDED"] == [new.name]
