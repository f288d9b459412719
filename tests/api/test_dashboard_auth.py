"""The dashboard's sign-in, sessions and CSRF, its pages, its series and the
local API docs, over real HTTP against the real store (no Ray: the
supervisor is built, not started, and nothing here asks the cluster)."""

from __future__ import annotations

import re

import httpx
import pytest

from api.server.app import create_app
from api.server.sessions import COOKIE, CSRF_HEADER
from service.store.tenants import ADMIN_TENANT
from tests.api.conftest import ADMIN_KEY, make_supervisor
from tests.api.live_server import LiveServer
from workers.schema import JobSpec

SPEC = {"name": "dash", "workers": 1, "model": {"n_layers": 1, "d_model": 32, "n_heads": 2,
                                                 "seq_len": 16}, "train": {"steps": 10}}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    supervisor = make_supervisor(tmp_path_factory.mktemp("dash"), session_ttl_s=60)
    with LiveServer(create_app(supervisor)) as live:
        yield live, supervisor
    supervisor.store.dispose()


@pytest.fixture(scope="module")
def url(served):
    return served[0].url


@pytest.fixture(scope="module")
def store(served):
    return served[1].store


CLIENTS: list[httpx.Client] = []


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    while CLIENTS:
        CLIENTS.pop().close()


def admin_client(url: str) -> httpx.Client:
    CLIENTS.append(httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                                timeout=10))
    return CLIENTS[-1]


def sign_in(url: str, key: str) -> tuple[httpx.Client, str]:
    """A client holding a session cookie, and that session's CSRF token (read off a page)."""
    client = httpx.Client(base_url=url, timeout=10)
    CLIENTS.append(client)
    r = client.post("/ui/session", json={"api_key": key})
    assert r.status_code == 200, r.text
    page = client.get("/")
    assert page.status_code == 200, page.text
    token = re.search(r'name="csrf-token" content="([0-9a-f]+)"', page.text).group(1)
    return client, token


def test_the_cookie_is_httponly_and_samesite_strict_and_never_the_key(url):
    r = httpx.post(f"{url}/ui/session", json={"api_key": ADMIN_KEY})
    assert r.status_code == 200 and r.json()["tenant"] == ADMIN_TENANT
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and ADMIN_KEY not in cookie
    parts = {p.strip().lower() for p in cookie.split(";")}
    assert "httponly" in parts and "samesite=strict" in parts and "path=/" in parts
    assert "secure" not in parts  # plain http on loopback; https sets it


