"""Alembic's entry point. `JobStore.migrate()` hands over an open connection
(in `config.attributes["connection"]`); the `alembic` command line, given a
Config with `sqlalchemy.url`, gets its own."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from service.store.engine import build_engines
from service.store.models import Base

config = context.config


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # ALTER TABLE by copy
        transactional_ddl=True,  # one transaction: all revisions or none
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("the job store migrates online only")
connection = config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    url = config.get_main_option("sqlalchemy.url")
    if url is None:
        raise RuntimeError("the job store migrates a given connection or sqlalchemy.url; got neither")
    _, writer = build_engines(url)
    try:
        with writer.connect() as own:
            run(own)
    finally:
        writer.dispose()
