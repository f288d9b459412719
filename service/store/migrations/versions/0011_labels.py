"""Labels and a note on jobs: `jobs.labels` (JSON, at most 16 `key: value`
pairs, what `GET /v1/jobs?label=key=value` filters on) and `jobs.note` (free
text), set at submit from the spec and changed by `PATCH /v1/jobs/{id}`.
A job there already has none (NULL reads as no labels).

Added columns only, nullable: an older replica beside it during a rollout
runs on (docs/deploy.md). Plain ADD COLUMNs (no batch copy of `jobs`, which
would drop 0006's triggers on SQLite); SQLite >= 3.35 and Postgres both drop
a column in place.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("labels", sa.JSON(), nullable=True))
    op.add_column("jobs", sa.Column("note", sa.Text(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE jobs DROP COLUMN note")
    op.execute("ALTER TABLE jobs DROP COLUMN labels")
