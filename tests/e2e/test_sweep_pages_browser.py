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

import httpx
import pytest

from tests.ci import in_ci
from tests.e2e.browser import Browser, available

WHY_NOT = available()
if WHY_NOT and not in_ci():
    pytest.skip(f"no browser here: {WHY_NOT}", allow_module_level=True)

from api.server.app import create_app  # noqa: E402
from service.states import JobState as S  # noqa: E402
from tests.api.conftest import ADMIN_KEY, make_supervisor  # noqa: E402
from tests.api.live_server import LiveServer  # noqa: E402
from tests.e2e.test_dashboard_browser import (  # noqa: E402
    at_phone_width,
    browser,  # noqa: F401 - the module's Chromium, a fixture of its own here
    clean,
    sign_in,
    text_of,
    told_apart,
    wait_for,
    y_ticks,
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
         "pruner_options": {"min_steps": 10}, "labels": {"study": "lr-grid"}}
HEADS = {**SWEEP, "name": "heads-ablation", "space": {"model.n_heads": {"choice": [2, 4]}},
         "max_trials": 2, "labels": {"study": "heads", "owner": "ana"},
         "note": "Do heads matter at this width? Two points, the same lr as the grid's best; "
                 "compare with lr-grid.\nRun again after the data change."}
# (lr, heads, how fast its loss falls, the step it was pruned at or None); the last trial's
# point was refused (3 heads do not divide d_model 32): no job, no objective
TRIALS = [(0.003, 2, 0.050, None), (0.0003, 4, 0.012, None), (0.01, 2, 0.080, None),
          (0.3, 4, 0.002, 20), (0.001, 3, 0.030, None)]


MIB = 1 << 20


