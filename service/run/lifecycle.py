"""What becomes of a job once its worker group has ended: one pure function,
`decide`, from plain facts about the job (`JobFacts`) and a typed account of
how its group ended (`GroupOutcome`) to the `Transition` to record.

No Ray, no store, no clock: the job runner (service/run/runner.py) gathers the
facts, asks, and carries the answer out, and so does reconcile
(service/control/reconcile.py) for a group found gone after a control-plane
restart, so that every ending is tested in microseconds
(tests/service/run/test_lifecycle.py). The reasons are the events'
and the errors' texts that users, the end-to-end and the chaos tests read.

What a job asked to give its workers back gets:

    CANCELLING           -> CANCELLED (whatever the group did)
    PRUNING              -> PRUNED (likewise; its ranks told to stop at their next step,
                            killed if not stopped soon; its latest committed checkpoint kept)
    SUSPENDING           -> SUSPENDED, checkpointed or not (a success still succeeds)
    PREEMPTING           -> QUEUED, not counted as a failure (likewise)
    RUNNING, SIGTERM     -> PREEMPTING -> QUEUED (a preemption, counted apart)

and a group that failed, or stopped short of its steps unasked, restarts or
fails by the one restart policy (service/scheduling/restart.py). A group
reconcile found gone (`Outcome.GONE`) gives back what was asked, and a job
that was starting or training goes RESTARTING, its `restarts` unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from service.scheduling.restart import AttemptSteps, Failure, RestartPolicy
from service.states import IN_ATTEMPT, YIELDING, JobState
from service.states import JobState as S
from workers.cluster.errors import PlacementTimeoutError, RankError, is_permanent, permanent_cause
from workers.schema import DEFAULT_MAX_RESTARTS

if TYPE_CHECKING:
    from service.store import JobRecord
    from workers.cluster.rank_info import RankInfo


class Outcome(Enum):
    FINISHED = "finished"  # every rank stopped on its own: all steps done, or checkpointed when asked
    PREEMPTED = "preempted"  # every rank got SIGTERM (a preemption notice), checkpointed, stopped
    FAILED = "failed"  # a rank failed or was lost, or the group stopped answering
    KILLED = "killed"  # asked to stop, it did not within its grace period: killed
    CANCELLED = "cancelled"  # its user cancelled it while it ran
    PRUNED = "pruned"  # its sweep's pruner stopped it while it ran
    START_FAILED = "start_failed"  # the group could not start
    NO_CAPACITY = "no_capacity"  # the group's bundles were not all free in time
    NO_GROUP = "no_group"  # between attempts: no group runs (a runner's first look)
    GONE = "gone"  # found gone by reconcile after a control-plane restart: no runner saw it end
    CONTROL_PLANE_ERROR = "control_plane_error"  # a bug of ours: fail the job loudly

    @property
    def group_ran(self) -> bool:
        """Whether a group ran or was started: only then does the decision
        read the job's latest checkpoint and how many nodes the cluster has."""
        return self not in (Outcome.NO_GROUP, Outcome.CONTROL_PLANE_ERROR)


@dataclass(frozen=True)
class GroupOutcome:
    """How the job's worker group ended, as its runner saw it."""

    kind: Outcome
    error: str | None = None  # what went wrong, in words
    rank: int | None = None  # the rank that failed, where known
    node: str | None = None  # the node that rank ran on, where known
    permanent: bool = False  # a fault a restart cannot fix (bad data, no compiler): fail, do not restart

    @classmethod
    def failed(cls, error: Exception, node_infos: Sequence[RankInfo] = ()) -> GroupOutcome:
        """A running group that raised: a rank failed or was lost
        (`RankError`), or the ranks did not answer (hung, stopped)."""
        if isinstance(error, RankError):
            return cls(Outcome.FAILED, str(error), error.rank, _node(node_infos, error.rank),
                       is_permanent(str(error)))
        return cls(Outcome.FAILED, f"worker group not answering: {error}")

    @classmethod
    def start_failed(cls, error: Exception, node_infos: Sequence[RankInfo] = ()) -> GroupOutcome:
        """A group whose start raised: no capacity in time (`PlacementTimeoutError`),
        or any other reason it could not start."""
        if isinstance(error, PlacementTimeoutError):
            return cls(Outcome.NO_CAPACITY, str(error))
        rank = error.rank if isinstance(error, RankError) else None
        return cls(Outcome.START_FAILED, str(error), rank, _node(node_infos, rank),
                   is_permanent(str(error)))


def _node(node_infos: Sequence[RankInfo], rank: int | None) -> str | None:
    if rank is None or rank >= len(node_infos):
        return None
    return node_infos[rank].node_id or node_infos[rank].node_ip


