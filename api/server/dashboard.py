"""The web dashboard and the API's own docs, in the same process as the API:
pages (`api.server.routes.ui`, `api.server.routes.sweep_pages`), the JSON they
read beside the REST API (`api.server.routes.series`,
`api.server.routes.fair_share`), Swagger UI and ReDoc
(`api.server.routes.docs`), and every asset from the package
(`api/server/ui/static`: no CDN, no build step)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from api.server.routes import docs, fair_share, series, sweep_pages, ui
from api.server.series_cache import SeriesCache
from api.server.sessions import DashboardSessions

UI_DIR = Path(__file__).resolve().with_name("ui")
STATIC_URL = "/ui/static"


def install_dashboard(app: FastAPI, store, settings) -> None:
    app.state.sessions = DashboardSessions(store, settings.resolved_secret(),
                                           app.state.admin_key, settings.session_ttl_s)
    app.state.series_cache = SeriesCache()
    for module in (series, fair_share, ui, sweep_pages, docs):
        app.include_router(module.router)
    app.mount(STATIC_URL, StaticFiles(directory=UI_DIR / "static"), name="ui-static")
