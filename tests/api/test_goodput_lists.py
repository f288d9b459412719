"""`GET /v1/jobs/goodput` (a page of jobs' goodput in one request) and
`GET /v1/usage/goodput` (the goodput of the caller's jobs over time) through
a real server on a real SQLite file: the list's numbers are the job's own
(`GET /v1/jobs/{id}/goodput`), the buckets add up to what `GET /v1/usage`
says of the same window, and a tenant sees only its own jobs in either.

The jobs' lives are written through the store as the supervisor writes them
(transitions, metrics rows with their `wall_time`), so nothing needs a
cluster: the supervisor is never started."""

from __future__ import annotations

import time

import httpx
import pytest

from api.server.app import create_app
from service.observability.goodput import PHASES
from service.states import JobState as S
from tests.api.conftest import ADMIN_KEY, make_supervisor
from tests.api.live_server import LiveServer
from workers.schema import JobSpec

SPEC = {"name": "lived", "workers": 2, "train": {"steps": 3},
        "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16}}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    control = make_supervisor(tmp_path_factory.mktemp("goodput-lists"))
    with LiveServer(create_app(control)) as live:
        yield live.url, control.store
    control.store.dispose()


def _client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10)


def _lived(store, tenant: str, *, finish: bool) -> str:
    """A job queued a moment, started on 2 workers, three timed steps (with
    data waits and a checkpoint stall), then SUCCEEDED (or left RUNNING)."""
    job, _ = store.create_job(tenant=tenant, name="lived", spec=JobSpec.model_validate(SPEC))
    time.sleep(0.05)
    store.transition(job.id, S.STARTING, reason="admitted", workers=2, attempt=1)
    time.sleep(0.05)
    store.transition(job.id, S.RUNNING, reason="group up")
    for step in (1, 2, 3):
        time.sleep(0.04)
        store.record_metrics(job.id, 1, [{"step": step, "loss": 3.0, "wall_time": time.time(),
                                          "step_time_s": 0.03, "data_wait_s": 0.01,
                                          "checkpoint_stall_s": 0.005 if step == 2 else 0.0}])
    if finish:
        time.sleep(0.02)
        store.transition(job.id, S.SUCCEEDED, reason="done", step=3)
    return job.id


@pytest.fixture(scope="module")
def jobs(served):
    """Tenant a's finished and running jobs, tenant b's finished one, and both keys."""
    url, store = served
    _, key_a = store.tenants.create("gp-a")
    _, key_b = store.tenants.create("gp-b")
    return {"done": _lived(store, "gp-a", finish=True), "running": _lived(store, "gp-a", finish=False),
            "other": _lived(store, "gp-b", finish=True), "key_a": key_a, "key_b": key_b}


def test_a_lists_goodput_is_each_jobs_own(served, jobs):
    url, _ = served
    with _client(url, jobs["key_a"]) as a:
        asked = [jobs["done"], jobs["running"], jobs["other"], "j-000000000000"]
        listed = a.get("/v1/jobs/goodput", params={"id": ",".join(asked)})
        assert listed.status_code == 200, listed.text
        items = {i["id"]: i for i in listed.json()["items"]}
        # b's job and an unknown id are left out alike
        assert list(items) == [jobs["done"], jobs["running"]]
        own = a.get(f"/v1/jobs/{jobs['done']}/goodput").json()
        done = items[jobs["done"]]
        assert done["wall_s"] == pytest.approx(own["wall_s"], abs=1e-9)
        assert done["goodput"] == pytest.approx(own["goodput"], abs=1e-9)
        assert done["phases"] == pytest.approx(own["phases"], abs=1e-9)
        assert done["phases"]["data_wait"] > 0 and done["phases"]["checkpoint_stall"] > 0
        assert 0 < done["goodput"] < 1
        running = items[jobs["running"]]
        assert sum(running["phases"].values()) == pytest.approx(running["wall_s"], rel=1e-6)
        # asked again (a finished job's answer is kept): the same numbers
        again = a.get("/v1/jobs/goodput", params=[("id", jobs["done"])]).json()["items"]
        assert again == [done]
    with _client(url, ADMIN_KEY) as admin:
        everyone = admin.get("/v1/jobs/goodput", params={"id": f"{jobs['done']},{jobs['other']}"})
        assert [i["id"] for i in everyone.json()["items"]] == [jobs["done"], jobs["other"]]


def test_a_lists_goodput_refuses_bad_ids(served, jobs):
    url, _ = served
    with _client(url, jobs["key_a"]) as a:
        for params in ({"id": ",".join(f"j-{i:012d}" for i in range(501))}, {"id": "j" * 65}, {}):
            refused = a.get("/v1/jobs/goodput", params=params)
            assert refused.status_code == 422, (params, refused.text)
            assert "id" in refused.json()["error"]["message"], refused.text


def test_goodput_over_time_adds_up_to_the_windows_usage(served, jobs):
    url, _ = served
    with _client(url, jobs["key_b"]) as b:  # b's only job is finished: both answers hold still
        over = b.get("/v1/usage/goodput", params={"window_s": 600, "buckets": 30})
        usage = b.get("/v1/usage", params={"window_s": 600}).json()["tenants"][0]
        assert over.status_code == 200, over.text
        body = over.json()
        assert body["tenant"] == "gp-b" and len(body["buckets"]) == 30
        starts = [bucket["start"] for bucket in body["buckets"]]
        assert starts == sorted(starts) and body["buckets"][-1]["end"] == body["until"]
        for phase in PHASES:
            total = sum(bucket["phases"][phase] for bucket in body["buckets"])
            assert total == pytest.approx(usage["phases"][phase], rel=1e-6, abs=1e-9), phase
        held = [bk for bk in body["buckets"] if bk["goodput"] is not None]
        assert held and all(0 <= bk["goodput"] <= 1 for bk in held)
        assert body["buckets"][-1]["phases"]["training"] > 0  # the job ran just now
        assert all(bk["goodput"] is None for bk in body["buckets"][:-2])  # nothing before it

        # b sees nothing of a's jobs, and may not ask for a's
        assert b.get("/v1/usage/goodput", params={"tenant": "gp-a"}).status_code == 403
    with _client(url, ADMIN_KEY) as admin:
        everyone = admin.get("/v1/usage/goodput", params={"window_s": 600, "buckets": 30}).json()
        assert everyone["tenant"] is None
        assert (sum(bk["phases"]["training"] for bk in everyone["buckets"])
                > sum(bk["phases"]["training"] for bk in body["buckets"]))


@pytest.mark.parametrize(("params", "field"), [({"buckets": 0}, "buckets"), ({"buckets": 201}, "buckets"),
                                               ({"window_s": 0}, "window_s"),
                                               ({"window_s": "nan"}, "window_s")])
def test_goodput_over_time_refuses_bad_queries(served, jobs, params, field):
    url, _ = served
    with _client(url, jobs["key_a"]) as a:
        refused = a.get("/v1/usage/goodput", params=params)
        assert refused.status_code == 422, refused.text
        assert field in refused.json()["error"]["message"], refused.text
