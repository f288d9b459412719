"""Sweeps and their trials (`sweeps`, `sweep_trials`), on the job store's
engines (`JobStore.sweeps`).

A sweep's state changes by compare-and-set on the stored state, so a cancel
racing the controller's pass cannot be overwritten by it. A trial's row is
written once per number (`add_trial` is idempotent): the controller, restarted
between asking the study for a trial and recording it, records it the next
time instead of asking again.
"""

from __future__ import annotations

import builtins
import secrets
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Engine, Select, delete, func, select, update
from sqlalchemy.exc import IntegrityError

from service.states import LIVE_SWEEP, SweepState, TrialState
from service.store.engine import Fence, transaction, write_transaction
from service.store.errors import SweepNotFound
from service.store.models import Job, Sweep, SweepTrial, stored_labels, utcnow
from service.store.sweep_records import PARSED_SWEEP_SPECS, SweepRecord, SweepTrialRecord
from workers.schema.sweep import SweepSpec

_TRIAL_FIELDS = frozenset({"job_id", "state", "objective", "pruned_step", "error"})
_SHOWN_ON_JOB = frozenset({"job_id", "objective", "pruned_step"})  # a job's `trial` (JobTrial)


def new_sweep_id() -> str:
    return f"s-{secrets.token_hex(6)}"


def sweep_record(row: Sweep) -> SweepRecord:
    return SweepRecord(
        id=row.id, tenant=row.tenant, name=row.name, state=SweepState(row.state),
        spec=PARSED_SWEEP_SPECS.parse(row.id, row.spec), study=row.study, error=row.error,
        created_at=row.created_at, updated_at=row.updated_at, finished_at=row.finished_at,
        idempotency_key=row.idempotency_key, labels=stored_labels(row.labels), note=row.note,
    )


def trial_record(row: SweepTrial) -> SweepTrialRecord:
    return SweepTrialRecord(
        sweep_id=row.sweep_id, number=row.number, job_id=row.job_id, params=dict(row.params),
        state=TrialState(row.state), objective=row.objective, pruned_step=row.pruned_step,
        error=row.error, created_at=row.created_at, updated_at=row.updated_at,
    )


