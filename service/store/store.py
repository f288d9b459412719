"""The job store: the control plane's source of truth for jobs, their event
log, metrics and logs.

Safe to share between threads (API requests, one supervisor thread per job):
every method is its own short transaction and returns plain frozen records.
A state change is a compare-and-set on the stored state in the same
transaction as its event row, so two writers racing from one state cannot both
win, and a change the table forbids is never written.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Select, delete, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from checkpoints.manifest import finite
from service.log_text import printable
from service.scheduling import AttemptSteps, Demand, QuotaPolicy
from service.states import ACTIVE, TERMINAL, JobState, check_transition
from service.store.audit import AuditStore
from service.store.engine import (
    Fence,
    build_engines,
    loop_reader,
    normalize_url,
    transaction,
    write_transaction,
)
from service.store.errors import (
    ConcurrentUpdate,
    JobNotFound,
    JobUnfinished,
    QuotaExceeded,
    UnexpectedState,
)
from service.store.flavors import FlavorStore
from service.store.job_reads import JobReads
from service.store.leases import LeaseStore
from service.store.models import (
    LOG_LINE_LENGTH,
    Flavor,
    Job,
    JobEvent,
    JobLog,
    JobMetrics,
    Tenant,
    utcnow,
)
from service.store.records import EventRecord, JobRecord, LogRecord, keep_parsed_spec
from service.store.recovery_event import RECOVERY, Recovery
from service.store.sessions import SessionStore
from service.store.sweeps import SweepStore
from service.store.tenants import TenantStore, tenant_policy
from workers.schema import JobSpec, SpecError

MIGRATIONS_DIR = str(Path(__file__).resolve().with_name("migrations"))
TRANSITION_TRIES = 8  # compare-and-set attempts before ConcurrentUpdate
METRICS_BATCH = 500  # rows per upsert statement (SQLite caps bound parameters)
_MIGRATION_LOCK = int.from_bytes(b"brigade!", "big")  # a Postgres advisory lock key
_SETTABLE = frozenset(
    {"priority", "workers", "requested_workers", "step", "restarts", "preemptions",
     "attempt", "error", "latest_checkpoint", "latest_loss", "failures_since_progress",
     "labels", "note"}
)


def alembic_config(url: str | URL | None = None) -> Config:
    """Alembic's config for the store's migrations, without an alembic.ini."""
    config = Config()
    config.set_main_option("script_location", MIGRATIONS_DIR)
    if url is not None:
        rendered = normalize_url(url).render_as_string(hide_password=False)
        config.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return config


def new_job_id() -> str:
    return f"j-{secrets.token_hex(6)}"


class JobStore:
    """`JobStore("sqlite:///path/brigade.db")` or a Postgres URL
    (`postgresql://...` means psycopg 3). Call `migrate()` before first use."""

    def __init__(self, url: str | URL):
        self.url = normalize_url(url)
        self._reader, self._writer = build_engines(self.url)
        self.reads = JobReads(self._reader)  # the API's reads, from any thread
        loop_engine = loop_reader(self.url)
        # The same on the event loop's own connection (SQLite: local reads), or None.
        self.loop_reads = None if loop_engine is None else JobReads(loop_engine)
        self.tenants = TenantStore(self._reader, self._writer)
        self.flavors = FlavorStore(self._reader, self._writer)
        self.sessions = SessionStore(self._reader, self._writer)
        self.audit = AuditStore(self._reader, self._writer)
        self.sweeps = SweepStore(self._reader, self._writer)
        self.leases = LeaseStore(self._reader, self._writer)
        self._fence: Fence | None = None
        # Told of each state change once it is written, (tenant, the state it reached): the
        # supervisor counts them here, the one place every change passes. Set it before
        # making `fenced` views: each copies it.
        self.on_transition: Callable[[str, JobState], None] | None = None

    @property
    def replica(self) -> str | None:
        """The control-plane replica this process is: named in each job event
        and audit row it writes (set once at start-up)."""
        return self.audit.replica  # one place: a fenced view sees it too

    @replica.setter
    def replica(self, name: str | None) -> None:
        self.audit.replica = name

    def fenced(self, fence: Fence) -> JobStore:
        """This store as the leader's control loop and runners write through
        it: the same engines and reads, but every write transaction first
        asks `fence` (in the transaction itself) whether this replica still
        leads, and is refused with `Deposed` once it does not. The API's
        writes go through the plain store."""
        view = copy.copy(self)
        view._fence = fence
        view.sweeps = self.sweeps.fenced(fence)  # the sweeps' controller writes as the leader too
        return view

    def check_fence(self) -> None:
        """A write transaction that writes nothing: `Deposed` where this fenced
        view's writer leads no more (on a plain store, nothing to check)."""
        if self._fence is not None:
            with self._write():
                pass

    @property
    def dialect(self) -> str:
        return self._reader.dialect.name

    def ping(self) -> None:
        """A round trip to the database (raises what the driver raises)."""
        with self._read() as session:
            session.execute(select(1))

    def migrate(self) -> None:
        """Bring the schema to the newest revision (a no-op when it is there)."""
        with self._writer.begin() as connection:
            if self.dialect == "postgresql":  # two processes starting at once take turns
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
                # Alembic imports its revisions inside the transaction: no idle limit here.
                connection.exec_driver_sql("SET LOCAL idle_in_transaction_session_timeout = 0")
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    def dispose(self) -> None:
        """Close the pooled connections (the store may be used again: it reconnects)."""
        self._reader.dispose()
        if self.loop_reads is not None:
            self.loop_reads.dispose()

    close = dispose

    # -- jobs -------------------------------------------------------------

    def create_job(
        self, *, tenant: str, name: str, spec: JobSpec, priority: int = 0,
        idempotency_key: str | None = None, reason: str = "submitted",
        demand: Demand | None = None, sweep: str | None = None,
    ) -> tuple[JobRecord, bool]:
        """A new QUEUED job and its creation event: (job, True). With an
        idempotency key the tenant has used before: (that job, False), even
        when its quota would refuse a new one.

        A tenant with a row in `tenants` is held to its quota, atomically: its
        row is locked (Postgres; on SQLite the write transaction's BEGIN
        IMMEDIATE already serialises writers), its QUEUED jobs are counted and
        the job inserted in one transaction, so N+1 racing submits at a
        `max_queued_jobs` of N admit exactly N. Only QUEUED jobs count (a
        preempted job requeued counts again; a SUSPENDED one waits for its
        user, not for capacity, and does not). With `demand` the job is also
        refused when it could never run under the quota, or asks for a
        priority above the tenant's (`QuotaPolicy.check_submit`). Refusals
        raise `QuotaExceeded`. A name with no tenants row (the admin) is
        unlimited. `sweep`: the sweep the job is a trial of."""
        if idempotency_key is not None and (found := self._by_key(tenant, idempotency_key)):
            return found, False
        now = utcnow()
        job = Job(
            id=new_job_id(), tenant=tenant, name=name, state=JobState.QUEUED.value,
            spec=spec.to_json(), priority=priority, step=0, restarts=0, preemptions=0,
            attempt=0, idempotency_key=idempotency_key, created_at=now, updated_at=now,
            sweep=sweep, labels=dict(spec.labels), note=spec.note,
        )
        try:
            with self._write() as session:
                if found := self._check_quota(session, tenant, idempotency_key, demand):
                    return found, False  # the same key committed while this one waited
                self._check_flavor_kept(session, spec)
                session.add(job)
                session.flush()  # the job row before its event's foreign key
                session.add(JobEvent(job_id=job.id, time=now, from_state=None,
                                     to_state=job.state, reason=reason, replica=self.replica))
                record = job.to_record()
        except IntegrityError:
            # A concurrent submit with the same key won the unique constraint.
            existing = idempotency_key is not None and self._by_key(tenant, idempotency_key)
            if not existing:
                raise
            return existing, False
        keep_parsed_spec(record.id, spec)  # stored as spec.to_json(): no second parse of it
        return record, True

    @staticmethod
    def _check_flavor_kept(session: Session, spec: JobSpec) -> None:
        """The job's flavor still exists, its row locked until the job is in
        (Postgres; SQLite's writers are serialised): a delete of the flavor
        (`FlavorStore.delete`, which locks it too) either sees this job and is
        refused, or comes first and this submit is refused, never a job of a
        flavor gone. The submit check read it before, without a lock."""
        name = spec.resources_per_worker.flavor
        if name is not None and session.get(Flavor, name, with_for_update=True) is None:
            field = "resources_per_worker.flavor"
            raise SpecError(field, f"{field}: no flavor {name!r} (deleted while the job was "
                                   "submitted)")

    def get_job(self, job_id: str, *, tenant: str | None = None) -> JobRecord | None:
        """The job, or None; with `tenant`, None unless the job is that tenant's."""
        return self.reads.get_job(job_id, tenant=tenant)

    def list_jobs(
        self, *, tenant: str | None, states: Iterable[JobState] | None = None,
        limit: int = 50, offset: int = 0, name: str | None = None, sweep: str | None = None,
        labels: Iterable[tuple[str, str]] = (),
    ) -> tuple[list[JobRecord], int]:
        """One page of a tenant's jobs (tenant None: every tenant's), newest
        first, and how many there are in all (`sweep`: only that sweep's trials;
        `labels`: only jobs with every one of these (key, value))."""
        return self.reads.list_jobs(tenant=tenant, states=states, limit=limit, offset=offset,
                                    name=name, sweep=sweep, labels=labels)

    def count_by_state(self) -> dict[JobState, int]:
        """How many jobs of all tenants are in each state (every state listed)."""
        with self._read() as session:
            rows = session.execute(select(Job.state, func.count()).group_by(Job.state))
            found = {JobState(state): count for state, count in rows}
        return {state: found.get(state, 0) for state in JobState}

    def delete_job(self, job_id: str) -> JobRecord:
        """Remove a finished job and its history (events, metrics, logs);
        `JobUnfinished` while it is unfinished. Its storage is the caller's."""
        with self._write() as session:
            job = session.get(Job, job_id, with_for_update=True)
            if job is None:
                raise JobNotFound(job_id)
            record = job.to_record()
            if not record.state.is_terminal:
                raise JobUnfinished(job_id, record.state)
            session.execute(delete(Job).where(Job.id == job_id),  # history cascades
                            execution_options={"synchronize_session": False})
            return record

    def finished_before(self, cutoff: datetime, limit: int = 500) -> list[JobRecord]:
        """Up to `limit` of every tenant's finished jobs that ended before
        `cutoff`, oldest first: what the retention purge removes."""
        terminal = [s.value for s in TERMINAL]
        with self._read() as session:
            jobs = session.scalars(
                select(Job).where(Job.state.in_(terminal), Job.finished_at < cutoff)
                .order_by(Job.finished_at, Job.id).limit(limit)
            )
            return [job.to_record() for job in jobs]

    def count_by_tenant_and_state(self) -> dict[str, dict[JobState, int]]:
        """How many jobs each tenant has in each state (states it has none in left out)."""
        with self._read() as session:
            rows = session.execute(
                select(Job.tenant, Job.state, func.count()).group_by(Job.tenant, Job.state))
            found: dict[str, dict[JobState, int]] = {}
            for tenant, state, count in rows:
                found.setdefault(tenant, {})[JobState(state)] = count
        return found

    def jobs_in_states(self, states: Iterable[JobState]) -> list[JobRecord]:
        """Every tenant's jobs in these states, oldest first (first come, first served)."""
        values = [JobState(s).value for s in states]
        with self._read() as session:
            jobs = session.scalars(
                select(Job).where(Job.state.in_(values)).order_by(Job.created_at, Job.id)
            )
            return [job.to_record() for job in jobs]

    def jobs_changed_since(self, since: datetime, states: Iterable[JobState],
                           tenants: Iterable[str] | None = None) -> list[JobRecord]:
        """Every tenant's jobs (or these tenants') in these states or changed
        at or after `since`: with `since` the start of a window and the states
        that hold workers, every job that may have held workers within the window."""
        values = [JobState(s).value for s in states]
        query = select(Job).where(or_(Job.state.in_(values), Job.updated_at >= since))
        if tenants is not None:
            query = query.where(Job.tenant.in_(list(tenants)))
        with self._read() as session:
            jobs = session.scalars(query.order_by(Job.created_at, Job.id))
            return [job.to_record() for job in jobs]

    def transition(
        self, job_id: str, to: JobState, *, reason: str,
        expect: JobState | Iterable[JobState] | None = None, queue_quota: str | None = None,
        event_time: float | None = None, **fields,
    ) -> JobRecord:
        """Move the job to `to` if the table allows it from its stored state
        (and that state is one of `expect`, when given), record the event, and
        set `fields` (see `update_job`) in the same transaction. Sets
        started_at at the first RUNNING and finished_at at a final state.

        Raises IllegalTransition (UnexpectedState for a failed `expect`),
        JobNotFound, or ConcurrentUpdate if the job kept changing underneath.
        With `queue_quota` (a tenant's name), the move onto the queue is held
        to that tenant's `max_queued_jobs` in the same transaction, as a
        submit is (`QuotaExceeded`). `event_time` (epoch seconds): when the change
        was decided, where that came before the write (a pruner's verdict, carried out
        first), for the event's time; None: now. Once it is written, `on_transition`
        is told."""
        to = JobState(to)
        expected = _as_states(expect)
        values = _column_values(fields)
        for _ in range(TRANSITION_TRIES):
            with self._write() as session:
                found = session.execute(
                    select(Job.state, Job.started_at).where(Job.id == job_id)
                ).one_or_none()
                if found is None:
                    raise JobNotFound(job_id)
                current = JobState(found.state)
                if expected is not None and current not in expected:
                    raise UnexpectedState(job_id, current, to, expected)
                check_transition(job_id, current, to)
                if queue_quota is not None:
                    self._check_quota(session, queue_quota, None, None)
                now = utcnow()
                changes = {**values, "state": to.value, "updated_at": now}
                if to is JobState.RUNNING and found.started_at is None:
                    changes["started_at"] = now
                if to.is_terminal:
                    changes["finished_at"] = now
                job = self._update(session, job_id, changes, state=current)
                if job is None:
                    continue  # it moved between our read and our write: look again
                held = job.workers if to in ACTIVE else None
                at = now if event_time is None else self._decided_at(session, job_id, event_time, now)
                session.add(JobEvent(job_id=job_id, time=at, from_state=current.value,
                                     to_state=to.value, reason=reason, workers=held,
                                     replica=self.replica))
                moved = job.to_record()
            if self.on_transition is not None:  # written: the transaction has committed
                self.on_transition(moved.tenant, to)
            return moved
        raise ConcurrentUpdate(job_id, TRANSITION_TRIES)

    @staticmethod
    def _decided_at(session: Session, job_id: str, decided: float, now: datetime) -> datetime:
        """An event's time decided before its write: never later than now, nor
        earlier than the job's latest event (the events stay in order)."""
        latest = session.execute(select(func.max(JobEvent.time)).where(JobEvent.job_id == job_id)).scalar()
        at = min(now, datetime.fromtimestamp(decided, UTC))
        return at if latest is None else max(at, latest)

    def update_job(self, job_id: str, **fields) -> JobRecord:
        """Set job fields other than its state: priority, workers,
        requested_workers, step, restarts, preemptions, attempt, error,
        latest_checkpoint ({"step", "world_size"} or None), latest_loss,
        failures_since_progress, labels, note."""
        changes = {**_column_values(fields), "updated_at": utcnow()}
        with self._write() as session:
            job = self._update(session, job_id, changes)
            if job is None:
                raise JobNotFound(job_id)
            return job.to_record()

    def note(self, job_id: str, reason: str, *, kind: str | None = None,
             detail: dict | None = None) -> EventRecord:
        """An event without a state change (from and to both the current
        state): what the control plane did to a job in passing, such as
        reattaching to its workers after a restart; with a `kind` and its
        `detail` fields, one the API and the pages read back (a "moved":
        service/store/move_event.py)."""
        with self._write() as session:
            found = session.execute(
                select(Job.state, Job.workers).where(Job.id == job_id)).one_or_none()
            if found is None:
                raise JobNotFound(job_id)
            held = found.workers if JobState(found.state) in ACTIVE else None
            event = JobEvent(job_id=job_id, time=utcnow(), from_state=found.state,
                             to_state=found.state, reason=reason, workers=held,
                             replica=self.replica, kind=kind, detail=detail)
            session.add(event)
            session.flush()  # its id
            return event.to_record()

    def record_recovery(self, job_id: str, *, ranks: Sequence[int], from_step: int,
                        to_step: int | None, seconds: float, in_place: bool,
                        reason: str) -> EventRecord:
        """Ranks of the running job were lost and the others kept their
        processes: one event of kind "recovery" (from and to the job's current
        state; its reason a sentence, its detail the fields given:
        `service.store.recovery_event`), and, `in_place`, the job's
        `recoveries` + 1 in the same transaction. Not in place (it fell back
        to a whole-group restart) counts nothing here: the RESTARTING that
        follows is counted as every restart is.

        `from_step`: the step training had reached; `to_step`: the in-memory
        snapshot's step it went on from (None where it did not); `seconds`:
        from the loss seen to training going on (or to giving up); `reason`:
        in place, what was lost and why, else why it fell back. Write it once
        training goes on (or the fallback begins): goodput counts the
        `seconds` before the event as `recovering`."""
        recovery = Recovery.made(ranks=ranks, from_step=from_step, to_step=to_step,
                                 seconds=seconds, in_place=in_place, reason=reason)
        now = utcnow()
        with self._write() as session:
            found = session.execute(
                select(Job.state, Job.workers).where(Job.id == job_id).with_for_update()
            ).one_or_none()
            if found is None:
                raise JobNotFound(job_id)
            if recovery.in_place:
                session.execute(update(Job).where(Job.id == job_id).values(
                    recoveries=Job.recoveries + 1, updated_at=now),
                    execution_options={"synchronize_session": False})
            held = found.workers if JobState(found.state) in ACTIVE else None
            event = JobEvent(job_id=job_id, time=now, from_state=found.state,
                             to_state=found.state, reason=recovery.sentence(), workers=held,
                             replica=self.replica, kind=RECOVERY, detail=recovery.detail())
            session.add(event)
            session.flush()  # its id
            return event.to_record()

    def events(self, job_id: str) -> list[EventRecord]:
        """The job's state changes, oldest first (creation included)."""
        return self.events_of([job_id]).get(job_id, [])

    def events_of(self, job_ids: Iterable[str], chunk: int = 500) -> dict[str, list[EventRecord]]:
        """Each of these jobs' state changes, oldest first (in queries of
        `chunk` ids, well under any database's limit on bound parameters)."""
        ids = list(dict.fromkeys(job_ids))
        found: dict[str, list[EventRecord]] = {}
        with self._read() as session:
            for start in range(0, len(ids), chunk):
                events = session.scalars(
                    select(JobEvent).where(JobEvent.job_id.in_(ids[start:start + chunk]))
                    .order_by(JobEvent.job_id, JobEvent.id)
                )
                for event in events:
                    found.setdefault(event.job_id, []).append(event.to_record())
        return found

    # -- metrics and logs -------------------------------------------------

    def record_metrics(self, job_id: str, attempt: int, rows: Iterable[dict]) -> None:
        """Keep each row's metrics under its "step"; a step recorded before
        (by an earlier attempt, before a restart) is replaced. NaN and
        infinite values are kept as None (JSON has no such numbers)."""
        now = utcnow()
        by_step: dict[int, dict] = {}
        for row in rows:
            if "step" not in row:
                raise ValueError(f"a metrics row needs a 'step': {row!r}")
            step = int(row["step"])
            metrics = {k: finite(v) for k, v in row.items() if k != "step"}
            by_step[step] = dict(job_id=job_id, step=step, attempt=attempt, time=now,
                                 metrics=metrics)
        values = list(by_step.values())  # one row a step: an upsert may touch a row once
        if not values:
            return
        with self._write() as session, _job_must_exist(job_id):
            for start in range(0, len(values), METRICS_BATCH):
                session.execute(self._metrics_upsert(values[start:start + METRICS_BATCH]))

    def metrics(self, job_id: str, *, since_step: int = 0, limit: int | None = None) -> list[dict]:
        """The job's metrics from `since_step` on (inclusive), by step, each with its "step"."""
        query = (
            select(JobMetrics.step, JobMetrics.metrics)
            .where(JobMetrics.job_id == job_id, JobMetrics.step >= since_step)
            .order_by(JobMetrics.step)
            .limit(limit)
        )
        with self._read() as session:
            return [{**metrics, "step": step} for step, metrics in session.execute(query)]

    def metric_columns(self, job_id: str, numbers: Iterable[str], texts: Iterable[str] = (), *,
                       since_step: int = 0) -> list[tuple]:
        """(step, *numbers, *texts) of each of the job's rows from `since_step`
        on, by step; a value a row lacks is None. The database picks the fields
        out of each row's JSON (SQLite's json_extract, Postgres' ->>), which
        is several times faster than loading whole rows: what the dashboard's
        curves read."""
        fields = [JobMetrics.metrics[n].as_float() for n in numbers]
        fields += [JobMetrics.metrics[n].as_string() for n in texts]
        query = (
            select(JobMetrics.step, *fields)
            .where(JobMetrics.job_id == job_id, JobMetrics.step >= since_step)
            .order_by(JobMetrics.step)
        )
        with self._read() as session:
            return [tuple(row) for row in session.execute(query)]

    def attempt_steps(self, job_id: str, attempt: int) -> AttemptSteps | None:
        """The steps attempt number `attempt` took, as its metrics rows say:
        the step it resumed from (its first new row's `resumed_from`; for rows
        without one, the step before its first) and its newest; None where
        none of its rows is stored. Asked when the attempt has ended, before
        a later one replaces its rows: what the restart policy reads to tell
        whether it made progress."""
        resumed = JobMetrics.metrics["resumed_from"].as_integer()
        query = (select(func.min(resumed), func.min(JobMetrics.step), func.max(JobMetrics.step))
                 .where(JobMetrics.job_id == job_id, JobMetrics.attempt == attempt))
        with self._read() as session:
            resumed_from, first, last = session.execute(query).one()
        if last is None:
            return None
        return AttemptSteps(resumed_from=first - 1 if resumed_from is None else resumed_from,
                            last=last)

    def append_log(self, job_id: str, lines: Iterable[str]) -> None:
        """Append lines to the job's log (each cut to LOG_LINE_LENGTH characters)."""
        now = utcnow()
        rows = [dict(job_id=job_id, time=now, line=_log_line(line)) for line in lines]
        if not rows:
            return
        with self._write() as session, _job_must_exist(job_id):
            session.execute(insert(JobLog), rows)

    def logs(self, job_id: str, *, after_id: int = 0, limit: int = 1000) -> list[LogRecord]:
        """Up to `limit` log lines with ids above `after_id`, oldest first; page
        on with the last one's id."""
        query = (
            select(JobLog)
            .where(JobLog.job_id == job_id, JobLog.id > after_id)
            .order_by(JobLog.id)
            .limit(limit)
        )
        with self._read() as session:
            return [line.to_record() for line in session.scalars(query)]

    # -- internals --------------------------------------------------------

    def _read(self) -> AbstractContextManager[Session]:
        return transaction(self._reader)

    def _write(self) -> AbstractContextManager[Session]:
        return write_transaction(self._writer, self._fence)

    def _one(self, query: Select) -> JobRecord | None:
        with self._read() as session:
            job = session.scalars(query).one_or_none()
            return None if job is None else job.to_record()

    def _by_key(self, tenant: str, key: str) -> JobRecord | None:
        return self._one(select(Job).where(Job.tenant == tenant, Job.idempotency_key == key))

    def _check_quota(self, session: Session, tenant: str, idempotency_key: str | None,
                     demand: Demand | None) -> JobRecord | None:
        """In the submit's write transaction, before the insert: lock the
        tenant's row, then answer the job this idempotency key already made
        (if any, committed while this submit waited), or raise
        `QuotaExceeded` where the quota refuses a new one; None: insert."""
        row = session.scalars(
            select(Tenant).where(Tenant.name == tenant).with_for_update()
        ).one_or_none()
        if idempotency_key is not None:
            found = session.scalars(select(Job).where(
                Job.tenant == tenant, Job.idempotency_key == idempotency_key)).one_or_none()
            if found is not None:
                return found.to_record()
        if row is None:  # the admin: no tenants row, no quota
            return None
        queued = session.scalars(select(func.count()).select_from(Job).where(
            Job.tenant == tenant, Job.state == JobState.QUEUED.value)).one()
        policy, quota = tenant_policy(row.to_record()), QuotaPolicy()
        decision = (quota.check_queue(policy, queued) if demand is None
                    else quota.check_submit(policy, queued, demand))
        if not decision.allowed:
            raise QuotaExceeded(decision.reason, retryable=decision.retryable,
                                field=decision.field)
        return None

    @staticmethod
    def _update(session: Session, job_id: str, changes: dict,
                state: JobState | None = None) -> Job | None:
        """UPDATE the job (only while it is in `state`, when given), returning
        it as stored now, or None if no row matched."""
        query = update(Job).where(Job.id == job_id)
        if state is not None:
            query = query.where(Job.state == state.value)
        query = query.values(**changes).returning(Job)
        return session.scalars(
            query, execution_options={"synchronize_session": False}
        ).one_or_none()

    def _metrics_upsert(self, values: list[dict]):
        dialect = sqlite if self.dialect == "sqlite" else postgresql
        upsert = dialect.insert(JobMetrics).values(values)
        return upsert.on_conflict_do_update(
            index_elements=[JobMetrics.job_id, JobMetrics.step],
            set_={name: upsert.excluded[name] for name in ("attempt", "time", "metrics")},
        )


