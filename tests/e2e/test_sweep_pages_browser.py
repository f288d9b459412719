"""The sweep pages and the compare view in a real browser (headless Chromium,
tests/e2e/browser.py) against the real app on a real SQLite store, whose
sweep, trial jobs and metrics rows are written through the store's own API
(the supervisor is never started: nothing runs, so no pass moves them): the
trials sorted by objective on a click, the pruned trial marked, the best
trials' curves and the compare view's N curves drawn. Screenshots
(sweeps.png, sweep.png, compare.png) go to a temporary directory, or to
docs/ui/ with BRIGADE_UI_SHOTS=1 (how docs/ui's are remade), so that a run
of the suite leaves the checkout as it was."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import pytest

from tests.ci import in_ci
from tests.e2e.browser import Browser, available

WHY_NOT = available()
if WHY_NOT and not in_ci():
    pytest.skip(f"no browser here: {WHY_NOT}", allow_module_level=True)

from api.app import create_app  # noqa: E402
from service.states import JobState as S  # noqa: E402
from tests.api.conftest import ADMIN_KEY, make_supervisor  # noqa: E402
from tests.api.live_server import LiveServer  # noqa: E402
from tests.e2e.test_dashboard_browser import (  # noqa: E402
    at_phone_width,
    browser,  # noqa: F401 - the module's Chromium, a fixture of its own here
    clean,
    sign_in,
    text_of,
    wait_for,
)

DOCS_UI = Path(__file__).resolve().parents[2] / "docs" / "ui"
SHOTS = DOCS_UI if os.environ.get("BRIGADE_UI_SHOTS") == "1" else Path(tempfile.mkdtemp("-ui-shots"))
BASE = {"name": "lr-grid", "workers": 1, "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
        "data": {"source": "tokens", "uri": "file:///data/corpus"},
        "train": {"steps": 60, "lr": 0.001}, "eval": {"holdout_fraction": 0.1, "every_steps": 10}}
SWEEP = {"name": "lr-grid", "base": BASE, "sampler": "grid", "max_trials": 5, "max_concurrent": 2,
         "space": {"train.lr": {"grid": [0.0003, 0.001, 0.003, 0.01, 0.3]},
                   "model.n_heads": {"choice": [2, 4, 3]}},
         "objective": {"metric": "eval_loss", "mode": "min"}, "pruner": "asha",
         "pruner_options": {"min_steps": 10}}
# (lr, heads, how fast its loss falls, the step it was pruned at or None); the last trial's
# point was refused (3 heads do not divide d_model 32): no job, no objective
TRIALS = [(0.003, 2, 0.050, None), (0.0003, 4, 0.012, None), (0.01, 2, 0.080, None),
          (0.3, 4, 0.002, 20), (0.001, 3, 0.030, None)]


def _curve(rate: float, steps: int) -> list[dict]:
    """Made-up but plausible rows: a loss falling at `rate` to a floor, an eval loss every 10 steps."""
    rows = []
    for step in range(1, steps + 1):
        loss = 1.8 + 3.7 * math.exp(-rate * step) + 0.04 * math.sin(step * 1.7)
        row = {"step": step, "loss": loss}
        if step % 10 == 0:
            row["eval_loss"] = loss + 0.12
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(the live server, the sweep's id, the trials' job ids by number, {tenant: key})."""
    from workers.spec import JobSpec
    from workers.spec.sweep import SweepSpec, trial_spec

    supervisor = make_supervisor(tmp_path_factory.mktemp("sweep-browser"))
    store = supervisor.store
    keys = {name: store.tenants.create(name)[1] for name in ("team-a", "team-b")}
    spec = SweepSpec.model_validate(SWEEP)
    sweep, _ = store.sweeps.create(tenant="team-a", spec=spec)
    jobs: dict[int, str] = {}
    for number, (lr, heads, rate, pruned_at) in enumerate(TRIALS[:4]):
        params = {"train.lr": lr, "model.n_heads": heads}
        store.sweeps.add_trial(sweep.id, number, params)
        job, _ = store.create_job(tenant="team-a", name=f"lr-grid-t{number}", sweep=sweep.id,
                                  spec=trial_spec(spec, params, number))
        rows = _curve(rate, pruned_at or 60)
        store.record_metrics(job.id, 1, rows)
        for to in (S.STARTING, S.RUNNING):
            store.transition(job.id, to, reason="made by the test")
        if pruned_at:
            store.transition(job.id, S.PRUNING, reason=f"pruned at step {pruned_at}: asha")
            store.transition(job.id, S.PRUNED, reason="pruned", step=pruned_at)
        else:
            store.transition(job.id, S.SUCCEEDED, reason="all steps done", step=60)
        last_eval = [r["eval_loss"] for r in rows if "eval_loss" in r][-1]
        store.sweeps.update_trial(sweep.id, number, job_id=job.id, objective=last_eval,
                                  state="PRUNED" if pruned_at else "SUCCEEDED", pruned_step=pruned_at)
        jobs[number] = job.id
    store.sweeps.add_trial(sweep.id, 4, {"train.lr": 0.001, "model.n_heads": 3})
    store.sweeps.update_trial(
        sweep.id, 4, state="FAILED",
        error="model.d_model: model.d_model (32) must be divisible by model.n_heads (3)")
    store.sweeps.set_state(sweep.id, _sweep_state("RUNNING"))
    store.sweeps.set_state(sweep.id, _sweep_state("SUCCEEDED"))
    # a job of team-b's, to be refused in team-a's compare view
    store.create_job(tenant="team-b", name="theirs", spec=JobSpec.model_validate(BASE))
    with LiveServer(create_app(supervisor)) as live:
        yield live, sweep.id, jobs, keys
    store.dispose()


