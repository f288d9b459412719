"""`JobRequests.prune`: a sweep's pruner stops a trial early. Without Ray, a
supervisor that is not started (nothing admitted) moves jobs set up in each
state; on the session's Ray cluster, a running job pruned stops at once,
PRUNED with its checkpoint kept, and its workers go to the next job."""

from __future__ import annotations

import contextlib
import time

import pytest
import ray
from ray.util.placement_group import placement_group

from service.run.launch import group_name
from service.states import JobState as S
from service.store import JobNotFound
from service.supervisor import Supervisor
from tests.api.conftest import make_supervisor
from tests.waiting import wait_until
from workers.cluster.group import WorkerGroup
from workers.cluster.placed import placed_groups
from workers.schema import JobSpec

SMALL = {"name": "trial", "workers": 1, "resources_per_worker": {"cpu": 1},
         "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
         "train": {"steps": 10, "global_batch_size": 4}}
SPEC = JobSpec.model_validate(SMALL)
# The session cluster's 4 cpus, for as long as it is let run: the next job waits for them.
# Every checkpoint it commits is kept (up to 100: 1,000 steps): what the prune found committed
# is still there however many steps its ranks take before they stop.
WHOLE = JobSpec.model_validate({**SMALL, "resources_per_worker": {"cpu": 4},
                                "train": {"steps": 100_000, "global_batch_size": 4},
                                "checkpoint": {"every_steps": 10, "keep_last": 100}})
# Steps long enough (a few tenths of a second here) that a stop sent at once reaches the ranks
# within one, on a loaded machine too: the bound is the product's, the step's length the room.
SLOW = JobSpec.model_validate({**SMALL, "model": {"n_layers": 2, "d_model": 128, "n_heads": 4,
                                                  "seq_len": 64},
                               "train": {"steps": 100_000, "global_batch_size": 64},
                               "checkpoint": {"every_steps": 5, "keep_last": 100}})
# How the store reaches each state a prune may find a job in (after its submit).
SETUP = {
    S.QUEUED: [], S.STARTING: [S.STARTING], S.RUNNING: [S.STARTING, S.RUNNING],
    S.RESTARTING: [S.STARTING, S.RUNNING, S.RESTARTING],
    S.SUSPENDING: [S.STARTING, S.RUNNING, S.SUSPENDING],
    S.SUSPENDED: [S.STARTING, S.RUNNING, S.SUSPENDING, S.SUSPENDED],
    S.PREEMPTING: [S.STARTING, S.RUNNING, S.PREEMPTING],
    S.CANCELLING: [S.STARTING, S.RUNNING, S.CANCELLING],
    S.SUCCEEDED: [S.STARTING, S.RUNNING, S.SUCCEEDED], S.CANCELLED: [S.CANCELLED],
    S.PRUNING: [S.STARTING, S.RUNNING, S.PRUNING], S.PRUNED: [S.PRUNED],
}


@pytest.fixture
def supervisor(tmp_path):
    supervisor = make_supervisor(tmp_path)  # not started: nothing is admitted
    assert supervisor.leadership.acquire()  # the pruner writes as the leader
    yield supervisor
    supervisor.store.dispose()


def job_in(supervisor: Supervisor, state: S) -> str:
    job, _ = supervisor.store.create_job(tenant="acme", name="trial-t0", spec=SPEC,
                                         sweep="s-000000000001")
    for step in SETUP[state]:
        supervisor.store.transition(job.id, step, reason="set up by the test")
    return job.id


