"""One job run for real through the API: a started supervisor admits it, two
rank actors train it on the session's Ray cluster, and every read route
shows what happened."""

from __future__ import annotations

import os

import pytest

from api.client import BrigadeClient
from api.schemas.jobs import JobProgress, LogLine
from api.server.app import create_app
from service.states import JobState
from tests.api.conftest import ADMIN_KEY, make_supervisor
from tests.api.live_server import LiveServer

pytestmark = pytest.mark.ray

STEPS = 6
SPEC = {
    "name": "live", "workers": 2, "resources_per_worker": {"cpu": 1},
    "model": {"n_layers": 2, "d_model": 32, "n_heads": 4, "seq_len": 32},
    "train": {"steps": STEPS, "global_batch_size": 4},
    "checkpoint": {"every_steps": 3, "keep_last": 3},
}


@pytest.fixture(scope="module")
def mlruns(tmp_path_factory):
    """The operator's MLflow tracking server: a file store (opted into, as MLflow 3 asks)."""
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    yield f"file://{tmp_path_factory.mktemp('mlruns')}"
    os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)


@pytest.fixture(scope="module")
def wandb_dir(tmp_path_factory):
    """W&B offline, its runs under the module's directory, its server a listener of ours
    that must see no connection (the proxies are left alone here: Ray's gRPC reads them)."""
    from tests.service.observability.test_wandb import Listener

    trap = Listener()
    directory = str(tmp_path_factory.mktemp("wandb"))
    saved = {k: os.environ.get(k) for k in ("WANDB_DIR", "WANDB_MODE", "WANDB_BASE_URL")}
    os.environ.update(WANDB_DIR=directory, WANDB_MODE="offline", WANDB_BASE_URL=trap.url)
    yield directory
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    assert trap.connections == [], f"W&B reached for the network: {trap.connections}"


@pytest.fixture(scope="module")
def live_client(tmp_path_factory, ray_cluster, mlruns, wandb_dir):
    supervisor = make_supervisor(tmp_path_factory.mktemp("live"), mlflow_tracking_uri=mlruns)
    supervisor.start()
    try:
        with LiveServer(create_app(supervisor)) as server, BrigadeClient(server.url, ADMIN_KEY) as client:
            yield client
    finally:
        supervisor.stop()


def test_a_job_runs_to_success_and_every_route_tells_of_it(live_client):
    client = live_client
    job = client.submit(SPEC)
    seen_workers, states = [], []
    for event in client.follow(job.id):
        if isinstance(event, JobProgress):
            states.append(event.state)
            if event.state is JobState.RUNNING and not seen_workers:
                seen_workers = client.workers(job.id)
    assert states[-1] is JobState.SUCCEEDED, client.get(job.id).error
    assert JobState.RUNNING in states

    done = client.get(job.id)
    assert (done.step, done.workers, done.restarts) == (STEPS, 2, 0)
    assert done.started_at and done.finished_at and done.latest_checkpoint.step == STEPS

    assert sorted(w.rank for w in seen_workers) == [0, 1] and all(w.pid for w in seen_workers)
    metrics = client.metrics(job.id)
    assert [m.step for m in metrics] == list(range(1, STEPS + 1))
    assert all(m.loss > 0 and m.comm_bytes > 0 and m.comm_bytes_theory > 0 for m in metrics)

    checkpoints = client.checkpoints(job.id)
    assert [c.step for c in checkpoints] == [3, 6]
    assert all(c.world_size == 2 and c.bytes > 0 and c.uri for c in checkpoints)

    transitions = [e.to_state for e in client.events(job.id)]
    assert transitions[0] is JobState.QUEUED and transitions[-1] is JobState.SUCCEEDED
    assert client.logs(job.id) and all(isinstance(line, LogLine) for line in client.logs(job.id))
    assert client.workers(job.id) == []  # released


def test_submit_follow_exits_0_on_success_and_usage_counts_the_run(live_client, mlruns, wandb_dir,
                                                                   tmp_path):
    import json

    import yaml
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from typer.testing import CliRunner

    from api.cli.main import app

    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump(SPEC | {"name": "followed", "labels": {"via": "cli"}, "tracking": {
        "tensorboard": True, "wandb": {"project": "live", "mode": "offline"}}}))
    env = {"BRIGADE_URL": live_client.url, "BRIGADE_API_KEY": ADMIN_KEY,
           "BRIGADE_CONFIG": str(tmp_path / "none.yaml")}
    runner = CliRunner()
    followed = runner.invoke(app, ["submit", "--follow", str(spec_file)], env=env)
    assert followed.exit_code == 0, followed.output
    job_id = followed.stdout.splitlines()[0]
    assert f"step {STEPS}/{STEPS}" in followed.stdout and "SUCCEEDED" in followed.stderr
    assert runner.invoke(app, ["wait", job_id], env=env).exit_code == 0
    shown = runner.invoke(app, ["status", job_id, "-o", "json"], env=env)
    assert shown.exit_code == 0, shown.output
    # This process is also a Ray driver: a line Ray forwards to it lands in the runner's stdout too.
    status = json.loads(shown.stdout[shown.stdout.index("{"):])
    assert (status["state"], status["step"]) == ("SUCCEEDED", STEPS) and status["loss"] > 0

    usage = {u.tenant: u for u in live_client.usage(window_s=3600).tenants}
    assert usage["admin"].jobs.get("SUCCEEDED", 0) >= 1
    assert usage["admin"].worker_seconds > 2 * 0.5  # two workers, for longer than half a second

    # Its metrics went to TensorBoard files under its storage prefix and to the operator's MLflow.
    # (The runner ends the run just after the job's final state: give it a moment.)
    import time

    prefix = live_client.checkpoints(job_id)[0].uri.removeprefix("file://").split("/checkpoints/")[0]
    mlflow = MlflowClient(tracking_uri=mlruns)
    experiment = mlflow.get_experiment_by_name("brigade/admin").experiment_id
    deadline = time.monotonic() + 20
    while True:
        (run,) = mlflow.search_runs([experiment], f"tags.`brigade.job` = '{job_id}'")
        if run.info.status == "FINISHED" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert run.info.status == "FINISHED" and run.info.run_name == job_id
    events = EventAccumulator(f"{prefix}/tensorboard")
    events.Reload()
    assert [e.step for e in events.Scalars("loss")] == list(range(1, STEPS + 1))
    assert [m.step for m in mlflow.get_metric_history(run.info.run_id, "loss")] == list(range(1, STEPS + 1))
    # and to its W&B run, offline, read back from the run's directory
    from tests.service.observability.wandb_run_dir import offline_runs

    (wandb_run,) = offline_runs(wandb_dir, job_id, count=1)
    assert (wandb_run.project, wandb_run.name, wandb_run.tags) == ("live", "followed", ["via=cli"])
    assert [h["_step"] for h in wandb_run.history if "loss" in h] == list(range(1, STEPS + 1))
    assert wandb_run.config["train"]["steps"] == STEPS and wandb_run.summary["brigade_state"] == "SUCCEEDED"