def _sweep_state(name: str):
    from service.store.sweep_records import SweepState

    return SweepState(name)


def _shot(browser: Browser, name: str) -> None:
    """The whole page at 1280 px into SHOTS, the window as it was before."""
    browser.screenshot(SHOTS / name)
    browser.resize(1280, 900)


def _trial_order(browser: Browser) -> list[int]:
    """The trials' numbers as the table lists them now (read at once: it is redrawn)."""
    return browser.driver.execute_script(
        "return [...document.querySelectorAll('#trials tbody tr[data-number]')]"
        ".map(r => Number(r.dataset.number));")


def _series(browser: Browser, chart: str) -> list[str]:
    """The series (job ids) drawn in `chart`, in order."""
    return browser.driver.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' polyline')]"
        ".map(p => p.dataset.series);", chart)


def _sorted_by(browser: Browser) -> str | None:
    return browser.driver.execute_script(
        "return document.querySelector(\"th[data-sort='objective']\").getAttribute('aria-sort');")


def test_the_sweeps_page_lists_the_sweep_with_its_best(served, browser):
    from selenium.webdriver.common.by import By

    live, sweep_id, _, keys = served
    sign_in(browser, live, keys["team-a"])
    d = browser.driver
    d.find_element(By.LINK_TEXT, "Sweeps").click()
    row = f"#sweeps-table tr[data-sweep-id='{sweep_id}']"
    wait_for("the sweep's row", lambda: d.find_elements(By.CSS_SELECTOR, row))
    cells = [td.text for td in d.find_elements(By.CSS_SELECTOR, f"{row} td")]
    assert cells[0].startswith("lr-grid") and "SUCCEEDED" in cells[1], cells
    assert cells[2] == "5 / 5" and "1 pruned" in cells[3] and "1 failed" in cells[3], cells
    best = min(_curve(rate, 60)[-1]["eval_loss"] for _, _, rate, pruned_at in TRIALS[:4] if not pruned_at)
    assert cells[4] == "min eval_loss" and cells[5] == f"{best:.4f}", cells
    _shot(browser, "sweeps.png")
    clean(browser, live)


def test_the_sweep_page_sorts_by_objective_and_marks_the_pruned_trial(served, browser):
    from selenium.webdriver.common.by import By

    live, sweep_id, jobs, _ = served
    d = browser.driver
    d.find_element(By.CSS_SELECTOR, f"#sweeps-table tr[data-sweep-id='{sweep_id}'] a").click()
    wait_for("the trials drawn", lambda: d.find_elements(By.CSS_SELECTOR, "#chart-objective g.pt"))
    assert _trial_order(browser) == [0, 1, 2, 3, 4]  # by number at first
    objectives = browser.driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#trials tbody tr[data-number]')]"
        ".map(r => [r.dataset.number, r.dataset.objective === '' ? null : Number(r.dataset.objective)]));")
    ranked = sorted((n for n in objectives if objectives[n] is not None), key=lambda n: objectives[n])
    d.find_element(By.CSS_SELECTOR, "th[data-sort='objective'] button").click()
    assert _trial_order(browser) == [int(n) for n in ranked] + [4]  # best first; no objective last
    assert _sorted_by(browser) == "ascending"
    d.find_element(By.CSS_SELECTOR, "th[data-sort='objective'] button").click()
    assert _trial_order(browser) == [int(n) for n in reversed(ranked)] + [4]
    assert _sorted_by(browser) == "descending"

    # the pruned trial: crossed in the objective chart and in each parameter's, its row marked
    assert d.find_elements(By.CSS_SELECTOR, "#chart-objective g.pt-pruned[data-number='3']")
    assert len(d.find_elements(By.CSS_SELECTOR, "#params g.pt-pruned[data-number='3']")) == 2
    ticks = text_of(browser, "#params figure[data-param='model.n_heads'] svg")
    assert all(n in ticks for n in "234"), ticks  # a choice's values side by side
    assert "pruned" in d.find_element(By.CSS_SELECTOR, "#trials tr[data-number='3']").get_attribute("class")
    assert text_of(browser, "#trials tr[data-number='3'] .pruned-at") == "at step 20"
    assert "PRUNED" in text_of(browser, "#trials tr[data-number='3']")
    assert "must be divisible" in text_of(browser, "#trials tr[data-number='4'] .note")
    # one chart a parameter; the best (finished) trials' curves overlaid, best first
    assert [f.get_attribute("data-param") for f in d.find_elements(By.CSS_SELECTOR, "#params figure")] == \
        ["train.lr", "model.n_heads"]
    assert "log scale" in text_of(browser, "#params figure[data-param='train.lr'] figcaption")
    wait_for("the best curves", lambda: len(_series(browser, "#chart-best")) == 3)
    assert _series(browser, "#chart-best") == [jobs[int(n)] for n in ranked if int(n) != 3]
    assert text_of(browser, "#sweep-best").startswith(f"Best: trial {ranked[0]}, eval_loss")
    d.find_element(By.CSS_SELECTOR, "th[data-sort='objective'] button").click()  # the best first again
    _shot(browser, "sweep.png")

    def fits() -> None:  # nothing but the trials' table scrolls sideways
        assert d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    at_phone_width(browser, fits)
    clean(browser, live)


