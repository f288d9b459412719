"""JobRunner driven end to end without Ray: a real (SQLite) store, and a fake
worker group per attempt that plays a script. Each test runs the runner's
loop on the test's own thread until it lets go of the job."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

import service.run.runner as runner_module
from service.run.lifecycle import GroupOutcome
from service.run.runner import ControlPlane, JobRunner
from service.scheduling.restart import RestartPolicy
from service.states import JobState as S
from service.store import JobStore
from workers.cluster.errors import PlacementTimeoutError, RankFailedError, RankLostError, WorkerGroupError
from workers.cluster.group_status import GroupStatus
from workers.cluster.in_place import CannotRecover
from workers.cluster.rank_info import RankInfo
from workers.cluster.replace import Recovery
from workers.schema import JobSpec

STEPS = 10  # the job's train.steps
EVERY = 2  # its ranks "checkpoint" every EVERY steps


@dataclass(frozen=True)
class DoneThenLost:
    """A script entry: the group trains `steps` more, says "done", and a rank
    is lost before the runner reads its last rows (a SIGKILL after its end)."""

    steps: int = 0


@pytest.fixture
def store(tmp_path):
    store = JobStore(f"sqlite:///{tmp_path / 'brigade.db'}")
    store.migrate()
    yield store
    store.dispose()


class FakeGroup:
    """A started worker group that plays `script`, one entry per `status()`:
    an int (take that many steps), "done", "preempted" (after a SIGTERM), an
    exception (raised), or a callable (something happening meanwhile, e.g.
    the user cancels). Past its script it trains on, a step a poll; asked to
    stop, it stops if `stops_when_asked`, else hangs."""

    def __init__(self, cluster: FakeCluster, script: list, *, stops_when_asked: bool = True,
                 start_error: WorkerGroupError | None = None):
        self.cluster, self.script, self.stops_when_asked = cluster, list(script), stops_when_asked
        self.start_error = start_error
        self.node_infos = [RankInfo(node_id=f"n-{r}", node_ip=f"10.0.0.{r}", pid=100 + r)
                           for r in range(2)]
        self.backend = "gloo"
        # A resumed group first replays the rows its checkpoint carried, marked.
        self.rows: list[dict] = [{**row, "replayed": True} for row in cluster.carried()]
        self.step = self.resumed_from = cluster.latest_step()
        self.stop_requested = self.shut_down = False
        self.lost: RankLostError | None = None  # what `progress` raises once a rank is lost
        # Recovery in place: the cluster's script of what each `recover` does.
        self.in_place = bool(cluster.recoveries)
        self.recovered: list[list[int]] = []

    def recover(self, lost: list[int]) -> Recovery:
        """The next scripted recovery: a snapshot step to go on from (the rows
        after it are taken again, the first marked resumed), or CannotRecover."""
        outcome = self.cluster.recoveries.pop(0)
        if isinstance(outcome, CannotRecover):
            raise outcome
        # (snapshot step, the survivors' step[, steps trained on before the runner's next look])
        # where the ranks got past what the store saw
        outcome, reached, *ahead = outcome if isinstance(outcome, tuple) else (outcome, self.step)
        self.recovered.append(lost)
        self.step = self.resumed_from = outcome
        self.train(ahead[0] if ahead else 0)
        return Recovery(ranks=lost, step=outcome, seconds=0.25, where=f"rank {lost[0]}",
                        reached=max(outcome, reached))

    def start(self) -> FakeGroup:
        if self.start_error is not None:
            raise self.start_error
        return self

    def start_training(self, spec: JobSpec, *, checkpoint: dict | None = None) -> None:
        self.spec = spec

    def progress(self, since: int = 0) -> list[dict]:
        if self.lost is not None:
            raise self.lost
        return self.rows[since:]

    def status(self) -> GroupStatus:
        if self.stop_requested and self.stops_when_asked:
            return GroupStatus(state="done")
        action = self.script.pop(0) if self.script else 0 if self.stop_requested else 1
        if callable(action):
            action(self)
            action = 0
        if isinstance(action, BaseException):
            raise action
        if action == "preempted":
            return GroupStatus(state="preempted", reason=f"rank 0 (pid 100, node 10.0.0.0) got SIGTERM "
                                                         f"(a preemption notice): checkpointed at step "
                                                         f"{self.step} and stopped")
        if action == "done":
            return GroupStatus(state="done")
        if isinstance(action, DoneThenLost):
            self.train(action.steps)
            self.lost = RankLostError(0, "rank 0 (pid 100, node 10.0.0.0) was lost")
            return GroupStatus(state="done")
        self.train(min(action, STEPS - self.step))
        return GroupStatus(state="running")

    def train(self, steps: int) -> None:
        for _ in range(steps):
            self.step += 1
            row = {"step": self.step, "loss": 1.0 / self.step, "lr": 1e-3, "tokens_per_s": 100.0}
            if self.step == self.resumed_from + 1 and self.resumed_from:
                row["resumed_from"] = self.resumed_from
            if self.step % EVERY == 0:
                row["checkpoint_step"] = self.step
                self.cluster.saved.append(self.step)
            self.rows.append(row)

    def request_stop(self) -> None:
        self.stop_requested = True

    def signal_stop(self) -> None:
        self.stop_requested = True

    def startup(self) -> dict[str, float]:
        return {}  # no phases to tell: the runner logs none

    def output(self) -> list[list[str]]:
        return []

    def shutdown(self) -> None:
        self.shut_down = True


class FakeCluster:
    """Everything a runner is handed, faked: for each attempt it launches, a
    script (a list) or the error its start raises; the checkpoints the ranks
    saved; the cluster's nodes."""

    def __init__(self, *attempts: list, nodes: int = 1, grace_s: float = 60.0,
                 restart_size=lambda job, nodes: job.workers, stops_when_asked: bool = True,
                 recoveries: tuple = ()):
        self.attempts, self.nodes, self.grace = list(attempts), nodes, grace_s
        # each recover(): a snapshot step, (its step, the survivors' step), or CannotRecover
        self.recoveries = list(recoveries)
        self.restart_sizes, self.stops_when_asked = restart_size, stops_when_asked
        self.saved: list[int] = []
        self.groups: list[FakeGroup] = []
        self.asked_restart_size: list[set[str]] = []
        self.ended: list[str] = []

    def latest_step(self) -> int:
        return self.saved[-1] if self.saved else 0

    def carried(self) -> list[dict]:
        """What the latest checkpoint carries: the last group's rows up to it
        (the real ranks carry only those not yet read; a superset is as good)."""
        last = self.groups[-1].rows if self.groups else []
        return [{k: v for k, v in row.items() if k != "replayed"}
                for row in last if row["step"] <= self.latest_step()]

    def launch(self, job):
        """As `service.run.launch.launch_group` does: start, train, or say why not."""
        attempt = self.attempts.pop(0)
        failing = isinstance(attempt, WorkerGroupError)
        group = FakeGroup(self, [] if failing else attempt, stops_when_asked=self.stops_when_asked,
                          start_error=attempt if failing else None)
        try:
            group.start()
            group.start_training(job.spec, checkpoint={"job": job.id})
        except WorkerGroupError as e:
            group.shutdown()
            return GroupOutcome.start_failed(e, group.node_infos)
        self.groups.append(group)
        return group

    def restart_size(self, job, nodes):
        self.asked_restart_size.append(set(nodes))
        return self.restart_sizes(job, nodes)

    def control(self) -> ControlPlane:
        return ControlPlane(
            restart_size=self.restart_size,
            latest_checkpoint=lambda job: ({"step": self.latest_step(), "world_size": 2}
                                           if self.saved else None),
            grace_s=lambda job: self.grace, live_nodes=lambda: self.nodes, done=self.ended.append,
        )


