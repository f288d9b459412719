"""What is asked of a job: submit (after the submit checks), cancel,
suspend, resume and delete from the API; prune from a sweep's pruner; and
the leader's purge of jobs past their retention.

Each is a state change in the store (or a job's removal) and nothing more:
the leader's loop and the job's runner see it at their next look and carry
it out (admit, stop the group, checkpoint). So any replica takes requests:
the API's are plain store writes; a prune, the leader's own, is written
through the fenced store and refused once another replica leads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from service.control.reach import reachable_job
from service.control.storage import JobStorage
from service.intake.checks import check_fits, check_memory, intake
from service.intake.flavors import flavor_labels
from service.observability.log_config import job_fields
from service.scheduling import Demand
from service.settings import Settings
from service.states import STOPPING, WITHOUT_WORKERS
from service.states import JobState as S
from service.store import JobRecord, JobStore, JobUnfinished, UnexpectedState
from service.store.models import utcnow
from service.store.tenants import ADMIN_TENANT
from workers.schema import JobSpec

logger = logging.getLogger(__name__)
PRUNE_TRIES = 5  # a prune decided again as often where the job keeps moving meanwhile
CANCEL_TRIES = 5  # a cancel written again as often where the job keeps moving meanwhile


class JobRequests:
    def __init__(self, settings: Settings, store: JobStore, storage: JobStorage, *,
                 leader_store: JobStore, wake: Callable[[], None]):
        """`store` for the API's writes; `leader_store` (the fenced view) for
        the pruner's; `wake`: the leader's loop looks again now (a job queued)."""
        self.settings, self.store, self.storage = settings, store, storage
        self.leader_store, self._wake = leader_store, wake

    def submit(self, tenant: str, spec: JobSpec, idempotency_key: str | None, *,
               sweep: str | None = None) -> tuple[JobRecord, bool]:
        """Queue the job that `spec` (parsed by the caller) asks for, once the
        submit checks (`service.intake.checks`) pass it; (job, created).
        `sweep`: the sweep it is a trial of."""
        spec = self.check_spec(tenant, spec)
        job, created = self.store.create_job(
            tenant=tenant, name=spec.name, spec=spec, sweep=sweep,
            priority=spec.priority, idempotency_key=idempotency_key, demand=Demand.from_spec(spec),
        )
        self._wake()
        return job, created

    def check_spec(self, tenant: str, spec: JobSpec) -> JobSpec:
        """The submit checks (`service.intake.checks`) alone: the spec they pass
        (fixed where they fix it), or their refusal (a sweep's base at its submit)."""
        return intake(spec, tenant, data_root=self.settings.resolved_data_uri_root,
                      store=self.store, checkpoints_of=self.storage.checkpoint_store)

    def cancel(self, tenant: str, job_id: str) -> JobRecord:
        """Idempotent: a job cancelled (or being cancelled) already is answered
        as it is. A job that moves while the cancel is written (admitted,
        started: the leader's own writes) is cancelled from where it went."""
        by = _who(tenant)
        tries = CANCEL_TRIES
        while True:
            job = reachable_job(self.store, tenant, job_id)
            if _cancelled_or_stopping(job.state):  # a pruned one stops anyway
                return job
            try:
                if job.state in WITHOUT_WORKERS:
                    return self.store.transition(job_id, S.CANCELLED, reason=f"cancelled by {by}",
                                                 expect=job.state)
                return self.store.transition(job_id, S.CANCELLING,
                                             reason=f"cancel requested by {by}", expect=job.state)
            except UnexpectedState:  # it moved meanwhile: cancel it from where it is now
                tries -= 1
                if not tries:
                    raise

    def prune(self, job_id: str, step: int, reason: str,
              decided_at: float | None = None) -> JobRecord:
        """Stop a sweep's trial early (its pruner's call): a job that holds or
        may hold workers goes PRUNING (its runner stops the group at once, its
        last committed checkpoint kept, and records PRUNED), one that holds
        none (QUEUED, SUSPENDED) PRUNED at once; the event's reason is
        "pruned at step {step}: {reason}", its time `decided_at` (epoch
        seconds: the pruner's verdict, whose stop went to the ranks before
        this write) or now. Idempotent: a job PRUNING or already finished
        (PRUNED too), or being cancelled, is returned as is."""
        why = f"pruned at step {step}: {reason}"
        for _ in range(PRUNE_TRIES):
            job = reachable_job(self.store, ADMIN_TENANT, job_id)
            if job.state.is_terminal or job.state in STOPPING:
                return job
            to = S.PRUNED if job.state in WITHOUT_WORKERS else S.PRUNING
            try:
                # the leader's pruner: a deposed leader's prune is refused (Deposed)
                pruned = self.leader_store.transition(job_id, to, reason=why, expect=job.state,
                                                      event_time=decided_at)
            except UnexpectedState:  # it moved meanwhile (admitted, preempted): decide again
                continue
            logger.info("job %s: %s -> %s: %s", job_id, job.state.value, to.value, why,
                        extra=job_fields(job))
            return pruned
        return reachable_job(self.store, ADMIN_TENANT, job_id)  # still moving: its pruner asks again

    def suspend(self, tenant: str, job_id: str) -> JobRecord:
        """Checkpoint, then stop: SUSPENDING, carried out by the job's runner."""
        job = reachable_job(self.store, tenant, job_id)
        return self.store.transition(
            job_id, S.SUSPENDING, expect=job.state,
            reason=f"suspend requested by {_who(tenant)}: checkpoint, then stop",
        )

    def resume(self, tenant: str, job_id: str, workers: int | None = None) -> JobRecord:
        """A SUSPENDED job queued again (at `workers`, checked as a submit
        checks a size, where given), held to its tenant's queue quota."""
        job = reachable_job(self.store, tenant, job_id)
        if workers is not None:
            job.spec.check_world_size(workers)
            labels = flavor_labels(job.spec, self.store)  # its flavor's nodes, where it has one
            check_fits(job.spec, workers, labels)
            check_memory(job.spec, [workers], labels)
        reason = f"resumed by {_who(tenant)}" + (f" at {workers} workers" if workers else "")
        job = self.store.transition(job_id, S.QUEUED, reason=reason, expect=S.SUSPENDED,
                                    requested_workers=workers, queue_quota=job.tenant)
        self._wake()
        return job

    def relabel(self, tenant: str, job_id: str, changes: dict) -> JobRecord:
        """Set the job's `labels` (all of them, replaced) and/or its `note` (None: none),
        whatever its state: they are the job's description, not its run."""
        reachable_job(self.store, tenant, job_id)
        unknown = set(changes) - {"labels", "note"}
        if unknown:
            raise TypeError(f"not a label or note: {', '.join(sorted(unknown))}")
        return self.store.update_job(job_id, **changes)

    def delete(self, tenant: str, job_id: str) -> JobRecord:
        """Remove a finished job: its storage (checkpoints, exports) first, so
        that a failure there leaves the record to delete again, then the
        record and its history. `JobUnfinished` while it runs or waits."""
        job = reachable_job(self.store, tenant, job_id)
        if not job.state.is_terminal:
            raise JobUnfinished(job_id, job.state)
        removed = self._remove(job)
        logger.info("job %s of tenant %s deleted by %s", job_id, job.tenant, _who(tenant),
                    extra=job_fields(job))
        return removed

    def purge_expired(self, now: datetime | None = None) -> list[str]:
        """Delete the jobs that finished more than `job_retention_days` ago;
        their ids. A job that cannot be deleted now is logged and tried again
        at the next purge."""
        days = self.settings.job_retention_days
        if days is None:
            return []
        cutoff = (now or utcnow()) - timedelta(days=days)
        removed = []
        for job in self.store.finished_before(cutoff):
            try:
                self._remove(job)
            except Exception:
                logger.exception("job %s: retention could not delete it", job.id,
                                 extra=job_fields(job))
                continue
            logger.info("job %s of tenant %s deleted: finished %s, past the retention of %g days",
                        job.id, job.tenant, job.finished_at, days, extra=job_fields(job))
            removed.append(job.id)
        return removed

    def _remove(self, job: JobRecord) -> JobRecord:
        """The job's storage, then its record and history."""
        self.storage.checkpoint_store(job).remove_job()
        return self.store.delete_job(job.id)


def _cancelled_or_stopping(state: S) -> bool:
    """A cancel has nothing left to do: cancelled, or its group being stopped already."""
    return state is S.CANCELLED or state in STOPPING


def _who(tenant: str) -> str:
    """Who asked, as an event names them."""
    return "the admin" if tenant == ADMIN_TENANT else "the user"
