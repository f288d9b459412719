"""A checkpoint storage that fails for a while, in one process (a world of
one, real gloo, real files): training goes on, the failed saves are
reported, nothing half-written is ever loadable, and saving resumes once the
storage is back. The fault is real: the job's checkpoint directory is moved
aside and a plain file put in its place, so every write under it fails with
the OS's own error (as root, too: no permission tricks)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from checkpoints import CheckpointTarget
from workers.engine.distributed import destroy_process_group, init_single_process
from workers.schema import JobSpec

SECRET = "storage-fault-secret-0123456789abcdef"


def config(async_save: bool) -> JobSpec:
    return JobSpec.model_validate({
        "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
        "data": {"source": "synthetic"},
        "train": {"steps": 30, "global_batch_size": 4, "lr": 3e-3},
        "checkpoint": {"every_steps": 5, "keep_last": 3, "async": async_save},
    })


@pytest.fixture
def one_rank():
    init_single_process(timeout_s=60)
    yield
    destroy_process_group()


class Outage:
    """The job's checkpoint directory swapped for a file, and back."""

    def __init__(self, directory: Path):
        self.directory, self.aside = directory, directory.with_name("checkpoints.aside")

    def begin(self) -> None:
        os.rename(self.directory, self.aside)
        self.directory.write_text("not a directory: the storage is gone")

    def end(self) -> None:
        self.directory.unlink()
        os.rename(self.aside, self.directory)


@pytest.mark.parametrize("async_save", [False, True], ids=["blocking", "async"])
def test_saves_fail_while_the_storage_is_gone_and_training_goes_on(one_rank, tmp_path, async_save):
    from workers.engine.trainer import Trainer

    cfg = config(async_save)
    straight = Trainer(cfg).run()

    target = CheckpointTarget(root=f"file://{tmp_path}/store", tenant="acme", job="j1",
                              secret=SECRET)
    store = target.open_store()
    outage = Outage(Path(store.layout.checkpoints))

    def on_step(metrics: dict) -> None:
        if metrics["step"] == 7:
            outage.begin()
        elif metrics["step"] == 17:
            outage.end()

    trainer = Trainer(cfg, target)
    rows = trainer.run(on_step)

    # Training went on, along the uninterrupted curve.
    assert [r["step"] for r in rows] == list(range(1, 31))
    assert [r["loss"] for r in rows] == [r["loss"] for r in straight]
    # The failed saves are reported, with the OS's reason, on the rows where they failed.
    failed = {r["step"]: r for r in rows if "checkpoint_error" in r}
    assert failed, rows
    assert all(8 <= step <= 20 for step in failed)
    last = max(failed)
    assert failed[last]["checkpoint_failures"] == len(failed)
    assert "checkpoint of step" in failed[last]["checkpoint_error"]
    assert trainer.checkpoints.failures == len(failed)
    # Saving came back with the storage; the old commit outlived the outage.
    committed = [info.step for info in store.list_committed()]
    assert committed == [20, 25, 30]
    assert max(r.get("checkpoint_step", 0) for r in rows) == 30
    # Nothing of the failed saves is loadable: every step directory left is committed.
    assert store.steps() == committed
    # And the job resumes from the newest commit.
    resumed = Trainer(cfg, target)
    assert resumed.resumed_from == 30 and resumed.step == 30
    resumed.checkpoints.close()


def test_a_resume_passes_over_a_torn_step(one_rank, tmp_path):
    """A save cut short (files but no manifest: a rank killed mid-write) is
    never loaded; the resume takes the commit before it and clears it away."""
    from workers.engine.trainer import Trainer

    cfg = config(async_save=False)
    target = CheckpointTarget(root=f"file://{tmp_path}/store", tenant="acme", job="j1",
                              secret=SECRET)
    store = target.open_store()
    Trainer(cfg, target).run(stop_after=10)
    torn = Path(store.layout.step(10))
    (torn / "manifest.json").unlink()  # what a kill between the shards and the commit leaves
    shutil.copy(torn / "__0_0.distcp", torn / "__0_0.distcp.partial")
    resumed = Trainer(cfg, target)
    assert resumed.resumed_from == 5
    assert store.steps() == [5]
    resumed.checkpoints.close()
