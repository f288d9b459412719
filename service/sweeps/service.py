"""Sweeps as the API asks for them (`supervisor.sweeps`): submit, read, view,
cancel, delete; and the controller's pass that the leader's loop runs.

It is handed the part of the control plane it uses, the job requests
(`TrialJobs`: submit, cancel, prune, delete; `service.control.requests`), and
their submit checks for a sweep's base (`check`), not the whole supervisor.

A sweep belongs to its tenant: another tenant's is not found (404), the
admin reaches every one. At submit, the base spec goes through a job's submit
checks (`check`, then the quota's at submit: a priority above the tenant's
`max_priority`, a size it could never run), a refusal naming `base.<field>`;
then every value a trial may take (each value of a grid or a choice, both
bounds of a range), set alone on the base as a trial sets it, goes through
the same checks: a 422 naming `space.<field>` and the value. So a value the
tenant may not use (a priority above its ceiling, an `init.uri` outside its
data prefix, another tenant's job in `init.job`) refuses the sweep rather than
each of its trials. Each trial's spec goes through them again when its job is
submitted (a combination of values may still be refused there: a FAILED trial).
The cost is one submit check a value (about a millisecond where the check
reads no data).
"""

from __future__ import annotations

import builtins
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from service.intake.dependencies import check_after
from service.scheduling import Demand, QuotaPolicy
from service.states import SweepState, TrialState
from service.store import JobNotFound, JobRecord, JobStore, QuotaExceeded
from service.store.errors import SweepNotFound, SweepUnfinished
from service.store.sweep_records import SweepRecord, SweepTrialRecord
from service.store.tenants import ADMIN_TENANT, tenant_policy
from service.sweeps.controller import REFUSALS, SweepController, TrialJobs, refusal_message
from service.sweeps.study import Studies
from workers.cluster.errors import CapacityError
from workers.schema import JobSpec, SpecError
from workers.schema.sweep import (
    MAX_TRIALS,
    Domain,
    SweepSpec,
    trial_labels_problem,
    trial_name,
    trial_spec,
)

logger = logging.getLogger(__name__)

BaseCheck = Callable[[str, JobSpec], JobSpec]  # (tenant, spec) -> the spec the submit checks pass


