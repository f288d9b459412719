"""Dependencies the routes declare: who is asking, and what they may reach.

    CurrentTenant   the tenant whose key is in `Authorization: Bearer <key>`:
                    the admin key is the tenant "admin"; a tenant's key, its name
                    (each request charged to its rate limit: `api.server.rate_limit`);
                    or the dashboard's session cookie, with its CSRF token on
                    a request that changes anything (`api.server.sessions`)
    require_admin   a route (or router) for the admin key only (403 otherwise)
    JobRequestsDep  what may be asked of a job: submit, cancel, suspend, resume,
                    delete (`service.control.requests.JobRequests`)
    ViewsDep        what the control plane shows: workers, checkpoints, goodput,
                    usage, fair shares, the cluster and its nodes, this replica's role
                    (`service.control.views.ControlViews`)
    DrainsDep       what may be asked of a node: a drain (`service.control.drains.NodeDrains`)
    SweepsDep       hyperparameter sweeps (`service.sweeps.service.SweepService`)
    ExportsDep      jobs' Hugging Face exports (`service.run.exports.ExportService`)
    SettingsDep     the service's settings
    StoreDep        its job store
    JobPagesDep     this app's kept pages of `GET /v1/jobs` (`api.server.job_json.JobPages`):
                    kept by app, since a page's version counts the changes of one database
    OwnedJob        the path's job, if it is the tenant's or the caller is the admin
                    (404 otherwise)

Each is the part of the control plane (`service.supervisor.Supervisor`) a
route uses, read from the app's supervisor at each request.

They are `async`: FastAPI runs a sync dependency in its thread pool, a hop
there and back (~0.1 ms of a ~1 ms request) for each. What they do on the event
loop is in memory (the admin key's compare, the key cache, the rate limiter)
or a local read on the loop's own connection (`read`); a key not in the cache, a session, and any read of a
database server go to the pool.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

from fastapi import Depends, Header, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from api.server.errors import ApiError, not_found
from api.server.job_json import JobPages
from api.server.sessions import COOKIE, CSRF_HEADER, SAFE_METHODS
from service.control.drains import NodeDrains
from service.control.requests import JobRequests
from service.control.views import ControlViews
from service.run.exports import ExportService
from service.settings import Settings
from service.store import JobRecord, JobStore
from service.store.job_reads import JobReads
from service.store.tenants import ADMIN_TENANT
from service.sweeps.service import SweepService

if TYPE_CHECKING:
    from service.supervisor import Supervisor

T = TypeVar("T")

_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer <key>`")


def _supervisor(request: Request) -> Supervisor:
    return request.app.state.supervisor


async def _job_requests(request: Request) -> JobRequests:
    return _supervisor(request).requests


async def _views(request: Request) -> ControlViews:
    return _supervisor(request).views


async def _drains(request: Request) -> NodeDrains:
    return _supervisor(request).drains


async def _sweeps(request: Request) -> SweepService:
    return _supervisor(request).sweeps


async def _exports(request: Request) -> ExportService:
    return _supervisor(request).exports


async def _settings(request: Request) -> Settings:
    return _supervisor(request).settings


async def _store(request: Request) -> JobStore:
    return _supervisor(request).store


async def _job_pages(request: Request) -> JobPages:
    return request.app.state.job_pages


JobRequestsDep = Annotated[JobRequests, Depends(_job_requests)]
ViewsDep = Annotated[ControlViews, Depends(_views)]
DrainsDep = Annotated[NodeDrains, Depends(_drains)]
SweepsDep = Annotated[SweepService, Depends(_sweeps)]
ExportsDep = Annotated[ExportService, Depends(_exports)]
SettingsDep = Annotated[Settings, Depends(_settings)]
StoreDep = Annotated[JobStore, Depends(_store)]
JobPagesDep = Annotated[JobPages, Depends(_job_pages)]

# A submit's `Idempotency-Key` header: a retry with the same key returns what the first made.
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", min_length=1, max_length=255)]


async def _current_tenant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    store: StoreDep,
) -> str:
    """The caller's tenant name, from its key alone (both compared in
    constant time); the key itself is never logged or echoed. Without a key,
    the dashboard's session cookie (`api.server.sessions`) stands for it, and a
    request that changes anything must then carry the session's CSRF token."""
    presented = credentials.credentials if credentials else ""
    if presented:
        tenant_name = known_key(request, store, presented)
        if tenant_name is None:
            tenant_name = await run_in_threadpool(tenant_for_key, request, store, presented)
        if tenant_name is not None:
            return _within_rate(request, tenant_name)
    elif (session_id := request.cookies.get(COOKIE)) is not None:
        return _within_rate(request, await run_in_threadpool(_session_tenant, request, session_id))
    message = "missing API key" if not credentials else "invalid API key"
    raise HTTPException(401, f"{message}: send 'Authorization: Bearer <key>'",
                        headers={"WWW-Authenticate": "Bearer"})


