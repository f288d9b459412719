"""Helpers for the job store tests."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from service.store import JobRecord
from workers.schema import JobSpec

SPEC = JobSpec.model_validate(
    {"model": {"n_layers": 2}, "train": {"steps": 10}, "workers": {"min": 1, "max": 4}})
NO_SUCH_JOB = "j-000000000000"


def submit(store, tenant="acme", name="job", **kwargs) -> JobRecord:
    job, created = store.create_job(tenant=tenant, name=name, spec=SPEC, **kwargs)
    assert created
    return job


def race(n: int, fn) -> list:
    """Run fn(i) for i < n on n threads released at once: each result or exception."""
    barrier = threading.Barrier(n)

    def one(i):
        barrier.wait()
        try:
            return fn(i)
        except Exception as error:  # noqa: BLE001 - the caller judges it
            return error

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))
