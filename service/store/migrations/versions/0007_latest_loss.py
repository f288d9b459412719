"""latest_loss: each job's newest loss, set where its metrics rows are recorded
(service/run/runner.py), so that the jobs list shows it without reading any
job's metrics. Jobs from before it show none until they record a row.

A plain ADD COLUMN (no batch copy of `jobs`, which would drop 0006's triggers
on SQLite); SQLite >= 3.35 and Postgres both drop a column in place.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("latest_loss", sa.Float(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE jobs DROP COLUMN latest_loss")
