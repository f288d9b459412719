"""The leader's part of the control plane: while this replica holds the
lease (`service.leadership`), its loop runs the sweeps' pass, the
scheduling pass (`service.run.scheduling_pass`), the queued jobs' start
forecasts and the retention purge, and one `JobRunner` thread per active job.

A term begins when the lease is gained: the scheduling pass is made anew
(its fair-share history rebuilt from the events), reconcile reattaches to
the live groups or settles the jobs whose groups are gone
(`service.control.reconcile`), and the warm rank pool starts. It ends when
the lease is lost: the runners detach at once, leaving their groups to the
next leader, and the pool's idle processes stop. Everything the loop, the
runners and reconcile write goes through `leader_store`, which refuses
their writes once another replica leads. A follower's loop keeps the start
forecasts fresh for its reads.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable

from service.control.reconcile import reconcile, remove_leftovers
from service.control.storage import JobStorage
from service.leadership import Leadership
from service.observability import metrics as service_metrics
from service.run.launch import launch_group
from service.run.lifecycle import GroupOutcome
from service.run.ray_cluster import draining_nodes, live_node_count
from service.run.runner import ControlPlane, Group, JobRunner
from service.run.scheduling_pass import SchedulingPass
from service.run.start_forecast import StartForecasts
from service.scheduling import RestartPolicy
from service.settings import Settings
from service.store import JobRecord, JobStore
from service.store.engine import normalize_url
from workers.cluster.group import WorkerGroup
from workers.cluster.pool import RankPool

logger = logging.getLogger(__name__)
RETENTION_CHECK_S = 60.0  # how often finished jobs past their retention are looked for
LEFTOVER_CHECK_S = 30.0  # how often worker groups no job needs are looked for on the cluster


class LeaderLoop:
    def __init__(self, settings: Settings, store: JobStore, leadership: Leadership, *,
                 leader_store: JobStore, storage: JobStorage, wake: threading.Event,
                 sweep_pass: Callable[[], None], purge_expired: Callable[[], object],
                 after_run: Callable[[JobRecord], None]):
        """`sweep_pass`: the sweeps' controller, before each scheduling pass;
        `purge_expired`: the retention purge, every RETENTION_CHECK_S;
        `after_run`: told of each job whose runner ended (an export after a success)."""
        self.settings, self.store, self.leadership = settings, store, leadership
        self.leader_store, self.storage, self.wake = leader_store, storage, wake
        self._sweep_pass, self._purge_expired, self._after_run = sweep_pass, purge_expired, after_run
        leadership.on_gained = lambda _token: wake.set()
        leadership.on_lost = self._deposed
        self._runners: dict[str, JobRunner] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._term: int | None = None  # the lease token the loop leads under (None: following)
        self._pool_started = False
        self._next_leftover_check = 0.0  # when groups left on the cluster are looked for next
        self.scheduling = SchedulingPass(settings, store, checkpoints_of=storage.checkpoint_store,
                                         placed_on=self._placed_on)
        self.forecasts = StartForecasts(self.scheduling, store)  # queued jobs' expected starts
        # What every job runner is handed of the control plane.
        self._control = ControlPlane(
            restart_size=lambda job, nodes: self.scheduling.restart_size(job, nodes),
            latest_checkpoint=storage.latest_checkpoint,
            grace_s=lambda job: self.scheduling.grace_s(job), live_nodes=live_node_count,
            done=self._runner_done, tracking=storage.tracking_for,
            confirm_leading=leader_store.check_fence, draining=draining_nodes,
        )
        self._restart_policy = RestartPolicy(base_backoff_s=settings.restart_backoff_s)
        # Warm rank processes for the jobs' next ranks (workers/cluster/pool.py), named after the
        # database: a successor (the next leader) on the same store clears what this one leaves idle.
        self.rank_pool = self._new_rank_pool()

    def start(self) -> None:
        """Run the loop, and take part in the lease: a lone replica takes it at
        once and its loop reconciles before its first pass."""
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)
        self._thread.start()
        self.leadership.start()

    def stop(self) -> None:
        """Stop admitting and watching, and give the lease up; running groups
        are left to a successor (or to the Ray head's own stop)."""
        self._stopping.set()
        self.wake.set()
        self._detach_runners(wait_s=10)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.leadership.stop()  # the lease given up: another replica leads at once
        if self._pool_started:
            self.rank_pool.shutdown()  # the idle ones: those in groups are the groups'

    def group_of(self, job_id: str) -> Group | None:
        """The worker group this replica's runner of the job drives, if any."""
        runner = self._runners.get(job_id)
        return runner.group if runner else None

    def _placed_on(self, job_id: str) -> list[str]:
        """The node id of each of the job's ranks, as this replica's runner's
        group has them (none: no runner here)."""
        group = self.group_of(job_id)
        return [info.node_id for info in group.node_infos] if group is not None else []

    def remove_leftovers(self) -> list[str]:
        """Remove the worker groups on the cluster that no job of this store
        needs and no runner holds (`service.control.reconcile.remove_leftovers`)."""
        def held(job_id: str) -> bool:
            with self._lock:
                return job_id in self._runners

        return remove_leftovers(self.leader_store, pool_prefix=self.rank_pool.name_prefix, held=held)

    def stop_now(self, job_id: str) -> None:
        """The job's pruner has spoken: its runner tells its ranks to stop now
        (`JobRunner.stop_now`), not at its next look; a job without a runner
        here holds no workers of this replica's, and a replica whose lease ran
        out leaves the ranks to the next leader."""
        if not self.leadership.is_leader:
            return
        with self._lock:
            runner = self._runners.get(job_id)
        if runner is not None:
            runner.stop_now()

    def reconcile(self) -> None:
        """Reattach to every active job's live group, or settle the job whose
        group is gone (`service.control.reconcile`)."""
        reconcile(self.leader_store, pool_prefix=self.rank_pool.name_prefix, spawn=self._spawn,
                  pg_timeout_s=self.settings.pg_timeout_s)

    # -- the loop ---------------------------------------------------------------

    def _loop(self) -> None:
        next_purge = 0.0
        while not self._stopping.is_set():
            if not self._leading():  # a follower: waits for the lease
                self.wake.wait(self.settings.poll_interval_s)
                self.wake.clear()
                continue
            try:  # sweeps first: the trials it submits are admitted in the same iteration
                self._sweep_pass()
            except Exception:
                logger.exception("sweep pass failed")
            try:
                self._admit()
            except Exception:
                logger.exception("admission pass failed")
            try:  # queued jobs' expected starts, remade when stale (what a job's read shows)
                self.forecasts.all()
            except Exception:
                logger.exception("the start forecast failed")
            if time.monotonic() >= self._next_leftover_check:
                self._next_leftover_check = time.monotonic() + LEFTOVER_CHECK_S
                try:
                    self.remove_leftovers()
                except Exception:
                    logger.exception("looking for worker groups left on the cluster failed")
            if self.settings.job_retention_days is not None and time.monotonic() >= next_purge:
                next_purge = time.monotonic() + RETENTION_CHECK_S
                try:
                    self._purge_expired()
                except Exception:
                    logger.exception("retention purge failed")
            self.wake.wait(self.settings.poll_interval_s)
            self.wake.clear()

    def _admit(self) -> None:
        """One scheduling pass (see `service.run.scheduling_pass`): launch what it starts."""
        with service_metrics.SCHEDULING_PASS.time():
            started = self.scheduling.run_pass()
        for job in started:
            self._spawn(job.id)

    # -- terms --------------------------------------------------------------------

    def _leading(self) -> bool:
        """Whether this replica leads now; at the start of a term, reconcile
        first (a term that cannot is given up: another replica may do
        better); at its end, let go of what the term held."""
        token = self.leadership.token
        if token is not None and token != self._term:
            self._end_term()  # an earlier term's runners, if any are still ending
            try:
                self._begin_term(token)
            except Exception:
                logger.exception("replica %s could not begin leading", self.leadership.replica)
                self.leadership.step_down("reconcile failed")
                self._end_term()
                return False
        elif token is None and self._term is not None:
            self._end_term()
        if token is None:
            self._follow()
        return token is not None

    def _begin_term(self, token: int) -> None:
        self.scheduling = SchedulingPass(self.settings, self.leader_store,  # history from the events
                                         checkpoints_of=self.storage.checkpoint_store,
                                         placed_on=self._placed_on)
        self.forecasts = StartForecasts(self.scheduling, self.store)
        self._term = token
        self.reconcile()
        self._next_leftover_check = 0.0  # and what no job needs, at this term's first pass
        if self.rank_pool.active:
            self.rank_pool = self._new_rank_pool()
            self.rank_pool.start()
            self._pool_started = True

    def _end_term(self) -> None:
        self._term = None
        self._detach_runners(wait_s=30)
        if self._pool_started:
            self._pool_started = False
            self.rank_pool.shutdown()  # its idle processes: the next leader fills its own

    def _follow(self) -> None:
        """A follower's part of the loop: queued jobs' expected starts, for its reads."""
        try:
            self.forecasts.all()
        except Exception:
            logger.exception("the start forecast failed")

    def _deposed(self, reason: str) -> None:
        """The lease is lost (from any thread): stop acting at once. The
        runners detach (their groups train on, for the next leader to
        reattach to); the loop lets go of the rest."""
        with self._lock:
            runners = list(self._runners.values())
        for runner in runners:
            runner.detach.set()
        self.wake.set()

    # -- runners ------------------------------------------------------------------

    def _spawn(self, job_id: str, attached: WorkerGroup | None = None) -> None:
        """Start the job's runner, handed what it needs of the control plane
        (`attached`: the live group reconcile found, to watch rather than launch)."""
        runner = JobRunner(
            job_id, store=self.leader_store, control=self._control, attached=attached,
            launch=self._launch, policy=self._restart_policy,
            poll_interval_s=self.settings.poll_interval_s,
        )
        with self._lock:
            self._runners[job_id] = runner
        runner.start()

    def _launch(self, job: JobRecord) -> WorkerGroup | GroupOutcome:
        return launch_group(job, self.storage.checkpoint_target(job), pg_timeout_s=self.settings.pg_timeout_s,
                            pool=self.rank_pool if self.rank_pool.active else None,
                            flavors=self.store.flavors)

    def _runner_done(self, job_id: str) -> None:
        with self._lock:
            self._runners.pop(job_id, None)
        self.wake.set()
        if not self._stopping.is_set() and self.leadership.is_leader:
            try:
                job = self.store.get_job(job_id)
                if job is not None:
                    self._after_run(job)  # a job that succeeded is exported
            except Exception:
                logger.exception("job %s: export after its run", job_id)

    def _detach_runners(self, wait_s: float) -> None:
        with self._lock:
            runners = list(self._runners.values())
        for runner in runners:
            runner.detach.set()
        for runner in runners:
            if runner is not threading.current_thread():
                runner.join(timeout=wait_s)

    def _new_rank_pool(self) -> RankPool:
        return RankPool(self.settings.rank_pool_size,
                        name_prefix=pool_prefix(self.settings.resolved_database_url),
                        fork_server=self.settings.fork_server)


def pool_prefix(database_url: str) -> str:
    """The names of a control plane's pooled rank processes: one prefix per
    database, the same for every replica on it (the next leader clears what
    the last one left idle)."""
    url = normalize_url(database_url).render_as_string(hide_password=True)
    digest = hashlib.sha256(url.encode()).hexdigest()[:10]
    return f"brigade-pool-{digest}"
