"""The dashboard's experiment pages over real HTTP (`api.server.routes.sweep_pages`):
the sweeps page, a sweep's page (its trials in the HTML) and the compare
view; a sign-in first, and another tenant's sweep or job not found.

Its own server on a real SQLite file, no cluster: the supervisor is never
started, so rows are written through the store's API."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from api.server.app import create_app
from tests.api.conftest import ADMIN_KEY, make_supervisor
from tests.api.live_server import LiveServer
from workers.schema import JobSpec

SPEC = {"name": "paged", "workers": 1, "train": {"steps": 10},
        "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16}}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(server URL, the supervisor, {tenant: key})."""
    supervisor = make_supervisor(tmp_path_factory.mktemp("sweep-pages"))
    keys = {name: supervisor.store.tenants.create(name)[1] for name in ("team-a", "team-b")}
    with LiveServer(create_app(supervisor)) as live:
        yield live.url, supervisor, keys
    supervisor.store.dispose()


@contextmanager
def _browser(url: str, key: str) -> Iterator[httpx.Client]:
    """A client holding a dashboard session (the pages' cookie) of `key`'s tenant."""
    with httpx.Client(base_url=url, timeout=10) as client:
        client.post("/ui/session", json={"api_key": key}).raise_for_status()
        yield client


def _job(store, tenant: str, name: str):
    job, _ = store.create_job(tenant=tenant, name=name, spec=JobSpec.model_validate({**SPEC, "name": name}))
    return job


def test_pages_send_a_browser_without_a_session_to_sign_in(served):
    url, _, _ = served
    with httpx.Client(base_url=url, timeout=10) as anonymous:
        for path in ("/sweeps", "/sweeps/s-anything", "/compare?jobs=j-a,j-b"):
            answer = anonymous.get(path, follow_redirects=False)
            assert answer.status_code == 303, path
            assert answer.headers["location"].startswith("/login?next=%2F"), answer.headers


def test_the_compare_view_names_each_job_and_hides_another_tenants(served):
    url, supervisor, keys = served
    store = supervisor.store
    a1, a2 = _job(store, "team-a", "lr-small"), _job(store, "team-a", "lr-large")
    b1 = _job(store, "team-b", "theirs")
    with _browser(url, keys["team-a"]) as team_a, _browser(url, ADMIN_KEY) as admin:
        page = team_a.get(f"/compare?jobs={a1.id},{a2.id}")
        assert page.status_code == 200, page.text
        assert "Compare 2 jobs" in page.text
        for job in (a1, a2):
            assert f'data-job-id="{job.id}"' in page.text and f">{job.name}</a>" in page.text
        assert 'id="chart-loss"' in page.text and 'id="chart-eval"' in page.text
        assert page.headers["content-security-policy"].startswith("default-src 'self'")

        mixed = team_a.get(f"/compare?jobs={a1.id},{b1.id}")  # another tenant's: not found
        assert mixed.status_code == 404 and "theirs" not in mixed.text
        assert b1.id in mixed.text and "not yours to see" in mixed.text
        assert team_a.get("/compare?jobs=j-nonexistent").status_code == 404
        assert admin.get(f"/compare?jobs={a1.id},{b1.id}").status_code == 200  # the admin: anyone's

        empty = team_a.get("/compare")
        assert empty.status_code == 200 and 'id="compare-empty"' in empty.text
        many = team_a.get("/compare?jobs=" + ",".join(f"j-{i}" for i in range(9)))
        assert many.status_code == 422 and "at most 8 jobs" in many.text


def test_the_jobs_list_and_every_page_link_to_the_sweeps(served):
    url, _, keys = served
    with _browser(url, keys["team-a"]) as team_a:
        jobs = team_a.get("/").text
        assert 'id="compare"' in jobs and 'href="/sweeps"' in jobs
        sweeps = team_a.get("/sweeps")
        assert sweeps.status_code == 200 and 'id="sweeps-table"' in sweeps.text
        assert '<a href="/sweeps" aria-current="page">Sweeps</a>' in sweeps.text