def _curve(rate: float, steps: int) -> list[dict]:
    """Made-up but plausible rows: a loss falling at `rate` to a floor, an eval loss every 10
    steps; the bytes moved a step, its theory, the memory and tokens/s nearly flat, as a
    small job's are (a tick a tenth of a MiB apart read 1.5, 1.4, 1.4 MiB)."""
    rows = []
    for step in range(1, steps + 1):
        loss = 1.8 + 3.7 * math.exp(-rate * step) + 0.04 * math.sin(step * 1.7)
        row = {"step": step, "loss": loss, "comm_bytes": int(1.452 * MIB) + 400 * (step % 3),
               "comm_bytes_theory": int(1.4385 * MIB), "tokens_per_s": 12345.0 + step % 4,
               "peak_mem_bytes": 700 * MIB + 3000 * step, "mem_theory_bytes": 690 * MIB}
        if step % 10 == 0:
            row["eval_loss"] = loss + 0.12
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(the live server, the sweep's id, the trials' job ids by number, {tenant: key})."""
    from workers.schema import JobSpec
    from workers.schema.sweep import SweepSpec, trial_spec

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
        # a pruned trial's ranks were two steps past the step it was judged at when told to stop
        rows = _curve(rate, pruned_at + 2 if pruned_at else 60)
        store.record_metrics(job.id, 1, rows)
        store.update_job(job.id, latest_loss=rows[-1]["loss"])
        for to in (S.STARTING, S.RUNNING):
            store.transition(job.id, to, reason="made by the test")
        if pruned_at:
            store.transition(job.id, S.PRUNING, reason=f"pruned at step {pruned_at}: asha")
            store.transition(job.id, S.PRUNED, reason="pruned", step=pruned_at + 2)
        else:
            store.transition(job.id, S.SUCCEEDED, reason="all steps done", step=60)
        last_eval = [r["eval_loss"] for r in rows if "eval_loss" in r and r["step"] <= (pruned_at or 60)][-1]
        store.sweeps.update_trial(sweep.id, number, job_id=job.id, objective=last_eval,
                                  state="PRUNED" if pruned_at else "SUCCEEDED", pruned_step=pruned_at)
        jobs[number] = job.id
    store.sweeps.add_trial(sweep.id, 4, {"train.lr": 0.001, "model.n_heads": 3})
    store.sweeps.update_trial(
        sweep.id, 4, state="FAILED",
        error="model.d_model: model.d_model (32) must be divisible by model.n_heads (3)")
    store.sweeps.set_state(sweep.id, _sweep_state("RUNNING"))
    store.sweeps.set_state(sweep.id, _sweep_state("SUCCEEDED"))
    # a second sweep of team-a's, labelled otherwise, with a note of two lines (nothing run)
    store.sweeps.create(tenant="team-a", spec=SweepSpec.model_validate(HEADS))
    # a job of team-b's, to be refused in team-a's compare view
    store.create_job(tenant="team-b", name="theirs", spec=JobSpec.model_validate(BASE))
    with LiveServer(create_app(supervisor)) as live:
        yield live, sweep.id, jobs, keys
    store.dispose()


def _sweep_state(name: str):
    from service.states import SweepState

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


def _listed_sweeps(browser: Browser) -> list[str]:
    return browser.driver.execute_script(
        "return [...document.querySelectorAll('#sweeps-table tbody tr[data-sweep-id]')]"
        ".map(r => r.querySelector('td.name a').textContent);")


def test_the_sweeps_list_shows_labels_and_a_short_note_and_filters_by_label(served, browser):
    """Each sweep's labels as chips and its note's first line, cut short (the whole note in
    its title); the label filter (and a chip, clicked) lists only the sweeps labelled so, as
    `GET /v1/sweeps?label=` does, kept in the page's URL; a filter that is not key=value
    says why."""
    from selenium.webdriver.common.by import By

    live, sweep_id, _, _ = served
    d = browser.driver
    d.get(live.url + "/sweeps")
    wait_for("both sweeps", lambda: sorted(_listed_sweeps(browser)) == ["heads-ablation", "lr-grid"])
    chips = d.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#sweeps-table tbody tr[data-sweep-id]')]"
        ".map(r => [r.querySelector('td.name a').textContent, [...r.querySelectorAll('a.label-chip')]"
        ".map(c => c.querySelector('.label-key').textContent + '=' + c.querySelector('.label-value').textContent)]));")
    assert chips["heads-ablation"] == ["owner=ana", "study=heads"], chips  # sorted by key
    assert chips["lr-grid"] and all(c.startswith("study=") for c in chips["lr-grid"]), chips
    note = d.find_element(By.CSS_SELECTOR, "#sweeps-table tr:not([data-sweep-id='%s']) .run-note" % sweep_id)
    assert note.text.startswith("Do heads matter at this width?") and note.text.endswith("\u2026"), note.text
    assert len(note.text) <= 60 and "data change" not in note.text, note.text
    assert note.get_attribute("title") == HEADS["note"]
    _shot(browser, "sweeps-labels.png")

    label = d.find_element(By.ID, "label-filter")
    label.send_keys("study=heads")
    wait_for("the filtered list", lambda: _listed_sweeps(browser) == ["heads-ablation"])
    assert "label=study%3Dheads" in d.current_url and text_of(browser, "#sweeps-summary") == "1 sweep match."
    label.clear()
    label.send_keys("nokey")
    wait_for("why not", lambda: "key=value" in text_of(browser, "#sweeps-table tbody"))
    # a chip, clicked, filters on itself; the page opened with ?label= filters at once
    d.get(live.url + "/sweeps")
    wait_for("both sweeps", lambda: len(_listed_sweeps(browser)) == 2)
    d.find_element(By.CSS_SELECTOR, "#sweeps-table a.label-chip[href*='owner']").click()
    wait_for("the chip's list", lambda: _listed_sweeps(browser) == ["heads-ablation"])
    assert d.find_element(By.ID, "label-filter").get_attribute("value") == "owner=ana"

    def fits() -> None:  # the chips and the note wrap: no sideways scrolling on a phone
        assert d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    at_phone_width(browser, fits)
    clean(browser, live, allow=("Failed to load resource",))  # the 422 itself
    d.get(live.url + "/sweeps")  # the list as the next test finds it
    wait_for("both sweeps", lambda: len(_listed_sweeps(browser)) == 2)


def test_the_sweep_page_sorts_by_objective_and_marks_the_pruned_trial(served, browser):
    from selenium.webdriver.common.by import By

    live, sweep_id, jobs, _ = served
    d = browser.driver
    d.find_element(By.CSS_SELECTOR, f"#sweeps-table tr[data-sweep-id='{sweep_id}'] a").click()
    wait_for("the trials drawn", lambda: d.find_elements(By.CSS_SELECTOR, "#chart-objective g.pt"))
    assert _trial_order(browser) == [0, 1, 2, 3, 4]  # by number at first
    assert text_of(browser, "#sweep-labels").replace("\n", "") == "studylr-grid"  # what its trials carry
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
    # its objective (the eval loss at step 20, judged) and its job's last loss (step 22), each named
    assert text_of(browser, "#trials th[data-sort='objective']") == "Objective: eval_loss"
    pruned_rows = _curve(TRIALS[3][2], 22)
    assert text_of(browser, "#trials tr[data-number='3'] .objective") == f"{pruned_rows[19]['eval_loss']:.4f}"
    assert text_of(browser, "#trials tr[data-number='3'] .last-loss") == f"{pruned_rows[21]['loss']:.4f}"
    assert "PRUNED" in text_of(browser, "#trials tr[data-number='3']")
    assert "must be divisible" in text_of(browser, "#trials tr[data-number='4'] .note")
    # one chart a parameter; the best (finished) trials' curves overlaid, best first
    assert [f.get_attribute("data-param") for f in d.find_elements(By.CSS_SELECTOR, "#params figure")] == \
        ["train.lr", "model.n_heads"]
    assert "log scale" in text_of(browser, "#params figure[data-param='train.lr'] figcaption")
    wait_for("the best curves", lambda: len(_series(browser, "#chart-best")) == 3)
    assert _series(browser, "#chart-best") == [jobs[int(n)] for n in ranked if int(n) != 3]
    assert text_of(browser, "#sweep-best").startswith(f"Best: trial {ranked[0]}, eval_loss")
    # every trial across its parameters, a line each (the pruned one dashed, the refused one
    # without an objective grey); each parameter's importance from the three finished trials
    lines = d.find_elements(By.CSS_SELECTOR, "#chart-parallel polyline.pc-line")
    assert sorted(int(line.get_attribute("data-number")) for line in lines) == [0, 1, 2, 3, 4]
    classes = {int(line.get_attribute("data-number")): line.get_attribute("class") for line in lines}
    assert "pc-pruned" in classes[3] and "pc-none" in classes[4] and "pc-best" in classes[int(ranked[0])]
    assert "eval_loss (min)" in text_of(browser, "#chart-parallel svg")
    wait_for("the importance", lambda: d.find_elements(By.CSS_SELECTOR, "#chart-importance g.imp-row"))
    shares = d.execute_script("return Object.fromEntries([...document.querySelectorAll("
                              "'#chart-importance g.imp-row')].map(g => [g.dataset.param, Number(g.dataset.share)]));")
    assert set(shares) == {"train.lr", "model.n_heads"} and abs(sum(shares.values()) - 1) < 1e-3, shares
    assert "3 finished trials" in text_of(browser, "#chart-importance figcaption")
    d.find_element(By.CSS_SELECTOR, "th[data-sort='objective'] button").click()  # the best first again
    _shot(browser, "sweep.png")

    def fits() -> None:  # nothing but the trials' table scrolls sideways
        assert d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    at_phone_width(browser, fits)
    clean(browser, live)


def _text_px(browser: Browser, css: str) -> list[float]:
    """The size each SVG text `css` matches is drawn at, in CSS pixels: its font size
    times its drawing's scale on the screen."""
    return browser.driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(t =>"
        " parseFloat(getComputedStyle(t).fontSize) * Math.hypot(t.getScreenCTM().a, t.getScreenCTM().b));",
        css)  # (a rotated text's scale is in both: the y axis's title)


