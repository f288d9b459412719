"""Weights & Biases as a job's tracker, in W&B's offline mode, its run
directory read back: the job's metrics at their steps, its spec as the run's
config, its end and its final export. Every address W&B could reach for (its
base URL, any HTTP proxy) is a loopback listener of the test's, which must
see no connection."""

from __future__ import annotations

import hashlib
import socket
import threading

import pytest

from checkpoints import FileEntry
from service.control.storage import JobStorage
from service.observability.tracking import WandbRun
from service.settings import Settings
from service.states import JobState
from service.store import JobStore
from tests.ci import in_ci
from tests.service.observability.wandb_run_dir import offline_runs
from workers.schema import JobSpec

if in_ci():
    import wandb  # noqa: F401 - the dev extra installs it: under CI its absence fails
else:
    pytest.importorskip("wandb", reason="no wandb here: pip install 'brigade[wandb]'")

ROWS = [{"step": s, "loss": 5.0 - s / 10, "lr": 1e-3 * s, "tokens_per_s": 100, "checkpoint_step": None,
         "replayed": False} for s in (1, 2, 3)]
SPEC = {"name": "wb-demo", "model": {"n_layers": 1}, "train": {"steps": 3, "lr": 0.01},
        "tracking": {"wandb": {"project": "brigade-tests", "entity": "acme-lab", "mode": "offline"}}}


class Listener:
    """A loopback port that records every connection made to it."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(1)
            try:
                self.connections.append(conn.recv(256))
            except OSError:
                self.connections.append(b"")
            conn.close()


@pytest.fixture
def wandb_dir(tmp_path, monkeypatch):
    """W&B offline, its files under the test's directory, every way out a listener of ours."""
    trap = Listener()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, trap.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", trap.url)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)  # never sent: nothing may be
    (tmp_path / "wandb-dir").mkdir()
    yield str(tmp_path / "wandb-dir")
    assert trap.connections == [], f"W&B reached for the network: {trap.connections}"
    trap.sock.close()


def test_a_run_holds_the_jobs_metrics_config_and_end(wandb_dir):
    spec = JobSpec.model_validate(SPEC)
    run = WandbRun(spec.tracking.wandb, "j-wb1", "wb-demo", "acme", config=spec.model_dump(mode="json"),
                   directory=wandb_dir, labels={"team": "nlp"}, note="first try")
    run.add(ROWS[:2])
    run.add(ROWS[1:])  # step 2 again (a replayed row): once in the run
    run.end(JobState.SUCCEEDED)

    (found,) = offline_runs(wandb_dir, "j-wb1", count=1)
    assert (found.run_id, found.project, found.entity, found.name) == (
        "j-wb1", "brigade-tests", "acme-lab", "wb-demo")
    assert found.tags == ["team=nlp"] and found.notes == "first try"
    assert found.config["train"]["lr"] == 0.01 and found.config["brigade"] == {
        "job": "j-wb1", "tenant": "acme"}
    steps = [(h["_step"], h["loss"]) for h in found.history]
    assert steps == [(1, pytest.approx(4.9)), (2, pytest.approx(4.8)), (3, pytest.approx(4.7))]
    assert "checkpoint_step" not in found.history[0] and "replayed" not in found.history[0]
    assert found.summary["brigade_state"] == "SUCCEEDED" and found.exit_code == 0


def test_the_service_logs_a_jobs_rows_and_its_final_export(wandb_dir, tmp_path):
    settings = Settings(data_dir=str(tmp_path / "data"))
    store = JobStore(f"sqlite:///{tmp_path / 'brigade.db'}")
    store.migrate()
    try:
        job, _ = store.create_job(tenant="acme", name="wb-demo", spec=JobSpec.model_validate(
            {**SPEC, "labels": {"study": "lr"}, "note": "as submitted"}))
        job = store.update_job(job.id, note="the current note")
        storage = JobStorage(settings)
        tracking = storage.tracking_for(job)
        assert tracking is not None
        tracking.record(ROWS)
        tracking.end(JobState.SUCCEEDED)
        assert tracking.problems == []

        exports = storage.checkpoint_target(job).open_exports()  # an export, as a Ray task commits it
        ident = "step-000000003-float32"
        directory = exports.begin(ident)
        data = b'{"model_type": "llama"}'
        exports.fs.pipe_file(f"{directory}/config.json", data)
        exports.commit(ident, world_size=1, files={"config.json": FileEntry(
            size=len(data), algo="sha256", digest=hashlib.sha256(data).hexdigest())}, extra={})
        storage.export_done(job, ident, None)
        storage.export_done(job, "step-000000002-float32", "RayTaskError: lost")  # failed: not logged
    finally:
        store.dispose()

    runs = offline_runs(wandb_dir, job.id, count=2)
    assert len(runs) == 2  # the job's run, then the same run resumed for its export
    assert [h["_step"] for h in runs[0].history] == [1, 2, 3]
    assert runs[0].config["name"] == "wb-demo" and runs[0].summary["brigade_state"] == "SUCCEEDED"
    assert runs[0].tags == ["study=lr"] and runs[0].notes == "the current note"
    export = runs[1].summary["export"]
    assert runs[1].run_id == job.id
    assert (export["id"], export["step"], export["kind"], export["bytes"]) == (ident, 3, "model", len(data))
    assert export["uri"].startswith("file://") and export["uri"].endswith(ident)


def test_a_service_without_the_wandb_extra_refuses_a_wandb_run(monkeypatch):
    import importlib.util

    from service.intake.checks import wandb_client
    from workers.schema import SpecError

    spec = JobSpec.model_validate(SPEC)
    assert wandb_client(spec, None) is spec  # installed here
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb"
                        else found(name, *a))
    with pytest.raises(SpecError, match=r"brigade\[wandb\]") as refused:
        wandb_client(spec, None)
    assert refused.value.field == "tracking.wandb"
    plain = JobSpec.model_validate({**SPEC, "tracking": {}})
    assert wandb_client(plain, None) is plain


def test_a_wandb_section_is_checked_at_submit():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="tracking.wandb.project"):
        JobSpec.model_validate({**SPEC, "tracking": {"wandb": {"project": "a/b"}}})
    with pytest.raises(ValidationError, match="tracking.wandb.mode"):
        JobSpec.model_validate({**SPEC, "tracking": {"wandb": {"project": "p", "mode": "shared"}}})