class SweepService:
    def __init__(self, store: JobStore, jobs: TrialJobs, check: BaseCheck,
                 wake: Callable[[], None] | None = None, *, leader_store: JobStore | None = None,
                 stop_now: Callable[[str], None] | None = None):
        """`store` for the API's requests; `leader_store` (the leader's fenced
        view: `JobStore.fenced`) for the controller's pass, whose writes a
        deposed leader must not make; `stop_now`: tells a pruned job's ranks
        to stop at once (the leader's runner of it)."""
        self.store, self.jobs, self._check = store, jobs, check
        self._wake = wake
        self.studies = Studies(store.url)
        self.controller = SweepController(leader_store or store, jobs, self.studies, wake=wake,
                                          stop_now=stop_now)

    # -- requests -------------------------------------------------------------

    def submit(self, tenant: str, spec: SweepSpec,
               idempotency_key: str | None) -> tuple[SweepRecord, bool]:
        """A new QUEUED sweep (its first trials start at the controller's next
        pass): (sweep, True); an idempotent retry: (that sweep, False)."""
        if idempotency_key is not None and (found := self.store.sweeps.by_key(tenant, idempotency_key)):
            return found, False
        self._check_dependencies(tenant, spec)
        self._check_base(tenant, spec.base)
        self._check_space(tenant, spec)
        record, created = self.store.sweeps.create(tenant=tenant, spec=spec,
                                                   idempotency_key=idempotency_key)
        if created:
            logger.info("sweep %s (%s) of tenant %s submitted: %d trials, %d at once",
                        record.id, record.name, tenant, spec.trial_budget, spec.max_concurrent)
            if self._wake is not None:
                self._wake()
        return record, created

    def get(self, tenant: str, sweep_id: str) -> SweepRecord:
        """The sweep, if `tenant` may reach it (its own; the admin: any); else `SweepNotFound`."""
        found = self.store.sweeps.get(sweep_id, tenant=None if tenant == ADMIN_TENANT else tenant)
        if found is None:
            raise SweepNotFound(sweep_id)
        return found

    def list(self, tenant: str, *, state: str | SweepState | Iterable[str | SweepState] | None = None,
             limit: int = 50, offset: int = 0,
             labels: Iterable[tuple[str, str]] = ()) -> builtins.list[SweepRecord]:
        """The tenant's sweeps (the admin: every tenant's), newest first; `labels`:
        only those with every one of these (key, value)."""
        states = [state] if isinstance(state, str | SweepState) else state
        return self.store.sweeps.list(tenant=None if tenant == ADMIN_TENANT else tenant,
                                      states=states, limit=limit, offset=offset, labels=labels)

    def relabel(self, tenant: str, sweep_id: str, changes: dict[str, Any]) -> SweepRecord:
        """Set the sweep's `labels` (all of them, replaced) and/or its `note`
        (None: none), whatever its state. The trials made from then on inherit
        the new labels; those made already keep theirs (each job's own to
        change). Labels that, with the base's, would be too many for a trial
        are a SpecError at `labels`, as at submit."""
        sweep = self.get(tenant, sweep_id)
        if unknown := set(changes) - {"labels", "note"}:
            raise TypeError(f"not a label or note: {', '.join(sorted(unknown))}")
        if "labels" in changes and (problem := trial_labels_problem(sweep.spec.base,
                                                                     changes["labels"])):
            raise SpecError("labels", problem)
        return self.store.sweeps.relabel(sweep.id, **changes)

    def trials(self, tenant: str, sweep_id: str) -> builtins.list[SweepTrialRecord]:
        return self.store.sweeps.trials(self.get(tenant, sweep_id).id)

    def view(self, tenant: str, sweep_id: str) -> dict[str, Any]:
        """The sweep as `GET /v1/sweeps/{id}` shows it: its spec, state,
        counts of trials by state, every trial and the best one."""
        sweep = self.get(tenant, sweep_id)
        trials = self.store.sweeps.trials(sweep.id)
        jobs = {job.id: job for job in self._jobs_of(sweep.id)}
        counts = {state.value: 0 for state in TrialState}
        for trial in trials:
            counts[trial.state.value] += 1
        counts["total"] = len(trials)
        return {
            "id": sweep.id, "name": sweep.name, "tenant": sweep.tenant, "state": sweep.state.value,
            "error": sweep.error, "waiting": self.controller.waiting.get(sweep.id),
            "created_at": sweep.created_at, "updated_at": sweep.updated_at,
            "finished_at": sweep.finished_at, "spec": sweep.spec.to_json(),
            "labels": sweep.labels, "note": sweep.note,
            "objective": _objective_json(sweep), "counts": counts,
            "trials": [_trial_json(sweep, t, jobs.get(t.job_id) if t.job_id else None)
                       for t in trials],
            "best": _best(sweep, trials),
        }

    def cancel(self, tenant: str, sweep_id: str) -> SweepRecord:
        """Cancel the sweep and its live trials' jobs; a finished sweep is
        answered as it is."""
        sweep = self.get(tenant, sweep_id)
        if sweep.state.is_terminal:
            return sweep
        cancelled = self.store.sweeps.set_state(sweep.id, SweepState.CANCELLED)
        if cancelled is None:  # it ended meanwhile
            return self.get(tenant, sweep_id)
        for trial in self.store.sweeps.trials(sweep.id):
            if not trial.state.is_terminal:
                self.store.sweeps.update_trial(sweep.id, trial.number, state=TrialState.CANCELLED)
        for job in self._jobs_of(sweep.id):  # the recorded trials' and any a crash left unrecorded
            if not job.state.is_terminal:
                with contextlib.suppress(JobNotFound):  # deleted meanwhile
                    self.jobs.cancel(tenant, job.id)
        self.studies.forget(sweep.study)
        logger.info("sweep %s cancelled", sweep.id)
        return cancelled

    def delete(self, tenant: str, sweep_id: str) -> SweepRecord:
        """Remove a finished sweep, its trials' jobs (their storage too) and its
        study; `SweepUnfinished` while it or one of its jobs is live."""
        sweep = self.get(tenant, sweep_id)
        if not sweep.state.is_terminal:
            raise SweepUnfinished(sweep.id, f"is {sweep.state.value}")
        jobs = self._jobs_of(sweep.id)
        if live := [job.id for job in jobs if not job.state.is_terminal]:
            raise SweepUnfinished(sweep.id, f"has trial jobs still stopping ({', '.join(live[:5])})")
        for job in jobs:
            with contextlib.suppress(JobNotFound):  # a delete retried: gone already
                self.jobs.delete(tenant, job.id)
        try:
            self.studies.delete(sweep.study)
        except Exception:  # the study's rows are only history: the sweep still goes
            logger.exception("sweep %s: its study could not be deleted", sweep.id)
        self.store.sweeps.delete(sweep.id)
        logger.info("sweep %s deleted with %d jobs", sweep.id, len(jobs))
        return sweep

    def run_pass(self) -> None:
        """The controller's pass over every live sweep (`service.sweeps.controller`)."""
        self.controller.run_pass()

    # -- helpers --------------------------------------------------------------

    def _jobs_of(self, sweep_id: str) -> builtins.list[JobRecord]:
        jobs, _ = self.store.list_jobs(tenant=None, sweep=sweep_id, limit=MAX_TRIALS + 1)
        return jobs

    def _check_job(self, tenant: str, spec: JobSpec) -> None:
        """What `POST /v1/jobs` checks of a spec before it queues it: the
        submit checks (`check`), then the quota's refusals for good (a
        priority above the tenant's max_priority, a size its quota could never
        run; not its queue's length, which changes)."""
        checked = self._check(tenant, spec)
        row = self.store.tenants.by_name(tenant)
        if row is None:  # the admin: no quota
            return
        decision = QuotaPolicy().check_submit(tenant_policy(row), 0, Demand.from_spec(checked))
        if not decision.allowed:
            raise QuotaExceeded(decision.reason, retryable=False, field=decision.field)

    def _check_base(self, tenant: str, base: JobSpec) -> None:
        """The submit checks on the base spec, refusals located under `base`."""
        try:
            self._check_job(tenant, base)
        except SpecError as error:
            raise SpecError(f"base.{error.field}", str(error)) from error
        except CapacityError as error:
            raise SpecError("base.workers", str(error)) from error
        except JobNotFound as error:
            raise SpecError("base.init.job", f"base.init.job: no job {error.job_id} of this "
                            "tenant") from error
        except QuotaExceeded as error:
            raise QuotaExceeded(error.reason, retryable=False, field=f"base.{error.field}") from error

    def _check_space(self, tenant: str, sweep: SweepSpec) -> None:
        """Every value a trial may take, set alone on the base as the trial
        sets it (`trial_spec`), through `_check_job`: the first refused is a
        SpecError at `space.<field>` naming the value and why."""
        for key, domain in sweep.space.items():
            for what, value in space_values(domain):
                try:
                    self._check_job(tenant, trial_spec(sweep, {key: value}, 0))
                except REFUSALS as error:
                    why = (f"init.job: job {error.job_id!r} not found" if isinstance(error, JobNotFound)
                           else refusal_message(error))
                    raise SpecError(f"space.{key}", f"space.{key}: {what} {value!r} is refused: "
                                                    f"{why}") from error

    def _check_dependencies(self, tenant: str, spec: SweepSpec) -> None:
        """Each `after` job is one of the tenant's own, not ended without
        succeeding: the jobs' own check (a 422 at `after.N`)."""
        check_after(spec.base.model_copy(update={"after": spec.after}), tenant, self.store)


