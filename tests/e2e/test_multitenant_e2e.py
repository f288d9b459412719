"""Tenants sharing one cluster, over real HTTP against `brigade serve` (a
local Ray head of 4 CPUs): a high-priority job preempts a low-priority elastic
one, which resumes at another size on the same loss curve; and fair share
between tenants of weights 2:1:1."""

from __future__ import annotations

import json
import time
from datetime import datetime

import httpx
import pytest

from tests.e2e.serve_harness import Server, losses_by_step, spec, uninterrupted

GRACE_S = 60
STEPS_A = 90  # the preempted elastic job: past step 15 when the urgent one comes, and long after
pytestmark = pytest.mark.timeout(900)  # whole flows on a 2-core machine


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_ray):
    srv = Server(tmp_path_factory.mktemp("tenants"), ray_address=shared_ray, shared=True, env={
        "BRIGADE_PREEMPTION_GRACE_S": str(GRACE_S),
        "BRIGADE_RATE_LIMIT_PER_S": "1000", "BRIGADE_RATE_LIMIT_BURST": "1000",
        # Fair share is measured in worker-seconds from STARTING to SUCCEEDED: with a warm
        # rank pool some 2-second jobs start warm and others cold (the pool refills behind
        # them), noise of the size of the share itself. Every job here starts cold alike.
        "BRIGADE_RANK_POOL_SIZE": "0",
    }).start()
    yield srv
    srv.stop()


class Tenant(Server):
    """The same server, spoken to with a new tenant's key (a tenant sees
    only its own jobs)."""

    def __init__(self, server: Server, name: str, **fields):
        r = server.http.post("/v1/tenants", json={"name": name, **fields})
        assert r.status_code == 201, r.text
        self.__dict__.update(server.__dict__)
        self.name = name
        self.http = httpx.Client(base_url=server.url, timeout=30,
                                 headers={"Authorization": f"Bearer {r.json()['api_key']}"})


def events(server: Server, job_id: str) -> list[dict]:
    return server.get(f"/v1/jobs/{job_id}/events")


def at(event: dict) -> float:
    return datetime.fromisoformat(event["time"]).timestamp()


def test_a_high_priority_job_preempts_an_elastic_one_which_resumes_on_its_loss_curve(server):
    a = Tenant(server, "team-a", max_priority=10)
    b = Tenant(server, "team-b", max_priority=100)
    elastic = spec(STEPS_A, workers={"min": 2, "max": 4}, priority=5)
    job_a = a.submit(elastic)
    a.wait(job_a["id"], lambda j: j["state"] == "RUNNING" and j["step"] >= 15)
    assert a.job(job_a["id"])["workers"] == 4  # the largest size that fits

    job_b = b.submit(spec(30, workers=2, priority=50))
    done_b = b.wait(job_b["id"], lambda j: j["state"] == "SUCCEEDED")
    done_a = a.wait(job_a["id"], lambda j: j["state"] == "SUCCEEDED")

    story = events(a, job_a["id"])
    told = json.dumps(story, indent=1)
    preempted = [e for e in story if e["to_state"] == "PREEMPTING"]
    assert len(preempted) == 1, told
    assert f"preempted by job {job_b['id']} of tenant team-b" in preempted[0]["reason"], told
    requeued = next(e for e in story if e["from_state"] == "PREEMPTING")
    assert requeued["to_state"] == "QUEUED", told
    assert at(requeued) - at(preempted[0]) < GRACE_S, told  # checkpointed and stopped in time
    assert "checkpointed at step" in requeued["reason"], told
    restart = [e for e in story if e["to_state"] == "STARTING"][1]
    assert "resumes from checkpoint step" in restart["reason"], told
    assert done_a["preemptions"] == 1 and done_a["restarts"] == 0, told  # not a failure
    assert done_a["workers"] in (2, 4), told  # resumed within min..max
    # B ran while A had given its workers back.
    b_story = events(b, job_b["id"])
    b_start = next(e for e in b_story if e["to_state"] == "STARTING")
    assert at(b_start) >= at(requeued), (told, b_story)
    assert done_b["step"] == 30

    # A's curve, across its preemption and resize, is its uninterrupted run's.
    got, want = losses_by_step(a, job_a["id"]), uninterrupted(elastic)
    assert sorted(got) == sorted(want) == list(range(1, STEPS_A + 1))
    worst = max(abs(got[s] - want[s]) / abs(want[s]) for s in want)
    assert worst < 1e-4, f"largest relative loss difference {worst:.2e}"


