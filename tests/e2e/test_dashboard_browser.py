"""The dashboard in a real browser (headless Chromium, Debian's packages,
driven by Selenium) against a real `brigade serve` running real tiny jobs:
one server and one browser for the whole module.

Every page visited is checked for requests to any host but the server (the
browser's own network log) and for console errors. Screenshots go to a
temporary directory, or to docs/ui/ with BRIGADE_UI_SHOTS=1 (how docs/ui's
are remade)."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from api.server.sessions import COOKIE, CSRF_HEADER
from tests.ci import in_ci
from tests.e2e.browser import Browser, available
from tests.e2e.serve_harness import KEY, Server

WHY_NOT = available()
if WHY_NOT and not in_ci():
    pytest.skip(f"no browser here: {WHY_NOT}", allow_module_level=True)
# Under CI the browser must be there (.ci/run installs it): a missing one fails below.

DOCS_UI = Path(__file__).resolve().parents[2] / "docs" / "ui"
SHOTS = DOCS_UI if os.environ.get("BRIGADE_UI_SHOTS") == "1" else Path(tempfile.mkdtemp("-ui-shots"))

SLOW_JOB = """\
name: dash-live
workers: 2
resources_per_worker: {cpu: 1}
model: {n_layers: 2, d_model: 48, n_heads: 4, seq_len: 32}
data: {source: builtin}
train: {steps: 600, global_batch_size: 12, lr: 0.003}
checkpoint: {every_steps: 5, keep_last: 2}
"""
# A job with an export (a Llama model has a Hugging Face one), made while the preparation runs.
LLAMA = {"name": "dash-llama", "workers": 1, "resources_per_worker": {"cpu": 1},
         "model": {"family": "llama", "n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16,
                   "vocab_size": 256},
         "data": {"source": "builtin"}, "train": {"steps": 4, "global_batch_size": 4},
         "checkpoint": {"every_steps": 2}}


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_ray):
    # a worker-hour of no flavor costs 36 (0.01 a worker-second): the usage table shows a cost
    srv = Server(tmp_path_factory.mktemp("dashboard"), ray_address=shared_ray, shared=True,
                 env={"BRIGADE_DEFAULT_PRICE_PER_WORKER_HOUR": "36"}).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser():
    assert WHY_NOT is None, WHY_NOT
    b = Browser()
    yield b
    b.close()


@pytest.fixture(scope="module")
def tenants(server):
    made = {n: server.http.post("/v1/tenants", json={"name": n}).json() for n in ("team-a", "team-b")}
    assert all("api_key" in t for t in made.values()), made
    return made


@pytest.fixture(scope="module")
def state():
    return {}


def wait_for(what, predicate, timeout_s: float = 60.0, every_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every_s)


def clean(browser: Browser, server: Server, allow: tuple[str, ...] = ()) -> None:
    """Nothing but the server was asked for, and the console has no error (but `allow`)."""
    urls, console = browser.drain()
    # chrome:// is the browser's own first tab (its new-tab page), loaded from inside the binary
    foreign = [u for u in browser.foreign(urls, server.url) if not u.startswith("chrome://")]
    assert foreign == [], foreign
    errors = [e for e in console if e["level"] == "SEVERE"
              and not any(a in e["message"] for a in allow)]
    assert errors == [], errors


def text_of(browser: Browser, css: str) -> str:
    """The first element's text; found again where the page redrew it between the find
    and the read (a live table's refresh: a stale element, seen once under load)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def first() -> str:
        found = browser.driver.find_elements(By.CSS_SELECTOR, css)
        return found[0].text if found else ""

    for _ in range(4):
        with contextlib.suppress(StaleElementReferenceException):
            return first()
    return first()  # a fifth time, raising what it raises


def sign_in(browser: Browser, server: Server, key: str) -> None:
    from selenium.webdriver.common.by import By

    d = browser.driver
    d.get(server.url + "/")
    wait_for("the sign-in page", lambda: "/login" in d.current_url)
    d.find_element(By.ID, "api-key").send_keys(key)
    d.find_element(By.CSS_SELECTOR, "#login-form button[type=submit]").click()
    wait_for("the jobs page", lambda: d.find_elements(By.ID, "jobs-table") and "/login" not in d.current_url)


def points(browser: Browser, series: str = "loss") -> int:
    return int(browser.driver.execute_script(
        "const l = document.querySelector(`polyline[data-series='${arguments[0]}']`);"
        "return l ? Number(l.dataset.points) : 0;", series))


def events_text(browser: Browser) -> str:
    return text_of(browser, "#events tbody")


def lines_high(browser: Browser, css: str) -> float:
    """How many of its own lines tall the (first) element matching `css` is."""
    return browser.driver.execute_script(
        "const e = document.querySelector(arguments[0]); const s = getComputedStyle(e);"
        "const line = parseFloat(s.lineHeight) || parseFloat(s.fontSize) * 1.2;"
        "return e.getBoundingClientRect().height / line;", css)


def y_ticks(browser: Browser, figures: str) -> dict[str, list[str]]:
    """The value axis's tick labels of each chart `figures` matches, by its id (or
    parameter), read at once (a refresh redraws them); a log axis's under "log:" + id."""
    return browser.driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll(arguments[0])].map(f =>"
        " [(f.querySelector('svg[data-scale=log]') ? 'log:' : '') + (f.id || f.dataset.param),"
        "  [...f.querySelectorAll('text.y-tick')].map(t => t.textContent)]));",
        figures)