class Waits:
    """A runner's `detach` that records each wait and never blocks."""

    def __init__(self):
        self.timeouts: list[float] = []

    def is_set(self) -> bool:
        return False

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        return False


def submit(store: JobStore, *, state=S.STARTING, max_restarts=3, workers=2) -> str:
    """A job as admission leaves it: STARTING, its first attempt at `workers`."""
    spec = JobSpec.model_validate({
        "name": "fake", "workers": {"min": 1, "max": 2}, "max_restarts": max_restarts,
        "model": {"n_layers": 2, "d_model": 32, "n_heads": 4, "seq_len": 16},
        "train": {"steps": STEPS, "global_batch_size": 4},
    })
    job, _ = store.create_job(tenant="acme", name="fake", spec=spec)
    store.transition(job.id, S.STARTING, expect=S.QUEUED, workers=workers, attempt=1,
                     reason="admitted at 2 workers")
    if state is not S.STARTING:
        store.transition(job.id, state, reason="set up by the test")
    return job.id


def run(store: JobStore, cluster: FakeCluster, job_id: str, *, attached=None) -> Waits:
    runner = JobRunner(job_id, store=store, launch=cluster.launch, control=cluster.control(),
                       policy=RestartPolicy(base_backoff_s=0.5), poll_interval_s=0.0,
                       attached=attached)
    runner.detach = waits = Waits()
    runner.run()  # on this thread: returns once the runner lets go of the job
    assert cluster.ended == [job_id]
    assert all(group.shut_down for group in cluster.groups)
    return waits


