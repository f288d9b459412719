"""A stop signalled through the GCS (workers/cluster/stop_signal.py) on the
session's real Ray cluster: rank 0's training thread reads it after each step,
so a training started with `stop_signals` stops at the next step boundary
with no actor call at all; one started without them never reads it; and a
signal outlives neither its training nor the next one's start."""

from __future__ import annotations

import time

import pytest

from tests.waiting import wait_until
from workers.cluster import stop_signal
from workers.cluster.group import WorkerGroup

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

JOB = {
    "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
    "data": {"source": "synthetic"},
    "train": {"steps": 3000, "global_batch_size": 4, "lr": 3e-3},
    "checkpoint": {"every_steps": 0, "memory_every_steps": 0},
}
SHORT = {**JOB, "train": {**JOB["train"], "steps": 40}}


def signalled(actor_id: str) -> bool:
    return stop_signal.StopWatch(actor_id).asked()


def test_a_signal_stops_rank_0s_training_at_the_next_step_with_no_actor_call(fork_pool):
    with WorkerGroup(2, pool=fork_pool) as group:
        rank0 = group.node_infos[0].actor_id
        assert rank0 and group.node_infos[1].actor_id not in ("", rank0)

        # With stop signals, only the key is written (no request_stop): the ranks stop
        # together. First on this group: its ranks have no earlier training's rows, which
        # `progress` could return before this training's first step.
        run = group.start_training(JOB, stop_signals=True)
        assert wait_until(lambda: len(run.progress()) >= 3, 120), "training never made a step"
        sent = time.time()
        stop_signal.signal(rank0)
        per_rank = run.wait(timeout_s=60)
        assert per_rank is not None, "the ranks did not stop on the signal"
        assert group.status().state == "done"  # a requested stop's (SIGTERM's is "preempted")
        rows = per_rank[0]
        assert rows[-1]["step"] < JOB["train"]["steps"]
        assert per_rank[1][-1]["step"] == rows[-1]["step"]  # both at the same boundary
        # The step running when the signal was written ends; at most one more begins
        # (its boundary's read came just before the write landed).
        begun_after = [row["step"] for row in rows if row["wall_time"] - row["step_time_s"] > sent]
        assert len(begun_after) <= 1, begun_after
        assert not signalled(rank0), "the key outlived its training"

        # Without stop signals the key is never read (nor cleared): the training runs to
        # its end with the key there throughout.
        run = group.start_training(SHORT)
        stop_signal.signal(rank0)
        assert [row["step"] for row in run.wait(timeout_s=120)[0]] == list(range(1, 41))
        assert signalled(rank0)

        # A key left from before a training with them does not stop it: its start clears it.
        rows = group.start_training(SHORT, stop_signals=True).wait(timeout_s=120)[0]
        assert [row["step"] for row in rows] == list(range(1, 41))
        assert not signalled(rank0)
