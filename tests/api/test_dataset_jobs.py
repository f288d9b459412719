"""`POST /v1/datasets`: a dataset's preparation as a job of kind 'prepare',
run for real by a started supervisor on the session's Ray cluster (two rank
actors tokenizing a file each a round): admitted, followed (one row a file),
its output byte-identical to `data prepare`'s; refused with a 422 naming the
field for inputs outside the tenant's prefix, a glob matching nothing and an
output that holds a dataset; cancellable like any job; named in `after` by
a training job submitted with it, before its dataset exists."""

from __future__ import annotations

import fsspec
import httpx
import pytest

from api.server.app import create_app
from api.client import BrigadeClient
from api.schemas.jobs import JobProgress
from service.states import JobState
from tests.api.conftest import ADMIN_KEY, make_supervisor, printed_id
from tests.api.live_server import LiveServer
from tests.workers.datasets.corpus import write_inputs, write_tokenizer
from workers.datasets.prepare import prepare

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def live(tmp_path_factory, ray_cluster):
    supervisor = make_supervisor(tmp_path_factory.mktemp("datasets"))
    supervisor.start()
    data = f"{supervisor.settings.resolved_data_uri_root}/tenants/admin/data"
    write_tokenizer(f"{data}/tokenizer.json")
    write_inputs(f"{data}/raw", files=3, docs_per_file=80)
    try:
        with LiveServer(create_app(supervisor)) as server, BrigadeClient(server.url, ADMIN_KEY) as client, \
                httpx.Client(base_url=server.url, timeout=30,
                             headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as http:
            yield client, http, data, server.url
    finally:
        supervisor.stop()


def request(data: str, output: str, **extra) -> dict:
    return {"inputs": [f"{data}/raw/*"], "output": f"{data}/{output}",
            "tokenizer": f"{data}/tokenizer.json", "workers": 2, "tokens_per_shard": 3000, **extra}


def files_of(uri: str) -> dict[str, bytes]:
    fs, root = fsspec.core.url_to_fs(uri)
    return {p.rsplit("/", 1)[-1]: fs.cat_file(p) for p in sorted(fs.find(root))}


def test_a_preparation_runs_as_a_job_and_writes_the_same_bytes(live, tmp_path):
    client, http, data, _ = live
    answer = http.post("/v1/datasets", json=request(data, "corpus"))
    assert answer.status_code == 201, answer.text
    job = answer.json()
    assert job["spec"]["kind"] == "prepare" and job["spec"]["train"]["steps"] == 3
    assert [f.rsplit("/", 1)[-1] for f in job["spec"]["prepare"]["inputs"]] == [
        "part-0.jsonl", "part-1.parquet", "part-2.jsonl"]
    states = [e.state for e in client.follow(job["id"]) if isinstance(e, JobProgress)]
    assert states[-1] is JobState.SUCCEEDED, client.get(job["id"]).error
    lines = [line.line for line in client.all_logs(job["id"])]
    assert any(line.startswith("file 3/3 part-2.jsonl: ") for line in lines), lines
    assert [m.step for m in client.metrics(job["id"])] == [1, 2, 3]
    here = f"file://{tmp_path}/here"
    prepare([f"{data}/raw/*"], here, tokenizer=f"{data}/tokenizer.json", workers=0, tokens_per_shard=3000)
    assert files_of(f"{data}/corpus") == files_of(here)

    again = http.post("/v1/datasets", json=request(data, "corpus"))
    assert again.status_code == 422 and again.json()["error"]["field"] == "prepare.output", again.text


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"inputs": ["file:///etc/*"]}, "inputs.0", "data prefix"),
    ({"inputs": ["{data}/raw/nothing-*.jsonl"]}, "inputs", "no input files match"),
    ({"tokenizer": "{data}/raw/part-0.jsonl"}, "prepare.tokenizer", "not a tokenizers JSON file"),
    ({"output": "file:///tmp/elsewhere"}, "prepare.output", "data prefix"),
])
def test_what_cannot_be_prepared_is_422_naming_the_field(live, change, field, words):
    _, http, data, _ = live
    body = request(data, "never") | {k: [x.format(data=data) for x in v] if isinstance(v, list)
                                     else v.format(data=data) for k, v in change.items()}
    answer = http.post("/v1/datasets", json=body)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == field and words in error["message"], error