@contextmanager
def _job_must_exist(job_id: str) -> Iterator[None]:
    """A row for a job that is not there breaks its foreign key: say so plainly."""
    try:
        yield
    except IntegrityError as error:
        raise JobNotFound(job_id) from error


def _as_states(expect: JobState | Iterable[JobState] | None) -> frozenset[JobState] | None:
    if expect is None:
        return None
    if isinstance(expect, (JobState, str)):
        return frozenset({JobState(expect)})
    return frozenset(JobState(s) for s in expect)


def _column_values(fields: dict) -> dict:
    """Caller-settable job fields as column values."""
    if "state" in fields:
        raise TypeError("a job's state changes only through transition(), which checks "
                        "it against the table and records the event")
    unknown = sorted(set(fields) - _SETTABLE)
    if unknown:
        raise TypeError(f"not settable job fields: {', '.join(unknown)} "
                        f"(settable: {', '.join(sorted(_SETTABLE))})")
    values = dict(fields)
    if "latest_checkpoint" in values:
        checkpoint = values.pop("latest_checkpoint")
        if checkpoint is None:
            values.update(latest_checkpoint_step=None, latest_checkpoint_world_size=None)
        else:
            values.update(latest_checkpoint_step=int(checkpoint["step"]),
                          latest_checkpoint_world_size=int(checkpoint["world_size"]))
    return values


def _log_line(line: str) -> str:
    # One printable line (no NUL, which Postgres text cannot hold, no forged
    # newline); cut, never refused.
    return printable(line, LOG_LINE_LENGTH - 32)