@pytest.mark.parametrize("state,to", [
    (S.STARTING, S.PRUNING), (S.RUNNING, S.PRUNING), (S.RESTARTING, S.PRUNING),
    (S.SUSPENDING, S.PRUNING), (S.PREEMPTING, S.PRUNING),
    (S.QUEUED, S.PRUNED), (S.SUSPENDED, S.PRUNED),  # no workers held: straight on
])
def test_a_prune_stops_a_job_that_holds_workers_and_ends_one_that_holds_none(supervisor, state, to):
    job_id = job_in(supervisor, state)
    pruned = supervisor.requests.prune(job_id, 7, "value 2.31 worse than the median 1.9")
    assert pruned.state is to and supervisor.store.get_job(job_id) == pruned
    last = supervisor.store.events(job_id)[-1]
    assert (last.from_state, last.to_state) == (state, to)
    assert last.reason == "pruned at step 7: value 2.31 worse than the median 1.9"


@pytest.mark.parametrize("state", [S.PRUNING, S.PRUNED, S.CANCELLING, S.CANCELLED, S.SUCCEEDED])
def test_a_prune_is_idempotent_and_leaves_a_finished_or_cancelled_job_as_it_is(supervisor, state):
    job_id = job_in(supervisor, state)
    before = supervisor.store.events(job_id)
    assert supervisor.requests.prune(job_id, 3, "again").state is state
    assert supervisor.store.events(job_id) == before


def test_a_cancel_of_a_pruning_job_answers_it_as_it_is(supervisor):
    job_id = job_in(supervisor, S.PRUNING)
    assert supervisor.requests.cancel("acme", job_id).state is S.PRUNING


def test_a_cancel_that_races_the_jobs_start_cancels_it_from_where_it_went(supervisor, monkeypatch):
    # The leader writes STARTING -> RUNNING between the cancel's read and its
    # write (seen in CI: the cancel was refused, and the job trained on).
    store = supervisor.store
    job_id = job_in(supervisor, S.STARTING)
    transition, raced = store.transition, []

    def leader_first(job: str, to: S, **kw):
        if not raced:
            raced.append(transition(job, S.RUNNING, reason="started (the leader, meanwhile)"))
        return transition(job, to, **kw)

    monkeypatch.setattr(store, "transition", leader_first)
    assert supervisor.requests.cancel("acme", job_id).state is S.CANCELLING
    assert [(e.from_state, e.to_state) for e in store.events(job_id)][-2:] == [
        (S.STARTING, S.RUNNING), (S.RUNNING, S.CANCELLING)]


def test_a_prunes_event_is_dated_at_the_verdict_never_before_the_jobs_last_event(supervisor):
    """The pruner tells the ranks first and writes after: PRUNING's time is its verdict's
    (`decided_at`), but never earlier than the job's previous event, nor later than now."""
    job_id = job_in(supervisor, S.RUNNING)
    running = supervisor.store.events(job_id)[-1].time.timestamp()
    decided = time.time()
    time.sleep(0.05)
    supervisor.requests.prune(job_id, 7, "behind", decided_at=decided)
    pruning = supervisor.store.events(job_id)[-1]
    assert pruning.to_state is S.PRUNING and abs(pruning.time.timestamp() - decided) < 1e-3

    other = job_in(supervisor, S.RUNNING)
    supervisor.requests.prune(other, 7, "behind", decided_at=running - 60)  # before its RUNNING
    events = supervisor.store.events(other)
    assert events[-1].time == events[-2].time  # kept in order
    late = job_in(supervisor, S.RUNNING)
    supervisor.requests.prune(late, 7, "behind", decided_at=time.time() + 60)
    assert supervisor.store.events(late)[-1].time.timestamp() <= time.time()  # never in the future


def test_a_prune_of_no_job_is_not_found(supervisor):
    with pytest.raises(JobNotFound):
        supervisor.requests.prune("j-000000000000", 1, "gone")


def test_a_pruning_job_whose_group_is_gone_after_a_restart_is_pruned(supervisor):
    job_id = job_in(supervisor, S.PRUNING)  # no workers recorded: no group to look for on Ray
    assert supervisor.leadership.acquire()  # reconcile writes as the leader
    supervisor.leader.reconcile()
    job = supervisor.store.get_job(job_id)
    assert job.state is S.PRUNED and job.finished_at is not None
    assert "worker group" in supervisor.store.events(job_id)[-1].reason


