"""What the API benches (`bench.api`, `bench.api_profile`) serve: a tenant
and its finished jobs in Brigade's store, and the rate limits out of the way.

Per-tenant rate limits would turn most of their requests into 429s: the
server runs with `NO_RATE_LIMIT` (`BRIGADE_RATE_LIMIT_PER_S` and
`BRIGADE_RATE_LIMIT_BURST` at 10^6).
"""

from __future__ import annotations

from bench.server import BrigadeServer

RATE = "1000000"
NO_RATE_LIMIT = {"BRIGADE_RATE_LIMIT_PER_S": RATE, "BRIGADE_RATE_LIMIT_BURST": RATE}
SPEC = {
    "name": "bench-api",
    "workers": 1,
    "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
    "train": {"steps": 10},
}
TENANT = "bench"


def fill_store(server: BrigadeServer, jobs: int) -> tuple[str, list[str]]:
    """A tenant and `jobs` CANCELLED jobs of it, through `JobStore` (the code
    the server runs): (its key, the jobs' ids)."""
    from service.states import JobState
    from service.store import JobStore
    from workers.schema import JobSpec

    store = JobStore(server.database_url)
    store.migrate()
    spec = JobSpec.model_validate(SPEC)
    ids = []
    try:
        _, key = store.tenants.create(TENANT)
        for i in range(jobs):
            job, _ = store.create_job(tenant=TENANT, name=f"bench-api-{i}", spec=spec)
            store.transition(job.id, JobState.CANCELLED, reason="made up by bench.api")
            ids.append(job.id)
    finally:
        store.dispose()
    return key, ids