def events(store: JobStore, job_id: str) -> list[tuple[str, str]]:
    return [(e.to_state.value, e.reason) for e in store.events(job_id)][2:]  # after admission


def to_states(store: JobStore, job_id: str) -> list[str]:
    return [state for state, _ in events(store, job_id)]


def user(store: JobStore, job_id: str, state: S, **fields):
    """Something the API or the scheduler does meanwhile: the job moves to `state`."""
    return lambda group: store.transition(job_id, state, reason=f"test: {state.value}", **fields)


# -- to the end ------------------------------------------------------------------------


def test_a_job_that_trains_all_its_steps_succeeds(store):
    job_id = submit(store)
    cluster = FakeCluster([4, 4, 2, "done"])
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.step, job.restarts, job.error) == (S.SUCCEEDED, STEPS, 0, None)
    assert job.latest_checkpoint == {"step": 10, "world_size": 2}
    assert events(store, job_id) == [
        ("RUNNING", "worker group of 2 ranks started (attempt 1, backend gloo)"),
        ("SUCCEEDED", "all 10 steps done"),
    ]
    assert [r["step"] for r in store.metrics(job_id)] == list(range(1, STEPS + 1))
    lines = [log.line for log in store.logs(job_id)]
    assert lines[0] == "attempt 1: 2 ranks on 10.0.0.0, 10.0.0.1, backend gloo"
    assert "step 10/10 loss 0.1000 lr 0.001 100 tok/s" in lines


def test_an_attempts_end_is_recorded_before_its_group_is_shut_down(store, monkeypatch):
    """A leader lost between the two leaves a job whose end is known (its group a leftover
    the next leader removes), never a RUNNING job whose group is gone, which the next
    leader's reconcile would restart: once seen, a 4-step job that had trained its 4 steps."""
    job_id = submit(store)
    at_shutdown = []

    def shutdown(group):
        at_shutdown.append(store.get_job(job_id).state)
        group.shut_down = True

    monkeypatch.setattr(FakeGroup, "shutdown", shutdown)
    cluster = FakeCluster([5, RankLostError(1, "rank 1 (pid 101, node 10.0.0.1) was lost")],
                          [10, "done"])
    run(store, cluster, job_id)
    assert at_shutdown == [S.RESTARTING, S.SUCCEEDED]
    assert store.get_job(job_id).attempt == 2


def test_a_lost_rank_restarts_from_the_latest_checkpoint_and_succeeds(store):
    job_id = submit(store)
    cluster = FakeCluster([5, RankLostError(1, "rank 1 (pid 101, node 10.0.0.1) was lost")],
                          [10, "done"])
    waits = run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.restarts, job.attempt, job.error) == (S.SUCCEEDED, 1, 2, None)
    assert events(store, job_id)[1:3] == [
        ("RESTARTING", "restart 1 of 3 from the latest checkpoint in 0.5 s: "
                       "rank 1 (pid 101, node 10.0.0.1) was lost"),
        ("STARTING", "starting attempt 2"),
    ]
    assert 0.5 in waits.timeouts  # the decision's backoff
    assert cluster.asked_restart_size == [{"n-0", "n-1"}]  # where the lost attempt ran
    first = store.metrics(job_id, since_step=5, limit=1)[0]
    assert (first["recovered_from"], first["lost_steps"]) == ("restart", 1)  # 5 taken, 4 saved


