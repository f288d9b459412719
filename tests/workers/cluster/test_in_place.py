"""Recovery in place on the session's real Ray cluster: a SIGKILLed rank is
replaced while the survivors keep their processes, every rank restores the
newest in-memory snapshot all of them have (workers/cluster/replace.py), and
the curve is the uninterrupted run's, bitwise; where that cannot work (a rank
and the peer holding its copy both lost, a replacement that cannot be placed)
the group fails as before, for a whole-group restart from disk."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid

import pytest
import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from tests.waiting import alive, wait_until
from workers.cluster.errors import RankLostError, WorkerGroupError
from workers.cluster.group import WorkerGroup
from workers.cluster.in_place import CannotRecover

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

STEPS = 160
EVERY = 4  # checkpoint.memory_every_steps
JOB = {
    "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
    "data": {"source": "synthetic"},
    "train": {"steps": STEPS, "global_batch_size": 4, "lr": 3e-3},
    "checkpoint": {"every_steps": 0, "memory_every_steps": EVERY},
}


def rank_step(group: WorkerGroup, rank: int) -> int:
    """The step the rank's current training reached; 0 where it does not train
    now (an earlier training on the same ranks that ended, a recovery under way)."""
    try:
        status = ray.get(group.actors[rank].status.remote(), timeout=10)
    except Exception:  # between a kill and its replacement
        return 0
    return (status["step"] or 0) if status["state"] == "running" else 0



@pytest.fixture(scope="module")
def straight(fork_pool):
    """The uninterrupted run's rank-0 rows."""
    with WorkerGroup(2, pool=fork_pool) as group:
        return group.train(JOB)[0]


def test_a_killed_rank_is_replaced_in_place_and_the_curve_is_the_uninterrupted_ones(
        fork_pool, straight, tmp_path):
    kills = [(1, 30), (0, 80)]  # (rank, at or after step): a non-zero rank, then rank 0
    survivor_pids: list[tuple[int, int, bool]] = []
    with WorkerGroup(2, pool=fork_pool, name_prefix=f"inplace-{uuid.uuid4().hex[:6]}") as group:
        # Saving to disk every 2 steps: the saves between the snapshot restored and
        # the kill are a dead branch the redone steps save again (rewound at the restore).
        saving = {**JOB, "checkpoint": {"every_steps": 2, "keep_last": 2, "memory_every_steps": EVERY}}
        target = {"root": f"file://{tmp_path}/store", "tenant": "acme", "job": "inplace",
                  "secret": "in-place-test-secret-0123456789abcdef"}
        run = group.start_training(saving, checkpoint=target)

        def kill_in_turn():
            for n, (victim, at) in enumerate(kills):
                if not wait_until(lambda at=at, v=victim: rank_step(group, 1 - v) >= at, 120):
                    return
                survivor = group.node_infos[1 - victim].pid
                os.kill(group.node_infos[victim].pid, signal.SIGKILL)
                wait_until(lambda n=n: len(run.recoveries) > n, 120)
                # the survivor's process, before the kill and once the group is whole again
                survivor_pids.append((survivor, group.node_infos[1 - victim].pid, alive(survivor)))

        killer = threading.Thread(target=kill_in_turn, daemon=True)
        killer.start()
        per_rank = None
        for _ in range(480):  # polled as a driver polls: rows read as they come, recovering between
            per_rank = run.wait(timeout_s=0.5)
            if per_rank is not None:
                break
            with contextlib.suppress(WorkerGroupError):  # rank 0 lost: the next wait recovers it
                run.progress()
        killer.join(10)
        rows = run.progress()
    assert per_rank is not None
    assert [r.ranks for r in run.recoveries] == [[1], [0]]
    # The survivors kept their processes: the same pid before the kill and after the recovery.
    assert len(survivor_pids) == 2
    for before, after, lives in survivor_pids:
        assert after == before and lives
    for recovery in run.recoveries:
        assert recovery.step % EVERY == 0 and recovery.step > 0
    # Each step once, on the uninterrupted curve, bitwise.
    assert [m["step"] for m in rows] == list(range(1, STEPS + 1))
    assert [m["loss"] for m in rows] == [m["loss"] for m in straight]
    assert not [row for row in rows if "checkpoint_error" in row]  # every save went through
    assert rows[-1]["checkpoint_step"] == STEPS
    for rank_rows in per_rank:
        assert rank_rows[-1]["step"] == STEPS
        assert rank_rows[-1]["loss"] == straight[-1]["loss"]
    # Training went on from each recovery's snapshot step (its row the redone one).
    for recovery in run.recoveries:
        assert rows[recovery.step].get("resumed_from") == recovery.step


