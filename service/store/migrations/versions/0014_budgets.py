"""A tenant's budget: `tenants.budget` (JSON `{"limit": float >= 0, "period":
"day" | "week" | "month"}`; NULL: none), the most its jobs may cost a period
at the flavors' prices (`flavor_prices`, 0012) before its queued jobs wait
(`service.scheduling.budget`).

An added column only, nullable: an older replica beside it during a rollout
runs on (docs/deploy.md), and holds no job for a budget.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tenants", sa.Column("budget", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE tenants DROP COLUMN budget")
