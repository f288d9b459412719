"""The `brigade` client commands against the live server."""

from __future__ import annotations

import json
import stat
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from typer.testing import CliRunner

from api.cli.main import app
from api.cli.spec_file import FILE_NOTE, OLD_FOLLOW_NOTE, old_follow_spelling
from api.profiles import record_server_url
from tests.api.conftest import ADMIN_KEY, printed_id
from tests.api.test_jobs import SPEC
from tests.waiting import wait_until


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
                                                     "STEP", "LOSS", "LABELS", "CREATED"]
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
    assert "hint: the service does not know the key sent" in wrong.stderr
    gone = brigade("jobs", "--url", "http://127.0.0.1:9")
    assert gone.exit_code == 1 and "cannot reach Brigade at http://127.0.0.1:9" in gone.stderr
    hint = gone.stderr.splitlines()[-1]  # how to start one, or point elsewhere
    assert hint.startswith("hint: start one here with `brigade serve` (`make serve` in a checkout"), hint
    assert "--url URL" in hint and "BRIGADE_URL" in hint, hint


def test_a_missing_key_says_every_way_to_give_one(brigade, tmp_path):
    """Run in another directory than the server's, with no key anywhere."""
    bare = {"BRIGADE_API_KEY": None, "BRIGADE_DATA_DIR": None, "BRIGADE_PROFILE": None,
            "BRIGADE_CONFIG": str(tmp_path / "none.yaml")}
    result = brigade("jobs", env=bare)
    assert result.exit_code == 1
    error, hint = result.stderr.splitlines()[-2:]
    assert error == "error: missing API key: send 'Authorization: Bearer <key>' (HTTP 401)"
    assert hint.startswith(f"hint: no API key was given, and there is no {tmp_path / '.data' / 'admin_key'}")
    for way in ("--key KEY", "BRIGADE_API_KEY=KEY", "`brigade login --url URL --key KEY`",
                "admin_key in its data dir", "BRIGADE_DATA_DIR"):
        assert way in hint, (way, hint)


def test_cancel_exits_0_once_the_job_runs_no_further_whatever_it_ended(brigade, client, store):
    """One rule for scripts (docs/cli-exit-status.md): 0 when the job is being cancelled, is
    cancelled, or had ended before (nothing to cancel); 1 only when the cancel
    could not be asked."""
    ended = {}
    for state in ("SUCCEEDED", "FAILED", "CANCELLED"):
        job = client.submit(SPEC)
        if state != "CANCELLED":
            store.transition(job.id, "STARTING", reason="admitted", workers=1, attempt=1)
            store.transition(job.id, "RUNNING", reason="started")
        store.transition(job.id, state, reason="ended by the test")
        ended[state] = job.id
    for state, job_id in ended.items():
        result = brigade("cancel", job_id)
        assert result.exit_code == 0, (state, result.output)
        assert result.stdout == f"{job_id}: {state}\n"
        if state != "CANCELLED":
            assert f"{job_id} had ended {state}: nothing to cancel" in result.stderr
    queued = client.submit(SPEC).id
    first, again = brigade("cancel", queued), brigade("cancel", queued)
    assert (first.exit_code, again.exit_code) == (0, 0) and again.stdout == f"{queued}: CANCELLED\n"
    missing = brigade("cancel", "j-000000000000")
    assert missing.exit_code == 1 and "not found" in missing.stderr


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
    result = brigade("submit", "-F", str(path))
    assert result.exit_code == 1 and result.stdout == ""
    assert "train.steps" in result.stderr and "HTTP 422" in result.stderr


# `-f` as kubectl means it: the file. `-F` / `--follow` follows; a bare `-f` (the old
# spelling of follow, where no file can be meant) still follows, with a note.

def follow_until_cancelled(brigade, client, name: str, *args: str):
    """Run `brigade *args` (a submit that follows the job named `name`) while this
    thread cancels that job once it is there: the command's Result."""
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(brigade, *args)
        found: list = []
        assert wait_until(lambda: running.done() or bool(found.extend(
            j for j in client.jobs(limit=500).items if j.name == name) or found), within_s=60)
        assert found, running.result().output  # it ended before its job was there: say why
        client.cancel(found[0].id)
        return running.result(timeout=60)


