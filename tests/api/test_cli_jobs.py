"""The `brigade` client commands against the live server."""

from __future__ import annotations

import json
import stat

import pytest
import yaml
from typer.testing import CliRunner

from api.cli import app
from api.profiles import record_server_url
from tests.api.conftest import ADMIN_KEY
from tests.api.test_jobs import SPEC


@pytest.fixture
def brigade(server, tmp_path, monkeypatch):
    """Run a `brigade` command against the live server; returns click's Result."""
    monkeypatch.chdir(tmp_path)  # no stray .data/admin_key from the checkout
    env = {"BRIGADE_URL": server.url, "BRIGADE_API_KEY": ADMIN_KEY, "BRIGADE_ADMIN_KEY": None}
    runner = CliRunner()
    return lambda *args, **kw: runner.invoke(app, list(args), env=env | kw.pop("env", {}), **kw)


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


def test_submit_get_jobs_cancel(brigade, spec_file):
    submitted = brigade("submit", str(spec_file))
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.strip()
    assert job_id.startswith("j-") and "QUEUED" in submitted.stderr

    got = brigade("get", job_id)
    assert got.exit_code == 0 and json.loads(got.stdout)["id"] == job_id

    listed = brigade("jobs", "--state", "QUEUED", "--limit", "500")
    assert listed.exit_code == 0
    assert listed.stdout.splitlines()[0].split() == ["ID", "TENANT", "NAME", "KIND", "STATE", "WORKERS",
                                                     "STEP", "LOSS", "CREATED"]
    assert any(line.startswith(job_id) and line.split()[3:5] == ["train", "QUEUED"]
               and line.split()[6:8] == ["0/5", "-"] for line in listed.stdout.splitlines())

    cancelled = brigade("cancel", job_id)
    assert cancelled.exit_code == 0 and cancelled.stdout.startswith(f"{job_id}: CANCEL")


def test_submit_json_from_stdin(brigade):
    result = brigade("submit", "-", input=json.dumps(SPEC))
    assert result.exit_code == 0 and result.stdout.strip().startswith("j-")


def test_logs_and_follow(brigade, client, store):
    job = client.submit(SPEC)
    store.append_log(job.id, ["step 1 loss 5.5", "step 2 loss 5.1"])
    assert brigade("logs", job.id).stdout.splitlines() == ["step 1 loss 5.5", "step 2 loss 5.1"]
    client.cancel(job.id)
    followed = brigade("logs", "-f", job.id)
    assert followed.exit_code == 1  # the job did not succeed
    assert followed.stdout.splitlines() == ["step 1 loss 5.5", "step 2 loss 5.1"]
    assert "CANCELLED" in followed.stderr


def test_resume_and_suspend_say_why_they_are_refused(brigade, client):
    job = client.submit(SPEC)
    for args in (("resume", job.id, "--workers", "2"), ("suspend", job.id)):
        result = brigade(*args)
        assert result.exit_code == 1 and "HTTP 409" in result.stderr and "QUEUED" in result.stderr


def test_checkpoints_of_a_queued_job(brigade, client):
    result = brigade("checkpoints", client.submit(SPEC).id)
    assert result.exit_code == 0
    assert result.stdout.split() == ["STEP", "WORLD", "SIZE", "BYTES", "CREATED", "URI"]


def test_a_bad_spec_is_refused_naming_the_field(brigade, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(SPEC | {"train": {"steps": -1}}))
    result = brigade("submit", str(path))
    assert result.exit_code == 1 and "train.steps" in result.stderr and "HTTP 422" in result.stderr


def test_a_spec_that_is_not_a_mapping_is_refused_before_sending(brigade, tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- model\n- train\n")
    result = brigade("submit", str(path))
    assert result.exit_code == 2 and "mapping" in result.stderr


def test_wrong_key_and_unreachable_server(brigade):
    wrong = brigade("jobs", env={"BRIGADE_API_KEY": "nope"})
    assert wrong.exit_code == 1 and "invalid API key" in wrong.stderr
    gone = brigade("jobs", "--url", "http://127.0.0.1:9")
    assert gone.exit_code == 1 and "cannot reach" in gone.stderr


def test_the_key_defaults_to_a_local_servers_admin_key(brigade, tmp_path):
    (tmp_path / "admin_key").write_text(ADMIN_KEY)
    result = brigade("jobs", env={"BRIGADE_API_KEY": None, "BRIGADE_DATA_DIR": str(tmp_path)})
    assert result.exit_code == 0, result.output


def test_the_url_and_key_default_to_the_brigade_serve_of_this_directory(brigade, server, tmp_path):
    data_dir = tmp_path / ".data"  # where `brigade serve` keeps them, run in this directory
    record_server_url(data_dir, server.url)
    (data_dir / "admin_key").write_text(ADMIN_KEY)
    assert stat.S_IMODE((data_dir / "server_url").stat().st_mode) == 0o600
    bare = {"BRIGADE_URL": None, "BRIGADE_API_KEY": None, "BRIGADE_DATA_DIR": None,
            "BRIGADE_PROFILE": None, "BRIGADE_CONFIG": str(tmp_path / "none.yaml")}
    found = brigade("jobs", env=bare)
    assert found.exit_code == 0, found.output
    assert "ID" in found.stdout

    # A profile says otherwise: its URL wins over the local server's.
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"profiles": {"p": {"url": "http://127.0.0.1:9"}}, "default": "p"}))
    elsewhere = brigade("jobs", env=bare | {"BRIGADE_CONFIG": str(config)})
    assert elsewhere.exit_code == 1 and "cannot reach Brigade at http://127.0.0.1:9" in elsewhere.stderr


def test_submit_follow_stops_on_a_refused_submit_with_its_error(brigade, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(SPEC | {"train": {"steps": -1}}))
    result = brigade("submit", "-f", str(path))
    assert result.exit_code == 1 and result.stdout == ""
    assert "train.steps" in result.stderr and "HTTP 422" in result.stderr