@dataclass(frozen=True, kw_only=True)
class JobFacts:
    """What a decision reads of a job record."""

    state: JobState
    step: int = 0
    total_steps: int
    restarts: int = 0
    preemptions: int = 0
    max_restarts: int = DEFAULT_MAX_RESTARTS
    workers: int | None = None
    attempt: int = 0
    failures_since_progress: int = 0  # what the restart policy counts (of `restarts`)

    @classmethod
    def of(cls, job: JobRecord) -> JobFacts:
        return cls(
            state=job.state, step=job.step, total_steps=job.spec.train.steps, restarts=job.restarts,
            preemptions=job.preemptions, max_restarts=job.spec.max_restarts, workers=job.workers,
            attempt=job.attempt, failures_since_progress=job.failures_since_progress,
        )


@dataclass(frozen=True)
class Transition:
    """What to record: move the job to `to` with `reason`, setting the store
    fields `fields` in the same write, after `via` where the table of states
    wants one in between (`to` None: no change, and a `reason` given is
    noted as an event of its own). Then launch a group again after
    `backoff_s`, or stop (`launch`)."""

    to: JobState | None
    reason: str = ""
    fields: Mapping[str, Any] = field(default_factory=dict)
    via: Transition | None = None
    launch: bool = False
    backoff_s: float = 0.0
    failure: Failure | None = None  # the failure this counted, for the runner's history


STAY = Transition(None)
RELEASED = {S.PREEMPTING: (S.QUEUED, "requeued"), S.SUSPENDING: (S.SUSPENDED, "suspended"),
            S.CANCELLING: (S.CANCELLED, "cancelled"), S.PRUNING: (S.PRUNED, "pruned")}
# A job asked to give its workers back whose group reconcile found gone: where it goes.
RELEASED_WHEN_GONE = {
    S.CANCELLING: Transition(S.CANCELLED), S.PRUNING: Transition(S.PRUNED),
    S.SUSPENDING: Transition(S.SUSPENDED, fields={"workers": None}),
    S.PREEMPTING: Transition(S.QUEUED),
}


def decide(job: JobFacts, outcome: GroupOutcome, *, checkpoint: dict | None = None,
           failures: Sequence[Failure] = (), multi_node: bool = False,
           policy: RestartPolicy | None = None, steps: AttemptSteps | None = None) -> Transition:
    """The job's next state after `outcome`. `checkpoint`: its latest
    committed one ({"step", "world_size"}), or None; `failures`: those its
    runner saw before, oldest first (a runner started after a control-plane
    restart saw none: the earlier ones still count, without a node);
    `multi_node`: whether the cluster has more than one live node; `steps`:
    what the attempt that ended took (`JobStore.attempt_steps`; None: none
    read), which tells whether a failed one made progress."""
    policy = policy or RestartPolicy()
    kind = outcome.kind
    if job.state.is_terminal:
        return STAY
    if kind is Outcome.CONTROL_PLANE_ERROR:
        return _fail(job, outcome.error or "control plane error")
    if kind is Outcome.NO_GROUP:
        return _between_attempts(job, policy)
    if kind is Outcome.GONE:
        return _gone(job, outcome.error or "its worker group is gone")
    if kind is Outcome.NO_CAPACITY:
        if job.state is S.STARTING:
            return Transition(S.QUEUED, f"capacity not available: {outcome.error}; requeued",
                              {"workers": None})
        return _released(job) or STAY
    kept = {"latest_checkpoint": checkpoint} if checkpoint else {}
    if job.state is S.CANCELLING or kind is Outcome.CANCELLED:
        return Transition(S.CANCELLED, "cancelled; workers released")
    if job.state is S.PRUNING or kind is Outcome.PRUNED:
        return Transition(S.PRUNED, f"pruned: stopped at step {job.step}; workers released", kept)
    if kind is Outcome.PREEMPTED:
        return _preempted(job, outcome.error or "a rank got SIGTERM", kept)
    if kind is Outcome.FINISHED:
        if job.step >= job.total_steps and (job.state is S.RUNNING or job.state in YIELDING):
            # Earlier attempts' errors stay in the job's events, not on a success.
            return Transition(S.SUCCEEDED, f"all {job.step} steps done", {"error": None, **kept})
        if job.state is S.SUSPENDING:
            return Transition(S.SUSPENDED, f"checkpointed at step {job.step}; workers released",
                              {"workers": None, **kept})
        if job.state is S.PREEMPTING:
            return Transition(S.QUEUED, f"checkpointed at step {job.step} and stopped: "
                                        "preempted, requeued", {"workers": None, **kept})
        # Stopped short without being asked: a failure.
        return _restart_or_fail(job, Failure(f"ranks stopped at step {job.step}"), kept,
                                failures, multi_node, policy, steps)
    error = f"could not start: {outcome.error}" if kind is Outcome.START_FAILED else outcome.error
    resumes = (f"resumes from checkpoint step {checkpoint['step']}" if checkpoint
               else "restarts from step 0 (no checkpoint yet)")
    if job.state is S.SUSPENDING:
        return Transition(S.SUSPENDED, f"stopped while suspending ({error}); {resumes}",
                          {"workers": None, **kept})
    if job.state is S.PREEMPTING:  # not the job's fault: not counted as a failure
        return Transition(S.QUEUED, f"stopped while preempted ({error}); requeued, {resumes}",
                          {"workers": None, **kept})
    failure = Failure(error or "unknown failure", outcome.node, outcome.rank)
    if outcome.permanent:  # bad data stays bad, a compiler stays missing: no restart spent
        cause = permanent_cause(error or "") or "it fails the same way again"
        return replace(_fail(job, f"{error} (not restarted: {cause})"), failure=failure)
    return _restart_or_fail(job, failure, kept, failures, multi_node, policy, steps)


