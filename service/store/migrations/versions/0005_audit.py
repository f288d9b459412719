"""audit_events: the audit trail (who did what to which job or tenant, when, from where).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
INDEXED = ("time", "actor", "tenant", "action", "target")


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("time", TIME, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=True),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.String(128), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("client", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit_events"),
    )
    for column in INDEXED:
        op.create_index(f"ix_audit_events_{column}", "audit_events", [column])


def downgrade() -> None:
    for column in INDEXED:
        op.drop_index(f"ix_audit_events_{column}", table_name="audit_events")
    op.drop_table("audit_events")