def test_a_lost_rank_recovered_in_place_goes_on_in_the_same_attempt(store):
    job_id = submit(store)
    cluster = FakeCluster([5, RankLostError(1, "rank 1 (pid 101, node 10.0.0.1) was lost"), 6, "done"],
                          recoveries=(4,))
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.restarts, job.recoveries, job.attempt) == (S.SUCCEEDED, 0, 1, 1)
    assert cluster.groups[0].recovered == [[1]] and len(cluster.groups) == 1
    [recovery] = [e for e in store.events(job_id) if e.kind == "recovery"]
    assert recovery.detail["in_place"] is True
    assert (recovery.detail["from_step"], recovery.detail["to_step"]) == (5, 4)
    assert recovery.detail["ranks"] == [1]
    assert [r["step"] for r in store.metrics(job_id)] == list(range(1, STEPS + 1))  # each once
    first = store.metrics(job_id, since_step=5, limit=1)[0]  # the first row after the snapshot
    assert (first["recovered_from"], first["lost_steps"]) == ("recovery", 1)
    lines = [log.line for log in store.logs(job_id)]
    assert any("lost at step 5: replaced in place" in line and "snapshot of step 4" in line
               for line in lines), lines


def test_the_recovery_is_measured_on_the_first_resumed_row_behind_rows_of_before_it(store):
    # Rank 0 took steps 6 and 7 before its peer was lost; the runner fetches them with
    # the first row after the recovery (8, resumed from the snapshot of 7): that row,
    # not the first fetched, carries what the recovery cost.
    def two_steps_then_a_loss(group):
        group.train(2)
        raise RankLostError(1, "rank 1 (pid 101, node 10.0.0.1) was lost")

    job_id = submit(store)
    cluster = FakeCluster([5, two_steps_then_a_loss, 2, "done"], recoveries=((7, 7, 1),))
    run(store, cluster, job_id)
    rows = store.metrics(job_id)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    [measured] = [r for r in rows if "recovered_from" in r]
    assert (measured["step"], measured["resumed_from"]) == (8, 7)
    assert (measured["recovered_from"], measured["lost_steps"]) == ("recovery", 0)


def test_a_recovery_names_the_step_the_survivors_reached_not_the_lagging_stores(store):
    # The store saw step 5; the survivors had taken step 7 and restored 6: lost at 7.
    job_id = submit(store)
    cluster = FakeCluster([5, RankLostError(1, "rank 1 (pid 101, node 10.0.0.1) was lost"), 6, "done"],
                          recoveries=((6, 7),))
    run(store, cluster, job_id)
    [recovery] = [e for e in store.events(job_id) if e.kind == "recovery"]
    assert (recovery.detail["from_step"], recovery.detail["to_step"]) == (7, 6)
    lines = [log.line for log in store.logs(job_id)]
    assert any("lost at step 7: replaced in place" in line for line in lines), lines


def test_a_recovery_in_place_that_cannot_work_falls_back_to_a_restart(store):
    job_id = submit(store)
    cluster = FakeCluster([5, RankLostError(1, "rank 1 was lost")], [10, "done"],
                          recoveries=(CannotRecover("no live rank holds a snapshot of rank(s) [1]"),))
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.restarts, job.recoveries, job.attempt) == (S.SUCCEEDED, 1, 0, 2)
    [recovery] = [e for e in store.events(job_id) if e.kind == "recovery"]
    assert recovery.detail["in_place"] is False
    assert "no live rank holds a snapshot of rank(s) [1]" in recovery.detail["reason"]


def test_a_failure_that_repeats_at_the_same_step_falls_back_to_a_restart(store):
    job_id = submit(store)
    lost = RankLostError(0, "rank 0 was lost")
    # Recovered to step 4 at step 5, then lost again before any new step: a restart.
    cluster = FakeCluster([5, lost, 0, lost], [10, "done"], recoveries=(4, 4))
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.restarts, job.recoveries) == (S.SUCCEEDED, 1, 1)
    reasons = [e.detail["reason"] for e in store.events(job_id) if e.kind == "recovery"]
    assert "the failure repeats at step 5" in reasons[-1]


def test_rows_a_failed_group_never_reported_are_recovered_from_its_checkpoint(store):
    job_id = submit(store)

    def three_more_then_lost(group):  # steps 4..6 taken (6 saved), then a rank dies unread
        group.train(3)
        raise RankLostError(1, "rank 1 was lost")

    cluster = FakeCluster([3, three_more_then_lost], [10, "done"])
    run(store, cluster, job_id)
    assert store.get_job(job_id).state is S.SUCCEEDED
    assert [r["step"] for r in store.metrics(job_id)] == list(range(1, STEPS + 1))
    assert store.metrics(job_id, since_step=6, limit=1)[0]["checkpoint_step"] == 6
    assert all("replayed" not in r for r in store.metrics(job_id))
    lines = [log.line for log in store.logs(job_id)]
    recovered = [line for line in lines if "recovered from the checkpoint" in line]
    assert recovered == ["steps 4, 5, 6: metrics recovered from the checkpoint (not read before "
                         "the previous attempt's group ended)"]


