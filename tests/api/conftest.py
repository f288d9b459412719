"""API fixtures: one live server (real HTTP on a free loopback port) per
module, in front of the real Supervisor and JobStore on a fresh data dir.

The supervisor is connected to the session's Ray cluster (it sizes jobs
against it) but not started: nothing is admitted, so submitted jobs stay
QUEUED unless a test moves them. `test_live_job.py` runs one for real.
"""

from __future__ import annotations

import httpx
import pytest

from api.server.app import create_app
from api.client import BrigadeClient
from service.settings import Settings
from service.store import JobStore
from service.supervisor import Supervisor
from tests.api.live_server import LiveServer

ADMIN_KEY = "test-admin-key"


def printed_id(stdout: str, prefix: str) -> str:
    """The id a CLI command printed: the first word of its `stdout` that starts
    with `prefix` ("j-", "s-"). The test process is a Ray driver, and lines of
    its workers may come before the id."""
    ids = [word for word in stdout.split() if word.startswith(prefix)]
    assert ids, f"no id starting {prefix!r} in {stdout!r}"
    return ids[0]


def make_supervisor(data_dir, **overrides) -> Supervisor:
    fields = dict(data_dir=str(data_dir), admin_key=ADMIN_KEY, secret="test-secret",
                  poll_interval_s=0.05,
                  stream_max_s=1.0,  # a fuzzer following a live job moves on quickly
                  rate_limit_per_s=1e6, rate_limit_burst=1_000_000,  # a fuzzer's ~1000 requests pass
                  # no export of each job that succeeds (a Ray task importing torch: seconds of CPU);
                  # the tests of that export ask for it (export_on_success="float32")
                  export_on_success="")
    settings = Settings(**{**fields, **overrides})
    store = JobStore(settings.resolved_database_url)
    store.migrate()
    return Supervisor(settings, store)


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory, ray_cluster):
    supervisor = make_supervisor(tmp_path_factory.mktemp("brigade"))
    yield supervisor
    supervisor.stop()
    supervisor.store.dispose()


@pytest.fixture(scope="module")
def server(supervisor):
    with LiveServer(create_app(supervisor)) as live:
        yield live


@pytest.fixture
def http(server):
    """A plain HTTP client with the admin key (for what the SDK never sends)."""
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                      timeout=10) as client:
        yield client


@pytest.fixture
def as_key(server):
    """`as_key(key)`: an HTTP client of the module's server that sends that key."""
    clients = []

    def make(key: str) -> httpx.Client:
        clients.append(httpx.Client(base_url=server.url, timeout=10,
                                    headers={"Authorization": f"Bearer {key}"}))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def client(server):
    with BrigadeClient(server.url, ADMIN_KEY, timeout=10) as client:
        yield client


@pytest.fixture
def store(supervisor):
    return supervisor.store


def pytest_collection_modifyitems(items):
    for item in items:  # whatever stands on the session's Ray cluster (the `supervisor` here does)
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ray)