def test_the_parameter_plots_text_is_the_stylesheets_size_at_1280_px_and_phone_width(served, browser):
    """Each parameter's plot is drawn at the width it is shown at: its tick labels 11 px and
    axis titles 12 px, as the stylesheet says (scaled down from a fixed width, three columns
    at 1280 px drew them smaller)."""
    live, sweep_id, _, _ = served
    d = browser.driver
    d.get(live.url + f"/sweeps/{sweep_id}")
    wait_for("the parameter plots", lambda: len(_text_px(browser, "#params text.x-tick")) > 3)

    def readable() -> None:
        wait_for("a drawing at this width", lambda: d.execute_script(
            "return [...document.querySelectorAll('#params figure svg')].every(s =>"
            " Math.abs(s.viewBox.baseVal.width - s.getBoundingClientRect().width) < 1.5);"))
        for css, px in (("#params text.axis-label:not(.axis-title)", 11), ("#params text.axis-title", 12)):
            sizes = _text_px(browser, css)
            assert sizes and all(abs(size - px) < 0.5 for size in sizes), (css, sizes)
        ticks = y_ticks(browser, "#params figure")
        assert set(ticks) == {"train.lr", "model.n_heads"}, ticks
        assert all(labels and told_apart(labels) for labels in ticks.values()), ticks
    at_phone_width(browser, readable)
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
    # where their specs differ, above the curves: the two sampled fields, each trial's value
    fields = [r.get_attribute("data-field") for r in d.find_elements(By.CSS_SELECTOR, "#spec-diff tbody tr")]
    assert sorted(fields) == ["model.n_heads", "train.lr"], fields
    lr_row = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#spec-diff tr[data-field='train.lr'] td")]
    assert lr_row == [str(TRIALS[n][0]) for n in (0, 1, 3)], lr_row
    assert d.execute_script("return document.getElementById('spec-diff').getBoundingClientRect().top"
                            " < document.getElementById('chart-loss').getBoundingClientRect().top")
    # the pruned trial's objective as its sweep page shows it, named with its pruning step
    pruned = f"#compared tr[data-job-id='{jobs[3]}'] .objective"
    assert text_of(browser, pruned).split("\n") == [f"{_curve(TRIALS[3][2], 22)[19]['eval_loss']:.4f}",
                                                    "at pruning step 20"]
    _shot(browser, "compare.png")
    clean(browser, live)


