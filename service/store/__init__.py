"""The durable job store (SQLAlchemy; SQLite by default, Postgres by URL)."""

from service.store.errors import (
    ConcurrentUpdate,
    JobNotFound,
    JobUnfinished,
    QuotaExceeded,
    TenantBusy,
    TenantExists,
    TenantNotFound,
    UnexpectedState,
)
from service.store.records import EventRecord, JobRecord, LogRecord, TenantRecord
from service.store.store import JobStore

__all__ = [
    "ConcurrentUpdate",
    "EventRecord",
    "JobNotFound",
    "JobRecord",
    "JobUnfinished",
    "JobStore",
    "LogRecord",
    "QuotaExceeded",
    "TenantBusy",
    "TenantExists",
    "TenantNotFound",
    "TenantRecord",
    "UnexpectedState",
]
