"""Goodput per tenant and for the cluster over real HTTP: a tiny job trains
on two rank actors under a started supervisor; `GET /v1/usage` then gives
its tenant's phases in worker-seconds (training = 2 workers x the job's own
training seconds from `/v1/jobs/{id}/goodput`), a goodput and the cluster's
total (the admin's report only); `/metrics` shows
`brigade_job_phase_seconds_total` by tenant and phase, training > 0; and
`brigade usage` prints each tenant's goodput and phases, the cluster's too."""

from __future__ import annotations

import time

import httpx
import pytest
from typer.testing import CliRunner

from api.server.app import create_app
from api.cli.main import app as cli
from service.states import TERMINAL, JobState
from tests.api.conftest import ADMIN_KEY, make_supervisor
from tests.api.live_server import LiveServer
from tests.api.test_tenants import create

pytestmark = pytest.mark.ray

FINAL = {state.value for state in TERMINAL}
WORKERS = 2
SPEC = {
    "name": "goodput", "workers": WORKERS, "resources_per_worker": {"cpu": 1},
    "model": {"n_layers": 1, "d_model": 32, "n_heads": 4, "seq_len": 32},
    "train": {"steps": 8, "global_batch_size": 4},
}


@pytest.fixture(scope="module")
def live(tmp_path_factory, ray_cluster):
    supervisor = make_supervisor(tmp_path_factory.mktemp("goodput"))
    supervisor.start()
    try:
        with LiveServer(create_app(supervisor)) as server, httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30) as admin:
            yield server, admin
    finally:
        supervisor.stop()


def test_usage_and_metrics_count_a_real_jobs_phases(live):
    server, admin = live
    tenant = create(admin)
    with httpx.Client(base_url=server.url, timeout=30,
                      headers={"Authorization": f"Bearer {tenant.api_key}"}) as own:
        job = own.post("/v1/jobs", json=SPEC).json()["id"]
        deadline = time.monotonic() + 120
        while (done := own.get(f"/v1/jobs/{job}").json())["state"] not in FINAL:
            assert time.monotonic() < deadline, done
            time.sleep(0.2)
        assert done["state"] == JobState.SUCCEEDED.value, done
        goodput = own.get(f"/v1/jobs/{job}/goodput").json()
        report = own.get("/v1/usage", params={"window_s": 3600}).json()

    [usage] = report["tenants"]
    assert usage["tenant"] == tenant.name and report["cluster"] is None  # a tenant: its own only
    phases = usage["phases"]
    assert goodput["phases"]["training"] > 0
    assert phases["training"] == pytest.approx(WORKERS * goodput["phases"]["training"], rel=0.02)
    assert phases["queued"] == 0  # held no workers
    assert sum(phases.values()) == pytest.approx(usage["worker_seconds"], rel=1e-6)
    assert usage["goodput"] == pytest.approx(
        phases["training"] / (usage["worker_seconds"] - phases["suspended"]))

    every = admin.get("/v1/usage", params={"window_s": 3600}).json()
    cluster = every["cluster"]
    assert cluster["tenant"] == "*" and cluster["worker_seconds"] >= usage["worker_seconds"]
    assert cluster["phases"]["training"] >= phases["training"] > 0 and 0 < cluster["goodput"] <= 1
    assert admin.get("/v1/usage", params={"tenant": tenant.name}).json()["cluster"] is None

    env = {"BRIGADE_URL": server.url, "BRIGADE_API_KEY": ADMIN_KEY, "BRIGADE_CONFIG": "/nonexistent"}
    table = CliRunner().invoke(cli, ["usage", "--window", "3600"], env=env)
    assert table.exit_code == 0, table.output
    assert "GOODPUT" in table.stdout and "TRAINING" in table.stdout
    [own_row] = [line.split() for line in table.stdout.splitlines() if line.startswith(tenant.name)]
    [cluster_row] = [line.split() for line in table.stdout.splitlines() if line.startswith("*")]
    assert own_row[6] == f"{usage['goodput']:.0%}" and own_row[7] == f"{phases['training']:.0f}"
    assert cluster_row[6] == f"{cluster['goodput']:.0%}"
    assert own_row[2] == f"{usage['cost']:.2f}" and own_row[3].startswith("(none)=")

    text = httpx.get(f"{server.url}/metrics").text
    assert "# TYPE brigade_job_phase_seconds_total counter" in text
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    counted = {phase: float(samples.get(
        f'brigade_job_phase_seconds_total{{phase="{phase}",tenant="{tenant.name}"}}', 0))
        for phase in goodput["phases"]}
    assert counted["training"] > 0
    assert sum(counted.values()) == pytest.approx(goodput["wall_s"], rel=0.02)
