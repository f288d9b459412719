"""Each tenant's request rate, over real HTTP on a server with a tiny limit
(1 a second, bursts of 3): the 4th quick request is answered 429 with
`Retry-After`; another tenant is unaffected; after waiting, requests pass
again; health and the OpenAPI document are never limited. The
bucket itself, on a fake clock: refill, cap, and no more admitted than it
holds under concurrent takes."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from api.server.app import create_app
from api.server.rate_limit import RateLimiter
from tests.api.conftest import ADMIN_KEY, make_supervisor
from tests.api.live_server import LiveServer

PER_S, BURST = 1.0, 3


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """(server url, {tenant name: key}) for a server limited to PER_S/BURST."""
    supervisor = make_supervisor(tmp_path_factory.mktemp("limited"),
                                 rate_limit_per_s=PER_S, rate_limit_burst=BURST)
    keys = {name: supervisor.store.tenants.create(name)[1] for name in ("alpha", "beta")}
    try:
        with LiveServer(create_app(supervisor)) as live:
            yield live.url, {**keys, "admin": ADMIN_KEY}
    finally:
        supervisor.stop()
        supervisor.store.dispose()


def get(url: str, key: str | None, path: str = "/v1/jobs") -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(url + path, headers=headers, timeout=10)


def test_over_the_burst_is_429_with_retry_after_then_passes_again(limited):
    url, keys = limited
    answers = [get(url, keys["alpha"]) for _ in range(BURST + 1)]
    assert [a.status_code for a in answers[:BURST]] == [200] * BURST
    refused = answers[BURST]
    assert refused.status_code == 429, refused.text
    retry_after = refused.headers["Retry-After"]
    assert retry_after.isdigit() and int(retry_after) >= 1
    error = refused.json()["error"]
    assert error["message"].startswith("rate limit") and "retry after" in error["message"]

    for other in ("beta", "admin"):  # each tenant has its own bucket
        assert get(url, keys[other]).status_code == 200
    for path in ("/healthz", "/openapi.json"):  # not limited (/metrics takes no key either)
        assert all(get(url, None, path).status_code == 200 for _ in range(BURST + 2)), path

    time.sleep(int(retry_after) + 0.05)
    assert get(url, keys["alpha"]).status_code == 200


def test_a_bad_key_is_401_not_charged(limited):
    url, _ = limited
    assert all(get(url, "not-a-key").status_code == 401 for _ in range(BURST + 2))


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_bucket_refills_at_its_rate_up_to_its_burst():
    clock = FakeClock()
    limiter = RateLimiter(per_s=2.0, burst=3, clock=clock)
    assert [limiter.take("a") for _ in range(3)] == [0.0] * 3
    assert limiter.take("a") == pytest.approx(0.5)  # one token in half a second
    assert limiter.take("b") == 0.0
    clock.now += 0.5
    assert limiter.take("a") == 0.0 and limiter.take("a") > 0
    clock.now += 60  # idle: refilled, but only to the burst
    assert [limiter.take("a") for _ in range(4)].count(0.0) == 3


def test_concurrent_takes_admit_no_more_than_the_bucket_holds():
    limiter = RateLimiter(per_s=1e-6, burst=50, clock=FakeClock())
    admitted, start = [], threading.Barrier(8)

    def hammer():
        start.wait()
        admitted.extend(w for w in (limiter.take("a") for _ in range(100)) if w == 0.0)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 50


def test_nonsense_limits_are_refused():
    for per_s, burst in ((0, 1), (1, 0), (-1, 5)):
        with pytest.raises(ValueError):
            RateLimiter(per_s, burst)