def space_values(domain: Domain) -> list[tuple[str, Any]]:
    """What a domain may give a trial, each once, with what it is: each
    value of a grid or a choice, the two bounds of a range."""
    if domain.values is not None:
        listed = [(f"{domain.kind} value", v) for v in domain.values]
    else:
        lo, hi = getattr(domain, domain.kind)
        listed = [(f"{domain.kind} bound", lo), (f"{domain.kind} bound", hi)]
    seen: set[tuple[type, Any]] = set()
    unique = []
    for what, value in listed:
        if (type(value), value) not in seen:  # 1 and True are two values
            seen.add((type(value), value))
            unique.append((what, value))
    return unique


def _trial_json(sweep: SweepRecord, trial: SweepTrialRecord,
                job: JobRecord | None) -> dict[str, Any]:
    """A trial as the API shows it: `objective` is what it is judged by (at its
    last step; a pruned one's at `pruned_step`, the value it was pruned on),
    `last_loss` and `step` its job's newest (what the jobs list shows), which a
    pruned trial's ranks reached after the decision."""
    return {"number": trial.number, "job": trial.job_id, "name": trial_name(sweep.name, trial.number),
            "params": trial.params, "objective": trial.objective, "state": trial.state.value,
            "pruned_step": trial.pruned_step, "error": trial.error,
            "step": job.step if job is not None else None,
            "last_loss": job.latest_loss if job is not None else None}


def _objective_json(sweep: SweepRecord) -> dict[str, Any]:
    """What the sweep judges by: its metric and mode, and how it is smoothed."""
    objective = sweep.spec.objective
    shown: dict[str, Any] = {"metric": objective.metric, "mode": objective.mode}
    if objective.smoothing != "none":
        shown |= {"smoothing": objective.smoothing, "ema_factor": objective.ema_factor}
    return shown


def _best(sweep: SweepRecord, trials: list[SweepTrialRecord]) -> dict[str, Any] | None:
    done = [t for t in trials if t.state is TrialState.SUCCEEDED and t.objective is not None]
    if not done:
        return None
    pick = min if sweep.spec.objective.mode == "min" else max
    best = pick(done, key=lambda t: t.objective)  # type: ignore[arg-type, return-value]
    return {"job": best.job_id, "number": best.number, "params": best.params,
            "objective": best.objective}