def test_a_group_reattached_by_another_driver_recovers_in_place(fork_pool, straight):
    # What a new leader does after a failover: attach to the group by its name,
    # follow its training by status, and replace a lost rank in place.
    name = f"reattach-{uuid.uuid4().hex[:6]}"
    with WorkerGroup(2, pool=fork_pool, name_prefix=name, detached=True) as group:
        group.start_training(JOB)
        attached = WorkerGroup.attach(name, 2, pool_prefix=fork_pool.name_prefix)
        try:
            assert attached.in_place and attached.run is not None
            assert attached.run.spec == group.run.spec and attached.run.stop_after is None
            with pytest.raises(WorkerGroupError, match="another driver"):
                attached.run.wait(timeout_s=0)
            assert wait_until(lambda: rank_step(attached, 0) >= 40, 120)
            survivor = attached.node_infos[0].pid
            os.kill(attached.node_infos[1].pid, signal.SIGKILL)
            recoveries = []
            for _ in range(480):  # as the runner follows a group: status, recover where it fails
                try:
                    if attached.status().state == "done":
                        break
                except RankLostError as lost:
                    recoveries.append(attached.recover([lost.rank]))
                attached.run.progress()
                time.sleep(0.25)
            rows = attached.run.progress()
            assert [r.ranks for r in recoveries] == [[1]] and recoveries[0].step % EVERY == 0
            assert attached.node_infos[0].pid == survivor and alive(survivor)
        finally:
            attached.shutdown()
    assert [m["step"] for m in rows] == list(range(1, STEPS + 1))
    assert [m["loss"] for m in rows] == [m["loss"] for m in straight]


LORA = {
    "model": {"family": "llama", "n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2,
              "seq_len": 16, "vocab_size": 256},
    "adapter": {"rank": 4, "alpha": 8},
    "data": {"source": "synthetic"},
    "train": {"steps": 60, "global_batch_size": 4, "lr": 2e-2, "warmup_steps": 0},
    "checkpoint": {"every_steps": 0, "memory_every_steps": EVERY},
}


def test_a_lora_job_recovers_in_place_on_its_curve(fork_pool):
    # A job that trains LoRA adapters on a frozen base: the snapshot holds the
    # adapters and their optimizer state, the base is built again from its source.
    with WorkerGroup(2, pool=fork_pool) as group:
        straight = group.train(LORA)[0]
        run = group.start_training(LORA)
        assert wait_until(lambda: rank_step(group, 0) >= 20, 120)
        survivor = group.node_infos[0].pid
        holdings = ray.get([actor.holdings.remote() for actor in group.actors], timeout=30)
        os.kill(group.node_infos[1].pid, signal.SIGKILL)
        try:
            per_rank = run.wait(timeout_s=240)
        except RankLostError:
            pytest.fail(f"not recovered in place; the ranks held, at the kill: {holdings}")
        rows = run.progress()
        assert group.node_infos[0].pid == survivor and alive(survivor)
    assert [r.ranks for r in run.recoveries] == [[1]]
    assert [m["step"] for m in rows] == list(range(1, 61))
    assert [m["loss"] for m in rows] == [m["loss"] for m in straight]
    assert per_rank[1][-1]["loss"] == straight[-1]["loss"]


