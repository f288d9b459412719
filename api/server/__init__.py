"""The REST API's process (`brigade serve`): the FastAPI app (`app.py`:
`create_app(supervisor)`), its routers by resource (`routes/`), the
dependencies they declare (`deps.py`: who asks, what they may reach), the
errors' one JSON shape (`errors.py`), the middleware and what the routes
share (the access log, body and rate limits, request metrics, the audit
writer, jobs' cached JSON, the series cache and downsampling, answers
serialised once), the dashboard's sign-in and pages (`sessions.py`,
`dashboard.py`, `ui/`) and the listening socket (`listener.py`).

Only the server imports this package: the client and the CLI's client
commands (the lean install: no FastAPI, no database driver) speak to it over
HTTP with the schemas of `api.schemas`; `brigade serve` alone imports it,
when run.
"""
