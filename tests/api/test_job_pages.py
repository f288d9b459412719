"""`GET /v1/jobs` and `GET /v1/jobs/{id}` through a real server on a real
SQLite file: a page kept by the API (`api.server.job_json.JobPages`) is never
answered after one of its jobs changed, however the change was made; and the
event loop's reads never wait on the pool the threads share.

Its own server, not the Ray-backed one of conftest: nothing here needs a
cluster (the supervisor is never started)."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack

import httpx
import pytest

from api.server.app import create_app
from service.states import JobState as S
from service.store import JobStore
from tests.api.conftest import ADMIN_KEY, make_supervisor
from tests.api.live_server import LiveServer

SPEC = {"name": "paged", "workers": 1, "train": {"steps": 10},
        "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16}}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(server URL, its store, a second store on the same file: another process)."""
    control = make_supervisor(tmp_path_factory.mktemp("pages"))
    other = JobStore(control.store.url)
    with LiveServer(create_app(control)) as live:
        yield live.url, control.store, other
    other.dispose()
    control.store.dispose()


def _client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=5)


def _submit(store, tenant: str, name: str):
    from workers.schema import JobSpec

    job, _ = store.create_job(tenant=tenant, name=name, spec=JobSpec.model_validate(SPEC))
    return job


def _listed(client: httpx.Client) -> dict[str, str]:
    answer = client.get("/v1/jobs")
    assert answer.status_code == 200, answer.text
    return {job["id"]: job["state"] for job in answer.json()["items"]}


def test_a_kept_page_shows_every_change_in_the_very_next_get(served):
    url, store, other = served
    _, key = store.tenants.create("paged")
    _, other_key = store.tenants.create("elsewhere")
    first = _submit(store, "paged", "first")
    with _client(url, key) as tenant, _client(url, ADMIN_KEY) as admin:
        assert _listed(tenant) == {first.id: "QUEUED"}
        assert _listed(tenant) == {first.id: "QUEUED"}  # answered from the kept page
        everyone = _listed(admin)

        other.transition(first.id, S.CANCELLED, reason="another process")  # a state change
        assert _listed(tenant) == {first.id: "CANCELLED"}

        second = _submit(other, "paged", "second")  # a new job
        assert _listed(tenant) == {first.id: "CANCELLED", second.id: "QUEUED"}

        other.update_job(second.id, step=4)  # a field the page shows, not the state
        steps = {j["id"]: j["step"] for j in tenant.get("/v1/jobs").json()["items"]}
        assert steps[second.id] == 4
        other.update_job(second.id, latest_loss=3.25)  # the newest loss, in the list itself
        items = {j["id"]: j for j in tenant.get("/v1/jobs").json()["items"]}
        assert items[second.id]["latest_loss"] == 3.25 and items[first.id]["latest_loss"] is None
        assert items[second.id]["spec"]["kind"] == "train"  # the list's kind column
        other.record_recovery(second.id, ranks=[1], from_step=4, to_step=4, seconds=0.5,
                              in_place=True, reason="rank 1's node gone")  # a count, and an event
        items = {j["id"]: j for j in tenant.get("/v1/jobs").json()["items"]}
        assert items[second.id]["recoveries"] == 1 and items[second.id]["restarts"] == 0
        event = tenant.get(f"/v1/jobs/{second.id}/events").json()[-1]
        assert (event["kind"], event["detail"]["in_place"], event["detail"]["to_step"]) == (
            "recovery", True, 4)
        assert tenant.get(f"/v1/jobs/{second.id}/events").json()[0]["kind"] is None

        other.delete_job(first.id)  # a deleted job
        assert _listed(tenant) == {second.id: "QUEUED"}
        assert tenant.get("/v1/jobs").json()["total"] == 1

        theirs = _submit(other, "elsewhere", "theirs")  # another tenant's write
        assert _listed(tenant) == {second.id: "QUEUED"}  # not on this tenant's page
        with _client(url, other_key) as them:
            assert _listed(them) == {theirs.id: "QUEUED"}
        assert theirs.id in _listed(admin) and first.id not in _listed(admin)
        assert _listed(admin) != everyone

        # the same query in another shape (a filter) is its own page, just as fresh
        other.transition(second.id, S.CANCELLED, reason="another process")
        assert tenant.get("/v1/jobs", params={"state": "QUEUED"}).json()["items"] == []
        assert _listed(tenant) == {second.id: "CANCELLED"}


def test_two_servers_in_one_process_each_answer_their_own_databases_page(tmp_path):
    """A kept page's version counts one database's changes: two stores each at
    version 1 must not answer each other's page (the pages are each app's own)."""
    pages = {}
    with ExitStack() as stack:
        for name in ("in-a", "in-b"):
            control = make_supervisor(tmp_path / name)
            stack.callback(control.store.dispose)
            _submit(control.store, "admin", name)  # admin's version 1 in both
            live = stack.enter_context(LiveServer(create_app(control)))
            admin = stack.enter_context(_client(live.url, ADMIN_KEY))
            pages[name] = admin
        for _ in range(2):  # the first read, then the kept page
            for name, admin in pages.items():
                assert [j["name"] for j in admin.get("/v1/jobs").json()["items"]] == [name]


