"""The cluster's nodes and their drains, from Ray's GCS to the page, on one
cluster of `ray start` processes on loopback (token auth on): a head with no
CPUs; w1 (2 CPUs) where tenant A's job runs; w2 and w3 (1 CPU each), held by
actors of the test's own (a drained node that holds nothing leaves at once).

- workers/cluster/nodes.py, in a driver of its own (`RayNodes.driver`: this
  pytest process may be the session cluster's driver already): the nodes as
  the GCS has them; w3 drained by `ray drain-node`, read back draining with its
  deadline, then gone with its reason once it holds nothing.
- The API (`brigade serve --ray-address`), the CLI and the cluster page: a
  tenant sees every node but only its own jobs' ranks; the admin sees all, the
  ranks where `GET /v1/jobs/{id}/workers` says (by Ray's node id); the drain
  (of w2) is the admin's alone, is `drain_node`'s GCS call (the record `ray
  drain-node` makes), reads back draining with its deadline and reason, is
  audited and cannot be taken back; the page marks the draining node with its
  deadline. With BRIGADE_UI_SHOTS=1 the page's screenshot is written to
  docs/ui/ (how docs/ui's are remade)."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from api.cli.main import app
from tests.ci import in_ci
from tests.e2e.browser import Browser, available
from tests.e2e.ray_nodes import RAY, RayNodes
from tests.e2e.serve_harness import KEY, Server, spec

# alone (make test's second phase, docs/testing.md): Ray nodes of its own, drained
pytestmark = pytest.mark.alone

DOCS_UI = Path(__file__).resolve().parents[2] / "docs" / "ui"
WORKERS = {"w1": 2, "w2": 1, "w3": 1}  # CPUs
LABELS = {"w1": {"pool": "on-demand"}, "w2": {"pool": "spot"}, "w3": {"pool": "spot"}}  # Ray's
SHOTS = DOCS_UI if os.environ.get("BRIGADE_UI_SHOTS") == "1" else Path(tempfile.mkdtemp("-ui-shots"))


HOLD = """
@ray.remote(num_cpus=1)
class Hold:
    def ready(self):
        return True
held = [Hold.options(name=f"hold-{n}", lifetime="detached", resources={f"brigade_{n}": 1}).remote()
        for n in ("w2", "w3")]
result = ray.get([h.ready.remote() for h in held], timeout=120)
"""
NODES = """
import dataclasses
from workers.cluster.nodes import cluster_nodes, draining_nodes
result = {"nodes": [dataclasses.asdict(n) | {"used": n.resources_used} for n in cluster_nodes()],
          "draining": sorted(draining_nodes())}
