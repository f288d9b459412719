"""Resource flavors on a cluster of labelled `ray start` nodes on loopback (the
head, with the label pool=a, and a worker node `b` with pool=b, 2 CPUs each;
token auth on: two nodes, not three, as each start costs ~15 s here) and
`brigade serve --ray-address` against it.

One scenario, each step standing on the one before (the cluster fits few
jobs at once, and each start costs seconds here):

- the admin puts flavors a and b; `GET /v1/cluster/nodes` shows each node's
  labels and flavor; a flavor of other labels node b has (Ray's own) is a 409
  naming flavor b and the node; `GET /v1/cluster` shows each flavor's use;
- a tenant whose quota on flavor a is one worker runs a job of flavor a: its
  rank runs on node a only (the rank's node id from `GET /v1/jobs/{id}/workers`
  against the nodes'); its second job of flavor a waits, the reason naming
  the flavor, though node a has a CPU free, while its job of flavor b runs,
  on node b only;
- a job of flavor b at a higher priority preempts the tenant's job of flavor
  b (a victim on its own flavor), never its job of flavor a, and runs on b;
- flavor a, in use, is not deleted (409 naming the jobs); a flavor that no
  node has is a 422 at submit.
"""

from __future__ import annotations

import pytest

from tests.e2e.ray_nodes import RayNodes
from tests.e2e.serve_harness import Server, spec

# alone (make test's second phase, docs/testing.md): labelled Ray nodes of its own
pytestmark = pytest.mark.alone

LONG = 100_000  # steps: a job that runs until it is cancelled
FLAVORS = {"a": {"brigade.io/pool": "a"}, "b": {"brigade.io/pool": "b"}}


@pytest.fixture(scope="module")
def cluster():
    nodes = RayNodes()
    try:
        nodes.start_head(num_cpus=2, labels=FLAVORS["a"])
        nodes.add_workers({"b": 2}, labels={"b": FLAVORS["b"]})
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture(scope="module")
def server(cluster, tmp_path_factory):
    served = Server(tmp_path_factory.mktemp("flavors"), ray_address=cluster.address,
                    env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": cluster.token,
                         "BRIGADE_RANK_POOL_SIZE": "0", "BRIGADE_PREEMPTION_GRACE_S": "30"}).start()
    try:
        yield served
    finally:
        served.stop()


def job(flavor: str, workers: int = 1, **extra) -> dict:
    return spec(LONG, workers=workers, resources_per_worker={"cpu": 1, "flavor": flavor},
                checkpoint={"every_steps": 20, "keep_last": 1}, **extra)


def nodes_of(server: Server, job_id: str) -> set[str]:
    """The Ray node ids its ranks run on."""
    return {w["node_id"] for w in server.get(f"/v1/jobs/{job_id}/workers")}


def running(server: Server, job_id: str) -> dict:
    return server.wait(job_id, lambda j: j["state"] == "RUNNING" and j["step"] >= 1, 120)


def test_jobs_of_a_flavor_run_on_its_nodes_within_its_quota_and_preempt_within_it(cluster, server):
    http = server.http
    for name, labels in FLAVORS.items():
        r = http.put(f"/v1/flavors/{name}", json={"labels": labels, "price_per_worker_hour": 1.0})
        assert r.status_code == 200, r.text
    shown = server.get("/v1/cluster/nodes")["nodes"]
    ids = {n["flavor"]: n["node_id"] for n in shown}
    assert set(ids) == {"a", "b"} and ids["b"] == cluster.node_id("b")
    assert [n["labels"]["brigade.io/pool"] for n in shown if n["head"]] == ["a"]
    # a flavor of labels that node b has beside flavor b's (Ray's own, e.g. its node id):
    # node b would be of both, so the put is refused naming flavor b and the node
    node_b = next(n for n in shown if n["flavor"] == "b")
    key, value = min((k, v) for k, v in node_b["labels"].items() if k != "brigade.io/pool")
    overlap = http.put("/v1/flavors/only-b", json={"labels": {key: value}})
    assert overlap.status_code == 409, overlap.text
    assert "flavor b's" in overlap.text and node_b["node_id"][:12] in overlap.text

    tenant = http.post("/v1/tenants", json={"name": "team", "max_priority": 10, "quota": {
        "flavors": {"a": {"max_workers": 1}}}}).json()
    own = type(server.http)(base_url=server.url, timeout=30,
                            headers={"Authorization": f"Bearer {tenant['api_key']}"})

    def submit(body: dict) -> str:
        r = own.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    on_a = submit(job("a"))
    second_a = submit(job("a"))
    on_b = submit(job("b", workers=2, priority=1))
    running(server, on_a)
    running(server, on_b)
    assert nodes_of(server, on_a) == {ids["a"]}
    assert nodes_of(server, on_b) == {ids["b"]}
    use = {f["flavor"]: f for f in server.get("/v1/cluster")["flavors"]}
    assert (use["a"]["nodes"], use["a"]["capacity"]["cpu"], use["a"]["workers"]) == (1, 2.0, 1)
    assert (use["b"]["workers"], use["b"]["usage"]["cpu"], use["b"]["free"]["cpu"]) == (2, 2.0, 0.0)
    waits = server.wait(second_a, lambda j: "flavor a" in (j.get("waiting") or ""), 30)
    assert waits["state"] == "QUEUED" and "quota" in waits["waiting"], waits

    urgent = server.submit(job("b", workers=2, priority=50, name="urgent"))["id"]
    running(server, urgent)
    assert nodes_of(server, urgent) == {ids["b"]}
    preempted = server.job(on_b)
    assert preempted["preemptions"] == 1 and preempted["state"] == "QUEUED", preempted
    assert server.job(on_a)["state"] == "RUNNING" and server.job(on_a)["preemptions"] == 0

    refused = http.delete("/v1/flavors/a")
    assert refused.status_code == 409, refused.text
    assert on_a in refused.json()["error"]["message"] and second_a in refused.json()["error"]["message"]
    nowhere = http.put("/v1/flavors/h100", json={"labels": {"brigade.io/pool": "h100"}})
    assert nowhere.status_code == 200
    r = http.post("/v1/jobs", json=job("h100"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "resources_per_worker.flavor", r.text

    for job_id in (on_a, second_a, on_b, urgent):  # the cluster goes with the module
        assert http.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    own.close()
