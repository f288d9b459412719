"""The dashboard's pages, its sign-in and its YAML submit.

Pages are HTML shells rendered here (api/server/ui/templates); their scripts
(api/server/ui/static/js) read and act through the JSON API with the session
cookie, so every route a page uses is authorised by `api.server.deps` on one code
path, the CSRF token included (it rides in the page's <meta>). A page
without a live session sends the browser to /login; another tenant's job is
a not-found page, as an unknown one is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError
from starlette.routing import NoMatchFound

from api.schemas.jobs import JobCreate, JobPublic
from api.schemas.sessions import SessionCreate, SessionPublic
from api.server.deps import CurrentTenant, JobRequestsDep, StoreDep, page_session, tenant_for_key
from api.server.errors import ApiError
from api.server.routes.jobs import ERRORS
from api.server.sessions import COOKIE
from service.states import JobState
from service.store.tenants import ADMIN_TENANT
from workers.schema.spec_yaml import load_spec_yaml

TEMPLATES = Jinja2Templates(directory=Path(__file__).resolve().parents[1] / "ui" / "templates")
# Pages load only what they ship: scripts and styles from this server, no inline code.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
YAML_TEMPLATE = """\
# A tiny GPT on the built-in corpus; every field but model and train.steps has a default.
name: my-job
workers: 2                      # or {min: 1, max: 4}
resources_per_worker: {cpu: 1, gpu: 0}
priority: 0
model: {family: gpt, n_layers: 2, d_model: 64, n_heads: 4, seq_len: 64, vocab_size: 256}
data: {source: builtin}
train: {steps: 100, global_batch_size: 8, lr: 0.003}
sharding: {strategy: full_shard}
checkpoint: {every_steps: 20, keep_last: 2}
"""

router = APIRouter(include_in_schema=False)
api_router = APIRouter(prefix="/ui", tags=["dashboard"], responses=ERRORS)


def _page(request: Request, template: str, session: tuple[str, str], status: int = 200,
          **context: Any) -> Response:
    tenant, session_id = session
    response = TEMPLATES.TemplateResponse(request, template, {
        "tenant": tenant, "is_admin": tenant == ADMIN_TENANT,
        "csrf_token": request.app.state.sessions.csrf_token(session_id),
        "states": [s.value for s in JobState], **context,
    }, status_code=status)
    return _secured(response)


def _secured(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response


def _sign_in_first(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)


@router.get("/login")
def login_page(request: Request) -> Response:
    if page_session(request) is not None:
        return RedirectResponse("/", status_code=303)
    return _secured(TEMPLATES.TemplateResponse(request, "login.html", {}))


@router.get("/")
def jobs_page(request: Request) -> Response:
    session = page_session(request)
    return _page(request, "jobs.html", session, page="jobs") if session else _sign_in_first(request)


@router.get("/jobs/{job_id}")
def job_page(request: Request, job_id: str, store: StoreDep) -> Response:
    session = page_session(request)
    if session is None:
        return _sign_in_first(request)
    tenant = session[0]
    job = store.get_job(job_id[:64], tenant=None if tenant == ADMIN_TENANT else tenant)
    if job is None:
        return _page(request, "not_found.html", session, status=404, page="jobs",
                     what=f"job {job_id[:64]!r}")
    kind = job.spec.kind  # a dataset's preparation shows its files, not a model's curves
    exports = kind == "train" and _has_route(request, "list_exports", job_id=job.id)
    return _page(request, "job.html", session, page="job", job_id=job.id, job_name=job.name,
                 job_labels=job.labels, job_note=job.note, kind=kind, has_exports=exports)


@router.get("/submit")
def submit_page(request: Request) -> Response:
    session = page_session(request)
    if session is None:
        return _sign_in_first(request)
    return _page(request, "submit.html", session, page="submit", yaml_template=YAML_TEMPLATE)


@router.get("/cluster")
def cluster_page(request: Request) -> Response:
    session = page_session(request)
    return _page(request, "cluster.html", session, page="cluster") if session else _sign_in_first(request)


@router.get("/tenants")
def tenants_page(request: Request) -> Response:
    session = page_session(request)
    if session is None:
        return _sign_in_first(request)
    if session[0] != ADMIN_TENANT:
        return _page(request, "not_found.html", session, status=404, page="tenants", what="page")
    return _page(request, "tenants.html", session, page="tenants")


def _has_route(request: Request, name: str, **params: str) -> bool:
    """Whether the app has the named route (a page shows what the API offers)."""
    try:
        request.app.url_path_for(name, **params)
    except NoMatchFound:
        return False
    return True


# -- JSON for the pages ------------------------------------------------------------


@api_router.post("/session")
def sign_in(body: SessionCreate, request: Request, response: Response, store: StoreDep) -> SessionPublic:
    """An API key for a session cookie (HttpOnly, SameSite=Strict). Tries are
    charged to the caller's address at the tenants' rate (429 beyond it)."""
    request.app.state.rate_limiter.check(f"sign-in from {request.client.host if request.client else '?'}")
    tenant = tenant_for_key(request, store, body.api_key)
    if tenant is None:
        raise ApiError(401, "api_key: not a valid API key", "api_key")
    sessions = request.app.state.sessions
    if previous := request.cookies.get(COOKIE):  # signing in again ends the session it replaces
        sessions.end(previous)
    sessions.set_cookie(request, response, sessions.start(tenant, body.api_key))
    return SessionPublic(tenant=tenant, expires_in_s=sessions.ttl_s)


@api_router.post("/session/end", status_code=204, response_class=Response)
def sign_out(request: Request, tenant: CurrentTenant) -> Response:
    """End the cookie's session (the CSRF token is checked as for any action)."""
    response = Response(status_code=204)
    if session_id := request.cookies.get(COOKIE):
        request.app.state.sessions.end(session_id)
    request.app.state.sessions.clear_cookie(request, response)
    return response


@api_router.post("/jobs", status_code=201,
                 openapi_extra={"requestBody": {"content": {"application/yaml": {}}}})
async def submit_yaml(request: Request, tenant: CurrentTenant, jobs: JobRequestsDep) -> JobPublic:
    """A job spec as YAML (what `brigade submit` reads), refused with the
    API's own messages."""
    try:
        raw = load_spec_yaml((await request.body()).decode("utf-8", errors="replace"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ApiError(422, f"body: not YAML{where}: {getattr(error, 'problem', None) or error}",
                       "body") from None
    if not isinstance(raw, dict):
        raise ApiError(422, "body: expected a YAML mapping (name: ..., model: ..., train: ...)", "body")
    try:
        spec = JobCreate.model_validate(raw)
    except ValidationError as error:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in error.errors()]) from None
    job, _ = await run_in_threadpool(jobs.submit, tenant, spec, None)
    return JobPublic.model_validate(job)


router.include_router(api_router)
