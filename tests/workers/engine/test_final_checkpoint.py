"""A run that reaches the end of its job keeps its final weights: the last
step is saved, blocking, whatever `checkpoint.every_steps` says (with 0 it
is the only save), so a job that succeeds can always be exported. In one
process (a world of one, real gloo, real files)."""

from __future__ import annotations

import pytest

from checkpoints import CheckpointTarget
from workers.engine.distributed import destroy_process_group, init_single_process
from workers.schema import JobSpec

SECRET = "final-checkpoint-secret-0123456789abcdef"


def spec(steps: int, **checkpoint) -> JobSpec:
    return JobSpec.model_validate({
        "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
        "data": {"source": "synthetic"},
        "train": {"steps": steps, "global_batch_size": 4},
        "checkpoint": {"keep_last": 5, **checkpoint},
    })


@pytest.fixture
def one_rank():
    init_single_process(timeout_s=60)
    yield
    destroy_process_group()


@pytest.mark.parametrize("steps, checkpoint, saved", [
    (3, {"every_steps": 0, "async": False}, [3]),  # no interval: the end is the one save
    (3, {"every_steps": 0}, [3]),  # async (the default): committed before the run returns
    (5, {"every_steps": 2}, [2, 4, 5]),  # the interval, then the end off it
    (5, {"every_steps": 2, "async": False}, [2, 4, 5]),  # the same, every save blocking
    (4, {"every_steps": 2}, [2, 4]),  # the end on the interval: saved once
])
def test_the_last_step_is_always_saved(one_rank, tmp_path, steps, checkpoint, saved):
    from workers.engine.trainer import Trainer

    target = CheckpointTarget(root=f"file://{tmp_path}/store", tenant="acme", job="j1",
                              secret=SECRET)
    trainer = Trainer(spec(steps, **checkpoint), target)
    rows = trainer.run()
    assert [c.step for c in target.open_store().list_committed()] == saved
    assert [r["step"] for r in rows if "checkpoint_step" in r] == saved
    digests = trainer.state_digests()

    # What was saved is the state the run ended with, bitwise; nothing is left to train.
    again = Trainer(spec(steps, **checkpoint), target)
    assert again.resumed_from == steps and again.state_digests() == digests
    assert again.run() == []
    assert [c.step for c in target.open_store().list_committed()] == saved


def test_a_run_stopped_short_of_the_end_saves_where_it_stopped(one_rank, tmp_path):
    from workers.engine.trainer import Trainer

    target = CheckpointTarget(root=f"file://{tmp_path}/store", tenant="acme", job="j2",
                              secret=SECRET)
    rows = Trainer(spec(6, every_steps=0), target).run(stop_after=2)
    assert rows[-1]["checkpoint_step"] == 2
    rows = Trainer(spec(6, every_steps=0), target).run()
    assert [r["step"] for r in rows] == [3, 4, 5, 6]
    assert [c.step for c in target.open_store().list_committed()] == [2, 6]