def tenant_for_key(request: Request, store: JobStore, key: str) -> str | None:
    """The tenant whose API key this is (the admin's: "admin"), or None
    (it may read the database)."""
    return known_key(request, store, key) or store.tenants.name_for_key(key)


def known_key(request: Request, store: JobStore, key: str) -> str | None:
    """The admin, or the tenant the key cache holds for this key; None:
    unknown here (not a key, or not looked up in the last seconds)."""
    if hmac.compare_digest(key.encode(), request.app.state.admin_key.encode()):
        return ADMIN_TENANT
    return store.tenants.cached_name_for_key(key)


def _session_tenant(request: Request, session_id: str) -> str:
    sessions = request.app.state.sessions
    tenant = sessions.tenant_of(session_id)
    if tenant is None:
        raise HTTPException(401, "session expired or ended: sign in again",
                            headers={"WWW-Authenticate": "Bearer"})
    if request.method not in SAFE_METHODS and not sessions.csrf_ok(
            session_id, request.headers.get(CSRF_HEADER, "")):
        raise ApiError(403, f"forbidden: a request made with the session cookie needs this "
                            f"session's CSRF token in the {CSRF_HEADER} header", CSRF_HEADER)
    return tenant


def page_session(request: Request) -> tuple[str, str] | None:
    """(tenant, session id) of a dashboard page's live session, or None."""
    session_id = request.cookies.get(COOKIE)
    tenant = request.app.state.sessions.tenant_of(session_id) if session_id else None
    return None if tenant is None or session_id is None else (tenant, session_id)


def _within_rate(request: Request, tenant: str) -> str:
    """The tenant, charged one request (429 with Retry-After over its rate)."""
    limiter = getattr(request.app.state, "rate_limiter", None)
    if limiter is not None:
        limiter.check(tenant)
    return tenant


CurrentTenant = Annotated[str, Depends(_current_tenant)]


async def require_admin(tenant: CurrentTenant) -> None:
    if tenant != ADMIN_TENANT:
        raise ApiError(403, "forbidden: only the admin key may do this")


async def _owned_job(job_id: Annotated[str, Path()], tenant: CurrentTenant,
                     store: StoreDep) -> JobRecord:
    """The job, or 404 alike for an unknown id and another tenant's (the
    admin reaches every tenant's)."""
    owner = None if tenant == ADMIN_TENANT else tenant
    job = None
    if _JOB_ID.match(job_id):
        job = await read(store, JobReads.get_job, job_id, tenant=owner)
    if job is None:
        raise not_found("job", job_id)
    return job


OwnedJob = Annotated[JobRecord, Depends(_owned_job)]


async def read(store: JobStore, method: Callable[..., T], *args, **kwargs) -> T:
    """`method(reads, *args, **kwargs)`, one of `JobReads`' methods: on the
    event loop through its own connection where the store has one
    (`JobStore.loop_reads`: SQLite, whose reads are local, CPU work alone),
    which no thread ever holds, so a loop read never waits for a pool; else
    in the thread pool, through the store's (a database server's reads wait
    on the network)."""
    if store.loop_reads is not None:
        return method(store.loop_reads, *args, **kwargs)
    return await run_in_threadpool(method, store.reads, *args, **kwargs)
