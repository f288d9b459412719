"""The `brigade` read commands and profiles through typer's runner against
the live server: status, events, metrics (csv, jsonl), logs read whole (2,500
lines, several pages) or its tail, wait, cluster, usage, `--output
json|yaml`, `login` writing a 0600 profile that `BrigadeClient()` reads too
(the environment overriding it), `--version` and shell completion."""

from __future__ import annotations

import csv
import io
import json
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from api.cli.main import app
from api.client import BrigadeClient
from tests.api.conftest import ADMIN_KEY
from tests.api.test_jobs import SPEC


@pytest.fixture
def brigade(server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {"BRIGADE_URL": server.url, "BRIGADE_API_KEY": ADMIN_KEY, "BRIGADE_ADMIN_KEY": None,
           "BRIGADE_CONFIG": str(tmp_path / "config.yaml"), "BRIGADE_PROFILE": None}
    runner = CliRunner()
    return lambda *args, **kw: runner.invoke(app, list(args), env=env | kw.pop("env", {}), **kw)


def rows(n: int, start: int = 1) -> list[dict]:
    return [{"step": s, "loss": 6.0 - s / 10, "lr": 1e-3, "tokens_per_s": 100.0,
             "comm_bytes_by_op": {"all_gather": 10}} for s in range(start, start + n)]


def test_status_events_and_metrics(brigade, client, store):
    job = client.submit(SPEC)
    store.transition(job.id, "STARTING", reason="admitted", workers=2, attempt=1)
    store.transition(job.id, "RUNNING", reason="started")
    store.record_metrics(job.id, 1, rows(3))
    store.update_job(job.id, step=3, latest_loss=5.7)  # as the runner records them together
    store.record_recovery(job.id, ranks=[1], from_step=3, to_step=2, seconds=0.8, in_place=True,
                          reason="node n-2 gone")

    listed = [line.split() for line in brigade("jobs", "--state", "RUNNING").stdout.splitlines()]
    assert [line[6:8] for line in listed if line[0] == job.id] == [["3/5", "5.7"]]
    shown = brigade("status", job.id)
    assert shown.exit_code == 0, shown.output
    assert "RUNNING" in shown.stdout and "3/5" in shown.stdout and "5.7000" in shown.stdout
    as_json = json.loads(brigade("status", job.id, "-o", "json").stdout)
    assert (as_json["state"], as_json["step"], as_json["steps"], as_json["loss"]) == ("RUNNING", 3, 5, 5.7)
    assert as_json["tenant"] == "admin" and as_json["restarts"] == 0
    assert as_json["recoveries"] == 1
    assert ["recoveries", "1"] in [line.split() for line in shown.stdout.splitlines()]

    events = yaml.safe_load(brigade("events", job.id, "--output", "yaml").stdout)
    assert [e["to_state"] for e in events] == ["QUEUED", "STARTING", "RUNNING", "RUNNING"]
    assert [e["kind"] for e in events] == [None, None, None, "recovery"]
    assert events[-1]["detail"]["seconds"] == 0.8
    assert "admitted" in brigade("events", job.id).stdout

    table = csv.DictReader(io.StringIO(brigade("metrics", job.id, "--format", "csv").stdout))
    read = list(table)
    assert [r["step"] for r in read] == ["1", "2", "3"] and read[0]["loss"] == "5.9"
    assert json.loads(read[0]["comm_bytes_by_op"]) == {"all_gather": 10}
    assert "checkpoint_step" not in table.fieldnames  # no column that is empty throughout
    lines = brigade("metrics", job.id, "--format", "jsonl", "--since-step", "2").stdout.splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2, 3]
    assert "LOSS" in brigade("metrics", job.id).stdout
    client.cancel(job.id)


