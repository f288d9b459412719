"""The API's reads of jobs: one job, a page of a tenant's jobs, many jobs'
states (what they wait on: service/run/dependencies.py), and the version
of a tenant's jobs that a page was read at. A job that is a sweep's trial is
read with its trial (`JobRecord.trial`: its number and objective from
`sweep_trials`, the metric from its sweep), so a job's view shows the value
its sweep's does; a trial's row written touches its job's row
(`SweepStore.update_trial`), so the version below moves with it.

Each statement is built once (Core rows of the jobs table, no ORM objects: a
job read through a Session and the ORM cost ~0.3 ms, this ~0.1 ms). A
`JobReads` reads through the engine it is given: `JobStore.reads` through the
store's pool (any thread), `JobStore.loop_reads` through the event loop's own
(`engine.loop_reader`: on SQLite, where the API reads on its event loop).

`jobs_version(tenant)` is the tenant's count of job changes, which the
database itself bumps on every insert, update and delete of one of its jobs
(the triggers of migration 0006, in the writing transaction: whoever writes,
this process, another API replica, the supervisor, a script): a page read
after the version is at least as new as the version says. Tenant None (the
admin's list of every tenant's jobs) is the sum over tenants: no counter row
is ever removed or lowered, so the sum grows with every change too.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from sqlalchemy import Engine, Select, bindparam, func, select

from service.states import JobState
from service.store.engine import single_reads
from service.store.models import Job, JobChanges, Sweep, SweepTrial, job_row_columns, job_row_record
from service.store.records import JobRecord, JobTrial

_JOBS = Job.__table__
_CHANGES = JobChanges.__table__
_TRIALS = SweepTrial.__table__
_SWEEPS = Sweep.__table__
_JOB_ROW = job_row_columns()
# A sweep's trial beside its job's row: its number and objective as the sweep shows them
# (`sweep_trials`), and the metric judged, from the sweep's spec.
_TRIAL_ROW = [_TRIALS.c.number.label("trial_number"),
              _SWEEPS.c.spec[("objective", "metric")].as_string().label("trial_metric"),
              _TRIALS.c.objective.label("trial_objective"),
              _TRIALS.c.pruned_step.label("trial_pruned_step")]
_JOBS_AND_TRIALS = (_JOBS.outerjoin(_TRIALS, (_TRIALS.c.sweep_id == _JOBS.c.sweep)
                                    & (_TRIALS.c.job_id == _JOBS.c.id))
                    .outerjoin(_SWEEPS, _SWEEPS.c.id == _TRIALS.c.sweep_id))
_JOB_BY_ID = (select(*_JOB_ROW, *_TRIAL_ROW).select_from(_JOBS_AND_TRIALS)
              .where(_JOBS.c.id == bindparam("job_id")))
_JOB_OF_TENANT = _JOB_BY_ID.where(_JOBS.c.tenant == bindparam("tenant"))
_VERSION_OF = select(_CHANGES.c.version).where(_CHANGES.c.tenant == bindparam("tenant"))
_VERSION_OF_ALL = select(func.coalesce(func.sum(_CHANGES.c.version), 0))


class JobReads:
    def __init__(self, reader: Engine):
        self._reader, self._single = reader, single_reads(reader)

    def dispose(self) -> None:
        """Close the engine's pooled connections (it reconnects if used again)."""
        self._reader.dispose()

    def get_job(self, job_id: str, *, tenant: str | None = None) -> JobRecord | None:
        """The job, or None; with `tenant`, None unless the job is that tenant's."""
        query, params = _JOB_BY_ID, {"job_id": job_id}
        if tenant is not None:
            query, params = _JOB_OF_TENANT, {"job_id": job_id, "tenant": tenant}
        with self._single.connect() as connection:
            row = connection.execute(query, params).one_or_none()
        return None if row is None else _record(row)

    def list_jobs(
        self, *, tenant: str | None, states: Iterable[JobState] | None = None,
        limit: int = 50, offset: int = 0, name: str | None = None, sweep: str | None = None,
        labels: Iterable[tuple[str, str]] = (),
    ) -> tuple[list[JobRecord], int]:
        """One page of a tenant's jobs (tenant None: every tenant's), newest
        first, and how many there are in all (`sweep`: only that sweep's trials;
        `labels`: only jobs with every one of these (key, value))."""
        params = {"tenant": tenant, "limit": limit, "offset": offset, "sweep": sweep,
                  "states": None if states is None else [JobState(s).value for s in states]}
        count, query = _list_queries(tenant is not None, states is not None, sweep is not None)
        if name:  # a part of the job's name, taken literally (no wildcards)
            named = _JOBS.c.name.contains(name, autoescape=True)
            count, query = count.where(named), query.where(named)
        for key, value in labels:  # the JSON column's member: json_extract (SQLite), ->> (Postgres)
            labelled = _JOBS.c.labels[key].as_string() == value
            count, query = count.where(labelled), query.where(labelled)
        with self._reader.connect() as connection, connection.begin():  # count and page agree
            total = connection.execute(count, params).scalar_one()
            page = connection.execute(query, params)
            return [_record(row) for row in page], total

    def states_of(self, job_ids: Iterable[str], *, tenant: str | None = None,
                  chunk: int = 500) -> dict[str, JobState]:
        """Each of these jobs' state, by id, in one query (per `chunk` ids);
        a job that is not there (or, with `tenant`, not that tenant's) is left out."""
        ids = list(dict.fromkeys(job_ids))
        found: dict[str, JobState] = {}
        with self._reader.connect() as connection:
            for start in range(0, len(ids), chunk):
                query = select(_JOBS.c.id, _JOBS.c.state).where(
                    _JOBS.c.id.in_(ids[start:start + chunk]))
                if tenant is not None:
                    query = query.where(_JOBS.c.tenant == tenant)
                found.update((row.id, JobState(row.state)) for row in connection.execute(query))
        return found

    def jobs_version(self, tenant: str | None) -> int:
        """How many times the tenant's jobs changed (None: every tenant's), ever."""
        query, params = (_VERSION_OF_ALL, {}) if tenant is None else (_VERSION_OF, {"tenant": tenant})
        with self._single.connect() as connection:
            found = connection.execute(query, params).scalar_one_or_none()
        return found or 0


def _record(row) -> JobRecord:
    """A row of `_JOB_ROW` and `_TRIAL_ROW` as the job's record, with its trial if it is one."""
    trial = None if row.trial_number is None else JobTrial(
        sweep=row.sweep, number=row.trial_number, metric=row.trial_metric,
        objective=row.trial_objective, pruned_step=row.trial_pruned_step)
    return job_row_record(tuple(row)[:len(_JOB_ROW)], trial)


@functools.cache
def _list_queries(by_tenant: bool, by_state: bool, by_sweep: bool) -> tuple[Select, Select]:
    """(count, page) of `list_jobs`, with bound parameters: built and compiled
    once per shape rather than on every call (~0.2 ms a page)."""
    conditions = []
    if by_tenant:
        conditions.append(_JOBS.c.tenant == bindparam("tenant"))
    if by_state:
        conditions.append(_JOBS.c.state.in_(bindparam("states", expanding=True)))
    if by_sweep:
        conditions.append(_JOBS.c.sweep == bindparam("sweep"))
    count = select(func.count()).select_from(_JOBS).where(*conditions)
    page = (select(*_JOB_ROW, *_TRIAL_ROW).select_from(_JOBS_AND_TRIALS).where(*conditions)
            .order_by(_JOBS.c.created_at.desc(), _JOBS.c.id.desc())
            .limit(bindparam("limit")).offset(bindparam("offset")))
    return count, page