def test_a_sweeps_page_names_its_trials_and_is_not_found_by_another_tenant(served):
    from workers.schema.sweep import SweepSpec, trial_spec

    url, supervisor, keys = served
    store = supervisor.store
    spec = SweepSpec.model_validate({
        "name": "lr", "base": {**SPEC, "name": "lr"}, "sampler": "grid", "max_trials": 2,
        "space": {"train.lr": {"grid": [0.001, 0.01]}}, "objective": {"metric": "loss", "mode": "min"}})
    sweep, _ = store.sweeps.create(tenant="team-a", spec=spec)
    for number, lr in enumerate((0.001, 0.01)):
        store.sweeps.add_trial(sweep.id, number, {"train.lr": lr})
        job, _ = store.create_job(tenant="team-a", name=f"lr-t{number}", sweep=sweep.id,
                                  spec=trial_spec(spec, {"train.lr": lr}, number))
        store.sweeps.update_trial(sweep.id, number, job_id=job.id)
    store.sweeps.update_trial(sweep.id, 1, state="PRUNED", objective=4.5, pruned_step=12)
    with _browser(url, keys["team-a"]) as team_a, _browser(url, keys["team-b"]) as team_b, \
            _browser(url, ADMIN_KEY) as admin:
        page = team_a.get(f"/sweeps/{sweep.id}")
        assert page.status_code == 200, page.text
        assert f'data-sweep-id="{sweep.id}"' in page.text
        for name in ("lr-t0", "lr-t1"):
            assert f">{name}</a>" in page.text  # each trial named, a link to its job
        assert '<tr data-number="1" data-state="PRUNED" class="pruned">' in page.text
        assert "at step 12" in page.text and 'data-param="train.lr"' in page.text
        assert admin.get(f"/sweeps/{sweep.id}").status_code == 200  # the admin: anyone's

        theirs = team_b.get(f"/sweeps/{sweep.id}")  # another tenant's: as an unknown one
        assert theirs.status_code == 404 and "lr-t0" not in theirs.text
        unknown = team_b.get("/sweeps/s-000000000000")
        assert unknown.status_code == 404
        assert theirs.text.replace(sweep.id, "s-000000000000") == unknown.text


def test_the_compare_view_lists_the_fields_in_which_the_specs_differ(served):
    url, supervisor, keys = served
    store = supervisor.store
    specs = [{**SPEC, "name": "diff-a", "train": {"steps": 10, "lr": 0.001}, "labels": {"team": "nlp"}},
             {**SPEC, "name": "diff-b", "train": {"steps": 10, "lr": 0.01},
              "checkpoint": {"every_steps": 5}, "labels": {"team": "nlp"}}]
    a, b = (store.create_job(tenant="team-a", name=s["name"], spec=JobSpec.model_validate(s))[0]
            for s in specs)
    store.update_job(b.id, labels={"team": "nlp", "stage": "dev"})  # the current labels are compared
    with _browser(url, keys["team-a"]) as team_a:
        page = team_a.get(f"/compare?jobs={a.id},{b.id}").text
        rows = dict(re.findall(r'<tr data-field="([^"]+)"><th scope="row" class="mono">[^<]+</th>\s*'
                               r'(.*?)</tr>', page, re.S))
        assert set(rows) == {"train.lr", "checkpoint.every_steps", "labels.stage"}  # no name, no steps
        values = {f: re.findall(r'<td class="value[^"]*">([^<]*)</td>', cells) for f, cells in rows.items()}
        assert values == {"train.lr": ["0.001", "0.01"], "checkpoint.every_steps": ["10", "5"],
                          "labels.stage": ["unset", "dev"]}
        assert page.index('id="spec-diff"') < page.index('id="chart-loss"')  # above the curves
        same = team_a.get(f"/compare?jobs={a.id},{_job(store, 'team-a', 'diff-c').id}").text
        assert 'id="spec-diff"' in same  # steps, lr and labels differ from SPEC's
        twin = store.create_job(tenant="team-a", name="diff-a2", spec=JobSpec.model_validate(
            {**specs[0], "name": "diff-a2"}))[0]
        alike = team_a.get(f"/compare?jobs={a.id},{twin.id}").text
        assert 'id="spec-same"' in alike and 'id="spec-diff"' not in alike


