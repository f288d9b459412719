"""Sweeps over real HTTP: the 422s that name the field, 404 across tenants on
every route (the admin sees all), idempotency and the audit trail, and the
README's example sweep (docs/examples/sweep-lr.yaml: TPE, ASHA) run for real
on the session's Ray cluster, driven and read through the `brigade sweep`
commands. One started supervisor and one server for the module."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from api.server.app import create_app
from api.cli.main import app
from tests.api.conftest import ADMIN_KEY, make_supervisor, printed_id
from tests.api.live_server import LiveServer

pytestmark = pytest.mark.ray

TRIAL = {
    "workers": 1, "resources_per_worker": {"cpu": 1},
    "model": {"n_layers": 1, "d_model": 16, "n_heads": 2, "seq_len": 16},
    "train": {"steps": 3, "global_batch_size": 2},
    "checkpoint": {"every_steps": 3, "keep_last": 1},
}
SWEEP = {
    "name": "lr", "base": TRIAL, "space": {"train.lr": {"grid": [0.001, 0.01]}},
    "sampler": "grid", "objective": {"metric": "loss", "mode": "min"},
    "max_trials": 2, "max_concurrent": 1,
}
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "sweep-lr.yaml"


@pytest.fixture(scope="module")
def server(tmp_path_factory, ray_cluster):
    supervisor = make_supervisor(tmp_path_factory.mktemp("sweeps"), export_on_success="")
    supervisor.start()
    try:
        with LiveServer(create_app(supervisor)) as live:
            yield live
    finally:
        supervisor.stop()
        supervisor.store.dispose()


@pytest.fixture(scope="module")
def keys(server):
    """Two tenants' API keys."""
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as admin:
        return {name: admin.post("/v1/tenants", json={"name": name}).json()["api_key"]
                for name in ("sweep-a", "sweep-b")}