def test_a_group_lost_after_its_final_checkpoint_succeeds_on_the_replayed_rows(store):
    # Seen in tests/soak: the last step saved, its rows unread, a rank killed; the
    # next attempt resumes at the end and only replays them. It must succeed, not
    # "stop short at step 2" on every attempt until max_restarts fails it.
    job_id = submit(store)

    def to_the_end_then_lost(group):
        group.train(STEPS - 2)
        raise RankLostError(0, "rank 0 was lost")

    cluster = FakeCluster([2, to_the_end_then_lost], ["done"])
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.step, job.restarts) == (S.SUCCEEDED, STEPS, 1), job.error
    assert [r["step"] for r in store.metrics(job_id)] == list(range(1, STEPS + 1))


def test_a_rank_lost_after_its_group_ended_leaves_the_job_succeeded(store):
    # Seen in tests/soak: a SIGKILL that landed as the runner read a done group's last rows
    # (its training over, its final save committed) failed the job: "control plane error".
    job_id = submit(store)
    cluster = FakeCluster([4, 4, 2, DoneThenLost()])
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.step, job.restarts, job.error) == (S.SUCCEEDED, STEPS, 0, None)


def test_a_rank_lost_before_a_done_groups_last_rows_were_read_replays_them_from_its_save(store):
    job_id = submit(store)
    cluster = FakeCluster([4, 4, DoneThenLost(steps=2)], ["done"])
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.step, job.restarts) == (S.SUCCEEDED, STEPS, 1), job.error
    assert [r["step"] for r in store.metrics(job_id)] == list(range(1, STEPS + 1))
    assert cluster.groups[1].resumed_from == STEPS  # the final save: nothing trained again


def test_failures_beyond_max_restarts_fail_the_job_with_the_cause(store):
    job_id = submit(store, max_restarts=1)
    boom = RankFailedError(0, "rank 0 failed: IsADirectoryError")
    cluster = FakeCluster([1, boom], [1, boom])
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.restarts) == (S.FAILED, 1)
    assert job.error == "failed 2 times, more than max_restarts 1: rank 0 failed: IsADirectoryError"
    assert to_states(store, job_id) == ["RUNNING", "RESTARTING", "STARTING", "RUNNING", "FAILED"]


def test_a_job_that_checkpoints_between_failures_outlives_max_restarts(store):
    # max_restarts 1: the second attempt's failure would fail it, but that attempt
    # committed step 4 after resuming from scratch: the count started again.
    job_id = submit(store, max_restarts=1)
    lost = RankLostError(1, "rank 1 was lost")
    cluster = FakeCluster([1, lost], [4, lost], [10, "done"])
    waits = run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.restarts, job.failures_since_progress) == (S.SUCCEEDED, 2, 1), job.error
    restarts = [reason for state, reason in events(store, job_id) if state == "RESTARTING"]
    assert restarts == [
        "restart 1 of 1 from the latest checkpoint in 0.5 s: rank 1 was lost",
        "restart 1 of 1 since its last progress (2 in all) from the latest checkpoint in 0.5 s: "
        "rank 1 was lost"]
    assert waits.timeouts.count(0.5) >= 2 and 1.0 not in waits.timeouts


def test_a_crash_loop_backs_off_longer_each_time(store):
    job_id = submit(store, max_restarts=3)
    boom = RankFailedError(0, "rank 0 failed: ImportError")
    cluster = FakeCluster(*[[1, boom]] * 4)
    waits = run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.restarts, job.failures_since_progress) == (S.FAILED, 3, 3)
    assert job.error == "failed 4 times, more than max_restarts 3: rank 0 failed: ImportError"
    assert [t for t in waits.timeouts if t >= 0.5] == [0.5, 1.0, 2.0]