def told_apart(labels: list[str], log: bool = False) -> bool:
    """Tick labels that say their ticks' values: each its own text, and on a linear axis
    the numbers they read evenly spaced, as the ticks are (a label rounded off breaks the
    spacing: 1.0, 1.3, 1.5 for 1.0, 1.25, 1.5)."""
    if len(set(labels)) != len(labels):
        return False
    units = {re.sub(r"^[-\d.]+", "", label).strip() for label in labels}
    if log or len(labels) < 3 or len(units) > 1:
        return True  # no even spacing to check
    numbers = [float(re.match(r"-?[\d.]+", label).group()) for label in labels]
    gaps = [b - a for a, b in zip(numbers, numbers[1:], strict=False)]
    return all(abs(g - gaps[0]) <= 1e-9 + abs(gaps[0]) * 1e-6 for g in gaps)


def at_phone_width(browser: Browser, check) -> None:
    """`check()` at 1280 px, then again at phone width (390 px)."""
    check()
    browser.resize(390, 844)
    try:
        time.sleep(0.3)
        check()
    finally:
        browser.resize(1280, 900)


def test_sign_in_sets_an_httponly_samesite_strict_cookie(server, browser, tenants):
    sign_in(browser, server, tenants["team-a"]["api_key"])
    cookie = browser.driver.get_cookie(COOKIE)
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert COOKIE not in browser.driver.execute_script("return document.cookie")  # scripts cannot read it
    assert tenants["team-a"]["api_key"] not in cookie["value"]
    assert text_of(browser, "#tenant") == "team-a"
    clean(browser, server)


