"""A node drained under a running job: its ranks moved before the deadline,
against the SIGTERM-only path, in the same run.

    .venv/bin/python -m bench.drain [--deadline 30]

A Ray cluster of `ray start` nodes on this machine (a head with no CPUs,
worker nodes of one CPU each: tests/e2e/ray_nodes.py) and `brigade serve
--ray-address` against it; one 2-worker job a mode (SPREAD: one rank a node):

- `drain`: the node of rank 1 drained with a `--deadline` through
  `POST /v1/cluster/nodes/{id}/drain` (the GCS call `ray drain-node` makes,
  DRAIN_NODE_REASON_PREEMPTION, as a spot reclaim's notice, without the
  seconds the CLI takes to start here): the leader sees it at its next poll
  and moves the rank in place (service/run/drains.py);
- `sigterm`: what a service that ignores the notice gets, the SIGTERM to the
  rank's process when the node goes: the rank checkpoints at its next step,
  the job is requeued and starts again on the nodes left (the node is killed
  once the job left it).

Notice -> training again = the notice (the drain request; the SIGTERM) -> the end
of the first step past the one the ranks had reached (its metrics row's
`wall_time`, the row that says where it resumed). For the SIGTERM path the
notice the job could have had is the deadline earlier: the table adds it.
Steps redone = the row's `lost_steps` (the step reached - the step resumed from).
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

from bench.report import Figure, Goal, cli, load
from bench.server import parse_time, wait_for

GOAL_S = 5.0  # issue 42: notice -> training again elsewhere
TITLE = "Drains: a node's ranks moved before its deadline vs the SIGTERM-only path"
COMMAND = ".venv/bin/python -m bench.drain"
MODES = ("drain", "sigterm")


def job_spec(mode: str) -> dict:
    return {
        "name": f"bench-drain-{mode}",
        "workers": 2,
        "resources_per_worker": {"cpu": 1},
        "placement": "SPREAD",
        "model": {"n_layers": 2, "d_model": 64, "n_heads": 4, "seq_len": 64},
        "data": {"source": "builtin"},
        "train": {"steps": 100_000, "global_batch_size": 8, "lr": 0.001},
        "checkpoint": {"every_steps": 10, "keep_last": 2},
    }


def one(server, cluster, mode: str, args) -> dict:
    job = server.submit(job_spec(mode))
    job_id = job["id"]
    server.wait(job_id, lambda j: j["state"] == "RUNNING" and j["step"] >= 15, 300)
    ranks = {w["rank"]: w for w in server.get(f"/v1/jobs/{job_id}/workers")}
    node = cluster.node_of(ranks[1]["pid"])
    load_at = load()
    noticed = time.time()
    if mode == "drain":  # the admin's drain (the GCS call `ray drain-node` makes, without its start-up)
        r = server.http.post(f"/v1/cluster/nodes/{ranks[1]['node_id']}/drain",
                             json={"deadline_s": args.deadline, "reason": "bench: spot reclaim"})
        assert r.status_code == 202, r.text
    else:
        os.kill(ranks[1]["pid"], signal.SIGTERM)
        server.wait(job_id, lambda j: j["state"] != "RUNNING", 120)
        cluster.kill(node)  # the node goes: the job starts again on the nodes left
    kind = "move" if mode == "drain" else "preemption"

    def resumed():
        rows = server.get(f"/v1/jobs/{job_id}/metrics?since_step=10")
        return next((r for r in rows if r.get("recovered_from") == kind), None)

    row = wait_for(f"job {job_id} training again after the {mode}", resumed, 300, 0.2)
    after = server.job(job_id)
    events = server.get(f"/v1/jobs/{job_id}/events")
    moved = [e["detail"] for e in events if e.get("kind") == "moved"]
    server.http.post(f"/v1/jobs/{job_id}/cancel")
    if mode == "drain":
        cluster.kill(node)  # its deadline: nothing of the job is there any more
    wall = row.get("wall_time") or parse_time(row["time"])
    return {
        "mode": mode, "node": node, "seconds": wall - noticed,
        "with_deadline": wall - noticed + (args.deadline if mode == "sigterm" else 0.0),
        "redone": int(row.get("lost_steps") or 0), "resumed_from": row.get("resumed_from"),
        "restarts": after["restarts"], "preemptions": after["preemptions"],
        "move_seconds": moved[0]["seconds"] if moved else None,
        "in_place": moved[0]["in_place"] if moved else None, "load": load_at,
    }


def add_args(parser) -> None:
    parser.add_argument("--deadline", type=int, default=30, help="the drain's deadline, seconds")


def run(args) -> Figure:
    from tests.e2e.ray_nodes import RayNodes
    from tests.e2e.serve_harness import Server

    cluster = RayNodes()
    results = []
    try:
        cluster.start_head(num_cpus=0)
        for name in ("w1", "w2", "w3", "w4"):  # one at a time (FACTS: together they time out)
            cluster.add_workers({name: 1})
        server = Server(Path(tempfile.mkdtemp(prefix="bench-drain-")), ray_address=cluster.address,
                        env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": cluster.token,
                             "BRIGADE_POLL_INTERVAL_S": "0.2", "BRIGADE_RANK_POOL_SIZE": "0"})
        server.start()
        try:
            for mode in MODES:
                results.append(one(server, cluster, mode, args))
                time.sleep(2)
        finally:
            server.stop()
    finally:
        cluster.stop()
    by = {r["mode"]: r for r in results}
    drain, sigterm = by["drain"], by["sigterm"]
    rows = "\n".join(
        f"| {r['mode']} | {r['seconds']:.2f} | {r['with_deadline']:.2f} | {r['redone']} | "
        f"{r['resumed_from']} | {r['restarts']} / {r['preemptions']} | "
        f"{_seconds(r['move_seconds'])} | {r['load']:.1f} |" for r in results)
    body = (
        "| path | notice -> training again (s) | counting the deadline (s) | steps redone | "
        "resumed from | restarts / preemptions | the move itself (s) | load at notice |\n"
        "|---|---:|---:|---:|---:|---|---:|---:|\n" + rows + "\n\n"
        f"A `ray start` cluster on this machine: a head with no CPUs and four worker nodes of one "
        f"CPU each; `brigade serve --ray-address` with `BRIGADE_POLL_INTERVAL_S=0.2`, no rank pool "
        f"(replacements start cold). One job a path: GPT n_layers 2, d_model 64, n_heads 4, "
        f"seq_len 64, 2 workers x 1 CPU spread over two nodes, global batch 8, checkpoint every "
        f"10 steps, the in-memory snapshots automatic. **drain**: rank 1's node drained through "
        f"`POST /v1/cluster/nodes/{{id}}/drain` (the GCS call of `ray drain-node`, reason "
        f"preemption), deadline {args.deadline} s. **sigterm**: SIGTERM to rank 1's process "
        f"(what the node's shutdown sends at the deadline), the node killed once the job left it. "
        f"The SIGTERM path could have had the notice {args.deadline} s earlier: 'counting the "
        f"deadline' adds it.")
    ratio = drain["seconds"] / sigterm["with_deadline"] if sigterm["with_deadline"] else float("nan")
    return Figure(
        name="drain", title=TITLE, command=f"{COMMAND} --deadline {args.deadline}", body=body,
        headline=(f"drain: notice -> training again {drain['seconds']:.2f} s, {drain['redone']} "
                  f"steps redone; SIGTERM only: {sigterm['seconds']:.2f} s after the SIGTERM "
                  f"({sigterm['with_deadline']:.2f} s after the notice it ignored), "
                  f"{sigterm['redone']} redone; {ratio:.2f}x"),
        goals=[
            Goal(f"drain: notice -> training again <= {GOAL_S:g} s", f"{drain['seconds']:.2f} s",
                 drain["seconds"] <= GOAL_S),
            Goal("drain: steps redone 0", str(drain["redone"]), drain["redone"] == 0),
            Goal("drain: moved in place, no restart or preemption",
                 f"in place {drain['in_place']}, restarts {drain['restarts']}, preemptions "
                 f"{drain['preemptions']}",
                 drain["in_place"] is True and drain["restarts"] == drain["preemptions"] == 0),
        ],
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    cli("drain", __doc__, add_args, run)
