"""The REST API: `create_app(supervisor)` builds it around a running control
plane. Importing this module starts nothing (no Ray, no database, no torch).
"""

from __future__ import annotations

from fastapi import FastAPI

from api.server import access_log
from api.server.body_limit import BodySizeLimit
from api.server.dashboard import install_dashboard
from api.server.errors import install_error_handlers
from api.server.job_json import JobJson, JobPages
from api.server.openapi import install_openapi
from api.server.rate_limit import RateLimiter
from api.server.request_metrics import HTTP_METRICS, RequestMetrics
from api.server.routes import (
    audit,
    cluster,
    flavors,
    goodput,
    health,
    jobs,
    logs,
    tenants,
    usage,
)
from api.server.routes import data as data_routes
from api.server.routes.datasets import router as datasets_router
from api.server.routes.exports import router as exports_router
from api.server.routes.sweeps import router as sweeps_router
from service.intake.tenant_data import TenantData
from service.observability.metrics import registry_for
from service.store.tenants import ADMIN_TENANT


def create_app(supervisor) -> FastAPI:
    """The app for this supervisor: its store, its settings, its admin key."""
    settings = supervisor.settings
    app = FastAPI(title="Brigade", version="0.1.0",
                  description="Multi-tenant FSDP2 training on Ray.",
                  docs_url=None, redoc_url=None)  # served from the package: api.server.dashboard
    app.state.supervisor = supervisor
    app.state.admin_key = settings.resolved_admin_key()
    app.state.rate_limiter = RateLimiter(settings.rate_limit_per_s, settings.rate_limit_burst)
    # Each listed job's JSON, kept while it does not change; each page's, while its tenant's
    # jobs do not (api/server/job_json.py). This app's own: a page's version is a count of
    # this store's database, which another app's store (another database) counts anew.
    app.state.job_pages = JobPages(JobJson())
    app.include_router(goodput.router)  # before a job's routes: /v1/jobs/goodput is no job's id
    for module in (jobs, logs, tenants, flavors, audit, cluster, usage, health):
        app.include_router(module.router)
    app.include_router(exports_router)  # a job's Hugging Face exports: api.server.routes.exports
    app.include_router(datasets_router)  # a dataset's preparation, as a job: api.server.routes.datasets
    app.include_router(sweeps_router)  # sweeps, whose trials are jobs: api.server.routes.sweeps
    app.include_router(tenants.whoami_router)  # the caller's tenant, data prefix, quota and use
    app.include_router(data_routes.router)  # files under the caller's data prefix: api.server.routes.data
    install_dashboard(app, supervisor.store, settings)
    install_error_handlers(app)
    install_openapi(app)  # the errors every route of its kind answers, declared once
    access_log.install()
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes, by_prefix={
        data_routes.PREFIX: (settings.max_upload_bytes, "BRIGADE_MAX_UPLOAD_BYTES")})
    app.add_middleware(RequestMetrics)  # outermost: every answer counts, refusals too
    app.state.metrics = registry_for(supervisor, *HTTP_METRICS)
    _make_data_folders(supervisor)
    return app


def _make_data_folders(supervisor) -> None:
    """Every tenant's data folder, the admin's too, where the data root is
    local (a tenant made before folders were made with it gets one here)."""
    root = supervisor.settings.resolved_data_uri_root
    for name in (ADMIN_TENANT, *(t.name for t in supervisor.store.tenants.list())):
        TenantData(root, name).make_folder()