def test_a_submitted_jobs_curve_grows_then_suspend_and_resume_from_the_page(server, browser, state):
    from selenium.webdriver.common.by import By

    d = browser.driver
    d.get(server.url + "/submit")
    area = d.find_element(By.ID, "spec-yaml")
    area.clear()
    area.send_keys("name: dash-live\ntrain: {steps: 0}\nmodel: {}\n")
    d.find_element(By.CSS_SELECTOR, "#submit-form button[type=submit]").click()
    error = wait_for("the API's refusal", lambda: text_of(browser, "#submit-error"))
    assert error.startswith("train.steps: Input should be greater than or equal to 1"), error
    clean(browser, server, allow=("/ui/jobs - Failed to load resource",))  # the 422 itself
    d.execute_script("document.getElementById('spec-yaml').value = arguments[0]", SLOW_JOB)
    d.find_element(By.CSS_SELECTOR, "#submit-form button[type=submit]").click()
    wait_for("the job's page", lambda: "/jobs/j-" in d.current_url)
    job_id = d.current_url.rsplit("/", 1)[1]
    state["job"] = job_id

    first = wait_for("a curve", lambda: points(browser), timeout_s=120)
    wait_for("the curve to grow", lambda: points(browser) > first, timeout_s=60)
    # the memory chart says what it measures (a CPU job: the process's RSS) against what theory
    wait_for("the memory curve", lambda: points(browser, "peak_mem_bytes"))
    memory = d.find_element(By.ID, "chart-memory")
    assert memory.get_attribute("data-device") == "cpu"
    caption = text_of(browser, "#chart-memory figcaption")
    assert "process resident memory" in caption and "model state" in caption, caption
    measured = text_of(browser, "#chart-memory .legend [data-series='peak_mem_bytes']")
    theory = text_of(browser, "#chart-memory .legend [data-series='mem_theory_bytes']")
    assert measured.startswith("measured: process peak RSS: "), measured
    assert theory.startswith("theory: model state per rank (16 B/param"), theory
    note = text_of(browser, "#chart-memory .chart-note")
    assert "resident memory (RSS)" in note and "16 bytes a parameter" in note, note
    # the latest step's FLOP/s per rank; a CPU's peak is unknown (no BRIGADE_PEAK_FLOPS): no MFU
    compute = wait_for("the FLOP/s figure", lambda: text_of(browser, "#job-compute"))
    assert re.fullmatch(r"compute: \d[\d.]* [KMGT]?FLOP/s per rank \(device peak unknown: no MFU\)",
                        compute), compute
    wait_for("the bytes moved", lambda: points(browser, "comm_bytes") > 1)
    ticks = y_ticks(browser, "figure.chart")
    assert {"chart-loss", "chart-throughput", "chart-comm"} <= set(ticks), ticks
    assert {"chart-memory", "log:chart-memory"} & set(ticks), ticks
    for name, labels in ticks.items():
        assert labels and told_apart(labels, name.startswith("log:")), (name, labels)
    assert "RUNNING" in text_of(browser, "#job-state")
    ranks = wait_for("the ranks and their nodes",
                     lambda: re.findall(r"\d+\.\d+\.\d+\.\d+", text_of(browser, "#workers tbody")))
    assert len(ranks) == 2, ranks

    d.find_element(By.ID, "suspend").click()
    wait_for("SUSPENDED", lambda: "SUSPENDED" in text_of(browser, "#job-state") and
             not d.find_element(By.ID, "resume").get_attribute("disabled"), timeout_s=120)
    assert "suspend requested by" in events_text(browser)
    rows = server.get(f"/v1/jobs/{job_id}/metrics")  # a suspended job writes no more rows
    wait_for("every row drawn", lambda: points(browser) == len(rows), timeout_s=30)  # polls every 2 s
    assert d.find_element(By.ID, "chart-loss").get_attribute("data-rows") == str(len(rows))

    d.find_element(By.ID, "resume-workers").send_keys("1")
    d.find_element(By.ID, "resume").click()
    wait_for("the resume event", lambda: "at 1 workers" in events_text(browser), timeout_s=30)
    wait_for("a resume mark on the curve",
             lambda: d.find_elements(By.CSS_SELECTOR, "#chart-loss g.mark-resume"), timeout_s=120)
    assert points(browser) > len(rows)
    assert server.job(job_id)["workers"] == 1
    clean(browser, server)


def test_csrf_token_missing_or_another_sessions_is_refused_in_the_browser(server, browser, tenants, state):
    other = httpx.Client(base_url=server.url, timeout=10)
    other.post("/ui/session", json={"api_key": tenants["team-a"]["api_key"]})
    other_token = re.search(r'csrf-token" content="(\w+)"', other.get("/").text).group(1)
    other.close()
    fetch = ("const done = arguments[arguments.length - 1];"
             "fetch(arguments[0], {method: 'POST', headers: arguments[1]}).then(r => done(r.status));")
    path = f"/v1/jobs/{state['job']}/cancel"
    d = browser.driver
    assert d.execute_async_script(fetch, path, {}) == 403
    assert d.execute_async_script(fetch, path, {CSRF_HEADER: other_token}) == 403
    assert server.job(state["job"])["state"] not in ("CANCELLING", "CANCELLED")
    browser.drain()  # the two 403s are logged as failed loads; nothing else happened
    # the page's own button carries the right token
    from selenium.webdriver.common.by import By

    d.get(server.url + f"/jobs/{state['job']}")
    wait_for("the cancel button", lambda: not d.find_element(By.ID, "cancel").get_attribute("disabled"))
    d.find_element(By.ID, "cancel").click()
    wait_for("the cancel", lambda: "cancel requested by" in events_text(browser) or
             "CANCELLED" in text_of(browser, "#job-state"), timeout_s=30)
    clean(browser, server)


