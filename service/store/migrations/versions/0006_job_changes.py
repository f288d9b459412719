"""job_changes: each tenant's count of job changes, bumped by triggers on `jobs`.

Every insert, update and delete of a job adds one to its tenant's row, in the
writing transaction, whoever writes (the store, a second API process, a
script): `GET /v1/jobs` answers a page it made before while the count it was
made at still stands (`service.store.job_reads`, `api.server.job_json`). A TRUNCATE
fires no row trigger: whoever empties `jobs` that way restarts the API.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_BUMP = ("INSERT INTO job_changes (tenant, version) {row} "
         "ON CONFLICT (tenant) DO UPDATE SET version = job_changes.version + 1")
_SQLITE_TRIGGERS = {
    "job_changes_insert": ("AFTER INSERT", [_BUMP.format(row="VALUES (NEW.tenant, 1)")]),
    "job_changes_update": ("AFTER UPDATE", [
        _BUMP.format(row="VALUES (NEW.tenant, 1)"),
        # a job moved to another tenant (the store never does) changes both lists
        _BUMP.format(row="SELECT OLD.tenant, 1 WHERE OLD.tenant <> NEW.tenant"),
    ]),
    "job_changes_delete": ("AFTER DELETE", [_BUMP.format(row="VALUES (OLD.tenant, 1)")]),
}
_POSTGRES_FUNCTION = f"""
CREATE FUNCTION job_changes_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'DELETE' THEN
        {_BUMP.format(row="VALUES (NEW.tenant, 1)")};
    END IF;
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.tenant IS DISTINCT FROM NEW.tenant) THEN
        {_BUMP.format(row="VALUES (OLD.tenant, 1)")};
    END IF;
    RETURN NULL;
END $$
"""


def upgrade() -> None:
    op.create_table(
        "job_changes",
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", name="pk_job_changes"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_POSTGRES_FUNCTION)
        op.execute("CREATE TRIGGER job_changes AFTER INSERT OR UPDATE OR DELETE ON jobs "
                   "FOR EACH ROW EXECUTE FUNCTION job_changes_bump()")
        return
    for name, (when, statements) in _SQLITE_TRIGGERS.items():
        body = "".join(f"{statement}; " for statement in statements)
        op.execute(f"CREATE TRIGGER {name} {when} ON jobs BEGIN {body}END")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER job_changes ON jobs")
        op.execute("DROP FUNCTION job_changes_bump()")
    else:
        for name in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    op.drop_table("job_changes")
