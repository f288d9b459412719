"""The job store's tables. The migrations in `migrations/versions/` must build
exactly this schema (tests compare them)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    type_coerce,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column

from service.states import JobState
from service.store.records import (
    STORED_SPECS,
    AuditRecord,
    EventRecord,
    JobRecord,
    JobTrial,
    LogRecord,
    TenantRecord,
)

ID_LENGTH = 32
TENANT_LENGTH = 128
NAME_LENGTH = 128
STATE_LENGTH = 16
IDEMPOTENCY_KEY_LENGTH = 255
LOG_LINE_LENGTH = 4096
TENANT_NAME_LENGTH = 63
KEY_ID_LENGTH = 16
KEY_HASH_LENGTH = 64  # sha256, hex
AUDIT_ACTION_LENGTH = 32
AUDIT_TARGET_LENGTH = 128
AUDIT_CLIENT_LENGTH = 64  # an IPv6 address and a port fit
REPLICA_LENGTH = 128  # a replica's name: host, pid and a random part
FLAVOR_NAME_LENGTH = 63
EVENT_KIND_LENGTH = 32  # what an event is besides a state change: "recovery"

# Row ids that may grow past 2**31 over a service's life; SQLite only
# autoincrements an INTEGER primary key (its rowid).
BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator):
    """Timezone-aware UTC in and out, on every dialect (SQLite keeps no zone:
    it stores naive UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the job store keeps aware UTC times")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("tenant", "idempotency_key"),
        Index(None, "tenant", "state", "created_at"),  # a tenant's list, by state
        Index(None, "tenant", "created_at"),  # a tenant's list, all states
        Index(None, "state", "created_at"),  # the supervisor's queue, FCFS
    )

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LENGTH))
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    state: Mapped[str] = mapped_column(String(STATE_LENGTH))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    workers: Mapped[int | None] = mapped_column(Integer)
    requested_workers: Mapped[int | None] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer, default=0)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    latest_checkpoint_step: Mapped[int | None] = mapped_column(Integer)
    latest_checkpoint_world_size: Mapped[int | None] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    idempotency_key: Mapped[str | None] = mapped_column(String(IDEMPOTENCY_KEY_LENGTH))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # the loss of the newest metrics row that has one (0007): what the jobs list shows
    latest_loss: Mapped[float | None] = mapped_column(Float)
    # the sweep this job is a trial of (0008); None: a job of its own
    sweep: Mapped[str | None] = mapped_column(String(ID_LENGTH), index=True)
    # lost ranks replaced while the others trained on, no restart (0010; `restarts` counts those)
    recoveries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # failures since the job last made progress (0010): what the restart policy counts
    failures_since_progress: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # `key: value` pairs lists filter on, and free text (0011): set at submit, changed by PATCH
    labels: Mapped[dict[str, str] | None] = mapped_column(JSON)
    note: Mapped[str | None] = mapped_column(Text)

    def to_record(self) -> JobRecord:
        return job_record(self)


class JobChanges(Base):
    """How many times each tenant's jobs changed: bumped by the database
    itself (migration 0006's triggers on `jobs`) in every transaction that
    inserts, updates or deletes a job; a row is never removed or lowered.
    What a cached page of jobs is checked against (`service.store.job_reads`)."""

    __tablename__ = "job_changes"

    tenant: Mapped[str] = mapped_column(String(TENANT_LENGTH), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger)


def job_row_columns() -> list:
    """The jobs table's columns in order, the spec as its stored text
    (`job_row_record` decodes it once per job)."""
    return [type_coerce(c, Text).label(c.name) if c.name == "spec" else c
            for c in Job.__table__.c]


def job_row_record(row: Any, trial: JobTrial | None = None) -> JobRecord:
    """The record of a row of `JOB_ROW` (the API's reads: no ORM object, the
    spec's JSON decoded once per job, columns by position; ~4 us a row where
    an ORM object costs ~30), with its trial where it is a sweep's."""
    (id_, tenant, name, state, spec, priority, workers, requested_workers, step, restarts,
     preemptions, checkpoint_step, checkpoint_world_size, attempt, error, idempotency_key,
     created_at, started_at, finished_at, updated_at, latest_loss, sweep, recoveries,
     failures_since_progress, labels, note) = row
    checkpoint = None
    if checkpoint_step is not None:
        checkpoint = {"step": checkpoint_step, "world_size": checkpoint_world_size}
    return JobRecord(
        id=id_, tenant=tenant, name=name, state=JobState(state),
        stored_spec=STORED_SPECS.decode(id_, spec), priority=priority, workers=workers,
        requested_workers=requested_workers, step=step, restarts=restarts,
        preemptions=preemptions, latest_checkpoint=checkpoint, attempt=attempt, error=error,
        idempotency_key=idempotency_key, created_at=created_at, started_at=started_at,
        finished_at=finished_at, updated_at=updated_at, latest_loss=latest_loss, sweep=sweep,
        recoveries=recoveries, failures_since_progress=failures_since_progress,
        labels=stored_labels(labels), note=note, trial=trial,
    )