def test_a_preparations_page_shows_its_files_and_their_progress(server, browser, tenants, state):
    from selenium.webdriver.common.by import By

    from tests.workers.datasets.corpus import write_inputs, write_tokenizer

    data = f"file://{server.data_dir.resolve()}/data-store/tenants/team-a/data"
    write_tokenizer(f"{data}/tokenizer.json")
    names = [uri.rsplit("/", 1)[-1] for uri in write_inputs(f"{data}/raw", files=3, docs_per_file=40)]
    with httpx.Client(base_url=server.url, timeout=30,
                      headers={"Authorization": f"Bearer {tenants['team-a']['api_key']}"}) as team_a:
        llama = team_a.post("/v1/jobs", json=LLAMA)
        assert llama.status_code == 201, llama.text
        state["llama"] = llama.json()["id"]
        answer = team_a.post("/v1/datasets", json={
            "name": "dash-prepare", "inputs": [f"{data}/raw/*"], "output": f"{data}/corpus",
            "tokenizer": f"{data}/tokenizer.json", "workers": 2, "tokens_per_shard": 2000})
        assert answer.status_code == 201, answer.text
    job_id = state["prepare"] = answer.json()["id"]
    d = browser.driver
    d.get(server.url + f"/jobs/{job_id}")
    assert text_of(browser, "#job-kind") == "dataset preparation"
    wait_for("every file tokenized",
             lambda: len(d.find_elements(By.CSS_SELECTOR, "#prepare-files tr.done")) == 3
             and "SUCCEEDED" in text_of(browser, "#job-state"), timeout_s=180)
    assert [td.text for td in d.find_elements(By.CSS_SELECTOR, "#prepare-files td.path")] == names
    progress = d.find_element(By.ID, "prepare-progress")
    assert progress.get_attribute("value") == progress.get_attribute("max") == "3"
    rows = server.get(f"/v1/jobs/{job_id}/metrics")
    tokens = sum(r["tokens"] for r in rows)
    summary = text_of(browser, "#prepare-summary")
    assert summary.startswith(f"3 of 3 files tokenized \u00b7 {tokens:,} tokens"), summary
    assert f"{data}/corpus" in text_of(browser, "#prepare-where")
    assert points(browser, "tokens_per_s") == 3  # tokens/s of each file
    # nothing of a model: no loss, memory or communication curve, no checkpoints
    for absent in ("chart-loss", "chart-memory", "chart-comm", "checkpoints", "exports"):
        assert not d.find_elements(By.ID, absent), absent
    assert text_of(browser, "#job-facts").startswith("file 3 of 3")
    assert '"prepare"' in text_of(browser, "#spec") and '"model"' not in text_of(browser, "#spec")
    clean(browser, server)


def test_the_jobs_list_shows_each_jobs_kind_and_latest_loss(server, browser, state):
    from selenium.webdriver.common.by import By

    d = browser.driver
    d.get(server.url + "/")
    wait_for("the jobs",
             lambda: len(d.find_elements(By.CSS_SELECTOR, "#jobs-table tbody tr[data-job-id]")) >= 3)
    headers = [th.text for th in d.find_elements(By.CSS_SELECTOR, "#jobs-table thead th")]
    assert headers[:5] == ["Job", "Kind", "State", "Step", "Loss"], headers  # at 1280 px

    def cells(job_id: str) -> list[str]:
        return [td.text for td in d.find_elements(By.CSS_SELECTOR, f"tr[data-job-id='{job_id}'] td")]

    loss = server.job(state["job"])["latest_loss"]
    assert loss is not None and loss > 0
    live = cells(state["job"])
    assert live[1] == "train" and live[4] == f"{loss:.3f}", live
    prep = cells(state["prepare"])
    assert prep[1] == "prepare" and prep[3] == "3 / 3 files" and prep[4] == "-", prep

    def one_line() -> None:
        assert lines_high(browser, f"tr[data-job-id='{state['job']}'] .id") < 1.5
        assert d.execute_script("return document.documentElement.scrollWidth") <= \
            d.execute_script("return window.innerWidth")
        # the loss: its own column at 1280 px, under the step at phone width (the table fits)
        shown = [e.text for e in d.find_elements(By.CSS_SELECTOR, f"tr[data-job-id='{state['job']}'] td")
                 if e.text.endswith(f"{loss:.3f}")]
        assert len(shown) == 1, cells(state["job"])
        table = d.find_element(By.CSS_SELECTOR, ".table-wrap")
        assert d.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth + 1", table)
    at_phone_width(browser, one_line)
    clean(browser, server)