def test_on_several_nodes_a_rank_failing_on_one_node_gives_up_before_max_restarts(store):
    job_id = submit(store, max_restarts=10)
    lost = RankLostError(1, "rank 1 was lost")
    cluster = FakeCluster(*[[1, lost]] * 4, nodes=3)
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.restarts) == (S.FAILED, 3)
    assert job.error == ("rank 1 failed on node n-1 4 times in a row (more than 3); giving up: "
                         "rank 1 was lost")


def test_an_elastic_job_that_lost_a_node_restarts_smaller(store):
    job_id = submit(store)
    cluster = FakeCluster([3, RankLostError(1, "rank 1 was lost")], [10, "done"],
                          restart_size=lambda job, nodes: 1)
    run(store, cluster, job_id)
    assert ("STARTING", "starting attempt 2 at 1 workers (was 2)") in events(store, job_id)
    assert store.get_job(job_id).workers == 1


def test_a_restart_that_fits_nowhere_now_goes_back_to_the_queue(store):
    job_id = submit(store)
    cluster = FakeCluster([3, RankLostError(1, "rank 1 was lost")],
                          restart_size=lambda job, nodes: None)
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.workers, job.restarts) == (S.QUEUED, None, 1)
    assert events(store, job_id)[-1] == (
        "QUEUED", "restart: not enough free capacity for any of its sizes; requeued")


# -- asked to stop -------------------------------------------------------------------


def test_cancel_while_running_releases_the_workers(store):
    job_id = submit(store)
    cluster = FakeCluster([2, user(store, job_id, S.CANCELLING)])
    run(store, cluster, job_id)
    assert store.get_job(job_id).state is S.CANCELLED
    assert events(store, job_id)[-1] == ("CANCELLED", "cancelled; workers released")


def test_prune_while_running_stops_the_ranks_at_their_next_step_and_releases_the_workers(store):
    """The ranks are told to stop at their next step; once they have (their
    rows read, their save committed) the group is shut down: PRUNED."""
    job_id = submit(store)
    cluster = FakeCluster([4, user(store, job_id, S.PRUNING)])
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.step, job.latest_checkpoint) == (S.PRUNED, 4, {"step": 4, "world_size": 2})
    assert events(store, job_id)[-2:] == [("PRUNING", "test: PRUNING"),
                                          ("PRUNED", "pruned: stopped at step 4; workers released")]
    assert cluster.groups[0].stop_requested and cluster.groups[0].shut_down
    assert cluster.saved == [2, 4]


def test_a_pruned_jobs_ranks_that_do_not_stop_are_killed_and_its_workers_released(store, monkeypatch):
    """Ranks slow to stop (a long save, a hung rank) are killed after
    PRUNE_STOP_S: the group is shut down all the same, its last committed
    checkpoint kept."""
    monkeypatch.setattr(runner_module, "PRUNE_STOP_S", 0.2)
    job_id = submit(store)
    cluster = FakeCluster([4, user(store, job_id, S.PRUNING)], stops_when_asked=False)
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert job.state is S.PRUNED and job.latest_checkpoint == {"step": 4, "world_size": 2}
    assert cluster.groups[0].stop_requested and cluster.groups[0].shut_down


def test_a_pruned_jobs_group_that_cannot_be_asked_to_stop_is_shut_down_and_pruned(store):
    """A rank that does not answer the stop (lost, hung) is not waited for:
    the group is shut down at once, the job PRUNED, not failed."""
    job_id = submit(store)
    cluster = FakeCluster([4, user(store, job_id, S.PRUNING)])

    def refuse() -> None:
        raise WorkerGroupError("request_stop took longer than 30s")

    run_with = cluster.launch

    def launch(job):
        group = run_with(job)
        group.request_stop = refuse
        return group

    cluster.launch = launch
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert job.state is S.PRUNED and cluster.groups[0].shut_down


def test_stop_now_tells_the_ranks_at_once_from_another_thread():
    """A pruner's stop goes to the ranks from its own thread, whatever the
    runner waits on, and wakes the runner's wait."""
    class Signalled:
        stopped = 0

        def signal_stop(self):
            self.stopped += 1

    runner = JobRunner("j-1", store=None, launch=None, control=None, policy=RestartPolicy(),
                       poll_interval_s=60.0)
    runner.group = group = Signalled()
    runner.stop_now()
    assert group.stopped == 1 and runner.nudged.is_set()
    started = time.monotonic()
    runner._pause()  # nudged: no wait for the poll interval
    assert time.monotonic() - started < 5 and not runner.nudged.is_set()


