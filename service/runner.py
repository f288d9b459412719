"""One job's driver: a thread that launches (or reattaches to) the job's
worker group on Ray, records its progress, carries out cancel and suspend,
and turns how the group ended into the job's next state.

The store is the source of truth: requests from the API arrive as state
changes (CANCELLING, SUSPENDING) that the runner sees at its next poll.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from service.recovery import RECOVERY_FIELDS, FailureHistory, Interruption, backoff_s
from service.spec import JobSpec
from service.states import IllegalTransition
from service.store.errors import UnexpectedState
from service.states import JobState as S
from workers.errors import PlacementTimeoutError, RankError, WorkerGroupError
from workers.group import WorkerGroup

if TYPE_CHECKING:
    from service.store import JobRecord
    from service.supervisor import Supervisor

logger = logging.getLogger(__name__)


def group_name(job_id: str, attempt: int) -> str:
    return f"brigade-{job_id}-a{attempt}"


class JobRunner(threading.Thread):
    def __init__(self, supervisor: Supervisor, job_id: str, attached: WorkerGroup | None = None):
        super().__init__(name=f"runner-{job_id}", daemon=True)
        self.sup, self.store, self.job_id = supervisor, supervisor.store, job_id
        self.group = attached
        self.detach = threading.Event()  # the control plane is stopping: leave the group be
        self._nodes: set[str] = set()  # where the last attempt's ranks ran
        # Faults (service/recovery.py): the failures this runner saw, for the
        # restart policy; the interruption the running attempt recovers from.
        self.failures = FailureHistory(supervisor.settings.restart_backoff_s)
        self._interruption: Interruption | None = None
        # Reattached: the attempt's rows are fetched again from its first, whose
        # recovery figures (recorded by the runner before) must not be lost.
        self._keep_recovery = attached is not None

    # -- the life of one job --------------------------------------------------

    def run(self) -> None:
        try:
            while not self.detach.is_set():
                job = self.store.get_job(self.job_id)
                if self.group is None and job.state is S.RESTARTING:
                    self._backoff(job)
                    if self.detach.is_set():
                        return
                    try:
                        job = self._restart(job)
                    except UnexpectedState:
                        continue  # cancelled, suspended or preempted meanwhile: look again
                    if job is None:
                        return
                if self.group is None and self._released_without_group(job):
                    return
                if self.group is None:
                    self.group = self._launch(job)
                    if self.group is None:
                        if self.store.get_job(self.job_id).state is S.RESTARTING:
                            continue  # it could not start, and has restarts left
                        return
                outcome = self._watch()
                if self.detach.is_set():
                    return
                self._nodes = {info["node_id"] for info in self.group.node_infos}
                self.group.shutdown()
                self.group = None
                if not self._conclude(outcome):
                    return
        except Exception as e:  # a bug of ours: fail the job loudly, never leave it hanging
            logger.exception("runner of job %s failed", self.job_id)
            self._fail(f"control plane error: {type(e).__name__}: {e}")
        finally:
            if self.group is not None and not self.detach.is_set():
                self.group.shutdown()
            self.sup.runner_done(self.job_id)

    def _restart(self, job: JobRecord) -> JobRecord | None:
        """RESTARTING -> STARTING at the largest size that fits now (an
        elastic job shrinks after losing a node), or back to the queue."""
        workers = self.sup.admission.restart_size(job, self._nodes)
        if workers is None:
            self.store.transition(
                self.job_id, S.QUEUED, expect=S.RESTARTING, workers=None,
                reason="restart: not enough free capacity for any of its sizes; requeued",
            )
            return None
        resized = f" at {workers} workers (was {job.workers})" if workers != job.workers else ""
        return self.store.transition(
            self.job_id, S.STARTING, expect=S.RESTARTING, attempt=job.attempt + 1,
            workers=workers, reason=f"starting attempt {job.attempt + 1}{resized}",
        )

    def _released_without_group(self, job: JobRecord) -> bool:
        """A job asked to give back workers it does not hold (preempted,
        suspended or cancelled between attempts) goes straight on."""
        ends = {S.PREEMPTING: (S.QUEUED, "requeued"), S.SUSPENDING: (S.SUSPENDED, "suspended"),
                S.CANCELLING: (S.CANCELLED, "cancelled")}
        if job.state not in ends:
            return False
        target, what = ends[job.state]
        self.store.transition(self.job_id, target, expect=job.state, workers=None,
                              reason=f"{what} between attempts: no workers were running")
        return True

    def _launch(self, job: JobRecord) -> WorkerGroup | None:
        spec = JobSpec.model_validate(job.spec)
        res = spec.resources_per_worker
        group = WorkerGroup(
            job.workers,
            cpus_per_worker=res.cpu,
            gpus_per_worker=res.gpu,
            name_prefix=group_name(job.id, job.attempt),
            placement_strategy=spec.placement,
            detached=True,
            pg_timeout_s=self.sup.settings.pg_timeout_s,
        )
        self._interruption = Interruption.before(self.store, job)
        try:
            group.start()
            group.start_training(spec.engine_config(), checkpoint=self.sup.checkpoint_target(job))
        except PlacementTimeoutError as e:
            group.shutdown()
            try:
                self.store.transition(self.job_id, S.QUEUED, expect=S.STARTING, workers=None,
                                      reason=f"capacity not available: {e}; requeued")
            except IllegalTransition:
                self._released_without_group(self.store.get_job(self.job_id))
            return None
        except (WorkerGroupError, ValueError) as e:
            group.shutdown()  # whatever of it started: no actor or bundle outlives the attempt
            self.failures.note(e, group)
            self._conclude(("failed", f"could not start: {e}"))
            return None
        try:
            self.store.transition(
                self.job_id, S.RUNNING, expect=S.STARTING,
                reason=f"worker group of {job.workers} ranks started (attempt {job.attempt}, "
                       f"backend {group.backend})",
            )
        except IllegalTransition:
            pass  # cancelled or suspended while starting: the watch carries it out
        self.store.append_log(self.job_id, [
            f"attempt {job.attempt}: {job.workers} ranks on "
            f"{', '.join(sorted({i['node_ip'] for i in group.node_infos}))}, backend {group.backend}"
        ])
        return group

    def _watch(self) -> tuple[str, str | None]:
        """Poll the group until it ends; ('done'|'cancelled'|'failed'|'killed', error).
        A group asked to stop (preempted, suspended) that has not stopped
        within its grace period is 'killed'."""
        seen, stop_sent = 0, None
        grace = self.sup.admission.grace_s(self.store.get_job(self.job_id))
        while not self.detach.is_set():
            try:
                seen += self._record(self.group.progress(seen))
                status = self.group.status()
            except RankError as e:
                self.failures.note(e, self.group)
                return ("failed", str(e))
            except WorkerGroupError as e:  # ranks that do not answer (hung, stopped): a failure too
                self.failures.note(e, self.group)
                return ("failed", f"worker group not answering: {e}")
            if status["state"] in ("done", "preempted"):
                self._record(self.group.progress(seen))
                return (status["state"], status.get("reason"))
            state = self.store.get_job(self.job_id).state
            if state is S.CANCELLING:
                return ("cancelled", None)
            if state in (S.SUSPENDING, S.PREEMPTING):
                if stop_sent is None:
                    self.group.request_stop()
                    stop_sent = time.monotonic()
                elif time.monotonic() - stop_sent > grace:
                    return ("killed", f"did not checkpoint and stop within its grace period "
                                      f"of {grace:g} s: ranks killed")
            time.sleep(self.sup.settings.poll_interval_s)
        return ("detached", None)

    def _record(self, rows: list[dict]) -> int:
        if not rows:
            return 0
        job = self.store.get_job(self.job_id)
        lines = []
        if self._keep_recovery and "resumed_from" in rows[0]:
            self._keep_recovery = False
            rows = [{**rows[0], **self._recorded_recovery(rows[0]["step"])}, *rows[1:]]
        if self._interruption is not None and "resumed_from" in rows[0]:
            cost = self._interruption.measure(rows[0])
            rows = [{**rows[0], **cost}, *rows[1:]]
            self._interruption = None
            lines.append(f"recovered from a {cost['recovered_from']} in {cost['recovery_s']:.1f} s "
                         f"(to the first new step): resumed at step {rows[0]['resumed_from']}, "
                         f"{cost['lost_steps']} steps lost")
        self.store.record_metrics(self.job_id, job.attempt, rows)
        fields = {"step": rows[-1]["step"]}
        if any("checkpoint_step" in r for r in rows):
            checkpoint = self._latest_checkpoint(job)
            if checkpoint is not None:
                fields["latest_checkpoint"] = checkpoint
        self.store.update_job(self.job_id, **fields)
        total = job.spec["train"]["steps"]
        for r in rows:
            lines.append(f"step {r['step']}/{total} loss {r['loss']:.4f} lr {r['lr']:.3g} "
                         f"{r['tokens_per_s']:.0f} tok/s")
            if "checkpoint_error" in r:
                lines.append(f"step {r['step']}: {r['checkpoint_error']} ({r['checkpoint_failures']} "
                             "failed saves in this attempt); training goes on from the last "
                             "committed checkpoint, and saves again at the next interval")
        self.store.append_log(self.job_id, lines)
        return len(rows)

    def _recorded_recovery(self, step: int) -> dict:
        stored = self.store.metrics(self.job_id, since_step=step, limit=1)
        if not stored or stored[0]["step"] != step:
            return {}
        return {k: stored[0][k] for k in RECOVERY_FIELDS if k in stored[0]}

    def _latest_checkpoint(self, job: JobRecord) -> dict | None:
        """The newest committed checkpoint, or None (also where the storage
        cannot be listed now: a fault there must not stop the job)."""
        try:
            return self.sup.latest_checkpoint(job)
        except Exception as e:
            logger.warning("job %s: cannot list its checkpoints: %s", self.job_id, e)
            return None

    def _conclude(self, outcome: tuple[str, str | None]) -> bool:
        """Move the job on from how its group ended; True to launch again."""
        kind, error = outcome
        job = self.store.get_job(self.job_id)
        checkpoint = self._latest_checkpoint(job)
        fields = {"latest_checkpoint": checkpoint} if checkpoint else {}
        if job.state is S.CANCELLING or kind == "cancelled":
            self.store.transition(self.job_id, S.CANCELLED, reason="cancelled; workers released")
            return False
        if kind == "preempted":
            return self._preempted(job, error or "a rank got SIGTERM", fields)
        if kind == "done":
            finished = job.step >= job.spec["train"]["steps"]
            if finished and job.state in (S.RUNNING, S.SUSPENDING, S.PREEMPTING):
                # Earlier attempts' errors stay in the job's events, not on a success.
                self.store.transition(self.job_id, S.SUCCEEDED, error=None,
                                      reason=f"all {job.step} steps done", **fields)
            elif job.state is S.SUSPENDING:
                self.store.transition(self.job_id, S.SUSPENDED,
                                      reason=f"checkpointed at step {job.step}; workers released",
                                      workers=None, **fields)
            elif job.state is S.PREEMPTING:
                self.store.transition(self.job_id, S.QUEUED, workers=None, **fields,
                                      reason=f"checkpointed at step {job.step} and stopped: "
                                             "preempted, requeued")
            else:  # stopped short without being asked: treat as a failure
                return self._restart_or_fail(job, f"ranks stopped at step {job.step}", fields)
            return False
        resumes = (f"resumes from checkpoint step {checkpoint['step']}" if checkpoint
                   else "restarts from step 0 (no checkpoint yet)")
        if job.state is S.SUSPENDING:
            self.store.transition(self.job_id, S.SUSPENDED, workers=None, **fields,
                                  reason=f"stopped while suspending ({error}); {resumes}")
            return False
        if job.state is S.PREEMPTING:  # not the job's fault: not counted as a failure
            self.store.transition(self.job_id, S.QUEUED, workers=None, **fields,
                                  reason=f"stopped while preempted ({error}); requeued, {resumes}")
            return False
        return self._restart_or_fail(job, error or "unknown failure", fields)

    def _preempted(self, job: JobRecord, reason: str, fields: dict) -> bool:
        """Every rank checkpointed and stopped after a preemption notice
        (SIGTERM): requeue, counted as a preemption, not a failure."""
        if job.state is S.SUSPENDING:
            self.store.transition(self.job_id, S.SUSPENDED, workers=None, **fields,
                                  reason=f"{reason}; suspended")
            return False
        if job.state in (S.RUNNING, S.STARTING):
            self.store.transition(self.job_id, S.PREEMPTING, expect=job.state,
                                  preemptions=job.preemptions + 1, reason=reason)
        self.store.transition(self.job_id, S.QUEUED, workers=None, **fields,
                              reason=f"{reason}: preempted, requeued")
        return False

    def _restart_or_fail(self, job: JobRecord, error: str, fields: dict) -> bool:
        """After a failure: RESTARTING (True) or FAILED, by the restart policy
        (service/recovery.py): max_restarts, and on a cluster of several
        nodes, no endless failures on one node."""
        max_restarts = job.spec.get("max_restarts", 3)
        if job.state is S.STARTING or job.state is S.RUNNING:
            decision = self.failures.decide(error, job.restarts, job.preemptions, max_restarts)
            if decision.restart:
                self.store.transition(
                    self.job_id, S.RESTARTING, error=error, restarts=job.restarts + 1, **fields,
                    reason=decision.reason,
                )
                return True
            self._fail(decision.reason)
            return False
        self._fail(f"{error} (after {job.restarts} restarts)")
        return False

    def _fail(self, error: str) -> None:
        job = self.store.get_job(self.job_id)
        if job is not None and not job.state.is_terminal:
            target = S.CANCELLED if job.state is S.CANCELLING else S.FAILED
            self.store.transition(self.job_id, target, reason=error, error=error)

    def _backoff(self, job: JobRecord) -> None:
        self.detach.wait(backoff_s(job.restarts, self.sup.settings.restart_backoff_s))
