"""Ray's drains followed, on a cluster of `ray start` nodes on this machine (a
head with no CPUs, worker nodes of one CPU each; token auth on) and `brigade
serve --ray-address` against it.

- A node running one rank of a 2-worker job drained with `ray drain-node`
  (what the autoscaler and a spot reclaim's notice do): the rank moves to a
  node that does not drain before the deadline, the other rank keeps its
  process, no step is redone and the curve is the uninterrupted one; the
  drained node then killed changes nothing for the job.
- No capacity left outside the draining node (drained through the API this
  time): the job checkpoints, gives its workers back and waits in the queue
  saying so; it trains again, from that checkpoint (nothing redone, the same
  curve), once a node joins.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.ray_nodes import RayNodes
from tests.e2e.serve_harness import Server, spec

# alone (make test's second phase, docs/testing.md): a drained node's rank moves before the drain's deadline; Ray nodes of its own
pytestmark = pytest.mark.alone

STEPS = 300  # long enough that the drain lands mid-run though the store sees the step late (150 was not)
DEADLINE_S = 60
JOB = spec(STEPS, placement="SPREAD", checkpoint={"every_steps": 10, "keep_last": 2})


@pytest.fixture(scope="module")
def cluster():
    nodes = RayNodes()
    try:
        nodes.start_head(num_cpus=0)
        for name in ("w1", "w2", "w3"):  # one at a time: together they time out here (FACTS)
            nodes.add_workers({name: 1})
        nodes.node_id("w1")  # the ids asked once, before any job runs
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture(scope="module")
def server(cluster, tmp_path_factory):
    served = Server(tmp_path_factory.mktemp("drains"), ray_address=cluster.address,
                    env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": cluster.token,
                         "BRIGADE_RANK_POOL_SIZE": "0"}).start()
    try:
        yield served
    finally:
        served.stop()


def rank_nodes(server: Server, cluster: RayNodes, job_id: str) -> dict[int, tuple[str, int]]:
    """Each rank's (node name, pid)."""
    return {w["rank"]: (cluster.node_of(w["pid"]), w["pid"])
            for w in server.get(f"/v1/jobs/{job_id}/workers")}


@pytest.fixture(scope="module")
def straight(server) -> dict[int, float]:
    """The same job uninterrupted, on the same cluster at the same world size:
    the curve a move must follow bitwise."""
    job_id = server.submit({**JOB, "name": "straight"})["id"]
    server.wait(job_id, lambda j: j["state"] == "SUCCEEDED", 300)
    return {r["step"]: r["loss"] for r in server.get(f"/v1/jobs/{job_id}/metrics")}


def moves(server: Server, job_id: str) -> list[dict]:
    return [e["detail"] for e in server.get(f"/v1/jobs/{job_id}/events") if e.get("kind") == "moved"]


def test_a_drained_node_s_rank_moves_before_the_deadline_and_nothing_is_redone(
        cluster, server, straight):
    job_id = server.submit(JOB)["id"]
    server.wait(job_id, lambda j: j["state"] == "RUNNING" and j["step"] >= 8, 180)
    before = rank_nodes(server, cluster, job_id)
    assert len({node for node, _ in before.values()}) == 2, before  # spread
    drained = before[1][0]
    spare = ({"w1", "w2", "w3"} - {node for node, _ in before.values()}).pop()
    noticed = time.time()
    node_id = cluster.drain(drained, deadline_s=DEADLINE_S, message="spot reclaim")
    issued = time.time()  # the CLI's start-up is seconds here: its deadline lies in between
    server.wait(job_id, lambda j: moves(server, job_id) or j["state"] != "RUNNING", 60)
    assert moves(server, job_id), server.event_lines(job_id) + "\n" + server.log_tail(20000)
    [move] = moves(server, job_id)
    assert move["in_place"] is True and move["ranks"] == [1], move
    assert move["node"] == node_id
    assert noticed + DEADLINE_S - 1 <= move["deadline"] <= issued + DEADLINE_S + 1, move
    assert time.time() < noticed + DEADLINE_S  # moved before the deadline
    after = rank_nodes(server, cluster, job_id)
    assert after[0] == before[0]  # the other rank kept its process
    assert after[1][0] == spare and after[1][1] != before[1][1], (before, after)

    cluster.kill(drained)  # the node goes at its deadline: nothing of the job was there
    done = server.wait(job_id, lambda j: j["state"] == "SUCCEEDED", 240)
    assert (done["restarts"], done["recoveries"], done["preemptions"]) == (0, 0, 0), done

    rows = server.get(f"/v1/jobs/{job_id}/metrics")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    [resumed] = [r for r in rows if r.get("recovered_from") == "move"]
    assert resumed["resumed_from"] == move["step"] == resumed["step"] - 1
    assert resumed["lost_steps"] == 0  # nothing redone
    assert {r["step"]: r["loss"] for r in rows} == straight  # the uninterrupted curve, bitwise


def test_with_no_capacity_elsewhere_the_job_checkpoints_and_waits_for_a_node(
        cluster, server, straight):
    # What is left of the first test's cluster: two live nodes of one CPU each.
    live = [name for name in ("w1", "w2", "w3") if cluster.nodes[name].alive()]
    assert len(live) == 2, live
    job_id = server.submit({**JOB, "checkpoint": {"every_steps": 100, "keep_last": 2}})["id"]
    server.wait(job_id, lambda j: j["state"] == "RUNNING" and j["step"] >= 6, 180)
    drained = rank_nodes(server, cluster, job_id)[1][0]
    # Through the API this time (the admin's drain: the same GCS call, its reason kept).
    r = server.http.post(f"/v1/cluster/nodes/{cluster.node_id(drained)}/drain",
                         json={"deadline_s": DEADLINE_S, "reason": "maintenance"})
    assert r.status_code == 202, r.text
    server.wait(job_id, lambda j: moves(server, job_id) or j["state"] not in ("RUNNING", "PREEMPTING",
                                                                             "QUEUED"), 60)
    queued = server.wait(job_id, lambda j: j["state"] == "QUEUED", 60)
    [move] = moves(server, job_id)
    assert move["in_place"] is False and "no capacity elsewhere" in move["outcome"], move
    assert move["reason"] == "preemption: maintenance", move  # the reason the API kept
    checkpoint = queued["latest_checkpoint"]["step"]
    assert checkpoint == queued["step"]  # checkpointed where it stopped: nothing to redo
    server.wait(job_id, lambda j: "draining: no capacity elsewhere" in (j.get("waiting") or ""), 30)
    time.sleep(3)
    assert server.job(job_id)["state"] == "QUEUED"  # never placed on the draining node

    cluster.add_workers({"w4": 1})  # capacity joins
    done = server.wait(job_id, lambda j: j["state"] == "SUCCEEDED", 300)
    assert done["preemptions"] == 1 and done["restarts"] == 0, done
    rows = server.get(f"/v1/jobs/{job_id}/metrics")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    [resumed] = [r for r in rows if r.get("recovered_from") == "preemption"]
    assert resumed["resumed_from"] == checkpoint and resumed["lost_steps"] == 0
    assert {r["step"]: r["loss"] for r in rows} == straight  # resumed on the same curve