def test_a_rank_and_the_peer_holding_its_copy_killed_at_once_fail_the_group(fork_pool):
    # In a world of three on one node rank 1's copy is with rank 2: both gone,
    # no live rank holds rank 1's state, and the group fails as a whole.
    with WorkerGroup(3, pool=fork_pool) as group:
        run = group.start_training(JOB)
        assert wait_until(lambda: rank_step(group, 0) >= 2 * EVERY + 1, 120)
        pids = [info.pid for info in group.node_infos]
        for victim in (1, 2):
            os.kill(pids[victim], signal.SIGKILL)
        with pytest.raises(RankLostError):
            run.wait(timeout_s=120)
        assert run.recoveries == []
        assert wait_until(lambda: not alive(pids[0]), 30), "the survivor was not shut down"


def test_a_replacement_that_cannot_be_placed_fails_the_group(fork_pool):
    # Cold replacements go in the lost rank's bundle: another actor waiting for
    # that bundle takes it as the rank dies, and the replacement never starts.
    with WorkerGroup(2, pool=fork_pool, ready_timeout_s=8) as group:
        run = group.start_training(JOB)
        assert wait_until(lambda: rank_step(group, 0) >= 2 * EVERY + 1, 120)
        bundle = group._gang.bundle_of_rank[1]
        blocker = BundleSitter.options(
            num_cpus=group.cpus_per_worker,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                group._pg, placement_group_bundle_index=bundle)).remote()
        os.kill(group.node_infos[1].pid, signal.SIGKILL)
        try:
            with pytest.raises(RankLostError):
                run.wait(timeout_s=120)
        finally:
            ray.kill(blocker)
        assert run.recoveries == []


@ray.remote(num_cpus=0)
class BundleSitter:
    """Holds a bundle's CPUs while it lives."""

    def ping(self) -> bool:
        return True


# A model whose snapshot (weights and Adam's moments, some MB) takes its peer a
# moment to take in: the copy's way is a window a kill can land in.
WIDE = {
    "model": {"n_layers": 2, "d_model": 256, "n_heads": 4, "seq_len": 16},
    "data": {"source": "synthetic"},
    "train": {"steps": 24, "global_batch_size": 4, "lr": 1e-3},
    "checkpoint": {"every_steps": 0, "memory_every_steps": EVERY},
}


def test_a_rank_killed_while_its_copy_goes_to_its_peer_restores_the_step_before(fork_pool):
    # Rank 1 is killed as soon as it is seen sending its copy of a step: the
    # peer's copy is the previous one, so the group goes back to the step
    # before (the newest that every rank has), and the curve is the same.
    with WorkerGroup(2, pool=fork_pool) as group:
        straight = group.train(WIDE)[0]
        run = group.start_training(WIDE)
        kills: list[tuple[int, int]] = []  # (the step of the copy on its way, survivor pid)

        def kill_mid_copy():
            # Up to three kills, one per recovery: one that lands mid-copy is enough.
            for n in range(3):
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    try:
                        seen = ray.get(group.actors[1].holdings.remote(), timeout=10)
                    except Exception:  # the replacement not answering yet
                        seen = {}
                    sending, step = seen.get("sending"), seen.get("step")
                    # (a copy of this training's: one of the run before may still be on its way)
                    if seen.get("state") == "running" and sending and step and 2 * EVERY <= sending <= step:
                        survivor = group.node_infos[0].pid
                        os.kill(group.node_infos[1].pid, signal.SIGKILL)
                        kills.append((seen["sending"], survivor))
                        break
                    time.sleep(0.002)
                else:
                    return
                if not wait_until(lambda n=n: len(run.recoveries) > n, 120):
                    return
                if run.recoveries[n].step < kills[n][0]:
                    return  # the copy on its way did not count: what this test is after

        killer = threading.Thread(target=kill_mid_copy, daemon=True)
        killer.start()
        per_rank = None
        for _ in range(960):
            per_rank = run.wait(timeout_s=0.25)
            if per_rank is not None:
                break
        killer.join(10)
        rows = run.progress()
        survivor_now = group.node_infos[0].pid
    assert per_rank is not None and kills, "no copy of rank 1's was ever seen on its way"
    assert [r.ranks for r in run.recoveries] == [[1]] * len(kills)
    sent, survivor = kills[-1]
    assert run.recoveries[-1].step < sent, (
        f"no kill landed while a copy was on its way: {kills}, {run.recoveries}")
    assert survivor_now == survivor and alive(survivor)
    assert [m["step"] for m in rows] == list(range(1, 25))
    assert [m["loss"] for m in rows] == [m["loss"] for m in straight]
    assert per_rank[1][-1]["loss"] == straight[-1]["loss"]


