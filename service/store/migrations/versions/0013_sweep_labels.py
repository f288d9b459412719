"""Labels and a note on sweeps: `sweeps.labels` (JSON, at most 16 `key: value`
pairs, what `GET /v1/sweeps?label=key=value` filters on and the trials made
from then on inherit) and `sweeps.note` (free text), set at submit from the
sweep's spec and changed by `PATCH /v1/sweeps/{id}`, as jobs' (0011). A sweep
there already gets its spec's (NULL: none).

Added columns only, nullable: an older replica beside it during a rollout
runs on (docs/deploy.md). Plain ADD COLUMNs, as 0011's; SQLite >= 3.35 and
Postgres both drop a column in place.

Revision ID: 0013
Revises: 0011 (0012, flavors, is another branch's: rebase onto it when both are merged)
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sweeps", sa.Column("labels", sa.JSON(), nullable=True))
    op.add_column("sweeps", sa.Column("note", sa.Text(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE sweeps SET labels = spec->'labels', note = spec->>'note'")
    else:
        op.execute("UPDATE sweeps SET labels = json_extract(spec, '$.labels'), "
                   "note = json_extract(spec, '$.note')")


def downgrade() -> None:
    op.execute("ALTER TABLE sweeps DROP COLUMN note")
    op.execute("ALTER TABLE sweeps DROP COLUMN labels")