def test_a_preparation_is_cancelled_like_any_job(live):
    import time

    from api.client import BrigadeError

    client, http, data, _ = live
    write_inputs(f"{data}/big", files=6, docs_per_file=4000)  # long enough to be caught running
    # relative uris: read under the tenant's data prefix, stored whole
    body = {"inputs": ["big/*"], "output": "cancelled", "tokenizer": "tokenizer.json",
            "workers": 2, "tokens_per_shard": 3000}
    job = http.post("/v1/datasets", json=body).json()
    assert job["spec"]["prepare"]["output"] == f"{data}/cancelled", job
    assert job["spec"]["prepare"]["inputs"][0].startswith(f"{data}/big/part-0"), job
    while True:  # a STARTING job cannot be cancelled (409): ask again once it runs
        try:
            client.cancel(job["id"])
            break
        except BrigadeError as e:
            assert e.status == 409, e
            time.sleep(0.05)
    states = [e.state for e in client.follow(job["id"]) if isinstance(e, JobProgress)]
    assert states[-1] is JobState.CANCELLED
    fs, root = fsspec.core.url_to_fs(f"{data}/cancelled")
    assert not fs.exists(f"{root}/index.json")  # a half-written dataset has no index


def test_the_cli_queues_a_preparation_and_follows_it(live):
    from typer.testing import CliRunner

    from api.cli.main import app

    client, _, data, url = live
    result = CliRunner().invoke(app, [
        "data", "prepare", "--service", "-f", "--input", f"{data}/raw/*.jsonl",
        "--output", f"{data}/from-cli", "--tokenizer", f"{data}/tokenizer.json", "--workers", "1",
        "--url", url, "--key", ADMIN_KEY])
    assert result.exit_code == 0, result.output
    job_id = printed_id(result.stdout, "j-")
    assert client.get(job_id).spec.kind == "prepare" and client.get(job_id).state is JobState.SUCCEEDED
    assert "index.json" in files_of(f"{data}/from-cli")


def test_a_token_past_the_vocabulary_fails_the_job_naming_the_shard_without_restarts(live, tmp_path):
    """What only the ranks can see (every id is checked as it is read, not
    at submit) fails the job at once: FAILED, the file named, no restart spent."""
    import hashlib
    import json

    import numpy as np

    client, _, data, _ = live
    uri = f"{data}/bad-ids"
    prepare([f"{data}/raw/*"], uri, tokenizer=f"{data}/tokenizer.json", workers=0)
    directory = uri.removeprefix("file://")
    index = json.loads(open(f"{directory}/index.json").read())
    for shard in index["shards"]:  # sizes and checksums still match: the submit passes
        path = f"{directory}/{shard['file']}"
        blob = np.full(shard["tokens"], 9999, dtype="<u2").tobytes()
        open(path, "wb").write(blob)
        shard["sha256"] = hashlib.sha256(blob).hexdigest()
    open(f"{directory}/index.json", "w").write(json.dumps(index))
    job = client.submit({"name": "bad-ids", "workers": 1, "max_restarts": 3,
                         "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16,
                                   "vocab_size": 512},
                         "data": {"source": "tokens", "uri": uri}, "train": {"steps": 3}})
    states = [e.state for e in client.follow(job.id) if isinstance(e, JobProgress)]
    done = client.get(job.id)
    assert states[-1] is JobState.FAILED and done.restarts == 0, done
    import re

    assert re.search(r"bad-ids/shard-\d{5}-\d{3}\.bin: token id 9999 at token \d+ is >= the "
                     r"vocabulary size", done.error), done.error
    assert done.error.endswith("(not restarted: its data is bad: fix or replace the file named, "
                               "then submit again)"), done.error


WAITING_STATES = ("QUEUED", "STARTING", "RUNNING")