"""


@pytest.fixture(scope="module")
def cluster():
    nodes = RayNodes()
    try:
        nodes.start_head(num_cpus=0)
        for name, cpus in WORKERS.items():  # one at a time: on a loaded machine one may time out
            nodes.add_workers({name: cpus}, labels={name: LABELS[name]})
        nodes.driver(HOLD)
        yield nodes
    finally:
        nodes.stop()
    left = nodes.leftovers(within_s=30)
    assert left == [], f"Ray processes outlived the cluster: {left}"


@pytest.fixture(scope="module")
def ids(cluster) -> dict[str, str]:
    """{name: Ray's node id}: "head", or the worker named by its resource `brigade_<name>`."""
    return {name_of(view): view["node_id"] for view in cluster.driver(NODES)["nodes"]}


def name_of(view: dict) -> str:
    own = [r.removeprefix("brigade_") for r in view["resources_total"] if r.startswith("brigade_")]
    return own[0] if own else "head"


def read(cluster: RayNodes) -> tuple[dict[str, dict], list[str]]:
    """({name: the node's NodeView, as a dict}, [the names of the draining nodes]) from a driver."""
    seen = cluster.driver(NODES)
    nodes = {name_of(v): v for v in seen["nodes"]}
    by_id = {v["node_id"]: name for name, v in nodes.items()}
    return nodes, [by_id[i] for i in seen["draining"]]


@pytest.fixture(scope="module")
def server(cluster, tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("nodes"), ray_address=cluster.address,
                    env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": cluster.token}).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tenants(server):
    """{name: an HTTP client with that tenant's key}: "a" and "b"."""
    clients = {}
    for name in ("a", "b"):
        made = server.http.post("/v1/tenants", json={"name": f"nodes-{name}"})
        assert made.status_code == 201, made.text
        clients[name] = httpx.Client(base_url=server.url, timeout=30,
                                     headers={"Authorization": f"Bearer {made.json()['api_key']}"})
    yield clients
    for client in clients.values():
        client.close()


@pytest.fixture(scope="module")
def running(server, tenants):
    """Tenant A's job, running on w1 (2 ranks: w2's CPU is the test's actor's, w3 is gone)."""
    submitted = tenants["a"].post("/v1/jobs", json=spec(100_000))
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    server.wait(job_id, lambda j: j["state"] == "RUNNING" and j["step"] >= 1, 240)
    yield job_id
    tenants["a"].post(f"/v1/jobs/{job_id}/cancel")


def brigade(server: Server, *args: str, key: str = KEY):
    """`brigade ARGS` against the module's server, with `key`."""
    env = {"BRIGADE_URL": server.url, "BRIGADE_API_KEY": key, "BRIGADE_PROFILE": None,
           "BRIGADE_CONFIG": os.devnull}
    return CliRunner().invoke(app, list(args), env=env)


def named(nodes: list[dict], ids: dict[str, str]) -> dict[str, dict]:
    """The API's nodes by name (see `ids`)."""
    names = {node_id: name for name, node_id in ids.items()}
    return {names[n["node_id"]]: n for n in nodes}


def test_the_nodes_are_read_as_the_gcs_has_them(cluster, ids):
    nodes, draining = read(cluster)
    assert sorted(nodes) == ["head", "w1", "w2", "w3"] and draining == []
    assert all(v["alive"] and not v["draining"] and v["drain_deadline"] is None
               and v["drain_reason"] is None for v in nodes.values())
    assert nodes["head"]["is_head"] and not nodes["w1"]["is_head"]
    assert nodes["w1"]["resources_total"]["CPU"] == 2 and "CPU" not in nodes["head"]["resources_total"]
    assert nodes["w1"]["used"]["CPU"] == 0 and nodes["w3"]["used"]["CPU"] == 1  # the test's actor
    assert nodes["w1"]["labels"]["ray.io/node-id"] == ids["w1"]
    assert nodes["w1"]["labels"]["pool"] == "on-demand"
    assert nodes["w1"]["address"]  # the node's IP


def test_a_drain_by_ray_drain_node_is_read_back_with_its_deadline(cluster, ids):
    before = time.time()
    subprocess.run([RAY, "drain-node", f"--address={cluster.address}", "--node-id", ids["w3"],
                    "--reason=DRAIN_NODE_REASON_PREEMPTION", "--reason-message=spot reclaim",
                    "--deadline-remaining-seconds=60"], env=cluster.env, check=True,
                   capture_output=True, timeout=120)
    after = time.time()
    nodes, draining = read(cluster)
    assert draining == ["w3"] and nodes["w3"]["draining"] and not nodes["w2"]["draining"]
    view = nodes["w3"]
    assert view["alive"]  # Ray kills nothing at the deadline: the caller does
    # whole seconds in the CLI, milliseconds in the GCS
    assert before + 59 <= view["drain_deadline"] <= after + 61, (before, view, after)
    # Ray does not say why while the node lives; its death record does, once it is gone
    assert view["drain_reason"] is None

    cluster.driver('ray.kill(ray.get_actor("hold-w3"))')  # it holds nothing now: it leaves
    deadline = time.monotonic() + 120
    while (gone := read(cluster)[0]["w3"])["alive"]:
        assert time.monotonic() < deadline, "the drained node did not leave once it held nothing"
        time.sleep(0.5)
    assert gone["drain_reason"] == "preemption: spot reclaim"
    assert not gone["draining"] and gone["drain_deadline"] is None


def test_the_admin_sees_every_node_and_the_ranks_on_each(server, running, ids):
    nodes = named(server.get("/v1/cluster/nodes")["nodes"], ids)
    assert sorted(nodes) == ["head", "w1", "w2", "w3"]
    assert [n["alive"] for n in nodes.values()].count(False) == 1 and not nodes["w3"]["alive"]
    assert nodes["w3"]["drain_reason"] == "preemption: spot reclaim"  # drained above, gone
    assert nodes["head"]["head"] and not nodes["w1"]["head"]
    assert not any(n["draining"] or n["drain_deadline"] for n in nodes.values())
    assert not any(n["drain_reason"] for name, n in nodes.items() if name != "w3")
    assert nodes["w1"]["resources"]["total"]["cpu"] == 2
    assert nodes["w1"]["resources"]["used"]["cpu"] == 2  # the job's two ranks
    assert nodes["w2"]["resources"]["used"]["cpu"] == 1  # the test's actor
    assert nodes["w1"]["labels"]["ray.io/node-id"] == nodes["w1"]["node_id"]
    assert nodes["w1"]["labels"]["pool"] == "on-demand" and nodes["w2"]["labels"]["pool"] == "spot"
    assert sorted((r["job"], r["rank"]) for r in nodes["w1"]["ranks"]) == [(running, 0), (running, 1)]
    assert nodes["w2"]["ranks"] == [] and nodes["head"]["ranks"] == []
    assert nodes["w3"]["resources"]["used"]["cpu"] == 0 and nodes["w3"]["ranks"] == []

    workers = server.get(f"/v1/jobs/{running}/workers")
    assert [w["node_id"] for w in workers] == [nodes["w1"]["node_id"]] * 2
    assert [w["node"] for w in workers] == [nodes["w1"]["address"]] * 2


def test_a_tenant_sees_the_nodes_but_no_other_tenants_jobs(server, tenants, running, ids):
    seen_by_b = tenants["b"].get("/v1/cluster/nodes")
    assert seen_by_b.status_code == 200, seen_by_b.text
    nodes = named(seen_by_b.json()["nodes"], ids)
    assert sorted(nodes) == ["head", "w1", "w2", "w3"]
    assert all(n["ranks"] == [] for n in nodes.values())
    assert running not in seen_by_b.text
    own = named(tenants["a"].get("/v1/cluster/nodes").json()["nodes"], ids)
    assert [r["job"] for r in own["w1"]["ranks"]] == [running, running]

    # the same in `brigade nodes`: B's table names no job, A's names its own on w1
    b_key = tenants["b"].headers["Authorization"].removeprefix("Bearer ")
    as_b = brigade(server, "nodes", key=b_key)
    assert as_b.exit_code == 0, as_b.output
    assert running not in as_b.stdout and len(as_b.stdout.strip().splitlines()) == 5  # header, 4
    a_key = tenants["a"].headers["Authorization"].removeprefix("Bearer ")
    w1 = own["w1"]["node_id"]
    row = next(line for line in brigade(server, "nodes", key=a_key).stdout.splitlines()
               if line.startswith(w1[:12]))
    assert f"{running} (0,1)" in row and "2/2" in row and "alive" in row, row
    assert "pool=on-demand" in row and "ray.io/node-id" not in row, row


def test_a_tenant_may_not_drain_a_node(server, tenants, running, ids):
    w2 = named(server.get("/v1/cluster/nodes")["nodes"], ids)["w2"]
    for client in tenants.values():
        refused = client.post(f"/v1/cluster/nodes/{w2['node_id']}/drain",
                              json={"deadline_s": 60, "reason": "mine"})
        assert refused.status_code == 403, refused.text
        assert "admin" in refused.json()["error"]["message"]
        assert client.delete(f"/v1/cluster/nodes/{w2['node_id']}/drain").status_code == 403
    after = named(server.get("/v1/cluster/nodes")["nodes"], ids)["w2"]
    assert not after["draining"]
    assert not [e for e in server.get("/v1/audit")["items"] if e["action"] == "node.drain"]


def test_the_admins_drain_is_read_back_audited_and_cannot_be_taken_back(server, running, ids,
                                                                         cluster):
    nodes = named(server.get("/v1/cluster/nodes")["nodes"], ids)
    w2, head = nodes["w2"]["node_id"], nodes["head"]["node_id"]

    bad = server.http.post(f"/v1/cluster/nodes/{w2}/drain", json={"deadline_s": 0})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "deadline_s", bad.text
    unknown = server.http.post(f"/v1/cluster/nodes/{'ab' * 28}/drain", json={})
    assert unknown.status_code == 404 and "not found" in unknown.json()["error"]["message"]
    refused = server.http.post(f"/v1/cluster/nodes/{head}/drain", json={"deadline_s": 60})
    assert refused.status_code == 409 and "head node" in refused.json()["error"]["message"]

    gone = server.http.post(f"/v1/cluster/nodes/{ids['w3']}/drain", json={"deadline_s": 60})
    assert gone.status_code == 409 and "not alive" in gone.json()["error"]["message"], gone.text
    ambiguous = brigade(server, "nodes", "drain", "", "--deadline", "300")  # every id starts so
    assert ambiguous.exit_code == 1 and "4 nodes with an id starting" in ambiguous.output

    before = time.time()  # by the CLI, as an operator would: the id's first characters
    drained = brigade(server, "nodes", "drain", w2[:10], "--deadline", "300",
                      "--reason", "kernel upgrade")
    after = time.time()
    assert drained.exit_code == 0, drained.output
    assert w2 in drained.stdout and "draining, goes in 4m5" in drained.stdout, drained.stdout
    assert "(preemption: kernel upgrade)" in drained.stdout

    shown = named(server.get("/v1/cluster/nodes")["nodes"], ids)
    assert shown["w2"]["draining"] and shown["w2"]["alive"]  # Ray kills nothing: the caller does
    deadline = shown["w2"]["drain_deadline"]
    assert before + 299 <= datetime.fromisoformat(deadline).timestamp() <= after + 301, deadline
    assert shown["w2"]["drain_reason"] == "preemption: kernel upgrade"
    assert not shown["w1"]["draining"] and not shown["head"]["draining"]

    cancel = server.http.delete(f"/v1/cluster/nodes/{w2}/drain")
    assert cancel.status_code == 409, cancel.text
    assert "Ray cannot cancel a drain" in cancel.json()["error"]["message"]
    assert named(server.get("/v1/cluster/nodes")["nodes"], ids)["w2"]["draining"]
    # the GCS's own record of the drain, as `ray drain-node` makes it
    recorded = cluster.driver("from ray._private.state import state\n"
                              "result = state.get_draining_nodes()")
    assert recorded == {w2: pytest.approx(datetime.fromisoformat(deadline).timestamp() * 1000, abs=1)}

    audited = [e for e in server.get("/v1/audit")["items"] if e["action"] == "node.drain"]
    assert [(e["actor"], e["target"], e["detail"]) for e in audited] == \
        [("admin", w2, {"deadline_s": 300, "reason": "kernel upgrade"})]
    assert server.job(running)["state"] == "RUNNING"  # a drain of a node holding no job: nothing

    listed = brigade(server, "nodes").stdout.splitlines()
    assert "draining, goes in" in next(line for line in listed if line.startswith(w2[:12]))


def test_the_cluster_page_lists_the_nodes_their_ranks_and_the_draining_one(server, running, ids):
    """After the drain above: w2 marked draining, with its deadline and reason; w1 with the
    job's two ranks."""
    why_not = available()
    if why_not and not in_ci():
        pytest.skip(f"no browser here: {why_not}")
    from selenium.webdriver.common.by import By

    from tests.e2e.test_dashboard_browser import clean, sign_in, text_of, wait_for

    nodes = named(server.get("/v1/cluster/nodes")["nodes"], ids)
    browser = Browser()
    try:
        sign_in(browser, server, KEY)
        d = browser.driver
        d.get(server.url + "/cluster")
        draining = wait_for("the draining node", lambda: d.find_elements(
            By.CSS_SELECTOR, f"#nodes tr.draining[data-node='{nodes['w2']['node_id']}']"))
        row = draining[0].text
        assert "draining" in row and "preemption: kernel upgrade" in row, row
        assert re.search(r"goes by .+ \(in \d+ s\)", row), row
        assert len(d.find_elements(By.CSS_SELECTOR, "#nodes tr.draining")) == 1
        w1 = text_of(browser, f"#nodes tr[data-node='{nodes['w1']['node_id']}']")
        assert f"{running} ranks 0, 1" in w1 and "2 / 2" in w1 and "alive" in w1, w1
        assert "pool=on-demand" in w1, w1
        browser.screenshot(SHOTS / "cluster-nodes.png")
        clean(browser, server)
    finally:
        browser.close()