def test_status_and_metrics_show_mfu_or_flops_alone(brigade, client, store):
    gpu, cpu = client.submit(SPEC), client.submit(SPEC)
    store.record_metrics(gpu.id, 1, [{**rows(1)[0], "flops_per_token": 6e9, "flops_per_s": 4.1e14,
                                      "mfu": 0.4143}])
    store.record_metrics(cpu.id, 1, [{**rows(1)[0], "flops_per_token": 6e5, "flops_per_s": 2.5e9,
                                      "mfu": None}])
    store.update_job(gpu.id, step=1)
    store.update_job(cpu.id, step=1)
    line = [ln for ln in brigade("status", gpu.id).stdout.splitlines() if ln.startswith("mfu")]
    assert line and line[0].split()[1:] == ["41.4%", "(410", "TFLOP/s", "per", "rank)"]
    shown = json.loads(brigade("status", gpu.id, "-o", "json").stdout)  # a queued job's, as JSON
    assert shown["mfu"] == 0.4143 and {"expected_start", "expected_start_reason"} <= set(shown)
    shown = brigade("status", cpu.id).stdout.splitlines()  # a CPU: no peak, so no MFU to show
    assert not [ln for ln in shown if ln.startswith("mfu")], shown
    line = [ln for ln in shown if ln.startswith("flop/s")]
    assert line and line[0].split()[1:] == ["2.5", "GFLOP/s", "per", "rank", "(no", "MFU:", "the",
                                            "device's", "peak", "is", "unknown)"], line
    header = brigade("metrics", gpu.id).stdout.splitlines()[0]
    assert header.split()[-1] == "MFU" and "MFU" not in brigade("metrics", cpu.id).stdout


def test_metrics_table_shows_columns_for_people_or_those_asked(brigade, client, store):
    job = client.submit(SPEC)
    store.transition(job.id, "STARTING", reason="admitted", workers=2, attempt=1)
    store.transition(job.id, "RUNNING", reason="started")
    ended = 1_796_000_000.0
    store.record_metrics(job.id, 1, [
        {**row, "step_time_s": 0.25, "peak_mem_bytes": 3 * 2**20, "wall_time": ended + row["step"],
         "comm_bytes": 4096} for row in rows(2)] + [
        {**rows(1, start=3)[0], "eval_loss": 5.5, "step_time_s": 1.5, "wall_time": ended + 3}])

    table = brigade("metrics", job.id)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["STEP", "LOSS", "EVAL", "LOSS", "LR", "TOKENS/S", "STEP", "TIME", "MEMORY"]
    assert lines[1].split() == ["1", "5.9000", "-", "1.00e-03", "100", "250", "ms", "3.0", "MiB"]
    assert lines[3].split() == ["3", "5.7000", "5.5000", "1.00e-03", "100", "1.50", "s", "-"]

    picked = brigade("metrics", job.id, "--columns", "step,wall_time,comm_bytes")
    assert picked.exit_code == 0, picked.output
    from datetime import datetime
    local = datetime.fromtimestamp(ended + 1).strftime("%Y-%m-%d %H:%M:%S")
    assert picked.stdout.splitlines()[0].split() == ["STEP", "TIME", "COMM"]
    assert picked.stdout.splitlines()[1].split() == ["1", *local.split(), "4.0", "KiB"]
    assert "e+09" not in picked.stdout
    every = brigade("metrics", job.id, "--columns", "all").stdout.splitlines()[0]
    assert "COMM_BYTES_BY_OP" in every and "TIME" in every

    wrong = brigade("metrics", job.id, "--columns", "step,lose")
    assert wrong.exit_code == 2 and "no metrics column 'lose' (did you mean loss" in wrong.stderr

    # Scripts get the rows as the API has them, whatever the table shows.
    as_json = json.loads(brigade("metrics", job.id, "-o", "json").stdout)
    assert as_json[0]["wall_time"] == ended + 1 and as_json[0]["comm_bytes_by_op"] == {"all_gather": 10}
    as_yaml = yaml.safe_load(brigade("metrics", job.id, "-o", "yaml", "--columns", "step").stdout)
    assert as_yaml == as_json
    client.cancel(job.id)


