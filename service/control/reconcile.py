"""Reconcile, at the start of a leader's term: every active job is matched
with what Ray holds, so that no job is lost or run twice after a
control-plane restart (or a change of leader).

A job's worker group is detached and named by (job, attempt)
(`service.run.launch.group_name`), so the new leader finds it by name:

- a live group that trains is reattached to: a runner watches it, and the
  same rank processes train on;
- a group started but never told to train (the launch was cut short) is
  cleared, and the same attempt launched again (nothing of it trained);
- a group that is gone: what happens to the job is `decide`'s
  (`service.run.lifecycle`, `Outcome.GONE`), recorded here, and a runner
  launches it where that says so.

And, at the start of a term and every LEFTOVER_CHECK_S of it
(`remove_leftovers`), a group left on the cluster that no job of this store
needs (its job ended, or it is not the job's current attempt) and no runner
holds is removed: its actors killed, its placement group freed. A runner
always shuts its group down as it ends; this catches the one a crash, or a
stop racing the group's own end, left behind, holding CPUs no job can use.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from service.log_text import printable
from service.observability.log_config import job_fields
from service.run.launch import GROUP_PREFIX, group_name, group_of_name
from service.run.lifecycle import GroupOutcome, JobFacts, Outcome, decide
from service.states import ACTIVE
from service.states import JobState as S
from service.store import JobRecord, JobStore
from workers.cluster.errors import RankError, WorkerGroupError
from workers.cluster.group import WorkerGroup
from workers.cluster.placed import placed_groups

logger = logging.getLogger(__name__)
RELAUNCH_WAIT_S = 15.0  # how long a cut-short launch's remains may take to leave Ray's names

# Start the job's runner (with the live group it is to watch, where one was found).
Spawn = Callable[[str, WorkerGroup | None], None]


def reconcile(store: JobStore, *, pool_prefix: str, spawn: Spawn,
              pg_timeout_s: float = 30.0) -> None:
    """After a (re)start: reattach to every active job's live worker group,
    or clear its remains and settle it (a job still STARTING, whose group
    never trained: launch the same attempt again). `store`: the leader's
    (fenced); `pool_prefix`: the names of the rank pool's processes;
    `pg_timeout_s`: the deployment's (a reattached group's hung rank is
    found within it, as a launched one's)."""
    for job in store.jobs_in_states(ACTIVE):
        name = group_name(job.id, job.attempt)
        group = (_live_group(job, name, pool_prefix, pg_timeout_s)
                 if job.state is not S.RESTARTING else None)
        if group is not None:
            store.note(job.id, f"reconciled after a control-plane restart: "
                               f"reattached to worker group {name}")
            spawn(job.id, group)
            continue
        if job.workers:
            remains = WorkerGroup.reclaim(name, job.workers, pool_prefix=pool_prefix)
            remains.shutdown()
            if job.state is S.STARTING and remains.names_free(RELAUNCH_WAIT_S):
                _launch_again(store, job, name, spawn)
                continue
        _settle_gone(store, job, name, spawn)


def remove_leftovers(store: JobStore, *, pool_prefix: str,
                     held: Callable[[str], bool]) -> list[str]:
    """Remove every worker group on the cluster of a job of this store that
    ended (or of an attempt not its current one) and whose runner here is
    gone (`held(job_id)`: a runner of the job is running); the names removed.
    A group of a job this store does not know is left be: another control
    plane (another database) may share the cluster."""
    removed = []
    for name, bundles in placed_groups(GROUP_PREFIX).items():
        parsed = group_of_name(name)
        if parsed is None or held(parsed[0]):
            continue
        job = store.get_job(parsed[0])
        if job is None or (job.state in ACTIVE and job.attempt == parsed[1]):
            continue
        left = WorkerGroup.reclaim(name, max(bundles, job.workers or 0, job.spec.max_workers),
                                   pool_prefix=pool_prefix)
        left.shutdown()
        logger.warning("job %s (%s): its worker group %s was left on the cluster: removed",
                       job.id, job.state.value, name, extra=job_fields(job))
        store.note(job.id, f"worker group {name} found left on the cluster after its "
                           f"{'end' if job.state.is_terminal else 'attempt'}: removed")
        removed.append(name)
    return removed


def _live_group(job: JobRecord, name: str, pool_prefix: str,
                pg_timeout_s: float) -> WorkerGroup | None:
    """The job's current attempt's group, if it is alive and training."""
    if not job.workers:
        return None
    try:
        group = WorkerGroup.attach(name, job.workers, pool_prefix=pool_prefix,
                                   pg_timeout_s=pg_timeout_s)
        group.status()
        if any(rank["state"] == "idle" for rank in group.call("status")):
            # Stopped between its start and start_training: nothing trains.
            raise WorkerGroupError(f"worker group {name} never began training")
    except (WorkerGroupError, RankError, ValueError) as e:
        logger.info("job %s: group %s not usable: %s", job.id, name, printable(e),
                    extra=job_fields(job))
        return None
    return group


def _launch_again(store: JobStore, job: JobRecord, name: str, spawn: Spawn) -> None:
    """A job whose launch was cut short (the control plane, or the leader,
    lost between its admission and its group's training): nothing of it
    trained, so the same attempt is launched again, not restarted (no
    restart counted, the attempt unchanged: it is launched once)."""
    store.note(job.id, f"reconciled after a control-plane restart: the launch of "
                       f"worker group {name} was cut short; launching it again")
    spawn(job.id, None)


def _settle_gone(store: JobStore, job: JobRecord, name: str, spawn: Spawn) -> None:
    """Record what `decide` says of a job whose group is gone, and start its
    runner where it is to be launched again."""
    why = f"reconciled after a control-plane restart: worker group {name} is gone"
    transition = decide(JobFacts.of(job), GroupOutcome(Outcome.GONE, why))
    if transition.to is not None:
        store.transition(job.id, transition.to, reason=transition.reason, **transition.fields)
    elif transition.reason:
        store.note(job.id, transition.reason)
    if transition.launch:
        spawn(job.id, None)