def job_record(job: Any) -> JobRecord:
    """The record of an ORM `Job`."""
    checkpoint = None
    if job.latest_checkpoint_step is not None:
        checkpoint = {"step": job.latest_checkpoint_step,
                      "world_size": job.latest_checkpoint_world_size}
    return JobRecord(
        id=job.id, tenant=job.tenant, name=job.name, state=JobState(job.state),
        stored_spec=job.spec, priority=job.priority, workers=job.workers,
        requested_workers=job.requested_workers, step=job.step, restarts=job.restarts,
        preemptions=job.preemptions, latest_checkpoint=checkpoint, attempt=job.attempt,
        error=job.error, idempotency_key=job.idempotency_key, created_at=job.created_at,
        started_at=job.started_at, finished_at=job.finished_at, updated_at=job.updated_at,
        latest_loss=job.latest_loss, sweep=job.sweep, recoveries=job.recoveries,
        failures_since_progress=job.failures_since_progress, labels=stored_labels(job.labels),
        note=job.note,
    )


def stored_labels(stored: Any) -> dict[str, str]:
    """The stored labels (JSON text where the driver leaves it so, NULL for none) as a dict."""
    if isinstance(stored, str):
        stored = json.loads(stored)
    return dict(stored or {})


def _job_fk() -> ForeignKey:
    return ForeignKey("jobs.id", ondelete="CASCADE")


class _JobHistory:
    """A row appended to a job's history, read back in id order."""

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(ID_LENGTH), _job_fk())
    time: Mapped[datetime] = mapped_column(UTCDateTime)

    @declared_attr.directive
    def __table_args__(cls) -> tuple:
        return (Index(None, "job_id", "id"),)


class JobEvent(_JobHistory, Base):
    __tablename__ = "job_events"

    from_state: Mapped[str | None] = mapped_column(String(STATE_LENGTH))
    to_state: Mapped[str] = mapped_column(String(STATE_LENGTH))
    reason: Mapped[str] = mapped_column(Text)
    # the world size the job holds after this event; None: no workers (0003)
    workers: Mapped[int | None] = mapped_column(Integer)
    # the control-plane replica that wrote it (0009); None: before replicas were named
    replica: Mapped[str | None] = mapped_column(String(REPLICA_LENGTH))
    # what it is besides a state change (0010): "recovery"; None: a state change or a note
    kind: Mapped[str | None] = mapped_column(String(EVENT_KIND_LENGTH))
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # the kind's own fields (0010)

    def to_record(self) -> EventRecord:
        return EventRecord(
            id=self.id, job_id=self.job_id, time=self.time,
            from_state=None if self.from_state is None else JobState(self.from_state),
            to_state=JobState(self.to_state), reason=self.reason, workers=self.workers,
            replica=self.replica, kind=self.kind,
            detail=None if self.detail is None else dict(self.detail),
        )


class JobMetrics(Base):
    """One row per (job, step): a later attempt that re-runs a step after a
    restart from an earlier checkpoint replaces the row."""

    __tablename__ = "job_metrics"

    job_id: Mapped[str] = mapped_column(String(ID_LENGTH), _job_fk(), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    time: Mapped[datetime] = mapped_column(UTCDateTime)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)


class JobLog(_JobHistory, Base):
    __tablename__ = "job_logs"

    line: Mapped[str] = mapped_column(String(LOG_LINE_LENGTH))

    def to_record(self) -> LogRecord:
        return LogRecord(id=self.id, time=self.time, line=self.line)


