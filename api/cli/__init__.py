"""The `brigade` command (`main.py`: the typer app, `brigade serve`, and
the entry point), its command groups by topic (jobs, sweeps, data, exports,
tenants, audit, the service, `train`), what the commands that talk to a
service share (`common.py`), and how they print (`output.py`,
`metric_columns.py`).

Everything but `serve` and `train` talks to a service through the client
(`api.client`) and starts without torch, Ray or the server's packages: the
lean install (`pip install brigade`) runs it.
"""
