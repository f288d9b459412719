"""A Ray cluster of three nodes on this machine (a head with no CPUs, two
worker nodes with 2 CPUs each, as `ray start` processes; token auth on) and
`brigade serve --ray-address` against it: an elastic job spread over both
worker nodes loses one of them mid-run, resumes on what is left at a smaller
world size, and finishes on the uninterrupted loss curve.

All nodes share this machine's IP, so a rank's node is told by its process:
a rank actor is a child of its node's raylet, a child of that node's
`ray start`."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.e2e.ray_nodes import RayNodes
from tests.e2e.serve_harness import Server, spec

# alone (make test's second phase, docs/testing.md): Ray nodes of its own, started and killed
pytestmark = pytest.mark.alone


@pytest.fixture
def cluster():
    nodes = RayNodes()
    try:
        nodes.start_head(num_cpus=0)
        nodes.add_workers({"w1": 2, "w2": 2})
        yield nodes
    finally:
        nodes.stop()
    left = nodes.leftovers(within_s=30)
    assert left == [], f"Ray processes outlived the cluster: {left}"


# -- the test -------------------------------------------------------------------

STEPS = 30
# No in-memory snapshots: the lost node's rank is not replaced in place, the job
# restarts smaller from disk, the elastic path this module proves.
CHECKPOINT = {"every_steps": 5, "keep_last": 2, "memory_every_steps": 0}
REFERENCE = """\
import json, sys
from workers.engine.local import run_single_process
from workers.schema import JobSpec
rows = run_single_process(JobSpec.model_validate(json.loads(sys.argv[1])))
print(json.dumps({r["step"]: r["loss"] for r in rows}))
"""


def test_a_spread_job_loses_a_node_and_finishes_at_a_smaller_world_size(cluster, tmp_path):
    job_spec = spec(STEPS, workers={"min": 2, "max": 4}, placement="SPREAD",
                    checkpoint=CHECKPOINT)
    reference = subprocess.Popen(  # meanwhile, the same job uninterrupted in one process
        [sys.executable, "-c", REFERENCE, json.dumps(job_spec)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    server = Server(tmp_path, ray_address=cluster.address,
                    env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": cluster.token}).start()
    try:
        wait_for_cpus(server, 4)  # the two worker nodes; the head has none
        jid = server.submit(job_spec)["id"]
        running = server.wait(jid, lambda j: j["state"] == "RUNNING"
                              and (j["latest_checkpoint"] or {}).get("step", 0) >= 5, 150)
        assert running["workers"] == 4  # the largest size that fits 2 x 2 CPUs
        ranks = server.get(f"/v1/jobs/{jid}/workers")
        nodes = [cluster.node_of(w["pid"]) for w in ranks]
        assert sorted(nodes) == ["w1", "w1", "w2", "w2"], (ranks, nodes)  # spread over both
        victim = nodes[-1]
        survivor = "w1" if victim == "w2" else "w2"

        cluster.kill(victim)  # mid-run: the node, its raylet, agents and two ranks
        assert server.job(jid)["step"] < STEPS, "the job finished before its node was lost"

        # RESTARTING, then STARTING at the size the survivor fits, not at the old one
        restarted = server.wait(jid, lambda j: j["restarts"] >= 1
                                and j["state"] in ("STARTING", "RUNNING", "SUCCEEDED"), 90)
        assert restarted["workers"] == 2, history(server, jid)
        resumed = server.wait(jid, lambda j: j["state"] in ("RUNNING", "SUCCEEDED"), 90)
        if resumed["state"] == "RUNNING":  # both ranks on the survivor
            after = server.get(f"/v1/jobs/{jid}/workers")
            assert [cluster.node_of(w["pid"]) for w in after] in ([], [survivor] * 2), after
        assert server.get("/v1/cluster")["capacity"]["cpu"] == 2
        done = server.wait(jid, lambda j: j["state"] == "SUCCEEDED", 150)
        assert done["step"] == STEPS and done["restarts"] == 1 and done["workers"] == 2, done
        assert done["latest_checkpoint"] == {"step": STEPS, "world_size": 2}

        events = server.get(f"/v1/jobs/{jid}/events")
        states = [e["to_state"] for e in events]
        assert states[:3] == ["QUEUED", "STARTING", "RUNNING"], history(server, jid)
        assert states[3:] == ["RESTARTING", "STARTING", "RUNNING", "SUCCEEDED"], \
            history(server, jid)
        assert "rank" in events[3]["reason"], events[3]  # which rank was lost, and where
        assert "at 2 workers (was 4)" in events[4]["reason"], events[4]

        losses = {r["step"]: r["loss"] for r in server.get(f"/v1/jobs/{jid}/metrics")}
        assert sorted(losses) == list(range(1, STEPS + 1))  # a re-run step: its resumed loss
        out, err = reference.communicate(timeout=120)
        assert reference.returncode == 0, err[-3000:]
        straight = {int(k): v for k, v in json.loads(out.splitlines()[-1]).items()}
        steps = sorted(losses)
        assert [losses[s] for s in steps] == pytest.approx([straight[s] for s in steps], rel=1e-4)
    finally:
        server.stop()
        if reference.poll() is None:
            reference.kill()
            reference.wait()


def history(server: Server, job_id: str) -> str:
    """The job's events, one line each, for an assertion message."""
    events = server.get(f"/v1/jobs/{job_id}/events")
    return "\n".join(f"{e['time']} {e['to_state']}: {e['reason']}" for e in events)


def wait_for_cpus(server: Server, cpus: float, timeout_s: float = 30) -> None:
    """Until the service sees the cluster's CPUs (its nodes have all joined)."""
    deadline = time.monotonic() + timeout_s
    while (seen := server.get("/v1/cluster")["capacity"]["cpu"]) != cpus:
        assert time.monotonic() < deadline, f"the cluster has {seen} CPUs, not {cpus}"
        time.sleep(0.3)