def test_jobs_wait_on_jobs_prepare_then_train_then_fine_tune(live):
    """A chain submitted at once: a training job `after` the preparation of
    the dataset it reads (not there yet at submit: not refused for it), a
    fine-tune from that job's checkpoint (`init.job`, still to run), each
    waiting QUEUED with its reason (the job it waits for, as it is) and no
    expected start, and each starting only after the one it waits on ended
    (the jobs' own events); a job waiting on a cancelled one fails naming it."""
    import time
    from datetime import datetime

    client, http, data, _ = live
    prepare_job = http.post("/v1/datasets", json=request(data, "chained", workers=1)).json()
    model = {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16, "vocab_size": 512}
    spec = {"workers": 1, "model": model, "data": {"source": "tokens", "uri": "chained"},
            "train": {"steps": 2}}
    trained = http.post("/v1/jobs", json={**spec, "name": "trained", "after": [prepare_job["id"]]})
    assert trained.status_code == 201, trained.text
    tuned = http.post("/v1/jobs", json={**spec, "name": "tuned", "train": {"steps": 1},
                                        "init": {"job": trained.json()["id"]}})
    assert tuned.status_code == 201, tuned.text
    blocker = http.post("/v1/jobs", json={**spec, "name": "blocker",
                                          "after": [tuned.json()["id"]]}).json()
    doomed = http.post("/v1/jobs", json={**spec, "name": "doomed", "after": [blocker["id"]]}).json()
    chain = {prepare_job["id"]: None, trained.json()["id"]: prepare_job["id"],
             tuned.json()["id"]: trained.json()["id"]}  # each job: the one it waits on
    seen: dict[str, list[tuple[str, str | None]]] = {job_id: [] for job_id in chain}

    def look() -> dict[str, dict]:
        """Each chained job as it is now, noting each waiting reason of a queued one."""
        views = {job_id: http.get(f"/v1/jobs/{job_id}").json() for job_id in chain}
        for job_id, view in views.items():
            if view["state"] == "QUEUED" and view["waiting"] is not None and \
                    (view["waiting"], view["expected_start"]) not in seen[job_id]:
                seen[job_id].append((view["waiting"], view["expected_start"]))
        return views

    deadline = time.monotonic() + 30
    while (job := http.get(f"/v1/jobs/{doomed['id']}").json())["waiting"] is None:
        assert time.monotonic() < deadline, job
        look()
        time.sleep(0.05)
    assert job["waiting"] == f"waiting for {blocker['id']} (QUEUED)" and job["state"] == "QUEUED"
    assert job["expected_start"] is None and job["expected_start_reason"] in (None, job["waiting"])
    client.cancel(blocker["id"])
    deadline = time.monotonic() + 30
    while (job := http.get(f"/v1/jobs/{doomed['id']}").json())["state"] != "FAILED":
        assert time.monotonic() < deadline, job
        look()
        time.sleep(0.05)
    assert job["error"] == f"dependency {blocker['id']} CANCELLED"

    deadline = time.monotonic() + 180
    while (views := look())[tuned.json()["id"]]["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
        assert time.monotonic() < deadline, views
        time.sleep(0.05)
    for view in views.values():
        assert view["state"] == "SUCCEEDED", view

    def events(job_id: str) -> list[dict]:
        return http.get(f"/v1/jobs/{job_id}/events").json()

    def when(event: dict) -> tuple[int, datetime]:
        return event["id"], datetime.fromisoformat(event["time"])

    def first(job_id: str, state: str) -> dict:
        return next(e for e in events(job_id) if e["to_state"] == state and e["from_state"] != state)

    for job_id, waits_on in chain.items():
        if waits_on is None:
            continue
        # It started after the one it waits on ended: by the events' order and their times.
        ended, began = first(waits_on, "SUCCEEDED"), first(job_id, "STARTING")
        assert when(ended)[0] < when(began)[0] and when(ended)[1] <= when(began)[1], (ended, began)
        # While it waited, its reason named that job, as that job was, and no start was expected.
        reasons = seen[job_id]
        assert reasons, f"{job_id} was never seen waiting"
        allowed = {f"waiting for {waits_on} ({state})" for state in WAITING_STATES}
        assert reasons[0][0] in allowed, reasons
        waits = [i for i, (why, _) in enumerate(reasons) if why in allowed]
        # what follows its dependency's end can only be the cluster's room, never another job
        assert all(why.startswith("capacity: ") for why, _ in reasons[waits[-1] + 1:]), reasons
        assert all(reasons[i][1] is None for i in waits), reasons
        assert len(waits) == waits[-1] + 1, reasons
    for job_id in (blocker["id"], doomed["id"]):  # never started
        assert "STARTING" not in [e["to_state"] for e in events(job_id)]

    tuned_id = tuned.json()["id"]
    reasons = [e["reason"] for e in events(tuned_id)]
    assert (f"init.job {trained.json()['id']} succeeded: the job starts from its latest "
            "committed step, 2") in reasons, reasons
