"""A checkpoint carries the metrics rows its reader has not acknowledged, so a
group that ends before its rows were read (a rank killed just after a save,
the control plane down) loses none: the resumed run hands them back. In one
process (a world of one, real gloo, real files)."""

from __future__ import annotations

import math

import pytest

from checkpoints import CheckpointTarget
from workers.engine.distributed import destroy_process_group, init_single_process
from workers.schema import JobSpec

SECRET = "carried-metrics-secret-0123456789abcdef"


def spec(steps: int) -> JobSpec:
    return JobSpec.model_validate({
        "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
        "data": {"source": "synthetic"},
        "train": {"steps": steps, "global_batch_size": 4},
        "checkpoint": {"every_steps": 5, "keep_last": 3},
    })


@pytest.fixture
def one_rank():
    init_single_process(timeout_s=60)
    yield
    destroy_process_group()


def carried(target: CheckpointTarget, step: int) -> list[int]:
    return [row["step"] for row in target.open_store().read_manifest(step).extra["metrics"]]


def test_unacknowledged_rows_ride_in_each_checkpoint_and_come_back_at_resume(one_rank, tmp_path):
    from workers.engine.trainer import Trainer

    target = CheckpointTarget(root=f"file://{tmp_path}/store", tenant="acme", job="j1",
                              secret=SECRET)
    first = Trainer(spec(12), target)
    first.acknowledges = True  # a reader that never acknowledges: every row stays unrecorded
    straight = first.run(stop_after=10)
    assert carried(target, 5) == [1, 2, 3, 4, 5]
    assert carried(target, 10) == list(range(1, 11))

    resumed = Trainer(spec(12), target)
    back = resumed.state.unrecorded()
    assert [row["step"] for row in back] == list(range(1, 11))
    assert [row["loss"] for row in back] == [row["loss"] for row in straight]
    assert back[9]["checkpoint_step"] == 10  # the saved step's row says it was saved
    resumed.acknowledges = True
    resumed.state.acknowledge(7)  # the reader recorded up to step 7
    resumed.run()
    assert carried(target, 12) == [8, 9, 10, 11, 12]


def test_without_a_reader_that_acknowledges_a_checkpoint_carries_only_its_own_row(one_rank, tmp_path):
    from workers.engine.trainer import Trainer

    target = CheckpointTarget(root=f"file://{tmp_path}/store", tenant="acme", job="j2",
                              secret=SECRET)
    Trainer(spec(10), target).run()
    assert carried(target, 5) == [5] and carried(target, 10) == [10]


def test_a_row_that_is_not_json_is_carried_as_none():
    from workers.engine.train_state import _json_row

    row = _json_row({"step": 3, "loss": math.nan, "lr": 0.1, "exposed_comm_s": math.inf}, saved=3)
    assert row == {"step": 3, "loss": None, "lr": 0.1, "exposed_comm_s": None, "checkpoint_step": 3}