def test_ranks_that_stop_as_their_pruner_says_before_its_write_lands_are_pruned_not_restarted(store):
    """The pruner tells the ranks first (`stop_now`) and writes PRUNING after: ranks that
    stopped meanwhile ("done" short of the end) wait for that write, and the job is PRUNED,
    not restarted for stopping short."""
    job_id = submit(store)
    runner: JobRunner | None = None

    def pruner_speaks(group):  # the stop at once; the store's write a moment later
        assert runner is not None
        runner.stop_now()
        threading.Timer(0.3, lambda: store.transition(
            job_id, S.PRUNING, reason="pruned at step 2: behind", expect=S.RUNNING)).start()

    cluster = FakeCluster([2, pruner_speaks])
    runner = JobRunner(job_id, store=store, launch=cluster.launch, control=cluster.control(),
                       policy=RestartPolicy(base_backoff_s=0.5), poll_interval_s=0.01)
    runner.run()
    job = store.get_job(job_id)
    assert (job.state, job.restarts, job.step) == (S.PRUNED, 0, 2), events(store, job_id)
    assert to_states(store, job_id) == ["RUNNING", "PRUNING", "PRUNED"]
    assert cluster.groups[0].stop_requested and cluster.groups[0].shut_down


def test_ranks_stopped_by_a_pruner_whose_write_never_lands_restart_from_their_save(store, monkeypatch):
    """A prune whose write found the job moved or failed: the runner waits PRUNE_STOP_S
    for it, then decides as for any group that stopped short."""
    monkeypatch.setattr(runner_module, "PRUNE_STOP_S", 0.2)
    job_id = submit(store)
    runner: JobRunner | None = None
    cluster = FakeCluster([2, lambda group: runner.stop_now()], [4, 4, 2, "done"])
    runner = JobRunner(job_id, store=store, launch=cluster.launch, control=cluster.control(),
                       policy=RestartPolicy(base_backoff_s=0.01), poll_interval_s=0.01)
    runner.run()
    job = store.get_job(job_id)
    assert job.state is S.SUCCEEDED and job.restarts == 1, events(store, job_id)


def test_suspend_checkpoints_and_stops(store):
    job_id = submit(store)
    cluster = FakeCluster([4, user(store, job_id, S.SUSPENDING)])
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.workers, job.step) == (S.SUSPENDED, None, 4)
    assert events(store, job_id)[-1] == ("SUSPENDED", "checkpointed at step 4; workers released")
    assert cluster.groups[0].stop_requested


def test_a_preempted_job_that_stops_within_its_grace_is_requeued(store):
    job_id = submit(store)
    cluster = FakeCluster([4, user(store, job_id, S.PREEMPTING, preemptions=1)])
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.workers, job.preemptions, job.restarts) == (S.QUEUED, None, 1, 0)
    assert events(store, job_id)[-1] == (
        "QUEUED", "checkpointed at step 4 and stopped: preempted, requeued")


def test_a_preempted_job_past_its_grace_is_killed_and_requeued(store):
    job_id = submit(store)
    cluster = FakeCluster([3, user(store, job_id, S.PREEMPTING, preemptions=1)],
                          grace_s=0.0, stops_when_asked=False)
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.preemptions, job.restarts) == (S.QUEUED, 1, 0)
    assert events(store, job_id)[-1] == (
        "QUEUED", "stopped while preempted (did not checkpoint and stop within its grace period "
                  "of 0 s: ranks killed); requeued, resumes from checkpoint step 2")


def test_a_sigterm_to_the_ranks_is_a_preemption_not_a_failure(store):
    job_id = submit(store)
    cluster = FakeCluster([4, "preempted"])
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.preemptions, job.restarts) == (S.QUEUED, 1, 0)
    notice = ("rank 0 (pid 100, node 10.0.0.0) got SIGTERM (a preemption notice): checkpointed "
              "at step 4 and stopped")
    assert events(store, job_id)[-2:] == [("PREEMPTING", notice),
                                          ("QUEUED", f"{notice}: preempted, requeued")]


# -- starting ----------------------------------------------------------------------


def test_a_group_that_fails_to_start_restarts(store):
    job_id = submit(store)
    cluster = FakeCluster(WorkerGroupError("forming the process group took longer than 60s"),
                          [10, "done"])
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.restarts) == (S.SUCCEEDED, 1)
    assert events(store, job_id)[0] == (
        "RESTARTING", "restart 1 of 3 from the latest checkpoint in 0.5 s: could not start: "
                      "forming the process group took longer than 60s")


