"""SIGTERM to a rank's process is a preemption notice, on the session's real
Ray cluster: Ray's own handler (which exits the worker at once) is replaced
inside the actor, the ranks checkpoint at the next step boundary and stop,
and a new group resumes there along the uninterrupted curve."""

from __future__ import annotations

import os
import signal
import uuid

import pytest

from checkpoints import CheckpointStore
from tests.waiting import alive, wait_until
from workers.engine.distributed import apply_watchdog_env, watchdog_env
from workers.cluster.group import WorkerGroup

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

SECRET = "sigterm-test-secret-0123456789abcdef"
STEPS = 100
JOB = {
    "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
    "data": {"source": "synthetic"},
    "train": {"steps": STEPS, "global_batch_size": 4, "lr": 3e-3},
    "checkpoint": {"every_steps": 0, "keep_last": 2, "async": True},  # only the emergency checkpoint
}



def test_sigterm_checkpoints_at_the_next_step_and_stops_cleanly(tmp_path, fork_pool):
    target = {"root": f"file://{tmp_path}/store", "tenant": "acme", "job": "j1", "secret": SECRET}
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    with WorkerGroup(2, name_prefix=prefix, pool=fork_pool) as group:
        pids = [info.pid for info in group.node_infos]
        run = group.start_training(JOB, checkpoint=target)
        assert wait_until(lambda: len(run.progress()) >= 3, 120), "training never made a step"
        os.kill(pids[1], signal.SIGTERM)
        per_rank = run.wait(timeout_s=60)  # a clean return: no rank was lost
        assert per_rank is not None, "the ranks did not stop after SIGTERM"
        status = group.status()
        # Ray's handler would have ended the process: ours kept it for the checkpoint.
        assert all(alive(pid) for pid in pids)
    stopped = per_rank[0][-1]["step"]
    assert stopped < STEPS, "the job ended before the notice landed"
    assert status.state == "preempted" and status.sigterm_ranks == [1]
    assert f"rank 1 (pid {pids[1]}," in status.reason and "SIGTERM" in status.reason
    assert per_rank[0][-1]["checkpoint_step"] == stopped  # the emergency checkpoint
    assert per_rank[1][-1]["step"] == stopped  # both ranks stopped at the same boundary
    store = CheckpointStore(target["root"], tenant="acme", job="j1", secret=SECRET.encode())
    assert [c.step for c in store.list_committed()] == [stopped]

    # A new group resumes at the stopped step: no step lost, the same curve, bitwise.
    with WorkerGroup(2, pool=fork_pool) as group:
        resumed = group.train(JOB, checkpoint=target)[0]
        straight = group.train(JOB)[0]
    assert resumed[0]["resumed_from"] == stopped
    assert [m["step"] for m in resumed] == list(range(stopped + 1, STEPS + 1))
    assert [m["loss"] for m in resumed] == [m["loss"] for m in straight[stopped:]]
    assert [m["loss"] for m in per_rank[0]] == [m["loss"] for m in straight[:stopped]]


def test_sigterm_to_an_idle_rank_ends_it_as_ray_would(fork_pool):
    with WorkerGroup(1, pool=fork_pool) as group:
        pid = group.node_infos[0].pid
        os.kill(pid, signal.SIGTERM)
        assert wait_until(lambda: not alive(pid), 30)


def test_the_nccl_watchdog_is_set_up_only_for_nccl(monkeypatch):
    assert watchdog_env("gloo", 30) == {}
    env = watchdog_env("nccl", 30)
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2"  # the communicator aborted, the process kept
    assert env["TORCH_NCCL_ENABLE_MONITORING"] == "1"
    assert int(env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"]) >= 60
    for key in env:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")  # the operator's choice stays
    applied = apply_watchdog_env("nccl", 30)
    assert applied["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert os.environ["TORCH_NCCL_ENABLE_MONITORING"] == "1"
    assert apply_watchdog_env("gloo", 30) == {}