def named(tmp_path, name: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(SPEC | {"name": name}))
    return path


def test_submit_dash_f_file_names_the_file_and_does_not_follow(brigade, client, tmp_path):
    result = brigade("submit", "-f", str(named(tmp_path, "by-file")))
    assert result.exit_code == 0, result.output
    job_id = result.stdout.strip()
    assert job_id.startswith("j-") and client.get(job_id).state.value == "QUEUED"  # not waited for
    assert FILE_NOTE in result.stderr
    long = brigade("submit", "--file", str(named(tmp_path, "by-long-file")))
    assert long.exit_code == 0 and client.get(long.stdout.strip()).name == "by-long-file"


@pytest.mark.parametrize("spelling", [("-F",), ("--follow",)])
def test_submit_capital_f_and_follow_follow_the_job_to_its_end(brigade, client, tmp_path, spelling):
    name = f"follow{spelling[0].count('-')}"
    result = follow_until_cancelled(brigade, client, name, "submit", *spelling, "-f",
                                    str(named(tmp_path, name)))
    assert result.exit_code == 1, result.output  # followed to its end, which was not a success
    assert printed_id(result.stdout, "j-") and "CANCELLED" in result.stderr
    assert OLD_FOLLOW_NOTE not in result.stderr and FILE_NOTE not in result.stderr


@pytest.mark.parametrize("after", [(), ("--idempotency-key", "old-follow-key")])
def test_the_old_bare_dash_f_still_follows_with_a_note(brigade, client, tmp_path, after):
    name = f"old-follow-{len(after)}"
    result = follow_until_cancelled(brigade, client, name, "submit", str(named(tmp_path, name)),
                                    "-f", *after)
    assert result.exit_code == 1 and "CANCELLED" in result.stderr, result.output
    assert OLD_FOLLOW_NOTE in result.stderr


def test_submit_names_its_spec_once(brigade, tmp_path):
    twice = brigade("submit", str(named(tmp_path, "one")), "-f", str(named(tmp_path, "two")))
    assert twice.exit_code == 2 and "named twice" in twice.stderr and "-F" in twice.stderr
    none = brigade("submit")
    assert none.exit_code == 2 and "name the spec file" in none.stderr


def test_the_old_spelling_is_read_only_where_nothing_else_is_meant():
    assert old_follow_spelling(["job.yaml", "-f"]) == (["job.yaml", "--follow"], True)
    assert old_follow_spelling(["job.yaml", "-f", "--url", "u"]) == (
        ["job.yaml", "--follow", "--url", "u"], True)
    for file_meant in (["-f", "job.yaml"], ["-f", "-"], ["-F", "-f", "job.yaml"],
                       ["--", "job.yaml", "-f"]):
        assert old_follow_spelling(file_meant) == (file_meant, False)


def test_label_a_job_and_list_by_label(brigade, tmp_path):
    path = tmp_path / "labelled.yaml"
    path.write_text(yaml.safe_dump(SPEC | {"labels": {"cli": "yes", "stage": "dev"}}))
    job_id = brigade("submit", str(path)).stdout.strip()
    labelled = brigade("label", job_id, "stage=prod", "owner=a=b", "--remove", "cli", "--note", "moved")
    assert labelled.exit_code == 0, labelled.output
    assert labelled.stdout.splitlines() == ["owner=a=b", "stage=prod", "note: moved"]

    listed = brigade("jobs", "--label", "stage=prod", "--label", "owner=a=b", "--output", "json")
    assert listed.exit_code == 0, listed.output
    assert [j["id"] for j in json.loads(listed.stdout)["items"]] == [job_id]
    table = brigade("jobs", "--label", "owner=a=b")
    assert "owner=a=b,stage=prod" in table.stdout
    refused = brigade("jobs", "--label", "no-value")
    assert refused.exit_code != 0 and "label" in refused.output
    bad = brigade("label", job_id, "nokey")
    assert bad.exit_code != 0 and "key=value" in bad.output