def test_a_second_failure_during_a_recovery_falls_back(fork_pool):
    # Rank 1 is lost; its replacement is killed as soon as it is placed, while
    # the ranks form their new process group: the recovery gives up, saying
    # why, for the whole-group restart from disk.
    with WorkerGroup(2, pool=fork_pool) as group:
        group.start_training(JOB)
        assert wait_until(lambda: rank_step(group, 0) >= 2 * EVERY + 1, 120)
        first = group.node_infos[1].pid
        os.kill(first, signal.SIGKILL)  # recovered by the driver itself, as the runner does
        killed: list[int] = []

        def kill_the_replacement():
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                info = group.node_infos[1]
                if info is not None and info.pid != first:
                    os.kill(info.pid, signal.SIGKILL)
                    killed.append(info.pid)
                    return
                time.sleep(0.001)

        killer = threading.Thread(target=kill_the_replacement, daemon=True)
        killer.start()
        with pytest.raises(CannotRecover, match="second failure during the recovery"):
            group.recover([1])
        killer.join(10)
        assert killed



TP = {
    "workers": 4,
    "model": {"family": "llama", "n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2,
              "seq_len": 16, "vocab_size": 256},
    "data": {"source": "synthetic"},
    "train": {"steps": 60, "global_batch_size": 8, "lr": 3e-3},
    "parallelism": {"tp": 2},
    "checkpoint": {"every_steps": 0, "memory_every_steps": EVERY},
}


def test_a_dp2_tp2_job_recovers_in_place_every_survivor_woken(fork_pool):
    # (dp 2, tp 2): rank 3 lost. Its direct peers fail at once (its process is
    # gone); the others wait in a collective with a survivor that lives on, and
    # wake only because a survivor leaving the broken group shuts its
    # connections (workers/engine/group_sockets.py): else gloo's timeout, and
    # the recovery gives up for a restart from disk.
    with WorkerGroup(4, tp_size=2, pool=fork_pool) as group:
        straight = group.train(TP)[0]
        run = group.start_training(TP)
        assert wait_until(lambda: rank_step(group, 0) >= 20, 120)
        survivors = [group.node_infos[r].pid for r in range(3)]
        killed = time.monotonic()
        os.kill(group.node_infos[3].pid, signal.SIGKILL)
        try:
            per_rank = run.wait(timeout_s=240)
        except RankLostError:
            pytest.fail("not recovered in place: the group was lost")
        rows = run.progress()
        assert [group.node_infos[r].pid for r in range(3)] == survivors
        assert all(alive(pid) for pid in survivors)
    assert [r.ranks for r in run.recoveries] == [[3]]
    recovery = run.recoveries[0]
    assert recovery.step % EVERY == 0 and recovery.step > 0
    assert recovery.seconds < 60, recovery  # woken, not gloo's timeout (30 minutes)
    assert time.monotonic() - killed < 200
    assert [m["step"] for m in rows] == list(range(1, 61))
    assert [m["loss"] for m in rows] == [m["loss"] for m in straight]
    assert all(r[-1]["loss"] == straight[-1]["loss"] for r in per_rank)
