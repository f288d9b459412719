"""One job's driver: a thread that launches (or reattaches to) the job's
worker group, records its progress, carries out cancel, prune and suspend,
and records the next state that `service.run.lifecycle.decide` gives for how
the group ended.

It decides nothing itself and reaches for nothing: it is handed the store
(the source of truth: requests from the API, and a sweep's pruner's, arrive
as state changes, CANCELLING, PRUNING or SUSPENDING, that it sees at its next
poll), `launch` (where the cluster begins: the supervisor's starts a Ray
worker group, a test's a fake), the restart policy, and `ControlPlane`, the
few questions it asks of the rest of the control plane.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from service.observability import metrics as service_metrics
from service.observability.log_config import about_job
from service.run.drains import DrainFollower
from service.run.launch import startup_line, startup_phases
from service.run.lifecycle import GroupOutcome, JobFacts, Outcome, Transition, decide, restart_at
from service.run.recovery import Interruption
from service.scheduling.restart import Failure, RestartPolicy
from service.states import YIELDING, IllegalTransition
from service.states import JobState as S
from service.store.errors import Deposed, JobNotFound, UnexpectedState
from workers.cluster.errors import RankError, WorkerGroupError, is_permanent
from workers.cluster.in_place import CannotRecover
from workers.schema.metrics_row import RECOVERY_FIELDS

if TYPE_CHECKING:
    from service.observability.tracking import JobTracking
    from service.store import JobRecord, JobStore
    from workers.cluster.group_status import GroupStatus
    from workers.cluster.move import Move
    from workers.cluster.node_view import NodeView
    from workers.cluster.rank_info import RankInfo
    from workers.cluster.replace import Recovery

logger = logging.getLogger(__name__)
SETTLE_TRIES = 5  # decisions in a row undone by the job moving meanwhile, before giving up
# A pruned job's ranks, told to stop at their next step, are killed if they have not stopped
# within this (or the job's grace period, if shorter): a slow save, a hung rank.
PRUNE_STOP_S = 10.0
LOOK_S = 0.05  # how often a runner waiting out its poll interval looks whether it must detach


class Group(Protocol):
    """What a runner uses of a started worker group (`workers.cluster.group.WorkerGroup`)."""

    node_infos: list[RankInfo]  # where each rank runs, by rank
    backend: str | None
    may_shutdown: Callable[[], bool] | None  # asked before shutdown kills anything

    def progress(self, since: int = 0) -> list[dict]: ...
    def output(self) -> list[list[str]]: ...  # each rank's stdout/stderr lines since the last call
    def status(self) -> GroupStatus: ...
    def startup(self) -> dict[str, float]: ...  # when each start-up phase ended ({}: not known)
    def request_stop(self) -> None: ...
    def signal_stop(self) -> None: ...  # request_stop, not waiting for the ranks' answers
    def shutdown(self) -> None: ...

    # Recovery in place: whether the group can replace a lost rank, and doing it
    # (CannotRecover where it cannot: workers/cluster/replace.py).
    in_place: bool

    def recover(self, lost: list[int]) -> Recovery: ...
    def move(self, ranks: list[int], avoid: set[str]) -> Move: ...  # off draining nodes


# The job's current attempt started and training (`job.workers` ranks), or
# how its start failed, with nothing of it left on the cluster.
Launch = Callable[["JobRecord"], "Group | GroupOutcome"]


@dataclass(frozen=True, kw_only=True)
class ControlPlane:
    """What a runner asks of the rest of the control plane."""

    # The size a job that lost its workers restarts at, given the nodes its
    # ranks ran on (those gone are left out); None: none fits now.
    restart_size: Callable[[JobRecord, set[str]], int | None]
    latest_checkpoint: Callable[[JobRecord], dict | None]  # {"step", "world_size"}, or None
    grace_s: Callable[[JobRecord], float]  # how long a job asked to stop may take
    live_nodes: Callable[[], int]  # the cluster's live nodes (the same-node rule needs > 1)
    done: Callable[[str], None]  # the runner of this job id has ended
    # the experiment trackers the job's metrics also go to (service.observability.tracking); None: none
    tracking: Callable[[JobRecord], JobTracking | None] | None = None
    # raises (`Deposed`) unless this replica still leads: asked before the runner stops or
    # kills a group (a deposed leader's runner leaves it to the next leader); None: never
    confirm_leading: Callable[[], None] | None = None
    # the cluster's draining nodes by id (service.run.ray_cluster.draining_nodes); None: none watched
    draining: Callable[[], dict[str, NodeView]] | None = None


class JobRunner(threading.Thread):
    def __init__(self, job_id: str, *, store: JobStore, launch: Launch, control: ControlPlane,
                 policy: RestartPolicy, poll_interval_s: float, attached: Group | None = None):
        super().__init__(name=f"runner-{job_id}", daemon=True)
        self.job_id, self.store, self.launch, self.control = job_id, store, launch, control
        self.policy, self.poll_interval_s = policy, poll_interval_s
        self.group = attached
        self.detach = threading.Event()  # the control plane is stopping: leave the group be
        self.nudged = threading.Event()  # look at the job now, not at the next poll
        self.pruned = threading.Event()  # its pruner told the ranks to stop (`stop_now`)
        self._nodes: set[str] = set()  # where the last attempt's ranks ran
        self._failures: list[Failure] = []  # those this runner saw, for the restart policy
        self._interruption: Interruption | None = None  # what the running attempt recovers from
        self._failed_at_step: int | None = None  # the job's step at its last recovery in place
        self._tracking: JobTracking | None = None  # made at the first rows
        # Reattached: the attempt's rows are fetched again from its first, whose
        # recovery figures (recorded by the runner before) must not be lost.
        self._keep_recovery = attached is not None
        draining = control.draining if control is not None and control.draining else dict
        self._drains = DrainFollower(job_id, store, draining, self._confirm_leading)

    # -- the life of one job --------------------------------------------------

    def run(self) -> None:
        job = None
        with contextlib.suppress(Exception):  # the run itself says what is wrong with the store
            job = self.store.get_job(self.job_id)
        with about_job(self.job_id, job.tenant if job else None):  # its records name the job
            try:
                self._run()
            finally:
                self._end_tracking()

    def _run(self) -> None:
        try:
            group, ended = self.group, GroupOutcome(Outcome.NO_GROUP)
            settled: Transition | None = None  # what an attempt's end was recorded as
            while not self.detach.is_set():
                if group is None:  # record what comes next, then launch or let go
                    transition = settled if settled is not None else self._settle(ended)
                    settled = None
                    if not transition.launch or self.detach.wait(transition.backoff_s):
                        return
                    started = self._start()
                    if isinstance(started, GroupOutcome):
                        ended = started
                        continue
                    group = self.group = started
                watched = self._watch(group)
                if watched is None or self.detach.is_set():
                    return
                ended = watched
                if self._tracking is not None:  # the attempt's last rows out before its end is recorded
                    self._tracking.flush(force=True)
                self._nodes = {info.node_id for info in group.node_infos}
                self._confirm_leading()
                # Recorded before the group goes: a leader lost in between leaves a job whose
                # end is known (a new leader removes the group as a leftover), never a RUNNING
                # job whose group is gone, which reconcile would restart.
                settled = self._settle(ended)
                group.shutdown()
                group = self.group = None
        except Deposed as e:  # another replica leads: it reattaches to the group
            logger.warning("runner of job %s stops: %s", self.job_id, e)
            self.detach.set()
        except Exception as e:  # a bug of ours: fail the job loudly, never leave it hanging
            logger.exception("runner of job %s failed", self.job_id)
            error = f"control plane error: {type(e).__name__}: {e}"
            try:
                self._settle(GroupOutcome(Outcome.CONTROL_PLANE_ERROR, error))
            except Deposed:
                self.detach.set()
        finally:
            if self.group is not None and not self.detach.is_set() and self._still_leading():
                self.group.shutdown()
            self.control.done(self.job_id)

    def stop_now(self) -> None:
        """The job's pruner has spoken: its ranks are told to stop at their
        next step at once, from the caller's thread (whatever the runner is
        waiting on), before the store's PRUNING is written, and the runner
        looks at the job now. Ranks that stop before that write lands are
        not taken for a group that stopped short (`_await_prune`)."""
        self.pruned.set()
        group = self.group
        if group is not None:
            try:
                group.signal_stop()
            except Exception as e:  # the group is going anyway: the runner's look stops it
                logger.warning("job %s: telling its ranks to stop: %s", self.job_id, e)
        self.nudged.set()

    def _pause(self) -> None:
        """Wait out a poll interval; less where the runner is nudged or must detach."""
        deadline = time.monotonic() + self.poll_interval_s
        while not self.detach.is_set() and (left := deadline - time.monotonic()) > 0:
            if self.nudged.wait(min(left, LOOK_S)):
                self.nudged.clear()
                return

    def _confirm_leading(self) -> None:
        """`Deposed` unless this replica still leads (before acting on a group)."""
        if self.control.confirm_leading is not None:
            self.control.confirm_leading()

    def _still_leading(self) -> bool:
        """Whether this replica is known to lead still (an error asking: not known)."""
        try:
            self._confirm_leading()
        except Exception as e:
            logger.warning("runner of job %s leaves its group be: %s", self.job_id, e)
            return False
        return True

    def _start(self) -> Group | GroupOutcome:
        """Launch the job's next attempt: its group, running, or how it did not start."""
        job = self._job()
        if job.state is S.RESTARTING:
            transition = restart_at(JobFacts.of(job), self.control.restart_size(job, self._nodes))
            try:
                job = self._apply(transition, job)
            except UnexpectedState:  # cancelled, suspended or preempted meanwhile
                return GroupOutcome(Outcome.NO_GROUP)
            if not transition.launch:  # back in the queue: the next look ends this runner
                return GroupOutcome(Outcome.NO_GROUP)
        elif job.state is not S.STARTING:  # cancelled, pruned or preempted in its backoff: no launch
            return GroupOutcome(Outcome.NO_GROUP)
        self._interruption = Interruption.before(self.store, job)
        self._drains.new_attempt()
        self.pruned.clear()  # a stop told to an earlier attempt's ranks is not this one's
        started = self.launch(job)
        if isinstance(started, GroupOutcome):
            return started
        # Cancelled or suspended while starting: the watch carries it out.
        with contextlib.suppress(IllegalTransition):
            self.store.transition(
                self.job_id, S.RUNNING, expect=S.STARTING,
                reason=f"worker group of {job.workers} ranks started (attempt {job.attempt}, "
                       f"backend {started.backend})",
            )
        self.store.append_log(self.job_id, [
            f"attempt {job.attempt}: {job.workers} ranks on "
            f"{', '.join(sorted({i.node_ip for i in started.node_infos}))}, "
            f"backend {started.backend}"
        ])
        return started

    def _watch(self, group: Group) -> GroupOutcome | None:
        """Poll the group until it ends, and say how (None: detached first).
        A group asked to stop (preempted, suspended) that has not stopped
        within its grace period is killed."""
        seen, stop_sent, startup_due = 0, None, True
        # A failure found mid-query shuts the group down: not once another replica leads (a
        # leader stopped past its lease would find every rank "hung" when it wakes).
        group.may_shutdown = self._still_leading
        grace = self.control.grace_s(self._job())
        while not self.detach.is_set():
            try:
                fetched = group.progress(seen)
                if startup_due:  # the attempt's first new row: where its start-up went
                    fetched, startup_due = self._note_startup(group, fetched)
                seen += self._record(fetched)
                self._record_output(group)  # before the status: a rank that failed said why
                status = group.status()
                noticed = time.time()
                moved = self._drains.check(group) if status.state == "running" else None
                if isinstance(moved, WorkerGroupError):
                    raise moved  # a move off a draining node broke the group: restarted
            except WorkerGroupError as e:  # a rank failed or was lost, or none answers (hung)
                recovered = self._recover_in_place(group, e)
                if recovered is None:
                    return GroupOutcome.failed(e, group.node_infos)
                if recovered.replaced_rank0:  # its rows start again in a new process
                    seen = 0
                continue
            if moved is not None:  # moved off a draining node, in place
                self._interruption = Interruption("move", noticed, moved.step)
                if 0 in moved.ranks:  # rank 0's rows start again in a new process
                    seen = 0
            if status.state in ("done", "preempted"):
                try:
                    self._record(group.progress(seen))
                    self._record_output(group)
                except WorkerGroupError as e:
                    # A rank lost after its training ended (its save committed): the outcome
                    # stands. Rows it never gave are its checkpoint's: one short of the job's
                    # steps is decided a stop short, restarted from that checkpoint, which
                    # replays them (`_recover`).
                    logger.warning("job %s: its group ended (%s), then: %s", self.job_id,
                                   status.state, e)
                if status.state == "done":
                    if self.pruned.is_set():
                        self._await_prune()
                    return GroupOutcome(Outcome.FINISHED)
                return GroupOutcome(Outcome.PREEMPTED, status.reason)
            state = self._job().state
            if state is S.CANCELLING:
                return GroupOutcome(Outcome.CANCELLED)
            if state is S.PRUNING:
                # Its ranks stop at their next step (its pruner told them at once: `stop_now`;
                # told again here, for a runner that took the group up later), their rows read
                # and their save committed, as they end; past PRUNE_STOP_S they are killed (the
                # last committed checkpoint stays: a save cut short never commits).
                if stop_sent is None:
                    self._confirm_leading()
                    try:
                        group.request_stop()
                    except WorkerGroupError:  # a rank gone or hung: no waiting for it
                        return GroupOutcome(Outcome.PRUNED)
                    stop_sent = time.monotonic()
                elif time.monotonic() - stop_sent > min(grace, PRUNE_STOP_S):
                    return GroupOutcome(Outcome.PRUNED)
                self._pause()
                continue
            if state in YIELDING:
                if stop_sent is None:
                    self._confirm_leading()
                    group.request_stop()
                    stop_sent = time.monotonic()
                elif time.monotonic() - stop_sent > grace:
                    return GroupOutcome(Outcome.KILLED, (
                        f"did not checkpoint and stop within its grace period of {grace:g} s: "
                        "ranks killed"))
            self._pause()
        return None

    def _await_prune(self) -> None:
        """The ranks stopped as their pruner told them (`stop_now`): wait for
        its write, PRUNING, or whatever the job became instead, for at most
        PRUNE_STOP_S, so that the outcome is decided from it (a job still
        RUNNING then stopped short: restarted from the save it just made)."""
        deadline = time.monotonic() + PRUNE_STOP_S
        while (self._job().state in (S.STARTING, S.RUNNING, S.RESTARTING)
               and time.monotonic() < deadline and not self.detach.wait(LOOK_S)):
            pass

    def _recover_in_place(self, group: Group, error: WorkerGroupError) -> Recovery | None:
        """Replace the rank `error` names and go on from the in-memory snapshot
        (workers/cluster/replace.py), recorded as a `recovery` event; None where
        the group cannot (no snapshots, the failure repeats at the same step,
        or `CannotRecover`): the job then restarts as a whole, the event says why."""
        if not isinstance(error, RankError) or not group.in_place or is_permanent(str(error)):
            return None  # bad data or a compiler that cannot run fails the same way in place
        lost_at, job = time.time(), self._job()
        first_line = str(error).split("\n", 1)[0]
        try:
            if self._failed_at_step == job.step:
                raise CannotRecover(f"the failure repeats at step {job.step}")
            self._failed_at_step = job.step
            self._confirm_leading()
            recovery = group.recover([error.rank])
        except CannotRecover as why:
            seconds = time.time() - lost_at
            self.store.record_recovery(self.job_id, ranks=[error.rank], from_step=job.step,
                                       to_step=None, seconds=seconds, in_place=False,
                                       reason=f"{first_line}; {why}")
            service_metrics.observe_recovery_event(in_place=False, seconds=seconds)
            return None
        # The store's step lags the ranks' by a poll: the survivors say how far they got.
        reached = max(job.step, recovery.reached)
        self.store.record_recovery(self.job_id, ranks=recovery.ranks, from_step=reached,
                                   to_step=recovery.step, seconds=recovery.seconds, in_place=True,
                                   reason=first_line)
        service_metrics.observe_recovery_event(in_place=True, seconds=recovery.seconds)
        self.store.append_log(self.job_id, [
            f"{recovery.where} lost at step {reached}: replaced in place in {recovery.seconds:.2f} s, "
            f"every rank restored the in-memory snapshot of step {recovery.step}"])
        self._interruption = Interruption("recovery", lost_at, reached)
        return recovery

    # -- recording the decision -------------------------------------------------

    def _settle(self, ended: GroupOutcome) -> Transition:
        """Record the job's next state after `ended`, decided again where the
        job moved meanwhile (cancelled, suspended, preempted)."""
        for _ in range(SETTLE_TRIES - 1):
            try:
                return self._settle_once(ended)
            except UnexpectedState:
                continue
        return self._settle_once(ended)

    def _settle_once(self, ended: GroupOutcome) -> Transition:
        job = self._job()
        ran = ended.kind.group_ran
        transition = decide(
            JobFacts.of(job), ended, policy=self.policy, failures=self._failures,
            checkpoint=self._latest_checkpoint(job) if ran else None,
            multi_node=ran and self.control.live_nodes() > 1,
            steps=self.store.attempt_steps(self.job_id, job.attempt) if ran else None,
        )
        self._apply(transition, job)
        if transition.failure is not None:
            self._failures.append(transition.failure)
        return transition

    def _apply(self, transition: Transition, job: JobRecord) -> JobRecord:
        """Carry `transition` out, each move expecting the state it was decided from."""
        if transition.via is not None:
            job = self._apply(transition.via, job)
        if transition.to is None:
            if transition.reason:
                self.store.note(self.job_id, transition.reason)
            return job
        moved = self.store.transition(self.job_id, transition.to, expect=job.state,
                                      reason=transition.reason, **transition.fields)
        logger.info("job %s: %s -> %s: %s", self.job_id, job.state.value, moved.state.value,
                    transition.reason)
        return moved

    # -- progress -----------------------------------------------------------------

    def _record(self, fetched: list[dict]) -> int:
        """Record the rows fetched from the group; how many were fetched."""
        if not fetched:
            return 0
        job = self._job()
        rows = [row for row in fetched if not row.get("replayed")]
        if len(rows) < len(fetched):
            self._recover(job, [row for row in fetched if row.get("replayed")])
        if not rows:
            return len(fetched)
        lines = []
        if self._keep_recovery and "resumed_from" in rows[0]:
            self._keep_recovery = False
            rows = [{**rows[0], **self._recorded_recovery(rows[0]["step"])}, *rows[1:]]
        # The first row trained after the interruption: not always the first fetched (rows
        # rank 0 trained before a move or a peer's loss may come in the same fetch).
        resumed = next((i for i, row in enumerate(rows) if "resumed_from" in row), None)
        if self._interruption is not None and resumed is not None:
            cost = self._interruption.measure(rows[resumed])
            rows[resumed] = {**rows[resumed], **cost}
            service_metrics.observe_recovery(cost["recovered_from"], cost["recovery_s"])
            self._interruption = None
            lines.append(f"recovered from a {cost['recovered_from']} in {cost['recovery_s']:.1f} s "
                         f"(to the first new step): resumed at step {rows[resumed]['resumed_from']}, "
                         f"{cost['lost_steps']} steps lost")
        self.store.record_metrics(self.job_id, job.attempt, rows)
        service_metrics.observe_checkpoint_saves(rows)
        self._track(job, rows)
        fields: dict = {"step": rows[-1]["step"]}
        losses = [r["loss"] for r in rows if r.get("loss") is not None and math.isfinite(r["loss"])]
        if losses:
            fields["latest_loss"] = losses[-1]
        if any("checkpoint_step" in r for r in rows):
            checkpoint = self._latest_checkpoint(job)
            if checkpoint is not None:
                fields["latest_checkpoint"] = checkpoint
        self.store.update_job(self.job_id, **fields)
        total = job.spec.train.steps
        for r in rows:
            if "file" in r:  # a dataset's preparation: a step is a file
                lines.append(f"file {r['step']}/{total} {r['file']}: {r['tokens']} tokens, "
                             f"{r['documents']} documents, {r['tokens_per_s']:.0f} tok/s")
                continue
            lines.append(f"step {r['step']}/{total} loss {r['loss']:.4f} lr {r['lr']:.3g} "
                         f"{r['tokens_per_s']:.0f} tok/s")
            if r.get("eval_loss") is not None:
                lines.append(f"step {r['step']}/{total} eval_loss {r['eval_loss']:.4f} "
                             f"eval_perplexity {r['eval_perplexity']:.3f}")
            if "checkpoint_error" in r:
                lines.append(f"step {r['step']}: {r['checkpoint_error']} ({r['checkpoint_failures']} "
                             "failed saves in this attempt); training goes on from the last "
                             "committed checkpoint, and saves again at the next interval")
        self.store.append_log(self.job_id, lines)
        return len(fetched)

    def _note_startup(self, group: Group, fetched: list[dict]) -> tuple[list[dict], bool]:
        """The attempt's start-up phases on its first new row (`startup`) and
        in its log; (the rows, whether that is still to do: no new row yet)."""
        first = next((i for i, row in enumerate(fetched) if not row.get("replayed")), None)
        if first is None:
            return fetched, True
        phases = startup_phases(group.startup(), fetched[first].get("wall_time", time.time()))
        if phases:
            self.store.append_log(self.job_id, [startup_line(self._job().attempt, phases)])
            fetched = list(fetched)
            fetched[first] = {**fetched[first], "startup": phases}
        return fetched, False

    def _track(self, job: JobRecord, rows: list[dict]) -> None:
        """The rows to the job's experiment trackers (a failing one is left off, said in its log)."""
        if self._tracking is None and self.control.tracking is not None:
            self._tracking = self.control.tracking(job)
        if self._tracking is None:
            return
        self._tracking.record(rows)
        if self._tracking.problems:
            self.store.append_log(self.job_id, self._tracking.problems)
            self._tracking.problems = []

    def _end_tracking(self) -> None:
        if self._tracking is None:
            return
        try:
            self._tracking.end(self._job().state)
        except Exception:
            logger.exception("job %s: ending its tracking", self.job_id)

    def _record_output(self, group: Group) -> None:
        """The ranks' own output (stdout, stderr) into the job's log, each
        line marked with its rank (made printable and cut by the store)."""
        lines = [f"rank {rank}: {line}" for rank, taken in enumerate(group.output())
                 for line in taken]
        if lines:
            self.store.append_log(self.job_id, lines)

    def _recover(self, job: JobRecord, carried: list[dict]) -> None:
        """Rows a checkpoint carried (of steps its attempt took, up to the
        step it saved) that were never read before that attempt's group
        ended: record those the store does not have."""
        first, last = carried[0]["step"], carried[-1]["step"]
        have = {m["step"] for m in self.store.metrics(self.job_id, since_step=first,
                                                         limit=last - first + 1)}
        missing = [{k: v for k, v in row.items() if k != "replayed"}
                   for row in carried if row["step"] not in have]
        if last > job.step:  # the job got that far: an attempt resumed at its end steps no more
            self.store.update_job(self.job_id, step=last)
        if not missing:
            return
        self.store.record_metrics(self.job_id, job.attempt, missing)
        steps = ", ".join(str(row["step"]) for row in missing)
        self.store.append_log(self.job_id, [
            f"steps {steps}: metrics recovered from the checkpoint (not read before the "
            "previous attempt's group ended)"])

    def _job(self) -> JobRecord:
        job = self.store.get_job(self.job_id)
        if job is None:
            raise JobNotFound(self.job_id)
        return job

    def _recorded_recovery(self, step: int) -> dict:
        stored = self.store.metrics(self.job_id, since_step=step, limit=1)
        if not stored or stored[0]["step"] != step:
            return {}
        return {k: stored[0][k] for k in RECOVERY_FIELDS if k in stored[0]}

    def _latest_checkpoint(self, job: JobRecord) -> dict | None:
        """The newest committed checkpoint, or None (also where the storage
        cannot be listed now: a fault there must not stop the job)."""
        try:
            return self.control.latest_checkpoint(job)
        except Exception as e:
            logger.warning("job %s: cannot list its checkpoints: %s", self.job_id, e)
            return None
