"""`brigade serve` with its store on PostgreSQL (the server on 127.0.0.1:5432,
a fresh database for the run, dropped after): a 2-worker job runs to the end
and every record of it lies in Postgres.

Where no Postgres answers the test is skipped, saying why; under CI (tests/ci.py's
in_ci()) it fails instead: there the Postgres leg must really run."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from tests.ci import skip_or_fail
from tests.e2e.serve_harness import Server, spec
from tests.service.conftest import postgres_database  # noqa: F401 - the same fresh database

STEPS = 20


@pytest.fixture
def postgres_url(postgres_database):  # noqa: F811 - the fixture imported above
    url, why_not = postgres_database
    if url is None:
        skip_or_fail(why_not)
    return url


def test_a_job_runs_to_success_with_the_store_on_postgres(postgres_url, tmp_path, shared_ray):
    server = Server(tmp_path, env={"BRIGADE_DATABASE_URL": postgres_url}, ray_address=shared_ray,
                    shared=True).start()
    try:
        job = server.submit(spec(STEPS, workers=2))
        done = server.wait(job["id"], lambda j: j["state"] == "SUCCEEDED", 180)
        assert done["step"] == STEPS and done["workers"] == 2
        assert done["latest_checkpoint"] == {"step": STEPS, "world_size": 2}
        states = [e["to_state"] for e in server.get(f"/v1/jobs/{job['id']}/events")]
        assert states == ["QUEUED", "STARTING", "RUNNING", "SUCCEEDED"]
        rows = server.get(f"/v1/jobs/{job['id']}/metrics")
        assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
        assert rows[-1]["loss"] < rows[0]["loss"]
        assert [j["id"] for j in server.get("/v1/jobs")["items"]] == [job["id"]]
    finally:
        server.stop()
    assert not (tmp_path / "brigade.db").exists()  # no SQLite beside it

    # What the API said is what Postgres holds.
    engine = create_engine(postgres_url)
    try:
        with engine.connect() as db:
            state = db.execute(text("SELECT state FROM jobs WHERE id = :id"),
                               {"id": job["id"]}).scalar_one()
            metrics = db.execute(text("SELECT count(DISTINCT step) FROM job_metrics "
                                      "WHERE job_id = :id"), {"id": job["id"]}).scalar_one()
            events = db.execute(text("SELECT count(*) FROM job_events WHERE job_id = :id"),
                                {"id": job["id"]}).scalar_one()
    finally:
        engine.dispose()
    assert (state, metrics, events) == ("SUCCEEDED", STEPS, 4)
