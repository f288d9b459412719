"""What the REST API takes and returns: one module of pydantic models per
resource (jobs, exports, sweeps, tenants, cluster, usage, goodput, series,
data, sessions, audit, health, errors), on one base (`base.Public`).

The server answers with these models and the client (`api.client`) parses
the answers with the very same, so the two cannot drift. They import no
server (FastAPI, the store, torch): the lean install (`pip install
brigade`: the CLI and the client) imports them.
"""