def wait_until_final(http: httpx.Client, sweep_id: str, timeout_s: float = 180.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while (view := http.get(f"/v1/sweeps/{sweep_id}").json())["state"] not in FINAL:
        assert time.monotonic() < deadline, view
        time.sleep(0.2)
    return view


def cancel_and_wait(http: httpx.Client, job_id: str, timeout_s: float = 60.0) -> None:
    """Cancel a job and wait for its workers to be given back (the module leaves Ray as found)."""
    http.post(f"/v1/jobs/{job_id}/cancel")
    deadline = time.monotonic() + timeout_s
    while (job := http.get(f"/v1/jobs/{job_id}").json())["state"] not in FINAL:
        assert time.monotonic() < deadline, job
        time.sleep(0.2)


def jobs_ended(http: httpx.Client, sweep_id: str, timeout_s: float = 60.0) -> None:
    """Wait for every job of the sweep to end: a cancelled sweep says CANCELLED
    at once, while its trials' jobs still give their workers back (CANCELLING)."""
    deadline = time.monotonic() + timeout_s
    while live := [j for j in http.get("/v1/jobs", params={"sweep": sweep_id}).json()["items"]
                   if j["state"] not in (*FINAL, "PRUNED")]:
        assert time.monotonic() < deadline, live
        time.sleep(0.2)


def refused(http: httpx.Client, body: dict) -> dict:
    r = http.post("/v1/sweeps", json=body)
    assert r.status_code == 422, r.text
    return r.json()["error"]


def test_refusals_name_the_field(http):
    error = refused(http, SWEEP | {"max_trails": 3})
    assert error["field"] == "max_trails" and "max_trials" in error["message"]
    error = refused(http, SWEEP | {"space": {"train.lr": {"uniform": ["low", 0.1]}}})
    assert error["field"].startswith("space.train.lr"), error
    error = refused(http, SWEEP | {"base": TRIAL | {"train": {"steps": 0}}})
    assert error["field"] == "base.train.steps" and "greater than or equal to 1" in error["message"]
    error = refused(http, SWEEP | {"base": TRIAL | {"train": {"steps": 3, "stepz": 1}}})
    assert error["field"] == "base.train.stepz", error
    error = refused(http, SWEEP | {"space": {"train.nonsense": {"grid": [1, 2]}}})
    assert error["field"] == "space.train.nonsense", error
    assert "train.nonsense" in error["message"], error
    error = refused(http, SWEEP | {"space": {"train.weight_decy": {"grid": [0.0, 0.1]}}})
    assert error["field"] == "space.train.weight_decy", error
    assert "did you mean train.weight_decay?" in error["message"], error  # as a job's field does
    assert http.get("/v1/sweeps?state=NONSENSE").status_code == 422


def test_another_tenant_gets_404_on_every_route_and_the_admin_sees_all(server, keys, as_key, http):
    a, b = as_key(keys["sweep-a"]), as_key(keys["sweep-b"])
    # its trial would wait for a job that never ends: the sweep stays QUEUED
    blocker = a.post("/v1/jobs", json=TRIAL | {"name": "blocker", "train": {"steps": 10_000}})
    made = a.post("/v1/sweeps", json=SWEEP | {"name": "mine", "after": [blocker.json()["id"]]})
    assert made.status_code == 201, made.text
    sweep = made.json()
    assert (sweep["tenant"], sweep["state"], sweep["counts"]["total"]) == ("sweep-a", "QUEUED", 0)
    sweep_id = sweep["id"]

    for method, path in (("GET", f"/v1/sweeps/{sweep_id}"), ("POST", f"/v1/sweeps/{sweep_id}/cancel"),
                         ("DELETE", f"/v1/sweeps/{sweep_id}"), ("GET", "/v1/sweeps/nope"),
                         ("GET", "/v1/sweeps/not%20an%20id")):
        r = b.request(method, path)
        assert r.status_code == 404 and "not found" in r.json()["error"]["message"], (path, r.text)
    assert sweep_id not in [s["id"] for s in b.get("/v1/sweeps").json()["sweeps"]]
    assert b.get("/v1/sweeps", params={"tenant": "sweep-a"}).status_code == 403

    assert [s["id"] for s in a.get("/v1/sweeps").json()["sweeps"]] == [sweep_id]
    assert http.get(f"/v1/sweeps/{sweep_id}").json()["tenant"] == "sweep-a"
    assert sweep_id in [s["id"] for s in http.get("/v1/sweeps").json()["sweeps"]]
    listed = http.get("/v1/sweeps", params={"tenant": "sweep-a", "state": "queued"}).json()["sweeps"]
    assert [s["id"] for s in listed] == [sweep_id] and "trials" not in listed[0]
    assert http.get("/v1/sweeps", params={"tenant": "sweep-b"}).json()["sweeps"] == []

    deleting = a.delete(f"/v1/sweeps/{sweep_id}")
    assert deleting.status_code == 409 and deleting.json()["error"]["field"] == "state"
    cancelled = http.post(f"/v1/sweeps/{sweep_id}/cancel")  # the admin may
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "CANCELLED"
    assert a.post(f"/v1/sweeps/{sweep_id}/cancel").json()["state"] == "CANCELLED"  # idempotent
    assert a.delete(f"/v1/sweeps/{sweep_id}").status_code == 204
    assert a.get(f"/v1/sweeps/{sweep_id}").status_code == 404
    cancel_and_wait(a, blocker.json()['id'])

    actions = [(e["action"], e["actor"]) for e in http.get(
        "/v1/audit", params={"target": sweep_id}).json()["items"]]
    assert actions == [("sweep.delete", "sweep-a"), ("sweep.cancel", "sweep-a"),
                       ("sweep.cancel", "admin"), ("sweep.submit", "sweep-a")]


def test_a_retried_submit_returns_the_same_sweep(http):
    body = SWEEP | {"name": "retried", "after": ["j-nonexistent"]}
    assert http.post("/v1/sweeps", json=body).json()["error"]["field"] == "after.0"
    # its trials wait for a job that does not end before the test cancels it
    blocker = http.post("/v1/jobs", json=TRIAL | {"name": "blocker", "train": {"steps": 10_000}})
    body = SWEEP | {"name": "retried", "after": [blocker.json()["id"]], "sampler": "random",
                    "space": {"train.lr": {"uniform": [0.001, 0.01]}}, "max_trials": 1}
    first = http.post("/v1/sweeps", json=body, headers={"Idempotency-Key": "k-1"})
    again = http.post("/v1/sweeps", json=body, headers={"Idempotency-Key": "k-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    other = http.post("/v1/sweeps", json=body, headers={"Idempotency-Key": "k-2"})
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    for sweep in (first.json()["id"], other.json()["id"]):
        assert http.post(f"/v1/sweeps/{sweep}/cancel").json()["state"] == "CANCELLED"
    cancel_and_wait(http, blocker.json()["id"])


def test_a_value_the_tenant_may_not_use_refuses_the_sweep_naming_it(server, http, as_key):
    """Each value of a grid or a choice and both bounds of a range go through a
    job's submit checks at submit: a 422 at `space.<field>` naming the value,
    rather than a sweep whose every trial is refused one by one."""
    made = http.post("/v1/tenants", json={"name": "sweep-c", "max_priority": 10}).json()
    c, other = as_key(made["api_key"]), as_key(http.post("/v1/tenants", json={"name": "sweep-d"})
                                               .json()["api_key"])
    theirs = other.post("/v1/jobs", json=TRIAL | {"name": "theirs"}).json()["id"]
    cancel_and_wait(other, theirs)
    llama = TRIAL | {"model": {"family": "llama", "n_layers": 1, "d_model": 16, "n_heads": 2,
                               "seq_len": 16}}

    def refused(body: dict, field: str) -> str:
        r = c.post("/v1/sweeps", json=SWEEP | {"sampler": "random"} | body)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["field"] == field, r.text
        return r.json()["error"]["message"]

    assert refused({"space": {"priority": {"choice": [5, 99]}}}, "space.priority") == (
        "space.priority: choice value 99 is refused: priority: priority 99 is above tenant "
        "sweep-c's max_priority 10")
    assert refused({"space": {"priority": {"int": [0, 11]}}}, "space.priority").startswith(
        "space.priority: int bound 11 is refused: priority: priority 11 is above")
    assert refused({"base": llama, "space": {"init.uri": {"grid": ["file:///etc/passwd"]}}},
                   "space.init.uri").startswith(
        "space.init.uri: grid value 'file:///etc/passwd' is refused: init.uri: init.uri must lie "
        "under this tenant's data prefix")
    assert refused({"space": {"init.job": {"choice": [theirs]}}}, "space.init.job") == (
        f"space.init.job: choice value {theirs!r} is refused: init.job: job {theirs!r} not found")
    assert refused({"space": {"train.steps": {"int": [-3, -1]}}}, "space.train.steps").startswith(
        "space.train.steps: int bound -3 is refused: train.steps: Input should be greater than or "
        "equal to 1")
    # jobs of another tenant in `after`, or in the base, the same way
    assert refused({"after": [theirs]}, "after.0") == f"after.0: job {theirs!r} not found"
    assert refused({"base": TRIAL | {"init": {"job": theirs}}}, "base.init.job") == (
        f"base.init.job: no job {theirs} of this tenant")
    assert c.get("/v1/sweeps").json()["sweeps"] == []
    # what the tenant may use is accepted (its ceiling included); its trials wait on a job of its own
    mine = c.post("/v1/jobs", json=TRIAL | {"name": "mine", "train": {"steps": 10_000}}).json()["id"]
    ok = c.post("/v1/sweeps", json=SWEEP | {"name": "fine", "after": [mine], "space": {
        "priority": {"choice": [0, 10]}, "train.lr": {"grid": [0.001, 0.01]}}})
    assert ok.status_code == 201, ok.text
    assert c.post(f"/v1/sweeps/{ok.json()['id']}/cancel").json()["state"] == "CANCELLED"
    cancel_and_wait(c, mine)


def test_values_refused_only_together_are_a_failed_trial(http):
    """Every value passes alone (d_model 18 and 22 with the base's 2 heads, 4 heads
    with its d_model 16); together they are refused: each trial is FAILED with the
    422's message, no job is made, and the sweep ends (FAILED: every trial failed)."""
    body = SWEEP | {"name": "bad-point", "space": {"model.d_model": {"grid": [18, 22]},
                                                   "model.n_heads": {"grid": [4]}}}
    made = http.post("/v1/sweeps", json=body)
    assert made.status_code == 201, made.text
    view = wait_until_final(http, made.json()["id"], timeout_s=60)
    assert view["state"] == "FAILED" and view["error"], view
    assert [t["state"] for t in view["trials"]] == ["FAILED", "FAILED"]
    for trial in view["trials"]:
        assert trial["job"] is None and trial["params"]["model.n_heads"] == 4
        assert "model.d_model" in trial["error"] and "divisible by model.n_heads (4)" in trial["error"]
    assert view["best"] is None


def test_the_example_sweep_through_the_cli(server, http, tmp_path, monkeypatch):
    """docs/examples/sweep-lr.yaml as the README runs it: `brigade sweep
    submit -F` follows its 6 trials (TPE, 2 at a time) on Ray to SUCCEEDED;
    each trial is a job of the sweep's (`GET /v1/jobs?sweep=ID`) that ended
    SUCCEEDED at its last step or PRUNED by ASHA at a rung; `brigade sweep
    best` prints the best succeeded trial's params as YAML with its job.

    Which trial ASHA prunes is fixed, whatever the timing: seed 0 samples one
    learning rate (trial 5's, 1.6e-4) more than 5x below every other trial's,
    and at every step from 4 to 24 its loss stays above what each of the three
    fastest learners has at any step from 4 on (measured: 4.957 against at
    most 4.903), so at its first rung it is behind the half that goes on,
    whichever of the others have reached the rung before it."""
    monkeypatch.chdir(tmp_path)
    example = yaml.safe_load(EXAMPLE.read_text())
    env = {"BRIGADE_URL": server.url, "BRIGADE_API_KEY": ADMIN_KEY, "BRIGADE_ADMIN_KEY": None,
           "BRIGADE_CONFIG": str(tmp_path / "none.yaml")}
    runner = CliRunner()

    def brigade(*args):
        return runner.invoke(app, list(args), env=env)

    followed = brigade("sweep", "submit", "-F", str(EXAMPLE))
    assert followed.exit_code == 0, followed.output
    sweep_id = printed_id(followed.stdout, "s-")
    assert f"sweep {sweep_id}: SUCCEEDED" in followed.stderr
    assert "best: trial" in followed.stderr and "pruned at step" in followed.stderr

    view = http.get(f"/v1/sweeps/{sweep_id}").json()
    trials = view["trials"]
    steps = example["base"]["train"]["steps"]
    assert view["state"] == "SUCCEEDED" and view["counts"]["total"] == len(trials) == 6
    assert [t["name"] for t in trials] == [f"lr-t{n}" for n in range(6)]
    assert {t["state"] for t in trials} <= {"SUCCEEDED", "PRUNED"}, trials
    for t in trials:
        assert 1e-4 <= t["params"]["train.lr"] <= 3e-2 and t["params"]["train.weight_decay"] in (0.0, 0.1)
    jobs = {j["id"]: j for j in http.get("/v1/jobs", params={"sweep": sweep_id}).json()["items"]}
    assert sorted(jobs) == sorted(t["job"] for t in trials)
    for t in trials:
        job = jobs[t["job"]]
        assert (job["name"], job["sweep"], job["state"]) == (t["name"], sweep_id, t["state"]), job
        # the sweep's and the jobs list's last loss are one value, named so in both
        assert (t["last_loss"], t["step"]) == (job["latest_loss"], job["step"]), (t, job)
        assert job["spec"]["train"]["lr"] == t["params"]["train.lr"]
        if t["state"] == "SUCCEEDED":
            assert job["step"] == steps and t["pruned_step"] is None, (job, t)
            continue
        # PRUNED at one of the example's rungs, before its last step, and its events say where
        assert t["pruned_step"] in (4, 8, 16) and job["step"] < steps, (job, t)
        reasons = [e["reason"] for e in http.get(f"/v1/jobs/{job['id']}/events").json()
                   if e["to_state"] == "PRUNING"]
        assert reasons and reasons[0].startswith(f"pruned at step {t['pruned_step']}: "), reasons
        assert "asha pruner" in reasons[0], reasons

    slowest = min(trials, key=lambda t: t["params"]["train.lr"])
    others = [t["params"]["train.lr"] for t in trials if t is not slowest]
    assert slowest["params"]["train.lr"] * 5 < min(others), trials  # what seed 0 samples
    assert slowest["state"] == "PRUNED", trials

    succeeded = [t for t in trials if t["state"] == "SUCCEEDED"]
    winner = min(succeeded, key=lambda t: t["objective"])
    assert view["best"] == {"job": winner["job"], "number": winner["number"],
                            "params": winner["params"], "objective": winner["objective"]}
    best = brigade("sweep", "best", sweep_id)
    assert best.exit_code == 0, best.output
    shown = yaml.safe_load(best.stdout[best.stdout.index("sweep:"):])
    assert shown == {"sweep": sweep_id, "job": winner["job"], "trial": winner["number"],
                     "metric": "loss", "mode": "min", "objective": winner["objective"],
                     "params": winner["params"]}

    status = brigade("sweep", "status", sweep_id)
    assert status.exit_code == 0, status.output
    assert f"{sweep_id} (lr, tenant admin): SUCCEEDED, 6/6 trials" in status.stdout
    assert f"best: trial {winner['number']}, job {winner['job']}" in status.stdout
    assert "objective: loss, smoothed (ema 0.8) (min)" in status.stdout
    assert "OBJECTIVE" in status.stdout and "LAST LOSS" in status.stdout
    assert all(job in status.stdout for job in jobs)
    as_json = brigade("sweep", "status", sweep_id, "-o", "json")
    assert json.loads(as_json.stdout[as_json.stdout.index("{"):])["id"] == sweep_id
    listed = brigade("sweep", "list", "-o", "json")
    assert sweep_id in [s["id"] for s in json.loads(listed.stdout[listed.stdout.index("{"):])["sweeps"]]


def test_the_example_sweep_is_a_valid_sweep():
    """docs/examples/sweep-lr.yaml, which the README runs with `brigade sweep submit`."""
    from workers.schema.sweep import SweepSpec

    spec = SweepSpec.model_validate(yaml.safe_load(EXAMPLE.read_text()))
    assert spec.pruner == "asha" and spec.trial_budget == spec.max_trials


def test_sweep_submit_dash_f_names_the_file_and_a_bare_dash_f_still_follows(server, http, tmp_path,
                                                                             monkeypatch):
    """`brigade sweep submit -f FILE` submits FILE and returns (kubectl's -f); the old
    spelling, FILE then a bare -f, follows the sweep to its end, with a note."""
    from concurrent.futures import ThreadPoolExecutor

    from api.cli.spec_file import FILE_NOTE, OLD_FOLLOW_NOTE

    monkeypatch.chdir(tmp_path)
    env = {"BRIGADE_URL": server.url, "BRIGADE_API_KEY": ADMIN_KEY, "BRIGADE_ADMIN_KEY": None,
           "BRIGADE_CONFIG": str(tmp_path / "none.yaml")}
    runner = CliRunner()
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(SWEEP | {"name": "by-file"}))
    by_file = runner.invoke(app, ["sweep", "submit", "-f", str(path)], env=env)
    assert by_file.exit_code == 0, by_file.output
    sweep_id = by_file.stdout.strip()
    assert sweep_id.startswith("s-") and FILE_NOTE in by_file.stderr
    assert http.post(f"/v1/sweeps/{sweep_id}/cancel").status_code == 200

    path.write_text(yaml.safe_dump(SWEEP | {"name": "old-follow"}))
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(runner.invoke, app, ["sweep", "submit", str(path), "-f"], env=env)
        deadline = time.monotonic() + 60
        while not (found := [s for s in http.get("/v1/sweeps").json()["sweeps"]
                             if s["name"] == "old-follow"]):
            assert time.monotonic() < deadline and not running.done(), running.result().output
            time.sleep(0.1)
        assert http.post(f"/v1/sweeps/{found[0]['id']}/cancel").status_code == 200
        followed = running.result(timeout=120)
    assert followed.exit_code == 1, followed.output  # followed to its end: CANCELLED
    assert f"sweep {found[0]['id']}: CANCELLED" in followed.stderr and OLD_FOLLOW_NOTE in followed.stderr
    for cancelled in (sweep_id, found[0]["id"]):  # the module leaves Ray as it found it
        jobs_ended(http, cancelled)
