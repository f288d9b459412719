"""The control plane: takes requests, runs the scheduling passes (priority,
fair share, elastic sizing, preemption: `service.run.scheduling_pass`), runs one
`JobRunner` thread per active job, and on start reconciles the store with
what is alive on Ray.

Several replicas may serve one database: each takes requests (the API's
writes are plain store writes), and only the one holding the leader lease
(`service.leadership`) runs the loop, the runners and reconcile, writing
through `leader_store`, which refuses its writes once another replica leads.
A follower tries for the lease every `lease_s / 3`; on gaining it, it
reconciles (reattaching to the old leader's live groups) and leads; on
losing it, it detaches its runners at once and leaves the groups be.

No job is lost or run twice: a job's worker group is named by (job,
attempt) and detached, so after a control-plane restart the supervisor
either reattaches to the live group of the job's current attempt or removes
its remains and restarts the job from its latest committed checkpoint.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from datetime import UTC, datetime, timedelta

from checkpoints import CheckpointStore, CheckpointTarget
from service.intake.checks import check_fits, check_memory, intake
from service.leadership import Leadership
from service.observability import metrics as service_metrics
from service.observability.fair_share_view import TenantShare, tenant_shares
from service.observability.goodput import Goodput, job_goodput
from service.observability.log_config import job_fields
from service.observability.log_text import printable
from service.observability.tracking import JobTracking, MlflowRun, TensorBoardFiles
from service.observability.usage import TenantUsage, phase_rows, usage_by_tenant
from service.run.exports import ExportService
from service.run.launch import group_name, launch_group
from service.run.lifecycle import GroupOutcome
from service.run.ray_cluster import cluster_capacity, group_workers, live_node_count, run_export
from service.run.runner import ControlPlane, JobRunner
from service.run.scheduling_pass import Admission
from service.run.start_forecast import StartForecasts
from service.scheduling import Demand, Resources, RestartPolicy
from service.settings import Settings
from service.states import ACTIVE
from service.states import JobState as S
from service.store import JobNotFound, JobRecord, JobStore, JobUnfinished, UnexpectedState
from service.store.engine import normalize_url
from service.store.models import utcnow
from service.store.tenants import ADMIN_TENANT
from service.sweeps.service import SweepService
from workers.cluster.errors import RankError, WorkerGroupError
from workers.cluster.group import WorkerGroup
from workers.cluster.pool import RankPool
from workers.spec import JobSpec

logger = logging.getLogger(__name__)
RETENTION_SWEEP_S = 60.0  # how often finished jobs past their retention are looked for
RELAUNCH_WAIT_S = 15.0  # how long a cut-short launch's remains may take to leave Ray's names
PRUNE_TRIES = 5  # a prune decided again as often where the job keeps moving meanwhile


class Supervisor:
    def __init__(self, settings: Settings, store: JobStore, *, on_stop=None):
        self.settings, self.store = settings, store
        self._runners: dict[str, JobRunner] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_stop = on_stop  # e.g. stop the local Ray head
        self.replica = settings.resolved_replica_name
        store.replica = self.replica  # named in each event and audit row this process writes
        self.leadership = Leadership(store.leases, self.replica, settings.lease_s,
                                     on_gained=lambda _token: self._wake.set(), on_lost=self._deposed)
        # What the loop, the runners and reconcile write through: refused once another replica leads.
        self.leader_store = store.fenced(self.leadership)
        self._term: int | None = None  # the lease token the loop leads under (None: following)
        self._pool_started = False
        self.admission = Admission(settings, store, checkpoints_of=self._checkpoint_store)
        self.forecasts = StartForecasts(self.admission, store)  # queued jobs' expected starts
        # What every job runner is handed of the control plane.
        self._control = ControlPlane(
            restart_size=lambda job, nodes: self.admission.restart_size(job, nodes),
            latest_checkpoint=self.latest_checkpoint,
            grace_s=lambda job: self.admission.grace_s(job), live_nodes=live_node_count,
            done=self.runner_done, tracking=self.tracking_for,
            confirm_leading=self.leader_store.check_fence,
        )
        self._restart_policy = RestartPolicy(base_backoff_s=settings.restart_backoff_s)
        # Warm rank processes for the jobs' next ranks (workers/cluster/pool.py), named after the
        # database: a successor (the next leader) on the same store clears what this one leaves idle.
        self.rank_pool = self._new_rank_pool()
        self.exports = ExportService(settings, store, self.checkpoint_target, run_export)
        # Sweeps: their trials are this supervisor's jobs; the loop runs their controller's pass.
        self.sweeps = SweepService(store, self, check=self.check_spec, wake=self._wake.set,
                                   leader_store=self.leader_store)

    # -- requests ---------------------------------------------------------------

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
        self._wake.set()
        return job, created

    def check_spec(self, tenant: str, spec: JobSpec) -> JobSpec:
        """The submit checks (`service.intake.checks`) alone: the spec they pass
        (fixed where they fix it), or their refusal (a sweep's base at its submit)."""
        return intake(spec, tenant, data_root=self.settings.resolved_data_uri_root,
                      store=self.store, checkpoints_of=self._checkpoint_store)

    def cancel(self, tenant: str, job_id: str) -> JobRecord:
        """Idempotent: a job cancelled (or being cancelled) already is answered as it is."""
        job = self._job(tenant, job_id)
        by = _who(tenant)
        try:
            if job.state in (S.CANCELLING, S.CANCELLED, S.PRUNING):  # a pruned one stops anyway
                return job
            if job.state in (S.QUEUED, S.SUSPENDED):
                return self.store.transition(job_id, S.CANCELLED, reason=f"cancelled by {by}",
                                             expect=job.state)
            return self.store.transition(job_id, S.CANCELLING, reason=f"cancel requested by {by}",
                                         expect=job.state)
        except UnexpectedState:  # it moved meanwhile: maybe a cancel that won the race
            now = self._job(tenant, job_id)
            if now.state in (S.CANCELLING, S.CANCELLED, S.PRUNING):
                return now
            raise

    def prune(self, job_id: str, step: int, reason: str) -> JobRecord:
        """Stop a sweep's trial early (its pruner's call): a job that holds or
        may hold workers goes PRUNING (its runner stops the group at once, its
        last committed checkpoint kept, and records PRUNED), one that holds
        none (QUEUED, SUSPENDED) PRUNED at once; the event's reason is
        "pruned at step {step}: {reason}". Idempotent: a job PRUNING or
        already finished (PRUNED too), or being cancelled, is returned as is."""
        why = f"pruned at step {step}: {reason}"
        for _ in range(PRUNE_TRIES):
            job = self._job(ADMIN_TENANT, job_id)
            if job.state.is_terminal or job.state in (S.PRUNING, S.CANCELLING):
                return job
            to = S.PRUNED if job.state in (S.QUEUED, S.SUSPENDED) else S.PRUNING
            try:
                # the leader's pruner: a deposed leader's prune is refused (Deposed)
                pruned = self.leader_store.transition(job_id, to, reason=why, expect=job.state)
            except UnexpectedState:  # it moved meanwhile (admitted, preempted): decide again
                continue
            if to is S.PRUNED:
                service_metrics.count_transition(pruned.tenant, S.PRUNED)
            logger.info("job %s: %s -> %s: %s", job_id, job.state.value, to.value, why,
                        extra=job_fields(job))
            return pruned
        return self._job(ADMIN_TENANT, job_id)  # still moving: as it is; its pruner asks again

    def suspend(self, tenant: str, job_id: str) -> JobRecord:
        job = self._job(tenant, job_id)
        return self.store.transition(
            job_id, S.SUSPENDING, expect=job.state,
            reason=f"suspend requested by {_who(tenant)}: checkpoint, then stop",
        )

    def resume(self, tenant: str, job_id: str, workers: int | None = None) -> JobRecord:
        job = self._job(tenant, job_id)
        if workers is not None:
            job.spec.check_world_size(workers)
            check_fits(job.spec, workers)
            check_memory(job.spec, [workers])
        reason = f"resumed by {_who(tenant)}" + (f" at {workers} workers" if workers else "")
        job = self.store.transition(job_id, S.QUEUED, reason=reason, expect=S.SUSPENDED,
                                    requested_workers=workers, queue_quota=job.tenant)
        self._wake.set()
        return job

    def delete(self, tenant: str, job_id: str) -> JobRecord:
        """Remove a finished job: its storage (checkpoints, exports) first, so
        that a failure there leaves the record to delete again, then the
        record and its history. `JobUnfinished` while it runs or waits."""
        job = self._job(tenant, job_id)
        if not job.state.is_terminal:
            raise JobUnfinished(job_id, job.state)
        self._checkpoint_store(job).remove_job()
        removed = self.store.delete_job(job_id)
        logger.info("job %s of tenant %s deleted by %s", job_id, job.tenant, _who(tenant),
                    extra=job_fields(job))
        return removed

    def sweep_finished(self, now: datetime | None = None) -> list[str]:
        """Delete the jobs that finished more than `job_retention_days` ago;
        their ids. A job that cannot be deleted now is logged and tried again
        at the next sweep."""
        days = self.settings.job_retention_days
        if days is None:
            return []
        cutoff = (now or utcnow()) - timedelta(days=days)
        removed = []
        for job in self.store.finished_before(cutoff):
            try:
                self._checkpoint_store(job).remove_job()
                self.store.delete_job(job.id)
            except Exception:
                logger.exception("job %s: retention could not delete it", job.id,
                                 extra=job_fields(job))
                continue
            logger.info("job %s of tenant %s deleted: finished %s, past the retention of %g days",
                        job.id, job.tenant, job.finished_at, days, extra=job_fields(job))
            removed.append(job.id)
        return removed

    def usage(self, tenant: str | None, window_s: float) -> tuple[datetime, datetime, list[TenantUsage]]:
        """(since, until, each tenant's usage) over the last `window_s` seconds
        (tenant None: every tenant's, those that used nothing too)."""
        now = utcnow()
        since = now - timedelta(seconds=window_s)
        jobs = [j for j in self.store.jobs_changed_since(since, ACTIVE)
                if tenant is None or j.tenant == tenant]
        events = self.store.events_of(j.id for j in jobs)
        rows = {j.id: phase_rows(self.store, j) for j in jobs}
        names = [tenant] if tenant else [t.name for t in self.store.tenants.list()]
        return since, now, list(usage_by_tenant(jobs, events, since, now, tenants=names,
                                                rows=rows).values())

    def goodput(self, tenant: str, job_id: str) -> Goodput:
        """Where the job's time since submit went, from what the store keeps
        (the same answer after a restart of the control plane)."""
        job = self._job(tenant, job_id)
        return job_goodput(job, self.store.events(job_id), self.store.metrics(job_id), utcnow())

    def workers(self, tenant: str, job_id: str) -> list[dict]:
        job = self._job(tenant, job_id)
        runner = self._runners.get(job_id)
        group = runner.group if runner else None
        if group is None:
            if self.leadership.is_leader or job.state not in ACTIVE or not job.workers:
                return []
            # A follower runs no runners: it asks the group's ranks where they are.
            return group_workers(group_name(job.id, job.attempt), job.workers,
                                 pool_prefix=self.rank_pool.name_prefix)
        return [
            {"rank": rank, "node": info["node_ip"], "pid": info["pid"], "state": "running"}
            for rank, info in enumerate(group.node_infos)
        ]

    def checkpoints(self, tenant: str, job_id: str) -> list[dict]:
        job = self._job(tenant, job_id)
        return [
            {"step": c.step, "world_size": c.world_size, "bytes": c.bytes,
             "created_at": c.created_at, "uri": c.uri}
            for c in self._checkpoint_store(job).list_committed()
        ]

    def cluster_status(self) -> dict:
        capacity = cluster_capacity()
        active = self.store.jobs_in_states(ACTIVE)
        queued = self.store.jobs_in_states([S.QUEUED])
        return {
            "capacity": capacity,
            "usage": dict(self.admission.held(active).items()),
            "running_jobs": len(active),
            "queue": [{"id": j.id, "name": j.name, "tenant": j.tenant, "priority": j.priority,
                       "waiting": self.waiting_reason(j.id),
                       "expected_start": self.expected_start(j.id)} for j in queued],
        }

    def waiting_reason(self, job_id: str) -> str | None:
        """Why a queued job did not start at the latest scheduling pass (this
        replica's: a follower's last pass was as a leader, if ever)."""
        if not self.leadership.is_leader:
            return None
        return self.admission.waiting.get(job_id)

    def role(self) -> dict:
        """This replica's part: {"role": "leader" | "follower", "leader": the
        lease's holder (None: no one now), "replica": this one's name}."""
        leading = self.leadership.is_leader
        try:
            holder = self.leadership.holder()
        except Exception:  # the database is out of reach: what this replica knows
            holder = self.replica if leading else None
        return {"role": "leader" if leading else "follower", "leader": holder,
                "replica": self.replica}

    def expected_start(self, job_id: str, *, made: bool = False) -> tuple[datetime | None, str | None]:
        """(when the queued job is expected to start, why none is given);
        (None, None) for a job not queued. `made`: from the forecast the loop
        made last, reading nothing (a route on the event loop)."""
        try:
            forecast = self.forecasts.of(job_id, made=made)
        except Exception as e:  # a forecast that fails must not fail the job's read
            logger.exception("the start forecast failed")
            return None, f"the forecast failed: {e}"
        if forecast is None:
            return None, None
        if forecast.expected_start is None:
            return None, forecast.reason
        return datetime.fromtimestamp(forecast.expected_start, UTC), None

    def fair_shares(self) -> list[TenantShare]:
        """Each tenant's weight, entitled share, what it holds now and its
        quota use (`service.observability.fair_share_view`), as of the latest pass."""
        active = self.store.jobs_in_states(ACTIVE)
        return tenant_shares(
            self.store.tenants.list(), active, self.store.jobs_in_states([S.QUEUED]),
            {job.id: self.admission.held([job]) for job in active},
            Resources(**cluster_capacity()), self.admission.service,
        )

    # -- checkpoints ------------------------------------------------------------

    def checkpoint_target(self, job: JobRecord) -> dict:
        return {
            "root": self.settings.resolved_storage_uri, "tenant": job.tenant, "job": job.id,
            "secret": self.settings.resolved_secret(),
            "storage_options": self.settings.storage_options,
        }

    def latest_checkpoint(self, job: JobRecord) -> dict | None:
        latest = self._checkpoint_store(job).latest_committed()
        return None if latest is None else {"step": latest.step, "world_size": latest.world_size}

    def tracking_for(self, job: JobRecord) -> JobTracking | None:
        """The experiment trackers this job's metrics go to: TensorBoard files
        under its storage prefix if its spec asks, the operator's MLflow."""
        makers: dict = {}
        if job.spec.tracking.tensorboard:
            store = self._checkpoint_store(job)
            makers["tensorboard"] = lambda: TensorBoardFiles(
                store.fs, f"{store.layout.prefix}/tensorboard", f"brigade-{job.id}")
        if uri := self.settings.mlflow_tracking_uri:
            makers["mlflow"] = lambda: MlflowRun(uri, job.tenant, job.id, job.name)
        return JobTracking(job.id, makers) if makers else None

    def _checkpoint_store(self, job: JobRecord) -> CheckpointStore:
        return CheckpointTarget.from_dict(self.checkpoint_target(job)).open_store()

    # -- the loop ---------------------------------------------------------------

    def start(self) -> None:
        """Serve, and lead when this replica holds the lease: a lone replica
        takes it at once and its loop reconciles before its first pass."""
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)
        self._thread.start()
        self.leadership.start()

    def stop(self) -> None:
        """Stop admitting and watching; running groups are left to a successor
        (or to the Ray head's own stop)."""
        self._stopping.set()
        self._wake.set()
        self._detach_runners(wait_s=10)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.leadership.stop()  # the lease given up: another replica leads at once
        if self._pool_started:
            self.rank_pool.shutdown()  # the idle ones: those in groups are the groups'
        if self._on_stop is not None:
            self._on_stop()

    def runner_done(self, job_id: str) -> None:
        with self._lock:
            self._runners.pop(job_id, None)
        self._wake.set()
        if not self._stopping.is_set() and self.leadership.is_leader:
            try:
                job = self.store.get_job(job_id)
                if job is not None:
                    self.exports.after_run(job)  # a job that succeeded is exported
            except Exception:
                logger.exception("job %s: export after its run", job_id)

    def _loop(self) -> None:
        next_sweep = 0.0
        while not self._stopping.is_set():
            if not self._leading():  # a follower: waits for the lease
                self._wake.wait(self.settings.poll_interval_s)
                self._wake.clear()
                continue
            try:  # sweeps first: the trials it submits are admitted in the same iteration
                self.sweeps.run_pass()
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
            if self.settings.job_retention_days is not None and time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + RETENTION_SWEEP_S
                try:
                    self.sweep_finished()
                except Exception:
                    logger.exception("retention sweep failed")
            self._wake.wait(self.settings.poll_interval_s)
            self._wake.clear()

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
                logger.exception("replica %s could not begin leading", self.replica)
                self.leadership.step_down("reconcile failed")
                self._end_term()
                return False
        elif token is None and self._term is not None:
            self._end_term()
        if token is None:
            self._follow()
        return token is not None

    def _begin_term(self, token: int) -> None:
        self.admission = Admission(self.settings, self.leader_store,
                                   checkpoints_of=self._checkpoint_store)  # history from the events
        self.forecasts = StartForecasts(self.admission, self.store)
        self._term = token
        self.reconcile()
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
        self._wake.set()

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

    def _admit(self) -> None:
        """One scheduling pass (see `service.run.scheduling_pass`): launch what it starts."""
        with service_metrics.SCHEDULING_PASS.time():
            started = self.admission.run_pass()
        for job in started:
            self._spawn(self._runner(job.id))

    def _runner(self, job_id: str, attached: WorkerGroup | None = None) -> JobRunner:
        """A runner for the job, handed what it needs of the control plane."""
        return JobRunner(
            job_id, store=self.leader_store, control=self._control, attached=attached,
            launch=self._launch, policy=self._restart_policy,
            poll_interval_s=self.settings.poll_interval_s,
        )

    def _launch(self, job: JobRecord) -> WorkerGroup | GroupOutcome:
        return launch_group(job, self.checkpoint_target(job), pg_timeout_s=self.settings.pg_timeout_s,
                            pool=self.rank_pool if self.rank_pool.active else None)

    def _spawn(self, runner: JobRunner) -> None:
        with self._lock:
            self._runners[runner.job_id] = runner
        runner.start()

    # -- reconciliation -----------------------------------------------------------

    def reconcile(self) -> None:
        """After a (re)start: reattach to every active job's live worker group,
        or clear its remains and restart it from its latest checkpoint (a job
        still STARTING, whose group never trained: launch the same attempt again)."""
        for job in self.store.jobs_in_states(ACTIVE):
            name = group_name(job.id, job.attempt)
            group = None
            if job.workers and job.state is not S.RESTARTING:
                try:
                    group = WorkerGroup.attach(name, job.workers,
                                               pool_prefix=self.rank_pool.name_prefix)
                    group.status()
                    if any(rank["state"] == "idle" for rank in group.call("status")):
                        # Stopped between its start and start_training: nothing trains.
                        raise WorkerGroupError(f"worker group {name} never began training")
                except (WorkerGroupError, RankError, ValueError) as e:
                    logger.info("job %s: group %s not usable: %s", job.id, name, printable(e),
                                extra=job_fields(job))
                    group = None
            if group is not None:
                self.leader_store.note(job.id, f"reconciled after a control-plane restart: "
                                        f"reattached to worker group {name}")
                self._spawn(self._runner(job.id, attached=group))
                continue
            if job.workers:
                remains = WorkerGroup.reclaim(name, job.workers,
                                              pool_prefix=self.rank_pool.name_prefix)
                remains.shutdown()
                if job.state is S.STARTING and remains.names_free(RELAUNCH_WAIT_S):
                    self._launch_again(job, name)
                    continue
            self._restart_after_loss(job, name)

    def _launch_again(self, job: JobRecord, name: str) -> None:
        """A job whose launch was cut short (the control plane, or the leader,
        lost between its admission and its group's training): nothing of it
        trained, so the same attempt is launched again, not restarted (no
        restart counted, the attempt unchanged: it is launched once)."""
        self.leader_store.note(job.id, f"reconciled after a control-plane restart: the launch of "
                                       f"worker group {name} was cut short; launching it again")
        self._spawn(self._runner(job.id))

    def _restart_after_loss(self, job: JobRecord, name: str) -> None:
        why = f"reconciled after a control-plane restart: worker group {name} is gone"
        if job.state is S.CANCELLING:
            self.leader_store.transition(job.id, S.CANCELLED, reason=why)
            return
        if job.state is S.PRUNING:  # its last committed checkpoint stays
            self.leader_store.transition(job.id, S.PRUNED, reason=why)
            service_metrics.count_transition(job.tenant, S.PRUNED)
            return
        if job.state is S.SUSPENDING:
            self.leader_store.transition(job.id, S.SUSPENDED, reason=why, workers=None)
            return
        if job.state is S.PREEMPTING:
            self.leader_store.transition(job.id, S.QUEUED, reason=why)
            return
        if job.state is not S.RESTARTING:
            self.leader_store.transition(job.id, S.RESTARTING,
                                  reason=f"{why}; restarting from the latest checkpoint")
            service_metrics.count_transition(job.tenant, S.RESTARTING)
        else:
            self.leader_store.note(job.id, why)
        self._spawn(self._runner(job.id))

    # -- helpers ------------------------------------------------------------------

    def _job(self, tenant: str, job_id: str) -> JobRecord:
        """The job, if `tenant` may reach it: its own, or any for the admin."""
        job = self.store.get_job(job_id, tenant=None if tenant == ADMIN_TENANT else tenant)
        if job is None:
            raise JobNotFound(job_id)
        return job


def pool_prefix(database_url: str) -> str:
    """The names of a control plane's pooled rank processes: one prefix per
    database, the same for every replica on it (the next leader clears what
    the last one left idle)."""
    url = normalize_url(database_url).render_as_string(hide_password=True)
    digest = hashlib.sha256(url.encode()).hexdigest()[:10]
    return f"brigade-pool-{digest}"


def _who(tenant: str) -> str:
    """Who asked, as an event names them."""
    return "the admin" if tenant == ADMIN_TENANT else "the user"
