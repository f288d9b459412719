"""What the job store hands back: plain frozen values, never ORM objects, so a
caller on any thread may keep them after the session that read them is gone."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from service.states import JobState
from workers.schema import JobSpec


class _ParsedSpecs:
    """A job's spec never changes after submit, so each is validated once per
    process while it is in use, not on every read (~35 us a job: on every page
    the API lists); the spec a job was created with is not validated at all
    (`keep`: the store is handed the parsed object)."""

    def __init__(self, size: int = 4096):
        self._size, self._specs = size, OrderedDict[str, JobSpec]()
        self._lock = threading.Lock()

    def parse(self, job_id: str, raw: dict[str, Any]) -> JobSpec:
        with self._lock:
            spec = self._specs.get(job_id)
            if spec is not None:
                self._specs.move_to_end(job_id)
                return spec
        return self.keep(job_id, JobSpec.model_validate(raw))

    def keep(self, job_id: str, spec: JobSpec) -> JobSpec:
        """`spec` as the job's, for its records in this process to hand back."""
        with self._lock:
            self._specs[job_id] = spec
            self._specs.move_to_end(job_id)
            if len(self._specs) > self._size:
                self._specs.popitem(last=False)
        return spec


_SPECS = _ParsedSpecs()


def keep_parsed_spec(job_id: str, spec: JobSpec) -> None:
    """The spec a job was just stored with (its JSON is `spec.to_json()`) as its
    records' `spec`: what the route parsed is handed on, not parsed again."""
    _SPECS.keep(job_id, spec)


class _StoredSpecs:
    """The stored spec's JSON text decoded once per job while in use (~12 us a
    job on SQLite: most of reading a page of 50), for the same reason: it never
    changes. Records share the dict; nobody may change it."""

    def __init__(self, size: int = 4096):
        self._size, self._specs = size, OrderedDict[str, dict[str, Any]]()
        self._lock = threading.Lock()

    def decode(self, job_id: str, raw: str | dict[str, Any]) -> dict[str, Any]:
        if isinstance(raw, dict):  # a driver that decodes JSON itself (psycopg)
            return raw
        spec = self._specs.get(job_id)
        if spec is not None:
            return spec
        spec = json.loads(raw)
        with self._lock:
            self._specs[job_id] = spec
            if len(self._specs) > self._size:
                self._specs.popitem(last=False)
        return spec


STORED_SPECS = _StoredSpecs()


@dataclass(frozen=True)
class JobTrial:
    """What a sweep's trial is, on its job's record: its sweep, its number,
    and its objective as the sweep shows it (`sweep_trials`: the value it is
    judged by at its newest step; a pruned trial's at `pruned_step`, the value
    it was pruned on), so a job's view and its sweep's agree."""

    sweep: str
    number: int
    metric: str  # the sweep's objective metric (`objective.metric`)
    objective: float | None
    pruned_step: int | None


@dataclass(frozen=True)
class JobRecord:
    id: str
    tenant: str
    name: str
    state: JobState
    stored_spec: dict[str, Any]  # the spec as stored (JSON); `spec` is it typed
    priority: int
    workers: int | None  # the current world size; None until a group is launched
    requested_workers: int | None  # a resume override of the spec's size
    step: int
    restarts: int
    preemptions: int
    latest_checkpoint: dict | None  # {"step": int, "world_size": int}
    attempt: int  # how many worker groups have been launched for the job
    error: str | None
    idempotency_key: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    latest_loss: float | None = None  # the newest metrics row's loss; None: none yet
    sweep: str | None = None  # the sweep this job is a trial of; None: a job of its own
    recoveries: int = 0  # lost ranks replaced while the others trained on (no restart)
    failures_since_progress: int = 0  # what the restart policy counts (service.scheduling.restart)
    # the current labels and note (workers/schema/labels.py): the spec's as submitted, or as changed
    labels: dict[str, str] = field(default_factory=dict)
    note: str | None = None
    # a sweep's trial: its objective as the sweep has it (the API's reads; None from a write)
    trial: JobTrial | None = None

    @cached_property
    def spec(self) -> JobSpec:
        """The job as submitted, typed: parsed on first use, so that reading
        many records (a scheduling pass over the queue) parses none."""
        return _SPECS.parse(self.id, self.stored_spec)


@dataclass(frozen=True)
class EventRecord:
    id: int
    job_id: str
    time: datetime
    from_state: JobState | None  # None for the creation event
    to_state: JobState
    reason: str
    workers: int | None = None  # the world size held after it; None: no workers
    replica: str | None = None  # the control-plane replica that wrote it
    # what it is besides a state change ("recovery": `service.store.recovery_event`); None:
    # a state change, or a note (from and to the same state)
    kind: str | None = None
    detail: dict[str, Any] | None = None  # the kind's own fields


@dataclass(frozen=True)
class LogRecord:
    id: int
    time: datetime
    line: str


@dataclass(frozen=True)
class TenantRecord:
    id: str
    name: str  # what the jobs' `tenant` column holds
    quota: dict  # max_workers, max_gpus, max_running_jobs, max_queued_jobs; None: no limit
    max_priority: int
    weight: float
    created_at: datetime
    updated_at: datetime
    budget: dict | None = None  # {"limit": float, "period": "day" | "week" | "month"}; None: none


@dataclass(frozen=True)
class FlavorRecord:
    """A resource flavor (`service.store.flavors`)."""

    name: str
    labels: dict[str, str]  # the Ray node labels a node of this flavor has (exact matches)
    price_per_worker_hour: float  # now; what it was before: `FlavorStore.price_at`
    description: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class AuditRecord:
    """One row of the audit trail (`service.store.audit`)."""

    id: int
    time: datetime
    actor: str  # the tenant whose key (or session) did it, or "admin"
    tenant: str | None  # the tenant the action concerns (a job's owner, the tenant changed)
    action: str  # job.submit, job.cancel, ..., tenant.create, tenant.rotate_key, ...
    target: str | None  # the job's or the tenant's id
    detail: dict[str, Any]
    client: str | None  # the client's address as the API saw it
    replica: str | None = None  # the control-plane replica that wrote it