def test_a_sweeps_importance_comes_from_its_finished_trials(served):
    from workers.schema.sweep import SweepSpec

    url, supervisor, keys = served
    store = supervisor.store
    spec = SweepSpec.model_validate({
        "name": "imp", "base": {**SPEC, "name": "imp"}, "sampler": "random", "max_trials": 12,
        "space": {"train.lr": {"loguniform": [1e-4, 1e-1]}, "train.weight_decay": {"uniform": [0, 0.2]}},
        "objective": {"metric": "loss", "mode": "min"}})
    sweep, _ = store.sweeps.create(tenant="team-a", spec=spec)
    rng = random.Random(0)
    for number in range(12):  # the objective is lr's distance from 10^-2.5; weight decay barely moves it
        lr, wd = 10 ** rng.uniform(-4, -1), rng.uniform(0, 0.2)
        store.sweeps.add_trial(sweep.id, number, {"train.lr": lr, "train.weight_decay": wd})
        loss = abs(math.log10(lr) + 2.5) + 0.01 * wd
        store.sweeps.update_trial(sweep.id, number, state="SUCCEEDED" if number < 10 else "PRUNED",
                                  objective=loss)
    with httpx.Client(base_url=url, timeout=10,
                      headers={"Authorization": f"Bearer {keys['team-a']}"}) as team_a, \
            httpx.Client(base_url=url, timeout=10,
                         headers={"Authorization": f"Bearer {keys['team-b']}"}) as team_b:
        found = team_a.get(f"/v1/sweeps/{sweep.id}/importance").json()
        assert (found["evaluator"], found["trials"], found["reason"]) == ("ped_anova", 10, None)
        assert list(found["importances"]) == ["train.lr", "train.weight_decay"]
        assert found["importances"]["train.lr"] > 0.6 and sum(found["importances"].values()) == \
            pytest.approx(1.0)
        assert team_b.get(f"/v1/sweeps/{sweep.id}/importance").status_code == 404

    early, _ = store.sweeps.create(tenant="team-a", spec=spec.model_copy(update={"name": "early"}))
    store.sweeps.add_trial(early.id, 0, {"train.lr": 0.001, "train.weight_decay": 0.1})
    store.sweeps.update_trial(early.id, 0, state="SUCCEEDED", objective=3.0)
    with httpx.Client(base_url=url, timeout=10,
                      headers={"Authorization": f"Bearer {keys['team-a']}"}) as team_a:
        none_yet = team_a.get(f"/v1/sweeps/{early.id}/importance").json()
    assert none_yet["importances"] == {} and "needs at least 3" in none_yet["reason"]


