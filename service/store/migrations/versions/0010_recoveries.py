"""Recoveries: each job's count of recoveries in place (`jobs.recoveries`: a
lost rank replaced while the others kept training, no restart), its failures
since it last made progress (`jobs.failures_since_progress`: what the restart
policy's backoff and `max_restarts` count), and what an event is besides a
state change (`job_events.kind`, e.g. "recovery", and its `detail` as JSON).

A job that is there already keeps the count it restarts by today: its
failures since progress start at its `restarts`, and reset at its next
progress. Earlier events have no kind (a state change or a note).

Added columns only, each with a default or nullable: an older replica beside
it during a rollout runs on (docs/deploy.md). Plain ADD COLUMNs (no batch copy
of `jobs`, which would drop 0006's triggers on SQLite); SQLite >= 3.35 and
Postgres both drop a column in place.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("recoveries", sa.Integer(), nullable=False,
                                    server_default="0"))
    op.add_column("jobs", sa.Column("failures_since_progress", sa.Integer(), nullable=False,
                                    server_default="0"))
    op.execute("UPDATE jobs SET failures_since_progress = restarts WHERE restarts > 0")
    op.add_column("job_events", sa.Column("kind", sa.String(32), nullable=True))
    op.add_column("job_events", sa.Column("detail", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE job_events DROP COLUMN detail")
    op.execute("ALTER TABLE job_events DROP COLUMN kind")
    op.execute("ALTER TABLE jobs DROP COLUMN failures_since_progress")
    op.execute("ALTER TABLE jobs DROP COLUMN recoveries")