def test_logs_read_whole_and_their_tail(brigade, client, store):
    job = client.submit(SPEC)
    store.append_log(job.id, [f"line {i}" for i in range(2500)])
    whole = brigade("logs", job.id)
    assert whole.exit_code == 0 and whole.stdout.splitlines() == [f"line {i}" for i in range(2500)]
    assert brigade("logs", job.id, "--tail", "3").stdout.splitlines() == ["line 2497", "line 2498",
                                                                           "line 2499"]
    client.cancel(job.id)
    followed = brigade("logs", job.id, "--tail", "1", "-f")
    assert followed.exit_code == 1 and followed.stdout.splitlines() == ["line 2499"]


def test_wait_and_outputs_of_the_service_commands(brigade, client):
    job = client.submit(SPEC)
    client.cancel(job.id)
    waited = brigade("wait", job.id)
    assert waited.exit_code == 1 and "CANCELLED" in waited.stderr

    listed = json.loads(brigade("jobs", "-o", "json", "--limit", "500").stdout)
    assert job.id in {j["id"] for j in listed["items"]}
    assert "TENANT" in brigade("jobs").stdout
    cluster = json.loads(brigade("cluster", "-o", "json").stdout)
    assert cluster["capacity"]["cpu"] > 0
    assert "cpu" in brigade("cluster").stdout
    usage = yaml.safe_load(brigade("usage", "--window", "3600", "-o", "yaml").stdout)
    assert usage["window_s"] == 3600 and isinstance(usage["tenants"], list)
    assert "TENANT" in brigade("usage").stdout
    assert brigade("delete", job.id).exit_code == 0
    gone = brigade("get", job.id)
    assert gone.exit_code == 1 and "not found" in gone.stderr


def test_login_saves_a_private_profile_that_the_client_reads(brigade, server, tmp_path, monkeypatch):
    config = tmp_path / "config.yaml"
    refused = brigade("login", "--url", server.url, "--key", "wrong")
    assert refused.exit_code == 1 and "invalid API key" in refused.stderr and not config.exists()
    saved = brigade("login", "--url", server.url, "--key", ADMIN_KEY, "--profile", "local")
    assert saved.exit_code == 0, saved.output
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert yaml.safe_load(config.read_text()) == {
        "profiles": {"local": {"url": server.url, "key": ADMIN_KEY}}, "default": "local"}

    bare = {"BRIGADE_URL": None, "BRIGADE_API_KEY": None}
    assert brigade("jobs", env=bare).exit_code == 0  # the default profile
    assert brigade("--profile", "local", "jobs", env=bare).exit_code == 0
    missing = brigade("--profile", "nope", "jobs", env=bare)
    assert missing.exit_code == 2 and "no profile 'nope'" in missing.stderr
    overridden = brigade("jobs", env={"BRIGADE_URL": None, "BRIGADE_API_KEY": "bad"})
    assert overridden.exit_code == 1 and "invalid API key" in overridden.stderr  # env wins

    monkeypatch.setenv("BRIGADE_CONFIG", str(config))
    monkeypatch.delenv("BRIGADE_URL", raising=False)
    monkeypatch.delenv("BRIGADE_API_KEY", raising=False)
    with BrigadeClient() as sdk:
        assert sdk.url == server.url and sdk.jobs(limit=1).limit == 1


def test_version_and_completion(brigade):
    version = brigade("--version")
    assert version.exit_code == 0 and version.stdout.startswith("brigade ")
    # Completion finds its shell from the process tree: asked from bash (`; true`
    # keeps bash the parent rather than exec-ing the command), it prints bash's.
    brigade_bin = shlex.quote(str(Path(sys.executable).parent / "brigade"))
    shown = subprocess.run(
        ["bash", "-c", f"{brigade_bin} --show-completion; true"],
        capture_output=True, text=True, timeout=60,
    )
    assert "complete -o default -F" in shown.stdout and "_BRIGADE_COMPLETE" in shown.stdout, (
        shown.stdout, shown.stderr)


def test_json_output_writes_a_time_taken_out_of_a_model_as_iso():
    from datetime import UTC, datetime

    from api.cli.output import plain

    when = datetime(2026, 12, 3, 13, 0, tzinfo=UTC)
    assert json.dumps(plain({"expected_start": when})) == '{"expected_start": "2026-12-03T13:00:00+00:00"}'