def test_nearly_flat_series_tick_labels_tell_their_ticks_apart(served, browser):
    """A trial's page: its bytes moved a step (1.452 MiB, give or take 800 bytes, against a
    theory of 1.4385), memory and tokens/s nearly flat; every chart's value axis labels
    each tick with its own text and its true value. And the chart itself, given the very
    series that drew 1.5, 1.4, 1.4 MiB."""
    from selenium.webdriver.common.by import By

    live, _, jobs, _ = served
    d = browser.driver
    d.get(live.url + f"/jobs/{jobs[0]}")
    wait_for("the bytes chart", lambda: d.find_elements(By.CSS_SELECTOR, "#chart-comm polyline"))
    ticks = y_ticks(browser, "figure.chart")
    assert {"chart-loss", "chart-throughput", "chart-memory", "chart-comm"} <= set(ticks), ticks
    for name, labels in ticks.items():
        assert len(labels) >= 2 and told_apart(labels), (name, labels)
    assert all(label.endswith(" MiB") for label in ticks["chart-comm"]), ticks["chart-comm"]

    def drawn(values: list[float]) -> list[str]:
        """The value axis's labels of a bytes chart drawn, on this page, over `values`."""
        return d.execute_script(
            "const f = document.createElement('figure'); f.className = 'chart'; document.body.append(f);"
            "Chart.draw(f, 'bytes', [{name: 'm', key: 'm', cls: 'c6', data: {step: arguments[0].map("
            " (v, i) => i + 1), value: arguments[0]}}], [], Brigade.bytes, {base: 1024});"
            "const said = [...f.querySelectorAll('text.y-tick')].map(t => t.textContent);"
            "f.remove(); return said;", values)

    flat = drawn([1.45 * MIB, 1.46 * MIB, 1.455 * MIB])
    assert len(flat) >= 3 and told_apart(flat) and flat[0] == "1.450 MiB", flat
    assert drawn([0, 0, 0]) == ["0 B", "1 B"]  # a flat zero: whole bytes, none below it
    _shot(browser, "job-flat-series.png")
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
    # a trial's objective as its sweep page shows it (the pruned one's at its pruning step)
    assert text_of(browser, f"tr[data-job-id='{jobs[3]}'] .objective").split("\n") == [
        f"{_curve(TRIALS[3][2], 22)[19]['eval_loss']:.4f}", "at pruning step 20"]
    assert text_of(browser, f"tr[data-job-id='{jobs[0]}'] .objective") == \
        f"{_curve(TRIALS[0][2], 60)[59]['eval_loss']:.4f}"
    _shot(browser, "jobs-objective.png")

    def fits() -> None:  # the ticks take no room the phone's table lacks
        table = d.find_element(By.CSS_SELECTOR, ".table-wrap")
        assert d.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth + 1", table)
        assert d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    at_phone_width(browser, fits)
    d.find_element(By.ID, "compare").click()
    wait_for("the compare view", lambda: "/compare?jobs=" in d.current_url)
    wait_for("two curves", lambda: len(_series(browser, "#chart-loss")) == 2)
    clean(browser, live)