def test_a_preempted_job_that_overstays_its_grace_period_is_killed_and_requeued(server):
    low = Tenant(server, "slow-to-leave", max_priority=10)
    high = Tenant(server, "urgent", max_priority=100)
    # 0.05 s of grace, and a model whose step and checkpoint take longer than
    # the runner's polls (0.2 s): the ranks are killed before they can stop.
    slow = spec(40, workers={"min": 2, "max": 4}, priority=1, preemption_grace_s=0.05)
    slow["model"] = {"n_layers": 4, "d_model": 256, "n_heads": 4, "seq_len": 64}
    victim = low.submit(slow)
    low.wait(victim["id"], lambda j: j["state"] == "RUNNING"
             and (j["latest_checkpoint"] or {}).get("step", 0) >= 10)
    urgent = high.submit(spec(20, workers=2, priority=90))
    high.wait(urgent["id"], lambda j: j["state"] == "SUCCEEDED")
    done = low.wait(victim["id"], lambda j: j["state"] == "SUCCEEDED")
    story = events(low, victim["id"])
    told = json.dumps(story, indent=1)
    requeued = next(e for e in story if e["from_state"] == "PREEMPTING")
    assert requeued["to_state"] == "QUEUED", told
    assert "grace period of 0.05 s" in requeued["reason"], told
    assert "resumes from checkpoint step" in requeued["reason"], told
    assert done["preemptions"] == 1 and done["restarts"] == 0 and done["step"] == 40, told
    steps = sorted(losses_by_step(low, victim["id"]))
    assert steps == list(range(1, 41))  # steps after the checkpoint ran again, once each


def received_worker_seconds(jobs: dict[Tenant, list[str]]) -> dict[str, float]:
    """Each tenant's worker-seconds while every tenant still had work queued
    or running: up to the moment the first tenant's last job ended."""
    spans: dict[str, list[tuple[float, float, int]]] = {}
    for tenant, ids in jobs.items():
        for job_id in ids:
            story = events(tenant, job_id)
            job = tenant.job(job_id)
            start = at(next(e for e in story if e["to_state"] == "STARTING"))
            end = at(next(e for e in story if e["to_state"] == "SUCCEEDED"))
            spans.setdefault(tenant.name, []).append((start, end, job["workers"]))
    t0 = min(s for runs in spans.values() for s, _, _ in runs)
    t1 = min(max(e for _, e, _ in runs) for runs in spans.values())
    return {tenant: sum(max(0.0, min(e, t1) - max(s, t0)) * n for s, e, n in runs)
            for tenant, runs in spans.items()}


def run_backlogs(backlogs: dict[Tenant, int]) -> dict[Tenant, list[str]]:
    """Each tenant queues its count of one-worker jobs of 2 cpus (the cluster
    fits two at a time), interleaved; wait for all to succeed."""
    small = spec(12, workers=1, resources_per_worker={"cpu": 2},
                 checkpoint={"every_steps": 0, "keep_last": 1})
    jobs: dict[Tenant, list[str]] = {t: [] for t in backlogs}
    for i in range(max(backlogs.values())):
        for tenant, count in backlogs.items():
            if i < count:
                jobs[tenant].append(tenant.submit(small)["id"])
    for tenant, ids in jobs.items():
        for job_id in ids:
            tenant.wait(job_id, lambda j: j["state"] == "SUCCEEDED", timeout_s=400)
    return jobs


def test_tenants_share_the_cluster_by_their_weights(server):
    # Weights 2:1:1 over two slots: the heavy tenant holds one slot throughout
    # and the two light ones take turns on the other, so one run shows both the
    # 2:1 share and the equal share of equal weights. Shares are counted until
    # the first tenant runs out of work (the heavy one, after its 8 jobs): each
    # light tenant has one job more than its 4 in that time, so both stay backlogged.
    heavy = Tenant(server, "heavy", weight=2)
    light = [Tenant(server, "light-1", weight=1), Tenant(server, "light-2", weight=1)]
    got = received_worker_seconds(run_backlogs({heavy: 8, light[0]: 5, light[1]: 5}))
    one, two = got["light-1"], got["light-2"]
    assert abs(one - two) / max(one, two) < 0.25, got
    ratio = got["heavy"] / ((one + two) / 2)
    assert 1.5 <= ratio <= 2.5, got
