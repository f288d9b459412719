"""Jobs, their events, metrics and logs.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ID = sa.String(32)
STATE = sa.String(16)
TIME = sa.DateTime(timezone=True)
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _job_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["job_id"], ["jobs.id"], name=f"fk_{table}_job_id_jobs", ondelete="CASCADE"
    )


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", ID, nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("state", STATE, nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("workers", sa.Integer(), nullable=True),
        sa.Column("requested_workers", sa.Integer(), nullable=True),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("preemptions", sa.Integer(), nullable=False),
        sa.Column("latest_checkpoint_step", sa.Integer(), nullable=True),
        sa.Column("latest_checkpoint_world_size", sa.Integer(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("started_at", TIME, nullable=True),
        sa.Column("finished_at", TIME, nullable=True),
        sa.Column("updated_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.UniqueConstraint("tenant", "idempotency_key", name="uq_jobs_tenant_idempotency_key"),
    )
    op.create_index("ix_jobs_tenant_state_created_at", "jobs", ["tenant", "state", "created_at"])
    op.create_index("ix_jobs_tenant_created_at", "jobs", ["tenant", "created_at"])
    op.create_index("ix_jobs_state_created_at", "jobs", ["state", "created_at"])

    op.create_table(
        "job_events",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("job_id", ID, nullable=False),
        sa.Column("time", TIME, nullable=False),
        sa.Column("from_state", STATE, nullable=True),
        sa.Column("to_state", STATE, nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_job_events"),
        _job_fk("job_events"),
    )
    op.create_index("ix_job_events_job_id_id", "job_events", ["job_id", "id"])

    op.create_table(
        "job_metrics",
        sa.Column("job_id", ID, nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("time", TIME, nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "step", name="pk_job_metrics"),
        _job_fk("job_metrics"),
    )

    op.create_table(
        "job_logs",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("job_id", ID, nullable=False),
        sa.Column("time", TIME, nullable=False),
        sa.Column("line", sa.String(4096), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_job_logs"),
        _job_fk("job_logs"),
    )
    op.create_index("ix_job_logs_job_id_id", "job_logs", ["job_id", "id"])


def downgrade() -> None:
    op.drop_table("job_logs")  # their indexes go with them
    op.drop_table("job_metrics")
    op.drop_table("job_events")
    op.drop_table("jobs")
