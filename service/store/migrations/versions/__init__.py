"""Alembic revisions of the job store's schema, oldest first by down_revision."""