# -- on Ray ----------------------------------------------------------------------------


def wait_for(read, until, timeout_s=120.0):
    deadline = time.monotonic() + timeout_s
    while not until(found := read()):
        assert time.monotonic() < deadline, f"still {found}"
        time.sleep(0.1)
    return found


def release(supervisor: Supervisor, job_ids: list[str]) -> None:
    """End the test's jobs and remove whatever is left of their worker groups,
    whatever the test got to: a group left behind holds the session cluster's
    CPUs from every later test. Then stop the supervisor."""
    store = supervisor.store
    try:
        def ended() -> bool:
            live = [j for j in map(store.get_job, job_ids) if j is not None and not j.state.is_terminal]
            for job in live:
                with contextlib.suppress(Exception):  # a STARTING job refuses: asked again
                    supervisor.requests.cancel("admin", job.id)
            return not live

        wait_until(ended, within_s=60, every_s=0.2)
    finally:
        supervisor.stop()
        try:
            for job in filter(None, map(store.get_job, job_ids)):
                for attempt in range(1, job.attempt + 1):
                    WorkerGroup.reclaim(group_name(job.id, attempt), job.spec.workers,
                                        pool_prefix=supervisor.leader.rank_pool.name_prefix).shutdown()
        finally:
            store.dispose()


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_a_running_job_pruned_stops_at_once_keeps_its_checkpoint_and_frees_its_workers(tmp_path):
    """No timing assumed of the ranks: the trial cannot finish before the prune
    lands (100,000 steps), keeps every checkpoint it commits (however many
    steps its ranks take before they stop), and is compared with itself by
    relations, not exact steps."""
    supervisor = make_supervisor(tmp_path, export_on_success="")
    supervisor.start()
    store = supervisor.store
    jobs: list[str] = []
    try:
        trial, _ = supervisor.requests.submit("admin", WHOLE, None, sweep="s-000000000001")
        jobs.append(trial.id)
        assert trial.sweep == "s-000000000001"
        running = wait_for(lambda: store.get_job(trial.id),
                           lambda j: j.state is S.RUNNING and j.latest_checkpoint is not None)
        nxt, _ = supervisor.requests.submit("admin", SPEC, None)
        jobs.append(nxt.id)
        # A scheduling pass ran and found no room: the trial holds the cluster's CPUs.
        assert wait_until(lambda: supervisor.views.waiting_reason(nxt.id) is not None, within_s=30), \
            store.get_job(nxt.id)
        assert supervisor.views.waiting_reason(nxt.id).startswith("capacity: needs 1 cpu for 1 workers, ")
        assert store.get_job(nxt.id).state is S.QUEUED

        supervisor.requests.prune(trial.id, running.step, "value 2.3 worse than the median 1.9")
        pruned = wait_for(lambda: store.get_job(trial.id), lambda j: j.state.is_terminal, 60)
        assert pruned.state is S.PRUNED, pruned.error
        assert running.step <= pruned.step < WHOLE.train.steps  # stopped, far from its end
        # What it had committed stays, and so does what its ranks committed as they stopped.
        kept = sorted(c["step"] for c in supervisor.views.checkpoints("admin", trial.id))
        assert running.latest_checkpoint["step"] in kept and pruned.latest_checkpoint["step"] in kept
        assert pruned.latest_checkpoint["step"] >= running.latest_checkpoint["step"]
        assert set(range(10, pruned.latest_checkpoint["step"] + 1, 10)) <= set(kept)  # none removed
        reasons = [(e.to_state, e.reason) for e in store.events(trial.id)]
        assert (S.PRUNING, f"pruned at step {running.step}: value 2.3 worse than the median 1.9") \
            in reasons
        assert reasons[-1][0] is S.PRUNED and reasons[-1][1].startswith("pruned: stopped at step ")
        assert supervisor.views.workers("admin", trial.id) == []

        # Its workers go to the next job.
        started = wait_for(lambda: store.get_job(nxt.id), lambda j: j.state is not S.QUEUED, 60)
        assert started.state in (S.STARTING, S.RUNNING, S.SUCCEEDED), started
    finally:
        release(supervisor, jobs)


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_a_pruned_jobs_ranks_told_at_once_begin_at_most_one_step_after_the_decision(tmp_path):
    """The pruner's stop goes to the ranks from its own thread
    (`LeaderLoop.stop_now`), before the store's PRUNING is written and not at
    the runner's next look (as the sweep controller does): the ranks begin at
    most one step after the decision (the step in flight ends), the runner
    waits for the write rather than take them for a group that stopped short,
    their rows all read, their last save committed and kept, the group
    released, no restart."""
    supervisor = make_supervisor(tmp_path, export_on_success="")
    supervisor.start()
    store = supervisor.store
    jobs: list[str] = []
    try:
        trial, _ = supervisor.requests.submit("admin", SLOW, None, sweep="s-000000000001")
        jobs.append(trial.id)
        running = wait_for(lambda: store.get_job(trial.id),
                           lambda j: j.state is S.RUNNING and j.step >= 3)
        decided = time.time()
        supervisor.leader.stop_now(trial.id)
        time.sleep(0.5)  # a slow write: the ranks may have stopped before it lands
        supervisor.requests.prune(trial.id, running.step, "behind", decided_at=decided)
        pruned = wait_for(lambda: store.get_job(trial.id), lambda j: j.state.is_terminal, 60)
        assert pruned.state is S.PRUNED and pruned.restarts == 0, pruned.error
        rows = store.metrics(trial.id)
        assert [r["step"] for r in rows] == list(range(1, pruned.step + 1))  # every row read
        begun = [r["step"] for r in rows if r["wall_time"] - r["step_time_s"] > decided]
        assert len(begun) <= 1, (begun, pruned.step)
        kept = [c["step"] for c in supervisor.views.checkpoints("admin", trial.id)]
        assert pruned.latest_checkpoint["step"] == pruned.step and pruned.step in kept
        assert supervisor.views.workers("admin", trial.id) == []
    finally:
        release(supervisor, jobs)


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_the_leader_removes_a_worker_group_left_on_the_cluster_by_an_ended_job(supervisor):
    """A group of a PRUNED job (and one of an attempt not its job's current
    one) is removed by the leader's look for leftovers; the group of a job
    this store does not know (another control plane's), and of an active
    job's current attempt, stay."""
    store = supervisor.store
    ended, stale, live = job_in(supervisor, S.PRUNED), job_in(supervisor, S.RUNNING), \
        job_in(supervisor, S.STARTING)
    store.update_job(stale, attempt=2)
    store.update_job(live, attempt=1)
    names = {"ended": group_name(ended, 1), "stale": group_name(stale, 1),
             "live": group_name(live, 1), "other": group_name("j-0123456789ab", 1)}
    try:
        for name in names.values():  # what a group holds on the cluster: its placement group
            pg = placement_group([{"CPU": 0.25}], name=f"{name}-pg", lifetime="detached")
            assert ray.get(pg.ready(), timeout=60)
        assert supervisor.leadership.acquire()  # again: its renewal does not run (not started)
        removed = supervisor.leader.remove_leftovers()
        assert sorted(removed) == sorted([names["ended"], names["stale"]])
        left = placed_groups("brigade-j-")
        assert names["live"] in left and names["other"] in left
        assert names["ended"] not in left and names["stale"] not in left
        assert supervisor.leader.remove_leftovers() == []  # once
        assert "left on the cluster after its end: removed" in store.events(ended)[-1].reason
    finally:
        for name in names.values():
            WorkerGroup.reclaim(name, 1).shutdown()