def test_trials_ticked_on_the_sweep_page_open_overlaid_in_the_compare_view(served, browser):
    from selenium.webdriver.common.by import By

    live, _, jobs, _ = served
    d = browser.driver
    picked = [jobs[0], jobs[1], jobs[3]]
    for job in picked:
        d.find_element(By.CSS_SELECTOR, f"#trials input.pick[value='{job}']").click()
    d.find_element(By.ID, "compare-picked").click()
    wait_for("the compare view", lambda: "/compare?jobs=" in d.current_url)
    for chart in ("#chart-loss", "#chart-eval"):
        wait_for(f"{chart}'s curves", lambda c=chart: len(_series(browser, c)) == 3)
        assert sorted(_series(browser, chart)) == sorted(picked)
    legend = text_of(browser, "#chart-loss .legend")
    assert all(f"lr-grid-t{n}" in legend for n in (0, 1, 3)), legend
    _shot(browser, "compare.png")
    clean(browser, live)


def test_the_jobs_list_ticks_jobs_into_the_compare_view(served, browser):
    from selenium.webdriver.common.by import By

    live, _, jobs, _ = served
    d = browser.driver
    d.get(live.url + "/")
    for job in (jobs[1], jobs[2]):
        box = f"tr[data-job-id='{job}'] input.pick"
        wait_for("the row", lambda b=box: d.find_elements(By.CSS_SELECTOR, b))
        d.find_element(By.CSS_SELECTOR, box).click()
    assert text_of(browser, "#compare-count") == "2 ticked"

    def fits() -> None:  # the ticks take no room the phone's table lacks
        table = d.find_element(By.CSS_SELECTOR, ".table-wrap")
        assert d.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth + 1", table)
        assert d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    at_phone_width(browser, fits)
    d.find_element(By.ID, "compare").click()
    wait_for("the compare view", lambda: "/compare?jobs=" in d.current_url)
    wait_for("two curves", lambda: len(_series(browser, "#chart-loss")) == 2)
    clean(browser, live)


def test_another_tenant_finds_neither_the_sweep_nor_its_trials(served, browser):
    from selenium.webdriver.common.by import By

    live, sweep_id, jobs, keys = served
    d = browser.driver
    d.delete_all_cookies()
    sign_in(browser, live, keys["team-b"])
    d.get(live.url + "/sweeps")
    wait_for("the empty list", lambda: "No sweeps yet" in text_of(browser, "#sweeps-table tbody"))
    d.get(live.url + f"/sweeps/{sweep_id}")
    assert d.find_element(By.TAG_NAME, "h1").text == "Not found" and "lr-grid" not in d.page_source
    d.get(live.url + f"/compare?jobs={jobs[0]}")
    assert d.find_element(By.TAG_NAME, "h1").text == "Not found"
    clean(browser, live, allow=("Failed to load resource",))  # the 404s themselves
    d.delete_all_cookies()
    sign_in(browser, live, ADMIN_KEY)  # the admin sees every tenant's
    d.get(live.url + f"/sweeps/{sweep_id}")
    wait_for("the trials", lambda: len(_trial_order(browser)) == 5)
    clean(browser, live)