class Tenant(Base):
    """A tenant and its one API key, kept as `key_id` (the key's public part,
    to find the row) and the sha256 of the whole key; never the key itself.
    Its jobs name it by `name` (the jobs' `tenant` column)."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    name: Mapped[str] = mapped_column(String(TENANT_NAME_LENGTH), unique=True)
    quota: Mapped[dict[str, Any]] = mapped_column(JSON)
    max_priority: Mapped[int] = mapped_column(Integer)
    weight: Mapped[float] = mapped_column(Float)
    key_id: Mapped[str] = mapped_column(String(KEY_ID_LENGTH), unique=True)
    key_hash: Mapped[str] = mapped_column(String(KEY_HASH_LENGTH))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # the most its jobs may cost a period (0014): {"limit", "period"}; None: no budget
    budget: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)

    def to_record(self) -> TenantRecord:
        return TenantRecord(
            id=self.id, name=self.name, quota=dict(self.quota), max_priority=self.max_priority,
            weight=self.weight, created_at=self.created_at, updated_at=self.updated_at,
            budget=dict(self.budget) if self.budget else None,
        )


class Flavor(Base):
    """A resource flavor (0012, `service.store.flavors`): a kind of node, named
    by the Ray node labels it has (`labels`, exact matches), its price per
    worker-hour now (its history: `FlavorPrice`) and a description."""

    __tablename__ = "flavors"

    name: Mapped[str] = mapped_column(String(FLAVOR_NAME_LENGTH), primary_key=True)
    labels: Mapped[dict[str, str]] = mapped_column(JSON)
    price_per_worker_hour: Mapped[float] = mapped_column(Float)
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class FlavorPrice(Base):
    """A flavor's price from `since` on (0012): a row for each price it has
    had, written when it is made and at every change; kept when the flavor
    is deleted, so a cost computed later prices what ran then."""

    __tablename__ = "flavor_prices"
    __table_args__ = (Index(None, "flavor", "since"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    flavor: Mapped[str] = mapped_column(String(FLAVOR_NAME_LENGTH))
    price_per_worker_hour: Mapped[float] = mapped_column(Float)
    since: Mapped[datetime] = mapped_column(UTCDateTime)


class DashboardSession(Base):
    """A web dashboard sign-in (`service.store.sessions`): the sha256 of the
    session id (the cookie's value is never stored), whose it is, and a
    reference to the key it signed in with, so that a rotated key ends it."""

    __tablename__ = "dashboard_sessions"
    __table_args__ = (Index(None, "expires_at"),)

    id_hash: Mapped[str] = mapped_column(String(KEY_HASH_LENGTH), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LENGTH))
    key_ref: Mapped[str] = mapped_column(String(KEY_HASH_LENGTH))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


class AuditEvent(Base):
    """One action of the audit trail (`service.store.audit`): who, when,
    what, on which target, from which client address. Only ever added."""

    __tablename__ = "audit_events"
    __table_args__ = (Index(None, "time"), Index(None, "actor"), Index(None, "tenant"),
                      Index(None, "action"), Index(None, "target"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    time: Mapped[datetime] = mapped_column(UTCDateTime)
    actor: Mapped[str] = mapped_column(String(TENANT_LENGTH))
    tenant: Mapped[str | None] = mapped_column(String(TENANT_LENGTH), nullable=True)
    action: Mapped[str] = mapped_column(String(AUDIT_ACTION_LENGTH))
    target: Mapped[str | None] = mapped_column(String(AUDIT_TARGET_LENGTH), nullable=True)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)
    client: Mapped[str | None] = mapped_column(String(AUDIT_CLIENT_LENGTH), nullable=True)
    # the control-plane replica that wrote it (0009)
    replica: Mapped[str | None] = mapped_column(String(REPLICA_LENGTH), nullable=True)

    def to_record(self) -> AuditRecord:
        return AuditRecord(id=self.id, time=self.time, actor=self.actor, tenant=self.tenant,
                           action=self.action, target=self.target, detail=dict(self.detail),
                           client=self.client, replica=self.replica)


class Sweep(Base):
    """A hyperparameter sweep (0008): its spec as submitted (the base job spec,
    the space, the sampler, the objective, the pruner: `workers.schema.sweep`),
    its state, and the Optuna study that searches it (kept in its own storage,
    `service.sweeps`). Its trials are jobs (`jobs.sweep`) and `sweep_trials`."""

    __tablename__ = "sweeps"
    __table_args__ = (UniqueConstraint("tenant", "idempotency_key"),
                      Index(None, "tenant", "created_at"), Index(None, "state"))

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LENGTH))
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    state: Mapped[str] = mapped_column(String(STATE_LENGTH))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    study: Mapped[str] = mapped_column(String(NAME_LENGTH))  # the Optuna study's name
    error: Mapped[str | None] = mapped_column(Text)
    idempotency_key: Mapped[str | None] = mapped_column(String(IDEMPOTENCY_KEY_LENGTH))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # `key: value` pairs lists filter on and later trials inherit, and free text (0013): set
    # at submit from the spec, changed by PATCH
    labels: Mapped[dict[str, str] | None] = mapped_column(JSON)
    note: Mapped[str | None] = mapped_column(Text)


class SweepTrial(Base):
    """One trial of a sweep (0008), numbered as Optuna numbers it: the point
    sampled, the job that runs it (None for a point whose spec was refused:
    `error` holds the 422's message), its state, objective and pruned step."""

    __tablename__ = "sweep_trials"

    sweep_id: Mapped[str] = mapped_column(
        String(ID_LENGTH), ForeignKey("sweeps.id", ondelete="CASCADE"), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str | None] = mapped_column(String(ID_LENGTH), index=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(STATE_LENGTH))
    objective: Mapped[float | None] = mapped_column(Float)
    pruned_step: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class LeaderLease(Base):
    """The control plane's leader lease (0009, `service.leadership`): one row
    per lease name; who holds it, until when (the database's clock), and the
    fencing token, raised by one at every change of holder, that every write
    of the leader's is checked against."""

    __tablename__ = "leader_lease"

    name: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(REPLICA_LENGTH))
    token: Mapped[int] = mapped_column(BigInteger)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    acquired_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