def test_a_wrong_key_signs_nobody_in_and_pages_send_to_login(url):
    r = httpx.post(f"{url}/ui/session", json={"api_key": "bk_nope"})
    assert r.status_code == 401 and r.json()["error"]["field"] == "api_key"
    assert "set-cookie" not in r.headers
    page = httpx.get(f"{url}/jobs/j-123", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/login?next=%2Fjobs%2Fj-123"
    assert httpx.get(f"{url}/login").status_code == 200
    forged = httpx.get(f"{url}/v1/jobs", cookies={COOKIE: "made-up"})
    assert forged.status_code == 401 and "sign in again" in forged.json()["error"]["message"]


def test_actions_need_this_sessions_csrf_token(url, store):
    job, _ = store.create_job(tenant=ADMIN_TENANT, name="csrf", spec=JobSpec.model_validate(SPEC))
    mine, token = sign_in(url, ADMIN_KEY)
    other, other_token = sign_in(url, ADMIN_KEY)
    assert token != other_token
    assert mine.get(f"/v1/jobs/{job.id}").status_code == 200  # reading needs no token
    for headers in ({}, {CSRF_HEADER: other_token}, {CSRF_HEADER: ""}):
        r = mine.post(f"/v1/jobs/{job.id}/cancel", headers=headers)
        assert r.status_code == 403 and r.json()["error"]["field"] == CSRF_HEADER, r.text
    assert store.get_job(job.id).state.value == "QUEUED"
    r = mine.post(f"/v1/jobs/{job.id}/cancel", headers={CSRF_HEADER: token})
    assert r.status_code == 200 and r.json()["state"] == "CANCELLED"


def test_sign_out_ends_the_session_and_a_rotated_key_ends_its_sessions(url):
    admin = admin_client(url)
    created = admin.post("/v1/tenants", json={"name": "rotating"}).json()
    first, first_token = sign_in(url, created["api_key"])
    second, _ = sign_in(url, created["api_key"])
    assert first.get("/v1/jobs").status_code == 200
    assert first.post("/ui/session/end").status_code == 403  # sign-out is an action too
    assert first.post("/ui/session/end", headers={CSRF_HEADER: first_token}).status_code == 204
    assert first.get("/v1/jobs").status_code == 401
    assert second.get("/v1/jobs").status_code == 200
    replaced = second.cookies[COOKIE]
    second.post("/ui/session", json={"api_key": created["api_key"]})  # signing in again
    assert second.cookies[COOKIE] != replaced
    assert httpx.get(f"{url}/v1/jobs", cookies={COOKIE: replaced}).status_code == 401
    assert admin.post(f"/v1/tenants/{created['id']}/keys").status_code == 201
    assert second.get("/v1/jobs").status_code == 401
    assert second.get("/", follow_redirects=False).status_code == 303


def test_an_expired_session_is_refused(url, store):
    session_id = store.sessions.create("acme", "ref", ttl_s=-1)
    assert store.sessions.tenant_of(session_id, "admin-ref") is None
    assert httpx.get(f"{url}/v1/jobs", cookies={COOKIE: session_id}).status_code == 401


def test_another_tenants_job_is_a_not_found_page(url, store):
    admin = admin_client(url)
    a = admin.post("/v1/tenants", json={"name": "page-a"}).json()
    b = admin.post("/v1/tenants", json={"name": "page-b"}).json()
    job, _ = store.create_job(tenant="page-a", name="secret-a", spec=JobSpec.model_validate(SPEC))
    as_a, _ = sign_in(url, a["api_key"])
    as_b, _ = sign_in(url, b["api_key"])
    assert as_a.get(f"/jobs/{job.id}").status_code == 200
    page = as_b.get(f"/jobs/{job.id}")
    assert page.status_code == 404 and "secret-a" not in page.text and "Not found" in page.text
    assert as_b.get("/tenants").status_code == 404  # the admin's page
    assert as_b.get("/v1/jobs").json()["total"] == 0


def test_yaml_submit_refuses_with_the_apis_messages(url):
    client, token = sign_in(url, ADMIN_KEY)
    def post(text: str) -> httpx.Response:
        return client.post("/ui/jobs", content=text,
                           headers={CSRF_HEADER: token, "Content-Type": "application/yaml"})
    r = post("name: x\nmodel: {}\ntrain: {steps: 0}\n")
    assert r.status_code == 422 and r.json()["error"]["field"] == "train.steps"
    assert r.json()["error"]["message"].startswith("train.steps: Input should be greater than")
    assert post("name: [unclosed\n").json()["error"]["message"].startswith("body: not YAML at line")
    assert post("- a list\n").status_code == 422
    assert client.post("/ui/jobs", content="name: x\n").status_code == 403  # no token


def test_series_counts_every_row_until_it_downsamples(url, store):
    job, _ = store.create_job(tenant=ADMIN_TENANT, name="curves", spec=JobSpec.model_validate(SPEC))
    rows = [{"step": s, "loss": 10.0 - s / 1000, "tokens_per_s": 100.0 + (s % 7)} for s in range(1, 5001)]
    rows[1234]["loss"] = 99.0  # a spike survives downsampling
    rows[4000].update(resumed_from=3990, recovered_from="restart")
    for row in rows[999::1000]:
        row["eval_loss"] = row["loss"] + 0.1  # evaluated every 1000 steps: a sparse series
    store.record_metrics(job.id, 1, rows)
    http = admin_client(url)
    full = http.get(f"/v1/jobs/{job.id}/series", params={"points": 20000}).json()
    assert full["rows"] == 5000 and len(full["series"]["loss"]["step"]) == 5000
    cut = http.get(f"/v1/jobs/{job.id}/series", params={"points": 2000}).json()
    assert len(cut["series"]["loss"]["value"]) <= 2000 and max(cut["series"]["loss"]["value"]) == 99.0
    assert cut["marks"] == [{"step": 4001, "kind": "restart"}]
    assert cut["series"]["eval_loss"]["step"] == [1000, 2000, 3000, 4000, 5000]
    assert "comm_bytes" not in cut["series"]  # no row has it
    assert http.get(f"/v1/jobs/{job.id}/series", params={"points": 1}).status_code == 422
    # new rows are read as they come; a new attempt's rows replace the old ones
    store.record_metrics(job.id, 1, [{"step": 5001, "loss": 1.0}])
    assert http.get(f"/v1/jobs/{job.id}/series").json()["rows"] == 5001
    store.update_job(job.id, attempt=2)
    store.record_metrics(job.id, 2, [{"step": 4001, "loss": 0.5, "resumed_from": 4000}])
    again = http.get(f"/v1/jobs/{job.id}/series", params={"points": 20000}).json()
    assert again["rows"] == 5001 and again["series"]["loss"]["value"][4000] == 0.5
    assert again["marks"] == [{"step": 4001, "kind": "resume"}]


def test_pages_and_docs_are_served_from_the_package(url):
    client, _ = sign_in(url, ADMIN_KEY)
    for path in ("/", "/submit", "/cluster", "/tenants"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert not re.search(r'(src|href)="(https?:)?//', page.text), path
    for path in ("/docs", "/redoc"):
        text = client.get(path).text
        assert "/ui/static/vendor/" in text and not re.search(r'(src|href)="https?://', text), path
    assert client.get("/ui/static/vendor/swagger-ui/swagger-ui-bundle.js").status_code == 200
    assert client.get("/ui/static/vendor/redoc/LICENSE").status_code == 200


def test_sign_in_tries_are_rate_limited_per_address(tmp_path):
    supervisor = make_supervisor(tmp_path, rate_limit_per_s=0.01, rate_limit_burst=3)
    try:
        with LiveServer(create_app(supervisor)) as live:
            codes = [httpx.post(f"{live.url}/ui/session", json={"api_key": f"guess-{i}"}).status_code
                     for i in range(5)]
            assert codes == [401, 401, 401, 429, 429]
    finally:
        supervisor.store.dispose()
