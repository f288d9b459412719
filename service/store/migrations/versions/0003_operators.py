"""operators: each job event records the world size the job holds after it
(None while it holds no workers), so usage is counted at the size that ran.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_events") as table:
        table.add_column(sa.Column("workers", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_events") as table:
        table.drop_column("workers")