def test_a_trials_objective_is_one_value_on_every_view(served, monkeypatch, tmp_path):
    """A pruned and a succeeded trial, their rows written as the controller
    would: the sweep's API and page, `brigade sweep status`, the jobs list
    (API and `brigade jobs`) and the compare view (API and page) all show each
    trial's objective, the pruned one's named with its pruning step, beside
    the job's last loss where the two differ."""
    from typer.testing import CliRunner

    from api.cli.main import app
    from workers.schema.sweep import SweepSpec, trial_spec

    url, supervisor, keys = served
    store = supervisor.store
    spec = SweepSpec.model_validate({
        "name": "agree", "base": {**SPEC, "name": "agree"}, "sampler": "grid", "max_trials": 2,
        "space": {"train.lr": {"grid": [0.001, 0.01]}}, "objective": {"metric": "loss"}})
    sweep, _ = store.sweeps.create(tenant="team-a", spec=spec)
    # (objective, pruned step, the job's last loss): the pruned one's ranks went on past its
    # pruning step, to a lower loss; the succeeded one's objective is its last loss
    made = {0: (3.6665, 16, 3.4001), 1: (3.4232, None, 3.4232)}
    jobs = {}
    for number, (objective, pruned_step, last_loss) in made.items():
        store.sweeps.add_trial(sweep.id, number, {"train.lr": (0.001, 0.01)[number]})
        job, _ = store.create_job(tenant="team-a", name=f"agree-t{number}", sweep=sweep.id,
                                  spec=trial_spec(spec, {"train.lr": (0.001, 0.01)[number]}, number))
        store.update_job(job.id, latest_loss=last_loss, step=10)
        store.sweeps.update_trial(sweep.id, number, job_id=job.id,
                                  state="PRUNED" if pruned_step else "SUCCEEDED",
                                  objective=objective, pruned_step=pruned_step)
        jobs[number] = job.id
    with httpx.Client(base_url=url, timeout=10,
                      headers={"Authorization": f"Bearer {keys['team-a']}"}) as api:
        trials = {t["number"]: t for t in api.get(f"/v1/sweeps/{sweep.id}").json()["trials"]}
        listed = {j["id"]: j for j in api.get("/v1/jobs", params={"sweep": sweep.id}).json()["items"]}
        one = {n: api.get(f"/v1/jobs/{job}").json() for n, job in jobs.items()}
        # a trial's objective written later shows on the list's kept page at once
        store.sweeps.update_trial(sweep.id, 1, objective=3.5)
        again = api.get("/v1/jobs", params={"sweep": sweep.id}).json()["items"]
        assert {j["trial"]["objective"] for j in again} == {3.6665, 3.5}
        store.sweeps.update_trial(sweep.id, 1, objective=3.4232)
    for number, (objective, pruned_step, last_loss) in made.items():
        trial = trials[number]
        assert (trial["objective"], trial["pruned_step"], trial["last_loss"]) == (
            objective, pruned_step, last_loss)
        shown = {"sweep": sweep.id, "number": number, "metric": "loss", "objective": objective,
                 "pruned_step": pruned_step}
        for job in (listed[jobs[number]], one[number]):  # the jobs list's and the compare view's
            assert job["trial"] == shown and job["latest_loss"] == last_loss

    with _browser(url, keys["team-a"]) as team_a:
        compare = team_a.get(f"/compare?jobs={jobs[0]},{jobs[1]}").text
        page = team_a.get(f"/sweeps/{sweep.id}").text
    cells = dict(re.findall(r'<tr data-job-id="([^"]+)".*?<td class="num objective">(.*?)</td>',
                            compare, re.S))
    assert ">3.6665</span>" in cells[jobs[0]] and "at pruning step 16" in cells[jobs[0]]
    assert ">3.4232</span>" in cells[jobs[1]] and "pruning" not in cells[jobs[1]]
    assert '<td class="num objective">3.6665</td>' in page and "at step 16" in page
    assert '<td class="num hide-narrow last-loss">3.4001</td>' in page

    monkeypatch.chdir(tmp_path)
    env = {"BRIGADE_URL": url, "BRIGADE_API_KEY": keys["team-a"], "BRIGADE_ADMIN_KEY": None}
    runner = CliRunner()
    status = runner.invoke(app, ["sweep", "status", sweep.id], env=env)
    listing = runner.invoke(app, ["jobs", "--sweep", sweep.id], env=env)
    assert status.exit_code == 0 and listing.exit_code == 0, status.output + listing.output
    header, *rows = listing.stdout.splitlines()
    assert header.split()[7:9] == ["LOSS", "OBJECTIVE"]
    by_job = {row.split()[0]: re.split(r"\s{2,}", row) for row in rows}  # cells: 2+ spaces apart
    assert by_job[jobs[0]][7:9] == ["3.4", "loss 3.667 (at pruning step 16)"]  # LOSS, OBJECTIVE
    assert by_job[jobs[1]][7:9] == ["3.423", "loss 3.423"]
    trial_rows = {line.split()[0]: line.split() for line in status.stdout.splitlines()
                  if line.split() and line.split()[0] in ("0", "1")}
    assert trial_rows["0"][4:7] == ["3.667", "16", "3.4"]  # OBJECTIVE, PRUNED AT, LAST LOSS
    assert trial_rows["1"][4:7] == ["3.423", "-", "3.423"]