def restart_at(job: JobFacts, workers: int | None) -> Transition:
    """A RESTARTING job whose backoff is over: its next attempt at `workers`,
    the largest of its sizes that fits now (an elastic job shrinks after
    losing a node), or, where none fits (None), back to the queue."""
    if workers is None:
        return Transition(S.QUEUED, "restart: not enough free capacity for any of its sizes; "
                                    "requeued", {"workers": None})
    resized = f" at {workers} workers (was {job.workers})" if workers != job.workers else ""
    return Transition(S.STARTING, f"starting attempt {job.attempt + 1}{resized}",
                      {"attempt": job.attempt + 1, "workers": workers}, launch=True)


def _between_attempts(job: JobFacts, policy: RestartPolicy) -> Transition:
    """No group runs: give back what is asked for, or launch (a RESTARTING
    job after its backoff, also when a runner takes it up after a
    control-plane restart)."""
    if released := _released(job):
        return released
    if job.state is S.RESTARTING:
        return Transition(None, launch=True, backoff_s=policy.backoff_s(job.failures_since_progress))
    if job.state is S.STARTING:
        return Transition(None, launch=True)
    return STAY


def _gone(job: JobFacts, why: str) -> Transition:
    """Reconcile found the job's group gone (`why`, its event's reason): what
    it was asked to give back is given, its latest committed checkpoint
    kept; a job that was starting or training restarts from that checkpoint
    (its `restarts` unchanged: the control plane failed, not the job), and
    one RESTARTING already is launched as it was, with a note."""
    if (given := RELEASED_WHEN_GONE.get(job.state)) is not None:
        return replace(given, reason=why)
    if job.state is S.RESTARTING:
        return Transition(None, why, launch=True)
    return Transition(S.RESTARTING, f"{why}; restarting from the latest checkpoint", launch=True)


def _released(job: JobFacts) -> Transition | None:
    """A job asked to give back workers it does not hold (preempted,
    suspended or cancelled between attempts) goes straight on."""
    if job.state not in RELEASED:
        return None
    target, what = RELEASED[job.state]
    return Transition(target, f"{what} between attempts: no workers were running",
                      {"workers": None})


def _preempted(job: JobFacts, reason: str, kept: dict) -> Transition:
    """Every rank checkpointed and stopped after a preemption notice
    (SIGTERM): requeued, counted as a preemption, not a failure."""
    if job.state is S.SUSPENDING:
        return Transition(S.SUSPENDED, f"{reason}; suspended", {"workers": None, **kept})
    requeued = Transition(S.QUEUED, f"{reason}: preempted, requeued", {"workers": None, **kept})
    if job.state in IN_ATTEMPT:  # the notice came before the scheduler's
        noticed = Transition(S.PREEMPTING, reason, {"preemptions": job.preemptions + 1})
        return replace(requeued, via=noticed)
    return requeued


def _restart_or_fail(job: JobFacts, failure: Failure, kept: dict, failures: Sequence[Failure],
                     multi_node: bool, policy: RestartPolicy,
                     steps: AttemptSteps | None) -> Transition:
    """After a failure: RESTARTING (launch again after the policy's backoff)
    or FAILED: max_restarts, and on a cluster of several nodes no endless
    failures on one node, both over the failures since the job last made
    progress (this one the first, where its attempt did: a count that the
    RESTARTING writes with `restarts`, so a restarted control plane goes on
    with it)."""
    if job.state not in IN_ATTEMPT:
        return _fail(job, f"{failure.error} (after {job.restarts} restarts)")
    committed = kept["latest_checkpoint"]["step"] if kept else None
    progressed = policy.made_progress(steps, committed)
    count = 1 if progressed else job.failures_since_progress + 1
    known = [*failures, failure][-count:]
    earlier = [Failure(error="(an earlier failure)")] * (count - len(known))
    decision = policy.decide(earlier + known, job.preemptions, job.max_restarts,
                             multi_node=multi_node,
                             before_progress=max(0, job.restarts + 1 - count))
    if not decision.restart:
        return replace(_fail(job, decision.reason), failure=failure)
    return Transition(S.RESTARTING, decision.reason,
                      {"error": failure.error, "restarts": job.restarts + 1,
                       "failures_since_progress": count, **kept},
                      launch=True, backoff_s=decision.backoff_s, failure=failure)


def _fail(job: JobFacts, error: str) -> Transition:
    target = {S.CANCELLING: S.CANCELLED, S.PRUNING: S.PRUNED}.get(job.state, S.FAILED)
    return Transition(target, error, {"error": error})
