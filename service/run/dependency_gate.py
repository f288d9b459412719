"""The scheduling pass's gate for jobs that wait on jobs: which queued jobs
it may offer the scheduler.

A queued job that has never started and names dependencies
(`service.run.dependencies.dependency_ids`) is held back while one is
unfinished, its waiting reason `waiting for j-... (RUNNING)`; it goes
QUEUED -> FAILED, naming the job, once one ended without succeeding. All
the queue's dependencies are read in one query a pass.

A job that waited for its `init.job` is checked once the source succeeded:
an unset `init.step` needs a committed checkpoint there (the engine loads
the latest, which no longer changes: every attempt reads the same weights;
the job's events say which step), an explicit one must be committed, or the
job fails saying so rather than at every attempt of its ranks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from service.run.dependencies import Broken, Waiting, dependency_ids, dependency_status
from service.states import IllegalTransition
from service.states import JobState as S

if TYPE_CHECKING:
    from checkpoints import CheckpointStore
    from service.store import JobRecord, JobStore

logger = logging.getLogger(__name__)


class DependencyGate:
    def __init__(self, store: JobStore,
                 checkpoints_of: Callable[[JobRecord], CheckpointStore] | None = None):
        self.store, self.checkpoints_of = store, checkpoints_of
        self.waiting: dict[str, str] = {}  # the last pass's: queued job id -> what it waits for
        self._init_checked: set[str] = set()  # jobs whose init source's step was found

    def hold(self, queued: list[JobRecord]) -> tuple[list[JobRecord], dict[str, str]]:
        """(the queued jobs the scheduler may start, in order; each held-back
        job's waiting reason). Jobs whose dependency will never succeed are
        failed, and in neither."""
        waits = {job.id: ids for job in queued
                 if job.attempt == 0 and _may_wait(job) and (ids := dependency_ids(job.spec))}
        self._init_checked &= waits.keys()
        if not waits:
            self.waiting = {}
            return queued, {}
        states = self.store.reads.states_of({i for ids in waits.values() for i in ids})
        ready, waiting = [], {}
        for job in queued:
            named = waits.get(job.id)
            status = None if named is None else dependency_status(named, states)
            if isinstance(status, Waiting):
                waiting[job.id] = status.reason
            elif isinstance(status, Broken):
                self._fail(job, status.reason)
            elif named is not None and (problem := self._init_problem(job)) is not None:
                if problem[0]:
                    self._fail(job, problem[1])
                else:
                    waiting[job.id] = problem[1]
            else:
                ready.append(job)
        self.waiting = waiting
        return ready, waiting

    def _fail(self, job: JobRecord, reason: str) -> None:
        try:
            self.store.transition(job.id, S.FAILED, expect=S.QUEUED, reason=reason, error=reason)
        except IllegalTransition as e:  # cancelled since the pass read it
            logger.info("job %s not failed: %s", job.id, e)

    def _init_problem(self, job: JobRecord) -> tuple[bool, str] | None:
        """Why a job that waited for its `init.job` cannot start: (True, why)
        for good, (False, why) for now (its storage did not answer); None: it can."""
        init = job.spec.init
        if (init is None or init.job is None or self.checkpoints_of is None
                or job.id in self._init_checked
                or (init.step is not None and init.job not in job.spec.after)):
            return None  # no source, or its step was fixed at submit
        source = self.store.get_job(init.job)
        if source is None:
            return True, f"init.job {init.job} no longer exists (deleted)"
        try:
            committed = sorted(c.step for c in self.checkpoints_of(source).list_committed())
        except Exception as e:  # storage down: try again at the next pass
            logger.warning("job %s: listing init.job %s's checkpoints: %s", job.id, init.job, e)
            return False, f"reading init.job {init.job}'s checkpoints: {e}"
        if init.step is None:
            if not committed:
                return True, (f"init.job {init.job} {source.state.value} without a committed "
                              "checkpoint: no weights to start from")
            self.store.note(job.id, f"init.job {init.job} succeeded: the job starts from its "
                                    f"latest committed step, {committed[-1]}")
        elif init.step not in committed:
            return True, (f"init.step: job {init.job} {source.state.value} without a committed "
                          f"checkpoint at step {init.step} (it has {committed[-5:]})")
        self._init_checked.add(job.id)
        return None


def _may_wait(job: JobRecord) -> bool:
    """Whether the job names any job, from its stored JSON (a queue of
    thousands is not parsed for it)."""
    init = job.stored_spec.get("init")
    return bool(job.stored_spec.get("after")) or bool(isinstance(init, dict) and init.get("job"))