def test_a_group_without_capacity_in_time_goes_back_to_the_queue(store):
    job_id = submit(store)
    cluster = FakeCluster(PlacementTimeoutError("2 bundles were not free within 60s"))
    run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.workers, job.restarts) == (S.QUEUED, None, 0)
    assert events(store, job_id) == [
        ("QUEUED", "capacity not available: 2 bundles were not free within 60s; requeued")]


@pytest.mark.parametrize("state,to,what", [(S.PREEMPTING, S.QUEUED, "requeued"),
                                           (S.CANCELLING, S.CANCELLED, "cancelled"),
                                           (S.PRUNING, S.PRUNED, "pruned")])
def test_a_job_asked_to_let_go_before_its_group_started_goes_straight_on(store, state, to, what):
    job_id = submit(store, state=state)
    cluster = FakeCluster()
    run(store, cluster, job_id)
    assert store.get_job(job_id).state is to
    assert events(store, job_id)[-1] == (to.value, f"{what} between attempts: no workers were running")
    assert cluster.groups == []


# -- after a control-plane restart ------------------------------------------------------


def test_a_runner_reattached_to_a_live_group_follows_it_to_the_end(store):
    job_id = submit(store, state=S.RUNNING)
    cluster = FakeCluster()
    group = FakeGroup(cluster, [6, 4, "done"])
    run(store, cluster, job_id, attached=group)
    assert store.get_job(job_id).state is S.SUCCEEDED
    assert to_states(store, job_id) == ["RUNNING", "SUCCEEDED"]  # no new attempt
    assert group.shut_down


def test_a_runner_reattached_to_a_pruning_jobs_live_group_stops_it(store):
    job_id = submit(store, state=S.RUNNING)
    store.transition(job_id, S.PRUNING, reason="pruned at step 0: test")
    cluster = FakeCluster()
    group = FakeGroup(cluster, [6])
    run(store, cluster, job_id, attached=group)
    assert store.get_job(job_id).state is S.PRUNED and group.shut_down
    assert to_states(store, job_id) == ["RUNNING", "PRUNING", "PRUNED"]


def test_a_restarting_job_pruned_in_its_backoff_is_pruned_without_a_new_attempt(store):
    job_id = submit(store, state=S.RUNNING)
    store.transition(job_id, S.RESTARTING, reason="rank 1 lost")
    cluster = FakeCluster([10, "done"])
    runner = JobRunner(job_id, store=store, launch=cluster.launch, control=cluster.control(),
                       policy=RestartPolicy(base_backoff_s=0.5), poll_interval_s=0.0)

    def pruned_meanwhile(timeout: float) -> bool:  # its pruner's call comes in the backoff
        store.transition(job_id, S.PRUNING, reason="pruned at step 0: test")
        return False

    runner.detach = Waits()
    runner.detach.wait = pruned_meanwhile
    runner.run()
    assert store.get_job(job_id).state is S.PRUNED and cluster.groups == []
    assert events(store, job_id)[-1] == ("PRUNED", "pruned between attempts: no workers were running")


def test_a_job_whose_group_is_gone_restarts_from_its_checkpoint_after_the_backoff(store):
    job_id = submit(store, state=S.RUNNING)
    store.transition(job_id, S.RESTARTING, reason="reconciled after a control-plane restart: "
                                                  "worker group brigade-x-a1 is gone")
    cluster = FakeCluster([10, "done"])
    cluster.saved = [6]  # what the lost group had committed
    waits = run(store, cluster, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.attempt, job.restarts) == (S.SUCCEEDED, 2, 0)
    assert waits.timeouts[0] == 0.5  # the policy's backoff for a restart, read on resume
    assert ("STARTING", "starting attempt 2") in events(store, job_id)
    assert [r["step"] for r in store.metrics(job_id)] == list(range(7, STEPS + 1))


def test_a_bug_of_ours_fails_the_job_loudly(store):
    job_id = submit(store)

    def broken(group):
        raise KeyError("loss")

    run(store, FakeCluster([1, broken]), job_id)
    job = store.get_job(job_id)
    assert (job.state, job.error) == (S.FAILED, "control plane error: KeyError: 'loss'")