def test_a_trials_labels_are_shown_edited_on_its_page_and_filter_the_jobs_list(served, browser):
    from selenium.webdriver.common.by import By

    live, sweep_id, jobs, _ = served
    d = browser.driver
    d.get(live.url + f"/jobs/{jobs[1]}")
    wait_for("the inherited label", lambda: "study\nlr-grid" in text_of(browser, "#job-labels")
             or "studylr-grid" in text_of(browser, "#job-labels").replace("\n", ""))
    d.find_element(By.CSS_SELECTOR, "#edit-labels summary").click()
    labels = d.find_element(By.ID, "labels-input")
    assert labels.get_attribute("value") == "study=lr-grid"
    labels.clear()
    labels.send_keys("study=lr-grid\nverdict=too slow")
    d.find_element(By.ID, "note-input").send_keys("Converges, but 4x slower than t0.\nKeep as a baseline.")
    d.find_element(By.ID, "save-labels").click()
    wait_for("saved", lambda: text_of(browser, "#labels-result") == "saved")
    job = httpx.get(f"{live.url}/v1/jobs/{jobs[1]}", headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                    timeout=10).json()
    assert job["labels"] == {"study": "lr-grid", "verdict": "too slow"}
    assert job["note"] == "Converges, but 4x slower than t0.\nKeep as a baseline."
    assert "Keep as a baseline." in text_of(browser, "#job-note")
    assert len(d.find_elements(By.CSS_SELECTOR, "#job-labels a.label-chip")) == 2
    _shot(browser, "job-labels.png")

    d.find_element(By.CSS_SELECTOR, "#job-labels a.label-chip[href*='verdict']").click()
    wait_for("the filtered list", lambda: [r.get_attribute("data-job-id") for r in d.find_elements(
        By.CSS_SELECTOR, "#jobs-table tbody tr[data-job-id]")] == [jobs[1]])
    assert d.find_element(By.ID, "label-filter").get_attribute("value") == "verdict=too slow"
    d.get(live.url + "/?label=study%3Dlr-grid")
    wait_for("the sweep's trials", lambda: len(d.find_elements(
        By.CSS_SELECTOR, "#jobs-table tbody tr[data-job-id]")) == 4)

    # the sweep's own, edited on its page as a job's are
    d.get(live.url + f"/sweeps/{sweep_id}")
    wait_for("the sweep's label", lambda: "studylr-grid" in text_of(browser, "#sweep-labels").replace("\n", ""))
    d.find_element(By.CSS_SELECTOR, "#edit-labels summary").click()
    labels = d.find_element(By.ID, "labels-input")
    assert labels.get_attribute("value") == "study=lr-grid"
    labels.send_keys("\nverdict=lr 3e-3 wins")
    d.find_element(By.ID, "note-input").send_keys("Grid over lr and heads.")
    d.find_element(By.ID, "save-labels").click()
    wait_for("saved", lambda: text_of(browser, "#labels-result") == "saved")
    sweep = httpx.get(f"{live.url}/v1/sweeps/{sweep_id}", headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                      timeout=10).json()
    assert (sweep["labels"], sweep["note"]) == ({"study": "lr-grid", "verdict": "lr 3e-3 wins"},
                                                "Grid over lr and heads.")
    assert len(d.find_elements(By.CSS_SELECTOR, "#sweep-labels a.label-chip")) == 2
    assert text_of(browser, "#sweep-note") == "Grid over lr and heads."
    _shot(browser, "sweep-labels.png")
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