class SweepStore:
    """Shares the job store's engines (`JobStore.sweeps`)."""

    def __init__(self, reader: Engine, writer: Engine, fence: Fence | None = None):
        self._reader, self._writer = reader, writer
        self._fence = fence

    def fenced(self, fence: Fence) -> SweepStore:
        """This store as the leader's sweep controller writes through it: every
        write transaction checks `fence` first (`JobStore.fenced`)."""
        return SweepStore(self._reader, self._writer, fence)

    # -- sweeps -------------------------------------------------------------

    def create(self, *, tenant: str, spec: SweepSpec,
               idempotency_key: str | None = None) -> tuple[SweepRecord, bool]:
        """A new QUEUED sweep: (sweep, True); with an idempotency key the
        tenant has used before: (that sweep, False)."""
        if idempotency_key is not None and (found := self.by_key(tenant, idempotency_key)):
            return found, False
        now = utcnow()
        sweep_id = new_sweep_id()
        row = Sweep(id=sweep_id, tenant=tenant, name=spec.name, state=SweepState.QUEUED.value,
                    spec=spec.to_json(), study=sweep_id, error=None,
                    idempotency_key=idempotency_key, created_at=now, updated_at=now,
                    labels=spec.labels, note=spec.note)
        try:
            with write_transaction(self._writer, self._fence) as session:
                session.add(row)
                session.flush()
                record = sweep_record(row)
        except IntegrityError:  # a concurrent submit with the same key won
            existing = idempotency_key is not None and self.by_key(tenant, idempotency_key)
            if not existing:
                raise
            return existing, False
        return record, True

    def get(self, sweep_id: str, *, tenant: str | None = None) -> SweepRecord | None:
        """The sweep, or None; with `tenant`, None unless it is that tenant's."""
        query = select(Sweep).where(Sweep.id == sweep_id)
        if tenant is not None:
            query = query.where(Sweep.tenant == tenant)
        return self._one(query)

    def list(self, *, tenant: str | None, states: Iterable[SweepState | str] | None = None,
             limit: int = 50, offset: int = 0,
             labels: Iterable[tuple[str, str]] = ()) -> builtins.list[SweepRecord]:
        """A tenant's sweeps (None: every tenant's), newest first (`labels`: only
        sweeps with every one of these (key, value), as a job's list filters)."""
        query = select(Sweep)
        if tenant is not None:
            query = query.where(Sweep.tenant == tenant)
        if states is not None:
            query = query.where(Sweep.state.in_([SweepState(s).value for s in states]))
        for key, value in labels:  # the JSON column's member: json_extract (SQLite), ->> (Postgres)
            query = query.where(Sweep.labels[key].as_string() == value)
        query = query.order_by(Sweep.created_at.desc(), Sweep.id.desc()).limit(limit).offset(offset)
        with transaction(self._reader) as session:
            return [sweep_record(row) for row in session.scalars(query)]

    def live(self) -> builtins.list[SweepRecord]:
        """Every tenant's QUEUED and RUNNING sweeps, oldest first (the controller's pass)."""
        query = (select(Sweep).where(Sweep.state.in_([s.value for s in LIVE_SWEEP]))
                 .order_by(Sweep.created_at, Sweep.id))
        with transaction(self._reader) as session:
            return [sweep_record(row) for row in session.scalars(query)]

    def set_state(self, sweep_id: str, to: SweepState, *,
                  expect: Iterable[SweepState] = LIVE_SWEEP,
                  error: str | None = None) -> SweepRecord | None:
        """Move the sweep to `to` if it is in one of `expect` now (a terminal
        state sets `finished_at`): the sweep as stored now; None where it was
        not (it moved on meanwhile, or is gone)."""
        now = utcnow()
        changes: dict[str, Any] = {"state": to.value, "updated_at": now}
        if error is not None:
            changes["error"] = error
        if to.is_terminal:
            changes["finished_at"] = now
        with write_transaction(self._writer, self._fence) as session:
            done = session.execute(
                update(Sweep).where(Sweep.id == sweep_id,
                                    Sweep.state.in_([SweepState(s).value for s in expect]))
                .values(**changes), execution_options={"synchronize_session": False})
            if not done.rowcount:  # type: ignore[attr-defined]
                return None
            row = session.get(Sweep, sweep_id, populate_existing=True)
            return None if row is None else sweep_record(row)

    def relabel(self, sweep_id: str, **fields: Any) -> SweepRecord:
        """Set the sweep's `labels` (all of them) and/or its `note` (None: none),
        whatever its state; `SweepNotFound` if it is gone."""
        if unknown := set(fields) - {"labels", "note"}:
            raise ValueError(f"not a label or note: {', '.join(sorted(unknown))}")
        with write_transaction(self._writer, self._fence) as session:
            row = session.get(Sweep, sweep_id, with_for_update=True)
            if row is None:
                raise SweepNotFound(sweep_id)
            for name, value in fields.items():
                setattr(row, name, value)
            row.updated_at = utcnow()
            session.flush()
            return sweep_record(row)

    def delete(self, sweep_id: str) -> None:
        """Remove the sweep and its trial rows (its jobs are the caller's)."""
        with write_transaction(self._writer, self._fence) as session:
            session.execute(delete(SweepTrial).where(SweepTrial.sweep_id == sweep_id))
            session.execute(delete(Sweep).where(Sweep.id == sweep_id))

    # -- trials -------------------------------------------------------------

    def trials(self, sweep_id: str) -> builtins.list[SweepTrialRecord]:
        """The sweep's trials by number."""
        query = (select(SweepTrial).where(SweepTrial.sweep_id == sweep_id)
                 .order_by(SweepTrial.number))
        with transaction(self._reader) as session:
            return [trial_record(row) for row in session.scalars(query)]

    def trial_counts(self, sweep_ids: Iterable[str]) -> dict[str, dict[TrialState, int]]:
        """How many trials each sweep has in each state (states with none left out)."""
        ids = list(sweep_ids)
        found: dict[str, dict[TrialState, int]] = {i: {} for i in ids}
        if not ids:
            return found
        query = (select(SweepTrial.sweep_id, SweepTrial.state, func.count())
                 .where(SweepTrial.sweep_id.in_(ids))
                 .group_by(SweepTrial.sweep_id, SweepTrial.state))
        with transaction(self._reader) as session:
            for sweep_id, state, count in session.execute(query):
                found[sweep_id][TrialState(state)] = count
        return found

    def add_trial(self, sweep_id: str, number: int, params: dict[str, Any]) -> SweepTrialRecord:
        """Trial `number`'s row, QUEUED with no job yet; the row as it is
        where it was added before (the same number is never written twice)."""
        now = utcnow()
        try:
            with write_transaction(self._writer, self._fence) as session:
                existing = session.get(SweepTrial, (sweep_id, number))
                if existing is not None:
                    return trial_record(existing)
                row = SweepTrial(sweep_id=sweep_id, number=number, job_id=None, params=params,
                                 state=TrialState.QUEUED.value, objective=None, pruned_step=None,
                                 error=None, created_at=now, updated_at=now)
                session.add(row)
                session.flush()
                return trial_record(row)
        except IntegrityError:  # added meanwhile (Postgres: no lock on a missing row)
            found = self.trial(sweep_id, number)
            if found is None:
                raise
            return found

    def trial(self, sweep_id: str, number: int) -> SweepTrialRecord | None:
        with transaction(self._reader) as session:
            row = session.get(SweepTrial, (sweep_id, number))
            return None if row is None else trial_record(row)

    def update_trial(self, sweep_id: str, number: int, **fields: Any) -> SweepTrialRecord:
        """Set the trial's `job_id`, `state`, `objective`, `pruned_step`, `error`."""
        if unknown := set(fields) - _TRIAL_FIELDS:
            raise ValueError(f"not a trial field: {', '.join(sorted(unknown))}")
        if isinstance(fields.get("state"), TrialState):
            fields["state"] = fields["state"].value
        with write_transaction(self._writer, self._fence) as session:
            row = session.get(SweepTrial, (sweep_id, number), with_for_update=True)
            if row is None:
                raise LookupError(f"no trial {number} of sweep {sweep_id}")
            shown = {name: getattr(row, name) for name in _SHOWN_ON_JOB}
            for name, value in fields.items():
                setattr(row, name, value)
            row.updated_at = utcnow()
            if row.job_id is not None and any(getattr(row, n) != v for n, v in shown.items()):
                # what the job's view shows changed: a no-op write of its row, so its tenant's
                # jobs version moves (migration 0006's triggers) and no list page kept stays
                session.execute(update(Job).where(Job.id == row.job_id).values(sweep=Job.sweep),
                                execution_options={"synchronize_session": False})
            session.flush()
            return trial_record(row)

    # -- helpers ------------------------------------------------------------

    def by_key(self, tenant: str, key: str) -> SweepRecord | None:
        """The tenant's sweep made with this idempotency key, or None."""
        return self._one(select(Sweep).where(Sweep.tenant == tenant, Sweep.idempotency_key == key))

    def _one(self, query: Select) -> SweepRecord | None:
        with transaction(self._reader) as session:
            row = session.scalars(query).one_or_none()
            return None if row is None else sweep_record(row)
