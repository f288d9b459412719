"""The sweep controller: one pass over every live sweep, run from the
supervisor's loop. Optuna decides what to try and what to prune; the pass
turns its decisions into jobs and its trials' jobs into what it is told.

For each QUEUED or RUNNING sweep, in order:

1. its `after` jobs: still running, the sweep waits QUEUED; one failed, the
   sweep FAILS naming it;
2. each live trial is synced from its job: its objective (the metric, or
   its moving average) is followed row by row, the values its pruner judges
   by are told to the study at their own steps, each once, the pruner asked
   after each (`service.sweeps.objective`: ASHA's rungs, every step for
   the median), and a trial the pruner stops is pruned at that step
   (its runner told to stop its ranks at once, then `JobRequests.prune`:
   PRUNING, dated at the verdict, then PRUNED, its last checkpoint kept);
   an ended job ends its trial (the
   objective at its last step for a success, FAIL or PRUNED otherwise, a
   pruned trial's objective the value it was pruned on);
3. while fewer than `max_concurrent` trials are live and fewer than its
   budget asked, the study is asked for a point; the trial's row is written,
   then its job submitted like any (intake, quota, fair share) with the
   idempotency key `sweep-{id}-t{k}`. A point whose spec is refused is a
   trial FAILED with the refusal's message;
4. the sweep goes RUNNING at its first job, and SUCCEEDED (or FAILED, when no
   trial succeeded) once every trial of its budget has ended and every job of
   it too (a pruned trial ends as its job goes PRUNING; the sweep waits for
   PRUNED, so a sweep that ended holds no ranks).

Crash safety: each step is written before the next is taken, and each is
taken again harmlessly. A trial Optuna asked for but the store has no row of
(a crash between the two) is recorded from the study, not asked again; a row
without a job is submitted again under the same idempotency key (the job the
first submit made, if it made one); a tell is skipped for a trial told
already. So a restart of the service loses or doubles no trial, and the
study keeps the sampler's whole history.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Protocol

from optuna.trial import FrozenTrial
from optuna.trial import TrialState as OptunaState
from pydantic import ValidationError

from service.run.dependencies import Broken, Waiting, dependency_ids, read_dependency_status
from service.states import JobState, SweepState, TrialState
from service.store import JobNotFound, JobRecord, JobStore, QuotaExceeded
from service.store.errors import Deposed
from service.store.sweep_records import SweepRecord, SweepTrialRecord
from service.sweeps.objective import ObjectiveSeries, to_report
from service.sweeps.study import Studies, distributions, running_trials, tell
from workers.cluster.errors import CapacityError
from workers.schema import JobSpec, SpecError, explain
from workers.schema.sweep import trial_spec

logger = logging.getLogger(__name__)

# A trial's state from its job's (PRUNING: the pruner has spoken; its job is stopping).
TRIAL_OF_JOB = {
    JobState.QUEUED: TrialState.QUEUED, JobState.SUSPENDED: TrialState.QUEUED,
    JobState.SUCCEEDED: TrialState.SUCCEEDED, JobState.FAILED: TrialState.FAILED,
    JobState.CANCELLED: TrialState.CANCELLED, JobState.PRUNED: TrialState.PRUNED,
    JobState.PRUNING: TrialState.PRUNED,
}


# A job whose ranks may be training: a prune tells them to stop before the store records it.
TRAINING = frozenset({JobState.STARTING, JobState.RUNNING, JobState.RESTARTING})


def trial_state(job: JobState) -> TrialState:
    return TRIAL_OF_JOB.get(job, TrialState.RUNNING)


class TrialJobs(Protocol):
    """What the controller asks of the control plane (`service.control.requests.JobRequests`)."""

    def submit(self, tenant: str, spec: JobSpec, idempotency_key: str | None, *,
               sweep: str | None = None) -> tuple[JobRecord, bool]: ...

    def cancel(self, tenant: str, job_id: str) -> JobRecord: ...

    def prune(self, job_id: str, step: int, reason: str,
              decided_at: float | None = None) -> JobRecord: ...

    def delete(self, tenant: str, job_id: str) -> JobRecord: ...


def idempotency_key(sweep_id: str, number: int) -> str:
    """A trial's job's key: a submit retried after a crash finds the job the first made."""
    return f"sweep-{sweep_id}-t{number}"


def refusal_message(error: Exception) -> str:
    """What a trial refused at submit records, led by the field (as the 422 says it)."""
    if isinstance(error, ValidationError):
        return explain(error, JobSpec)
    if isinstance(error, SpecError):
        return explain(error)
    if isinstance(error, CapacityError):
        return f"workers: {error}"
    if isinstance(error, QuotaExceeded):
        return f"{error.field}: {error.reason}"
    return str(error)


REFUSALS = (ValidationError, SpecError, CapacityError, JobNotFound, QuotaExceeded)


class SweepController:
    def __init__(self, store: JobStore, jobs: TrialJobs, studies: Studies,
                 wake: Callable[[], None] | None = None,
                 stop_now: Callable[[str], None] | None = None):
        """`wake`: the leader's loop, to run its next pass now; `stop_now`: the
        runner of a job just pruned, to stop its group now (the leader's)."""
        self.store, self.jobs, self.studies = store, jobs, studies
        self._wake, self._stop_now = wake, stop_now
        # each live trial's objective so far, by (sweep id, trial number): made from its
        # job's rows at the first pass of this process that syncs it, fed the new ones after
        self._series: dict[tuple[str, int], ObjectiveSeries] = {}
        self.waiting: dict[str, str] = {}  # a QUEUED sweep's id -> what it waits for

    def run_pass(self) -> None:
        """Advance every live sweep (one that fails is logged, the others go on)."""
        live = self.store.sweeps.live()
        for key in [key for key in self._series if key[0] not in {s.id for s in live}]:
            del self._series[key]  # its sweep ended or was cancelled
        for sweep in live:
            try:
                self.advance(sweep)
            except Deposed:  # another replica leads now: this pass ends here
                raise
            except Exception:
                logger.exception("sweep %s: the controller's pass failed", sweep.id)

    def advance(self, sweep: SweepRecord) -> None:
        spec = sweep.spec
        if sweep.state is SweepState.QUEUED and (ids := dependency_ids(spec)):
            status = read_dependency_status(self.store, ids)
            if isinstance(status, Broken):
                self._end(sweep, SweepState.FAILED, status.reason)
                return
            if isinstance(status, Waiting):
                self.waiting[sweep.id] = status.reason
                return
        self.waiting.pop(sweep.id, None)

        study = self.studies.study(sweep.study, spec)
        running = running_trials(study)
        rows = {t.number: t for t in self.store.sweeps.trials(sweep.id)}
        for number, trial in running.items():  # asked, then a crash before its row: record it
            if number not in rows:
                rows[number] = self.store.sweeps.add_trial(sweep.id, number, dict(trial.params))

        for number, row in list(rows.items()):
            if row.job_id is not None and not row.state.is_terminal:
                rows[number] = self._sync(sweep, study, row, running.get(number))

        submitted = False
        for number, row in sorted(rows.items()):
            if _unsubmitted(row):
                rows[number] = self._submit(sweep, study, row)
                submitted |= rows[number].job_id is not None
        while (sum(not r.state.is_terminal for r in rows.values()) < spec.max_concurrent
               and len(rows) < spec.trial_budget):
            asked = study.ask(distributions(spec))
            row = self.store.sweeps.add_trial(sweep.id, asked.number, dict(asked.params))
            rows[row.number] = row = self._submit(sweep, study, row)
            submitted |= row.job_id is not None
            if _unsubmitted(row):  # the queue is full for now: the next pass tries again
                break

        if submitted:
            self._started(sweep, rows)
        if (len(rows) >= spec.trial_budget and all(r.state.is_terminal for r in rows.values())
                and not self._stopping(rows.values())):
            if any(r.state is TrialState.SUCCEEDED for r in rows.values()):
                self._end(sweep, SweepState.SUCCEEDED, None)
            else:
                self._end(sweep, SweepState.FAILED, _no_success(list(rows.values())))

    def _stopping(self, rows) -> bool:
        """A pruned trial's job still stops (PRUNING): its trial has ended, and
        the next trial may start, but the sweep ends only with its last job."""
        for row in rows:
            if row.state is TrialState.PRUNED and row.job_id is not None:
                job = self.store.get_job(row.job_id)
                if job is not None and not job.state.is_terminal:
                    return True
        return False

    # -- a trial --------------------------------------------------------------

    def _submit(self, sweep: SweepRecord, study, row: SweepTrialRecord) -> SweepTrialRecord:
        """Submit the trial's job (again, after a crash: the same key finds the same job)."""
        try:
            spec = trial_spec(sweep.spec, row.params, row.number, sweep.labels)
            job, _ = self.jobs.submit(sweep.tenant, spec, idempotency_key(sweep.id, row.number),
                                      sweep=sweep.id)
        except QuotaExceeded as error:
            if not error.retryable:
                return self._refused(sweep, study, row, error)
            return row  # the tenant's queue is full: submitted again next pass
        except REFUSALS as error:
            return self._refused(sweep, study, row, error)
        return self.store.sweeps.update_trial(sweep.id, row.number, job_id=job.id,
                                              state=trial_state(job.state))

    def _refused(self, sweep: SweepRecord, study, row: SweepTrialRecord,
                 error: Exception) -> SweepTrialRecord:
        message = refusal_message(error)
        logger.info("sweep %s: trial %d refused: %s", sweep.id, row.number, message)
        tell(study, row.number, state=OptunaState.FAIL)
        return self.store.sweeps.update_trial(sweep.id, row.number, state=TrialState.FAILED,
                                              error=message)

    def _sync(self, sweep: SweepRecord, study, row: SweepTrialRecord,
              frozen: FrozenTrial | None) -> SweepTrialRecord:
        """Tell the pruner the trial's new objective values it judges by
        (`service.sweeps.objective`), prune it at the first it says so, end
        it if its job ended."""
        assert row.job_id is not None
        job = self.store.get_job(row.job_id)
        if job is None:
            self._series.pop((sweep.id, row.number), None)
            tell(study, row.number, state=OptunaState.FAIL)
            return self.store.sweeps.update_trial(sweep.id, row.number, state=TrialState.FAILED,
                                                  error=f"its job {row.job_id} was deleted")
        series = self._series.get((sweep.id, row.number))
        if series is None:  # first seen by this process: its rows from the first
            series = self._series[(sweep.id, row.number)] = ObjectiveSeries(sweep.spec.objective)
        series.feed(self.store.metrics(job.id, since_step=series.last_step + 1))
        # `frozen` None: the study was told of this trial already (a crash before its row was
        # updated), so nothing more is told; the row follows its job.
        pruned_at = None
        if frozen is not None and (told := to_report(sweep.spec, series, frozen.intermediate_values)):
            # an ended job's values are told too: the trials after it are compared with them
            running = not job.state.is_terminal
            judged = self.studies.judge(study, row.number, told, stop=running)
            if judged is not None and running:
                pruned_at = judged
                job = self._prune(sweep, job, pruned_at, series.values[pruned_at])
        latest = series.latest
        objective = latest[1] if latest else row.objective
        if pruned_at is not None:  # the value it was pruned on (none shown where it diverged)
            objective = _finite(series.values[pruned_at])

        state = trial_state(job.state)
        if state.is_terminal:
            self._series.pop((sweep.id, row.number), None)
        metric = sweep.spec.objective.metric
        if state is TrialState.SUCCEEDED:
            if latest is None:
                tell(study, row.number, state=OptunaState.FAIL)
                return self.store.sweeps.update_trial(
                    sweep.id, row.number, state=TrialState.FAILED,
                    error=f"the job succeeded but none of its metrics rows has {metric!r}")
            tell(study, row.number, value=latest[1])
            return self.store.sweeps.update_trial(sweep.id, row.number, state=state,
                                                  objective=latest[1])
        if state is TrialState.PRUNED:
            tell(study, row.number, state=OptunaState.PRUNED)
            step = row.pruned_step or pruned_at
            if step is None:  # pruned before this process judged it: the last step it was told
                steps = frozen.intermediate_values if frozen is not None else {}
                step = max(steps) if steps else job.step
            if step in series.values:
                objective = _finite(series.values[step])
            return self.store.sweeps.update_trial(sweep.id, row.number, state=state,
                                                  objective=objective, pruned_step=step)
        if state.is_terminal:  # FAILED, CANCELLED
            tell(study, row.number, state=OptunaState.FAIL)
            return self.store.sweeps.update_trial(sweep.id, row.number, state=state,
                                                  objective=objective, error=job.error)
        if state is not row.state or objective != row.objective:
            return self.store.sweeps.update_trial(sweep.id, row.number, state=state,
                                                  objective=objective)
        return row

    def _prune(self, sweep: SweepRecord, job: JobRecord, step: int, value: float) -> JobRecord:
        """Stop the trial's job: its ranks told first, the store's PRUNING (dated
        at the verdict) after, so the stop does not wait on the write (a write
        waits its turn behind the runners' rows on a busy database)."""
        decided = time.time()
        objective = sweep.spec.objective
        named = objective.metric + (" (smoothed)" if objective.smoothing != "none" else "")
        reason = (f"sweep {sweep.name}'s {sweep.spec.pruner} pruner: {named} {value:.6g} at "
                  f"step {step} falls behind its other trials' at that step")
        if job.state in TRAINING and self._stop_now is not None:
            # Should the write then find the job moved (cancelled, suspended, preempted,
            # restarting), the stop is one it would take anyway or that reaches a group
            # already going; its runner waits for the write before it settles.
            self._stop_now(job.id)
        pruned = self.jobs.prune(job.id, step, reason, decided_at=decided)
        logger.info("sweep %s: job %s pruned at step %d (%s), its ranks told %.3f s before the "
                    "write ended", sweep.id, job.id, step, pruned.state.value, time.time() - decided)
        if pruned.state is JobState.PRUNING and self._wake is not None:
            self._wake()  # its workers come free soon: the next pass admits the next trial
        return pruned

    # -- the sweep ------------------------------------------------------------

    def _started(self, sweep: SweepRecord, rows: dict[int, SweepTrialRecord]) -> None:
        """QUEUED -> RUNNING at its first job; a sweep cancelled while this pass
        submitted has its new jobs cancelled too."""
        if sweep.state is SweepState.QUEUED and self.store.sweeps.set_state(
                sweep.id, SweepState.RUNNING, expect=[SweepState.QUEUED]) is not None:
            return
        now = self.store.sweeps.get(sweep.id)
        if now is not None and now.state is SweepState.CANCELLED:
            for row in rows.values():
                if row.job_id is not None and not row.state.is_terminal:
                    self.jobs.cancel(sweep.tenant, row.job_id)
                    self.store.sweeps.update_trial(sweep.id, row.number,
                                                   state=TrialState.CANCELLED)

    def _end(self, sweep: SweepRecord, state: SweepState, error: str | None) -> None:
        if self.store.sweeps.set_state(sweep.id, state, error=error) is not None:
            logger.info("sweep %s %s%s", sweep.id, state.value, f": {error}" if error else "")
        self.waiting.pop(sweep.id, None)
        self.studies.forget(sweep.study)


def _unsubmitted(row: SweepTrialRecord) -> bool:
    return row.job_id is None and row.state is TrialState.QUEUED


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _no_success(rows: list[SweepTrialRecord]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.state.value] = counts.get(row.state.value, 0) + 1
    first = next((r for r in rows if r.error), None)
    detail = f"; trial {first.number}: {first.error}" if first is not None else ""
    return ("no trial succeeded (" + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            + ")" + detail)
