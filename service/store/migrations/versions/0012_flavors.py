"""Resource flavors: `flavors` (a kind of node, named by the Ray node labels it
has, its price per worker-hour and a description: `service.store.flavors`)
and `flavor_prices` (each price a flavor has had, from when: what a cost is
computed from, kept when the flavor goes).

New tables only: an older replica beside it during a rollout runs on
(docs/deploy.md), and knows no flavors.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "flavors",
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("price_per_worker_hour", sa.Float(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_flavors"),
    )
    op.create_table(
        "flavor_prices",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("flavor", sa.String(63), nullable=False),
        sa.Column("price_per_worker_hour", sa.Float(), nullable=False),
        sa.Column("since", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_flavor_prices"),
    )
    op.create_index("ix_flavor_prices_flavor_since", "flavor_prices", ["flavor", "since"])


def downgrade() -> None:
    op.drop_index("ix_flavor_prices_flavor_since", table_name="flavor_prices")
    op.drop_table("flavor_prices")
    op.drop_table("flavors")