def test_the_event_loop_answers_with_every_pooled_connection_held_by_threads(served):
    url, store, _ = served
    job = _submit(store, "admin", "pool-held")
    pool = store._reader.pool  # the pool the thread-pool routes (the writes) share
    held, release = threading.Barrier(pool.size() + pool._max_overflow + 1), threading.Event()

    def hold() -> None:
        with store._reader.connect():
            held.wait()
            release.wait(30)

    threads = [threading.Thread(target=hold, daemon=True) for _ in range(held.parties - 1)]
    for thread in threads:
        thread.start()
    try:
        held.wait(10)
        assert pool.checkedout() == pool.size() + pool._max_overflow  # none left to lend
        with _client(url, ADMIN_KEY) as admin:
            started = time.monotonic()
            one = admin.get(f"/v1/jobs/{job.id}")
            page = admin.get("/v1/jobs", params={"name": "pool-held"})
            took = time.monotonic() - started
        assert one.status_code == 200 and one.json()["id"] == job.id
        assert page.status_code == 200 and [j["id"] for j in page.json()["items"]] == [job.id]
        assert took < 2.0  # the pool's wait for a connection is 30 s
    finally:
        release.set()
        for thread in threads:
            thread.join(10)


def test_a_preparations_page_is_its_files_not_a_models_curves(served):
    from workers.schema import JobSpec

    url, store, _ = served
    spec = JobSpec.model_validate({
        "name": "prep", "kind": "prepare", "workers": 1, "model": {},
        "train": {"steps": 2, "global_batch_size": 8}, "checkpoint": {"every_steps": 0},
        "prepare": {"inputs": ["file:///d/a.jsonl", "file:///d/b.jsonl"], "output": "file:///d/out",
                    "train_vocab_size": 512}})
    prep, _ = store.create_job(tenant="admin", name="prep", spec=spec)
    train = _submit(store, "admin", "train")
    with httpx.Client(base_url=url, timeout=5) as browser:
        browser.post("/ui/session", json={"api_key": ADMIN_KEY}).raise_for_status()
        page = browser.get(f"/jobs/{prep.id}").text
        assert 'data-kind="prepare"' in page and 'id="prepare-files"' in page
        assert "chart-memory" not in page and 'id="checkpoints"' not in page and 'id="exports"' not in page
        page = browser.get(f"/jobs/{train.id}").text
        assert 'data-kind="train"' in page and "chart-memory" in page and "prepare-files" not in page


def test_a_sweeps_trials_list_by_sweep_in_the_api_the_client_and_the_cli(served, tmp_path):
    import json

    from typer.testing import CliRunner

    from api.cli.main import app
    from api.client import BrigadeClient
    from workers.schema import JobSpec

    url, store, other = served
    _, key = store.tenants.create("sweeper")
    spec = JobSpec.model_validate(SPEC)
    alone = _submit(store, "sweeper", "alone")
    trials = [store.create_job(tenant="sweeper", name=f"lr-t{k}", spec=spec,
                               sweep="s-0000000000a1")[0] for k in range(2)]
    admins, _ = store.create_job(tenant="admin", name="lr-t0", spec=spec, sweep="s-0000000000a1")
    with _client(url, key) as tenant, _client(url, ADMIN_KEY) as admin:
        listed = tenant.get("/v1/jobs", params={"sweep": "s-0000000000a1"}).json()
        assert [j["id"] for j in listed["items"]] == [trials[1].id, trials[0].id]
        assert listed["total"] == 2 and {j["sweep"] for j in listed["items"]} == {"s-0000000000a1"}
        assert tenant.get(f"/v1/jobs/{trials[0].id}").json()["sweep"] == "s-0000000000a1"
        assert tenant.get(f"/v1/jobs/{alone.id}").json()["sweep"] is None
        everything = tenant.get("/v1/jobs").json()["items"]  # another page than the sweep's
        assert len(everything) == 3 and alone.id in {j["id"] for j in everything}
        assert tenant.get("/v1/jobs", params={"sweep": "s-0000000000b2"}).json()["items"] == []
        assert admin.get("/v1/jobs", params={"sweep": "s-0000000000a1"}).json()["total"] == 3
        # a trial that changed shows on the sweep's kept page at once
        other.transition(trials[0].id, S.PRUNED, reason="pruned at step 0: test")
        states = {j["id"]: j["state"] for j in tenant.get(
            "/v1/jobs", params={"sweep": "s-0000000000a1"}).json()["items"]}
        assert states == {trials[0].id: "PRUNED", trials[1].id: "QUEUED"}
        too_long = tenant.get("/v1/jobs", params={"sweep": "s" * 33})
        assert too_long.status_code == 422 and "sweep" in too_long.text
    with BrigadeClient(url, key) as client:
        page = client.jobs(sweep="s-0000000000a1", state="PRUNED")
        assert [j.id for j in page.items] == [trials[0].id] and page.items[0].sweep == "s-0000000000a1"
    shown = CliRunner().invoke(app, ["jobs", "--sweep", "s-0000000000a1", "-o", "json"], env={
        "BRIGADE_URL": url, "BRIGADE_API_KEY": key, "BRIGADE_CONFIG": str(tmp_path / "none.yaml")})
    assert shown.exit_code == 0, shown.output
    assert {j["id"] for j in json.loads(shown.stdout)["items"]} == {t.id for t in trials}
    assert admins.id not in shown.stdout
