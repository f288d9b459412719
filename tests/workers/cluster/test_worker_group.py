"""WorkerGroup on the session's real local Ray cluster, with real gloo: no mocks."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.state import list_actors, list_placement_groups

from tests.waiting import alive, wait_until
from workers.cluster.errors import (
    CapacityError,
    PlacementTimeoutError,
    RankFailedError,
    RankLostError,
)
from workers.cluster.group import WorkerGroup
from workers.cluster.pool import start_rank_actor

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

GONE_WITHIN_S = 30.0  # ray.kill and placement-group removal are asynchronous
LOST_WITHIN_S = 60.0  # the spec: a lost rank is reported within a minute


def tiny_job(steps: int, data: dict | None = None) -> dict:
    return {
        "model": {"n_layers": 2, "d_model": 48, "n_heads": 4, "seq_len": 32},
        "train": {"steps": steps, "global_batch_size": 12, "lr": 3e-3},
        # No in-memory snapshots: a lost rank fails the group, what this module is
        # about (its replacement in place is tests/workers/cluster/test_in_place.py's).
        "checkpoint": {"every_steps": 0, "memory_every_steps": 0},
        "data": data or {"source": "synthetic"},
    }


def unique_prefix() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def leftovers(prefix: str, pids: list[int] = ()) -> list[str]:
    """What of a group named `prefix` still lives: actors, placement groups,
    processes (through Ray's public state API: the session's head runs the dashboard)."""
    # This cluster's (by its GCS): without an address the state API may pick another's.
    here = ray.get_runtime_context().gcs_address
    actors = [a.name for a in list_actors(here, filters=[("state", "!=", "DEAD")], limit=10_000)
              if a.name.startswith(prefix)]
    pgs = [p.name for p in list_placement_groups(here, filters=[("state", "!=", "REMOVED")],
                                                 limit=10_000) if p.name.startswith(prefix)]
    return actors + pgs + [f"pid {pid}" for pid in pids if alive(pid)]


def assert_nothing_left(prefix: str, pids: list[int] = ()) -> None:
    assert wait_until(lambda: not leftovers(prefix, pids), GONE_WITHIN_S, every_s=0.2), leftovers(prefix, pids)


# -- a normal run: one group, trained once, looked at by several tests ---------


@pytest.fixture(scope="module")
def normal_run():
    prefix = unique_prefix()
    group = WorkerGroup(2, name_prefix=prefix)
    with group:
        seen = {"backend": group.backend, "rendezvous": group.rendezvous}
        seen["pids"] = [info.pid for info in group.node_infos]
        run = group.start_training(tiny_job(steps=4))
        seen["per_rank"] = run.wait(timeout_s=120)
        seen["progress"] = run.progress()
    group.shutdown()  # a second time: must be harmless
    return group, prefix, seen


def test_ranks_form_a_gloo_group_on_loopback(normal_run):
    _, _, seen = normal_run
    assert seen["backend"] == "gloo"  # no GPU here; never hard-coded
    addr, port = seen["rendezvous"]
    assert addr == "127.0.0.1"  # one node: loopback, not Ray's node IP
    assert 0 < port < 65536
    assert len(set(seen["pids"])) == 2


def test_train_returns_every_rank_every_step(normal_run):
    _, _, seen = normal_run
    per_rank = seen["per_rank"]
    assert per_rank is not None and len(per_rank) == 2
    for metrics in per_rank:
        assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    # The loss is all-reduced: both ranks report the same number.
    assert [m["loss"] for m in per_rank[0]] == [m["loss"] for m in per_rank[1]]
    assert seen["progress"] == per_rank[0]  # progress() is rank 0's metrics


def test_shutdown_is_idempotent_and_leaves_nothing(normal_run):
    group, prefix, seen = normal_run
    group.shutdown()
    assert group.actors == []
    assert_nothing_left(prefix, seen["pids"])


# -- a lost rank ---------------------------------------------------------------


def _kill_with_ray(group: WorkerGroup, rank: int) -> None:
    ray.kill(group.actors[rank])


def _kill_with_sigkill(group: WorkerGroup, rank: int) -> None:
    os.kill(group.node_infos[rank].pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("kill", "rank"),
    [(_kill_with_ray, 1), (_kill_with_sigkill, 0)],
    ids=["ray.kill-rank1", "sigkill-rank0"],
)
def test_lost_rank_mid_training_is_named_within_a_minute(kill, rank):
    prefix = unique_prefix()
    group = WorkerGroup(2, name_prefix=prefix).start()
    pids = [info.pid for info in group.node_infos]
    run = group.start_training(tiny_job(steps=100_000))  # would run for hours
    assert wait_until(lambda: len(run.progress()) >= 1, 120, every_s=0.2), "training never made a step"
    assert run.wait(timeout_s=0) is None  # a poll: still running

    kill(group, rank)
    start = time.monotonic()
    with pytest.raises(RankLostError) as lost:
        run.wait(timeout_s=LOST_WITHIN_S)  # returning None (still running) fails too
    assert time.monotonic() - start < LOST_WITHIN_S
    assert lost.value.rank == rank
    assert f"rank {rank} (pid {pids[rank]}, node " in str(lost.value)
    assert "was lost" in str(lost.value)
    assert_nothing_left(prefix, pids)


def test_training_error_names_the_rank_and_the_remote_error(tmp_path):
    short = tmp_path / "short.txt"
    short.write_bytes(b"abc")  # fewer bytes than one sample: every rank raises
    prefix = unique_prefix()
    with WorkerGroup(2, name_prefix=prefix) as group:
        pids = [info.pid for info in group.node_infos]
        with pytest.raises(RankFailedError) as failed:
            group.train(tiny_job(steps=2, data={"source": "uri", "uri": f"file://{short}"}))
    assert failed.value.rank == 0
    assert str(failed.value).startswith(f"rank 0 (pid {pids[0]}, node ")
    assert "DataError" in str(failed.value) and "too short for seq_len 32" in str(failed.value)
    assert_nothing_left(prefix, pids)


# -- what can never start, or not now ------------------------------------------


@pytest.mark.parametrize(
    ("workers", "options", "says"),
    [
        (64, {}, "64 workers x 1 CPU need 64 CPU, but the cluster has 4 CPU in total"),
        (1, {"cpus_per_worker": 8}, "1 worker x 8 CPU need 8 CPU, but the cluster has 4 CPU"),
        (2, {"gpus_per_worker": 1}, "need 2 GPU, but the cluster has 0 GPU"),
        (2, {"placement_strategy": "STRICT_SPREAD"}, "but only 1 node(s) can hold one"),
    ],
    ids=["too-many-workers", "too-big-worker", "no-gpus", "strict-spread-one-node"],
)
def test_impossible_request_fails_fast_and_says_why(workers, options, says):
    prefix = unique_prefix()
    start = time.monotonic()
    with pytest.raises(CapacityError) as refused:
        WorkerGroup(workers, name_prefix=prefix, **options).start()
    assert time.monotonic() - start < 5.0
    assert says in str(refused.value)
    assert leftovers(prefix) == []


def test_unknown_placement_strategy_is_refused():
    with pytest.raises(ValueError, match=r"unknown placement strategy 'PACKED' \(known: PACK, "):
        WorkerGroup(2, placement_strategy="PACKED")


def test_bundles_not_free_in_time_leave_nothing_behind():
    hog = placement_group([{"CPU": 3}])  # the cluster has 4: a group of 2 fits, but not now
    ray.get(hog.ready(), timeout=30)
    prefix = unique_prefix()
    try:
        with pytest.raises(PlacementTimeoutError, match="were not free within 1s"):
            WorkerGroup(2, name_prefix=prefix, ready_timeout_s=1).start()
        assert_nothing_left(prefix)
    finally:
        remove_placement_group(hog)


def test_error_while_spawning_leaves_nothing_behind():
    prefix = unique_prefix()
    # An actor already holds the name rank 1 would take: its .remote() raises.
    squatter = start_rank_actor(name=f"{prefix}-rank-1", num_cpus=0).remote(1, 2, 1)
    ray.get(squatter.pid.remote(), timeout=60)
    try:
        with pytest.raises(ValueError, match="already taken"):
            WorkerGroup(2, name_prefix=prefix).start()
        assert wait_until(lambda: leftovers(prefix) == [f"{prefix}-rank-1"], GONE_WITHIN_S, every_s=0.2)
    finally:
        ray.kill(squatter)
