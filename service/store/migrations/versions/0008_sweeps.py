"""Sweeps: `sweeps` (a sweep's spec, state and Optuna study), `sweep_trials`
(each trial's point, job, state, objective and pruned step) and `jobs.sweep`
(the sweep a job is a trial of, for `GET /v1/jobs?sweep=ID`).

`jobs.sweep` is a plain ADD COLUMN (no batch copy of `jobs`, which would drop
0006's triggers on SQLite).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("jobs", sa.Column("sweep", sa.String(32), nullable=True))
    op.create_index("ix_jobs_sweep", "jobs", ["sweep"])
    op.create_table(
        "sweeps",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("study", sa.String(128), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.Column("finished_at", TIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_sweeps"),
        sa.UniqueConstraint("tenant", "idempotency_key", name="uq_sweeps_tenant_idempotency_key"),
    )
    op.create_index("ix_sweeps_tenant_created_at", "sweeps", ["tenant", "created_at"])
    op.create_index("ix_sweeps_state", "sweeps", ["state"])
    op.create_table(
        "sweep_trials",
        sa.Column("sweep_id", sa.String(32), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("objective", sa.Float(), nullable=True),
        sa.Column("pruned_step", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], ondelete="CASCADE",
                                name="fk_sweep_trials_sweep_id_sweeps"),
        sa.PrimaryKeyConstraint("sweep_id", "number", name="pk_sweep_trials"),
    )
    op.create_index("ix_sweep_trials_job_id", "sweep_trials", ["job_id"])


def downgrade() -> None:
    op.drop_table("sweep_trials")
    op.drop_table("sweeps")
    op.drop_index("ix_jobs_sweep", table_name="jobs")
    op.execute("ALTER TABLE jobs DROP COLUMN sweep")
