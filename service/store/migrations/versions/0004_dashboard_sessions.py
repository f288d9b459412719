"""dashboard_sessions: the web dashboard's sign-in sessions (hashes only).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "dashboard_sessions",
        sa.Column("id_hash", sa.String(64), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("key_ref", sa.String(64), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("expires_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id_hash", name="pk_dashboard_sessions"),
    )
    op.create_index("ix_dashboard_sessions_expires_at", "dashboard_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_dashboard_sessions_expires_at", table_name="dashboard_sessions")
    op.drop_table("dashboard_sessions")