def test_an_export_id_and_the_job_id_stay_on_one_line(server, browser, state):
    from selenium.webdriver.common.by import By

    job_id = state["llama"]
    wait_for("the Llama job", lambda: server.job(job_id)["state"] == "SUCCEEDED", timeout_s=180)
    made = server.http.post(f"/v1/jobs/{job_id}/exports", json={})
    assert made.status_code == 202, made.text
    export = made.json()["id"]
    assert "-" in export  # where a browser would break it
    wait_for("the export", lambda: any(x["id"] == export for x in server.get(f"/v1/jobs/{job_id}/exports")),
             timeout_s=120)
    d = browser.driver
    d.get(server.url + f"/jobs/{job_id}")
    wait_for("the export's row", lambda: d.find_elements(By.CSS_SELECTOR, "#exports .export-id"))
    assert d.find_element(By.CSS_SELECTOR, "#exports .export-id").get_attribute("title") == export

    def one_line() -> None:
        assert lines_high(browser, "#exports .export-id") < 1.5
        assert lines_high(browser, "#job-id") < 1.5
        assert d.execute_script("return document.documentElement.scrollWidth") <= \
            d.execute_script("return window.innerWidth")
    at_phone_width(browser, one_line)
    clean(browser, server)


def test_tenant_b_sees_none_of_as_jobs_and_as_job_is_not_found(server, browser, tenants, state):
    from selenium.webdriver.common.by import By

    d = browser.driver
    d.get(server.url + "/")
    d.find_element(By.ID, "sign-out").click()
    wait_for("signed out", lambda: "/login" in d.current_url)
    assert d.get_cookie(COOKIE) is None
    sign_in(browser, server, tenants["team-b"]["api_key"])
    wait_for("the empty list", lambda: "No jobs match" in text_of(browser, "#jobs-table tbody"))
    assert state["job"] not in d.page_source
    d.get(server.url + f"/jobs/{state['job']}")
    assert d.find_element(By.TAG_NAME, "h1").text == "Not found"
    assert "dash-live" not in d.page_source
    clean(browser, server, allow=(f"/jobs/{state['job']} - Failed to load resource",))  # the 404 itself


def test_admin_rotates_bs_key_on_the_tenants_page_and_bs_session_stops(server, browser, tenants):
    from selenium.webdriver.common.by import By

    b_session = httpx.Client(base_url=server.url, timeout=10)
    b_session.post("/ui/session", json={"api_key": tenants["team-b"]["api_key"]})
    assert b_session.get("/v1/jobs").status_code == 200
    d = browser.driver
    d.delete_all_cookies()
    sign_in(browser, server, KEY)
    for path, ready in (("/cluster", "#shares tbody tr"), ("/tenants", "#tenants tbody tr[data-tenant]")):
        d.get(server.url + path)
        wait_for(path, lambda r=ready: d.find_elements(By.CSS_SELECTOR, r))
        clean(browser, server)
    d.find_element(By.CSS_SELECTOR, "tr[data-tenant='team-b'] button.rotate").click()
    d.switch_to.alert.accept()
    key = wait_for("the new key", lambda: text_of(browser, "#new-key-value"))
    assert key.startswith("bk_") and key != tenants["team-b"]["api_key"]
    d.find_element(By.ID, "new-key-done").click()
    assert text_of(browser, "#new-key-value") == ""  # shown once, then gone from the page
    assert b_session.get("/v1/jobs").status_code == 401
    assert b_session.get("/", follow_redirects=False).status_code == 303
    b_session.close()
    clean(browser, server)


def test_docs_pages_load_from_the_server_alone(server, browser):
    from selenium.webdriver.common.by import By

    d = browser.driver
    for path, ready in (("/docs", ".swagger-ui .info"), ("/redoc", "[role=navigation], .menu-content")):
        d.get(server.url + path)
        wait_for(path, lambda r=ready: d.find_elements(By.CSS_SELECTOR, r), timeout_s=30)
        time.sleep(0.5)
        clean(browser, server)


