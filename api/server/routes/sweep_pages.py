"""The dashboard's experiment pages: the tenant's sweeps, one sweep (its
trials, their objectives, each parameter against the objective, the best
trials' curves, its trials' parallel coordinates and each parameter's
importance) and a compare view that lists where the jobs' specs differ and
overlays their loss and eval loss curves.

As the other pages (`api.server.routes.ui`), each is an HTML shell whose script
reads the JSON API with the session cookie (`GET /v1/sweeps`,
`GET /v1/sweeps/{id}`, `GET /v1/jobs/{id}/series`); a sweep's trials are
also in the HTML itself. Another tenant's sweep or job is a not-found page,
as an unknown one is.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from api.server.deps import StoreDep, SweepsDep, page_session
from api.server.routes.ui import _page, _sign_in_first
from service.store.tenants import ADMIN_TENANT
from workers.schema.differences import spec_differences

# Lines a chart can tell apart: the Okabe-Ito colours, the last four dashed as well.
MAX_COMPARED = 8

router = APIRouter(include_in_schema=False)


@router.get("/sweeps")
def sweeps_page(request: Request) -> Response:
    session = page_session(request)
    return _page(request, "sweeps.html", session, page="sweeps") if session else _sign_in_first(request)


@router.get("/sweeps/{sweep_id}")
def sweep_page(request: Request, sweep_id: str, sweeps: SweepsDep) -> Response:
    session = page_session(request)
    if session is None:
        return _sign_in_first(request)
    try:
        view = sweeps.view(session[0], sweep_id[:64])
    except LookupError:  # SweepNotFound: unknown, or another tenant's
        return _page(request, "not_found.html", session, status=404, page="sweeps",
                     what=f"sweep {sweep_id[:64]!r}")
    return _page(request, "sweep.html", session, page="sweep", sweep=view,
                 max_compared=MAX_COMPARED)


@router.get("/compare")
def compare_page(request: Request, store: StoreDep,
                 jobs: Annotated[str, Query(max_length=2000)] = "") -> Response:
    """`?jobs=ID,ID,...`: each the caller's (the admin's: anyone's), at most `MAX_COMPARED`."""
    session = page_session(request)
    if session is None:
        return _sign_in_first(request)
    tenant = session[0]
    ids = list(dict.fromkeys(i.strip()[:64] for i in jobs.split(",") if i.strip()))
    if len(ids) > MAX_COMPARED:
        return _page(request, "compare.html", session, status=422, page="compare", jobs=[],
                     problem=f"jobs: at most {MAX_COMPARED} jobs side by side ({len(ids)} given)")
    found = []
    for job_id in ids:
        job = store.get_job(job_id, tenant=None if tenant == ADMIN_TENANT else tenant)
        if job is None:
            return _page(request, "not_found.html", session, status=404, page="compare",
                         what=f"job {job_id!r}")
        found.append(job)
    return _page(request, "compare.html", session, page="compare", jobs=found, problem=None,
                 differences=_differences(found))


def _differences(jobs: list) -> list[dict]:
    """Where the jobs' specs differ (their names aside: the table names each), each
    job's value as JSON text; their current labels and notes, not those submitted."""
    specs = []
    for job in jobs:
        spec = job.spec.model_dump(mode="json", by_alias=True)
        spec.pop("name", None)
        specs.append({**spec, "labels": job.labels, "note": job.note})
    return [{"field": d.field, "values": [_shown(v) for v in d.values]}
            for d in spec_differences(specs)]


def _shown(value) -> str:
    return "unset" if value is None else value if isinstance(value, str) else json.dumps(value)