def test_a_sweeps_labels_and_note_are_changed_and_filter_its_list(served, monkeypatch, tmp_path):
    """`PATCH /v1/sweeps/{id}` `{labels, note}` as a job's, `GET /v1/sweeps?label=`,
    `brigade sweep label` and `brigade sweep list --label`, and the sweep's page."""
    from typer.testing import CliRunner

    from api.cli.main import app
    from workers.schema.sweep import SweepSpec

    url, supervisor, keys = served
    store = supervisor.store
    spec = SweepSpec.model_validate({
        "name": "tagged", "base": {**SPEC, "name": "tagged", "labels": {"team": "nlp"}},
        "sampler": "grid", "max_trials": 2, "space": {"train.lr": {"grid": [0.001, 0.01]}},
        "objective": {"metric": "loss"}, "labels": {"study": "lr"}})
    sweep, _ = store.sweeps.create(tenant="team-a", spec=spec)
    other, _ = store.sweeps.create(tenant="team-a", spec=spec.model_copy(update={"labels": {}}))
    with httpx.Client(base_url=url, timeout=10,
                      headers={"Authorization": f"Bearer {keys['team-a']}"}) as api, \
            httpx.Client(base_url=url, timeout=10,
                         headers={"Authorization": f"Bearer {keys['team-b']}"}) as team_b:
        shown = api.get(f"/v1/sweeps/{sweep.id}").json()
        assert (shown["labels"], shown["note"]) == ({"study": "lr"}, None)
        listed = api.get("/v1/sweeps", params={"label": "study=lr"}).json()["sweeps"]
        assert [s["id"] for s in listed] == [sweep.id]

        changed = api.patch(f"/v1/sweeps/{sweep.id}", json={"labels": {"study": "lr", "verdict": "ok"},
                                                            "note": "TPE beat random"})
        assert changed.status_code == 200, changed.text
        assert (changed.json()["labels"], changed.json()["note"]) == (
            {"study": "lr", "verdict": "ok"}, "TPE beat random")
        assert changed.json()["spec"]["labels"] == {"study": "lr"}  # the spec as submitted
        kept = api.patch(f"/v1/sweeps/{sweep.id}", json={"note": None}).json()
        assert (kept["labels"], kept["note"]) == ({"study": "lr", "verdict": "ok"}, None)
        both = api.get("/v1/sweeps", params=[("label", "study=lr"), ("label", "verdict=ok")]).json()
        assert [s["id"] for s in both["sweeps"]] == [sweep.id]

        for body, field in (({}, "body"), ({"labels": {"bad key": "x"}}, "labels"),
                            ({"labels": {f"k{i}": "v" for i in range(16)}}, "labels"),
                            ({"note": "x", "other": 1}, "other")):
            refused = api.patch(f"/v1/sweeps/{sweep.id}", json=body)
            assert refused.status_code == 422 and field in refused.text, (body, refused.text)
        assert "17 labels" in api.patch(f"/v1/sweeps/{sweep.id}", json={
            "labels": {f"k{i}": "v" for i in range(16)}}).json()["error"]["message"]
        assert api.get("/v1/sweeps", params={"label": "nokey"}).status_code == 422
        assert team_b.patch(f"/v1/sweeps/{sweep.id}", json={"note": "x"}).status_code == 404

    with _browser(url, keys["team-a"]) as team_a:
        page = team_a.get(f"/sweeps/{sweep.id}").text
    assert 'id="sweep-labels"' in page and "verdict" in page

    monkeypatch.chdir(tmp_path)
    env = {"BRIGADE_URL": url, "BRIGADE_API_KEY": keys["team-a"], "BRIGADE_ADMIN_KEY": None}
    runner = CliRunner()
    labelled = runner.invoke(app, ["sweep", "label", other.id, "stage=dev", "--note", "a baseline"],
                             env=env)
    assert labelled.exit_code == 0, labelled.output
    assert labelled.stdout.splitlines() == ["stage=dev", "note: a baseline"]
    removed = runner.invoke(app, ["sweep", "label", sweep.id, "--remove", "verdict"], env=env)
    assert removed.stdout.splitlines() == ["study=lr"]
    listing = runner.invoke(app, ["sweep", "list", "--label", "stage=dev"], env=env)
    assert listing.exit_code == 0, listing.output
    header, *rows = listing.stdout.splitlines()
    assert "LABELS" in header.split() and [r.split()[0] for r in rows] == [other.id]
    assert "stage=dev" in rows[0]