def test_the_jobs_page_at_phone_width_keeps_its_controls_reachable(server, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    d = browser.driver
    browser.resize(390, 844)
    try:
        d.get(server.url + "/")
        wait_for("rows", lambda: d.find_elements(By.CSS_SELECTOR, "#jobs-table tbody tr"))
        width = d.execute_script("return document.documentElement.scrollWidth")
        assert width <= 390 + 1, f"the page scrolls sideways at phone width ({width} px)"
        d.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
        reached = set()
        for _ in range(16):  # Tab walks the skip link, the nav, sign-out and the filters
            # Tab to whatever has the focus (no element held: the table's rows and their tick
            # boxes are redrawn by the page's refresh, which would leave a held one stale)
            if reached:
                ActionChains(d).send_keys(Keys.TAB).perform()
            reached.add(d.execute_script(
                "const e = document.activeElement; return e.id || e.getAttribute('href');"))
        assert {"sign-out", "state-filter", "name-filter"} <= reached, reached
        clean(browser, server)
    finally:
        browser.resize(1280, 900)


def test_the_cluster_page_shows_when_a_queued_job_is_expected_to_start(server, browser, tenants):
    d = browser.driver
    d.delete_all_cookies()
    sign_in(browser, server, KEY)
    for job in server.get("/v1/jobs?state=QUEUED,STARTING,RUNNING,SUSPENDED&limit=500")["items"]:
        server.http.post(f"/v1/jobs/{job['id']}/cancel")  # the cluster to these two alone
    holder = server.submit({"name": "dash-holder", "workers": 4, "resources_per_worker": {"cpu": 1},
                            "model": {"n_layers": 2, "d_model": 48, "n_heads": 4, "seq_len": 32},
                            "data": {"source": "builtin"},
                            "train": {"steps": 400, "global_batch_size": 12}})
    wait_for("the holder stepping", lambda: server.job(holder["id"])["step"] >= 5, timeout_s=120)
    behind = server.submit({"name": "dash-behind", "workers": 4, "resources_per_worker": {"cpu": 1},
                            "model": {"n_layers": 2, "d_model": 48, "n_heads": 4, "seq_len": 32},
                            "data": {"source": "builtin"}, "train": {"steps": 5, "global_batch_size": 12}})
    d.get(server.url + "/cluster")
    cell = wait_for("an expected start", lambda: re.search(
        r"\(in \d+ s\)", text_of(browser, "#queue tbody .expected-start") or ""), timeout_s=30)
    assert cell
    # Fair share: the admin key's own jobs (these two) are the tenant admin's, shown beside
    # the tenants (the page said "No tenant." with no tenant made yet), first
    def admin_row() -> list[str] | None:
        return d.execute_script(
            "const h = document.querySelector(\"#shares th[data-tenant='admin']\");"
            "return h ? [...h.parentElement.children].map(c => c.textContent) : null;")

    # running, queued, workers: the holder and the job behind it (the cancelled gone by then)
    wait_for("the admin's row", lambda: (admin_row() or [""] * 8)[5:8] == ["1 / \u221e"] * 2 + ["4 / \u221e"])
    admin = admin_row()
    assert admin[0].startswith("admin (the admin key's own jobs)"), admin
    shown = d.execute_script("return [...document.querySelectorAll('#shares th[data-tenant]')]"
                             ".map(h => h.dataset.tenant);")
    assert shown == ["admin", "team-a", "team-b"], shown
    assert "No tenant" not in text_of(browser, "#shares")
    browser.screenshot(SHOTS / "cluster-expected-start.png")
    clean(browser, server)
    for job in (holder, behind):
        server.http.post(f"/v1/jobs/{job['id']}/cancel")


def test_goodput_on_the_job_page_the_jobs_list_and_the_cluster_page(server, browser, tenants):
    """A finished job's phases drawn as one bar whose pieces are its seconds from
    `/v1/jobs/{id}/goodput`; its goodput in the jobs list; the cluster's over time; its
    cost per flavor and in all in the cluster page's usage (`GET /v1/usage`); a tenant's
    budget on the tenants page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    d = browser.driver

    def now_text(css: str) -> str:  # read at once: the list's rows are rebuilt every 2 s
        return d.execute_script("const e = document.querySelector(arguments[0]);"
                                "return e ? e.textContent : '';", css)

    d.delete_all_cookies()
    sign_in(browser, server, KEY)
    job = server.submit({**LLAMA, "name": "dash-goodput", "train": {"steps": 6, "global_batch_size": 4}})
    assert server.wait(job["id"], lambda j: j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"),
                       timeout_s=180)["state"] == "SUCCEEDED"
    own = server.get(f"/v1/jobs/{job['id']}/goodput")
    assert own["phases"]["training"] > 0 and own["phases"]["starting"] > 0, own

    d.get(server.url + f"/jobs/{job['id']}")
    wait_for("the goodput bar", lambda: d.find_elements(By.CSS_SELECTOR, "#goodput-bar rect[data-phase]"))
    rects = d.execute_script(  # read at once: a refresh replaces the elements
        "return [...document.querySelectorAll('#goodput-bar rect[data-phase]')]"
        ".map(r => [r.dataset.phase, Number(r.dataset.seconds), Number(r.getAttribute('width'))]);")
    drawn = {phase: seconds for phase, seconds, _ in rects}
    assert drawn == pytest.approx({p: s for p, s in own["phases"].items() if s > 0}, rel=1e-9), drawn
    widths = {phase: width for phase, _, width in rects}
    assert sum(widths.values()) == pytest.approx(1000, rel=1e-3)  # the bar is the wall time
    assert widths["training"] == pytest.approx(1000 * own["phases"]["training"] / own["wall_s"], abs=0.01)
    legend = text_of(browser, "#goodput-bar .phase-legend")
    assert "training" in legend and "starting" in legend, legend
    assert text_of(browser, "#goodput-figure") == f"goodput {100 * own['goodput']:.1f}%"
    browser.screenshot(SHOTS / "job-goodput.png")
    clean(browser, server)

    d.get(server.url + "/")
    cell = f"#jobs-table td.goodput[data-job-id='{job['id']}']"
    assert wait_for("the goodput column", lambda: now_text(cell)) == f"{100 * own['goodput']:.1f}%"
    assert "Goodput" in [th.text for th in d.find_elements(By.CSS_SELECTOR, "#jobs-table thead th")]
    never_ran = [j["id"] for j in server.get("/v1/jobs?state=CANCELLED&limit=500")["items"]
                 if j["workers"] is None and j["started_at"] is None]
    for other in never_ran[:3]:  # blank where a job never ran
        assert now_text(f"#jobs-table td.goodput[data-job-id='{other}']") == ""
    browser.screenshot(SHOTS / "jobs-goodput.png")
    clean(browser, server)

    d.get(server.url + "/cluster")
    Select(d.find_element(By.ID, "goodput-window")).select_by_value("3600,12")
    wait_for("the goodput chart", lambda: d.find_elements(
        By.CSS_SELECTOR, "#goodput-history rect[data-phase='training']"))
    history = server.get("/v1/usage/goodput?window_s=3600&buckets=12")
    shown = d.execute_script("return [...document.querySelectorAll('#goodput-history g.bucket')]"
                             ".map(g => g.dataset.goodput);")
    assert len(shown) == 12 and shown[-1] != ""  # the job just ran: the last bucket held workers
    assert any(b["goodput"] for b in history["buckets"])
    assert "Goodput over the window" in text_of(browser, "#goodput-history .chart-note")
    browser.screenshot(SHOTS / "cluster-goodput.png")
    clean(browser, server)

    usage = server.get("/v1/usage?window_s=86400")
    [own] = [u for u in usage["tenants"] if u["tenant"] == "admin"]
    assert own["cost"] > 0 and own["flavors"]["(none)"]["cost"] == pytest.approx(own["cost"])
    wait_for("the usage table", lambda: d.find_elements(By.CSS_SELECTOR, "#usage tr[data-tenant='*']"))
    shown = d.execute_script(  # read at once: a refresh rebuilds the rows
        "return Object.fromEntries([...document.querySelectorAll('#usage tbody tr')].map(r =>"
        " [r.dataset.tenant, [r.querySelector('td.cost').textContent,"
        "  [...r.querySelectorAll('td.flavors [data-flavor]')].map(f => f.dataset.flavor)]]));")
    cost, flavors = shown["admin"]
    # the admin's jobs may still run (an earlier test's): its cost only grows between the reads
    assert float(cost) >= round(own["cost"], 2) - 0.005 and flavors == ["(none)"], shown
    assert float(shown["*"][0]) >= float(cost)  # the cluster's: every tenant's
    browser.screenshot(SHOTS / "cluster-usage.png")
    clean(browser, server)

    team_a = tenants["team-a"]["id"]
    server.http.patch(f"/v1/tenants/{team_a}", json={"budget": {"limit": 50, "period": "month"}})
    d.get(server.url + "/tenants")
    budget = "tr[data-tenant='team-a'] td.budget"
    assert wait_for("the budget column", lambda: now_text(budget)) == "50 a month"
    server.http.patch(f"/v1/tenants/{team_a}", json={"budget": None})
    clean(browser, server)
