"""The API layer, by role: `server/` (the REST API's process and the web
dashboard), `schemas/` (what the API takes and returns, by resource),
`client.py` with `profiles.py` (the Python client and the saved connection
profiles it and the CLI read) and `cli/` (the `brigade` command). The lean
install runs the client and the CLI, never the server."""
