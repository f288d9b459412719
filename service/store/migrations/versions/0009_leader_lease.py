"""Replicas: `leader_lease` (who leads the control plane, until when, and the
fencing token its writes are checked against) and the replica that wrote each
job event and audit row.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "leader_lease",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("holder", sa.String(128), nullable=True),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", TIME, nullable=True),
        sa.Column("acquired_at", TIME, nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_leader_lease"),
    )
    op.add_column("job_events", sa.Column("replica", sa.String(128), nullable=True))
    op.add_column("audit_events", sa.Column("replica", sa.String(128), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE audit_events DROP COLUMN replica")
    op.execute("ALTER TABLE job_events DROP COLUMN replica")
    op.drop_table("leader_lease")
