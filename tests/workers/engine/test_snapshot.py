"""In-memory snapshots (workers/engine/snapshot.py): a new process group whose
ranks restore their snapshots trains on bitwise the curve of the run that was
never interrupted (2 ranks on gloo, in the same processes, as recovery in
place does it), from a pickled payload too and with int8 error feedback; a
snapshot of another job is refused by name; a lent payload holds the next
capture off; the automatic interval's rule; the schema's option."""

from __future__ import annotations

import json
import pickle
import threading
import time

import pytest
from pydantic import ValidationError

from tests.checkpoints.ckpt_harness import run_ranks
from tests.workers.engine.snapshot_ranks import EVERY, LOST_AFTER, STEPS, recover_in_place
from tests.workers.engine_spec import RECIPES, engine_job
from workers.engine.distributed import destroy_process_group, init_single_process
from workers.engine.snapshot import automatic_interval
from workers.schema import JobSpec

SNAPSHOT_STEP = LOST_AFTER // EVERY * EVERY  # the last one taken before the loss


def recovered(tmp_path_factory, sharding: dict) -> dict:
    out = tmp_path_factory.mktemp("recovery")
    run_ranks(recover_in_place, 2, str(out), sharding)
    return json.loads((out / "seen.json").read_text())


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return recovered(tmp_path_factory, {})


@pytest.fixture(scope="module")
def int8(tmp_path_factory):
    return recovered(tmp_path_factory, {"grad_compression": "int8"})


def test_a_new_group_restored_from_each_ranks_snapshot_follows_the_uninterrupted_curve(plain):
    assert plain["first"] == plain["reference"][:LOST_AFTER]
    assert plain["snapshot_step"] == SNAPSHOT_STEP and plain["own_resumed_from"] == SNAPSHOT_STEP
    assert plain["own_steps"] == list(range(SNAPSHOT_STEP + 1, STEPS + 1))
    assert plain["own"] == plain["reference"][SNAPSHOT_STEP:]  # bitwise: floats compared exactly
    assert plain["own_digests"] == plain["digests"]


def test_a_payload_held_by_a_peer_through_pickle_restores_the_same(plain):
    assert plain["sent_steps"] == list(range(EVERY, LOST_AFTER + 1, EVERY))  # one per interval
    assert plain["pickled_resumed_from"] == SNAPSHOT_STEP
    assert plain["pickled"] == plain["reference"][SNAPSHOT_STEP:]
    assert plain["pickled_digests"] == plain["digests"]


def test_int8_error_feedback_residuals_are_restored_exactly(int8):
    assert int8["residuals"] > 0  # one per FSDP unit that reduce-scatters
    assert int8["own"] == int8["reference"][SNAPSHOT_STEP:]
    assert int8["own_digests"] == int8["digests"]
    assert int8["pickled"] == int8["reference"][SNAPSHOT_STEP:]
    # Without them (what a disk checkpoint restores) the curve is another one:
    # restoring them is what makes the recovery exact.
    assert int8["no_residuals"] != int8["reference"][SNAPSHOT_STEP:]
    assert int8["no_residuals_digests"] != int8["digests"]


# -- one process ---------------------------------------------------------------------


@pytest.fixture
def one_rank():
    init_single_process(timeout_s=60)
    yield
    destroy_process_group()


def job(steps: int = 6, memory_every_steps: int | None = 2, **model):
    return engine_job(steps, data={"source": "synthetic"}, model=model,
                      checkpoint={"memory_every_steps": memory_every_steps})


LLAMA_LORA = {"model": {"family": "llama", "n_layers": 2, "d_model": 32, "n_heads": 4,
                        "n_kv_heads": 2, "seq_len": 16, "vocab_size": 256},
              "adapter": {"rank": 4}, "train": {"lr": 2e-2, "warmup_steps": 0}}
VARIANTS = {name: {"train": train} for name, train in RECIPES.items()} | {
    "lora": LLAMA_LORA, "bf16": {"sharding": {"param_dtype": "bfloat16"}}}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_optimizer_and_adapters_restore_bitwise(one_rank, variant):
    """Each recipe's optimizer state (Muon's and Adafactor's composites too),
    a LoRA job (a frozen base, state for the adapters only) and a bf16 one."""
    from workers.engine.trainer import Trainer

    sections = VARIANTS[variant]
    spec = engine_job(6, data={"source": "synthetic"}, checkpoint={"memory_every_steps": 2},
                      **sections)
    held = []

    def keep(snapshot) -> None:  # step 4's, copied: the capture at step 6 reuses the buffers
        if snapshot.step == 4:
            held.append(pickle.loads(pickle.dumps(snapshot.payload())))

    whole = Trainer(spec)
    curve = [row["loss"] for row in whole.run(on_snapshot=keep)]
    again = Trainer(spec, restore=held[0])
    assert [row["loss"] for row in again.run()] == curve[4:]
    assert again.state_digests() == whole.state_digests()


def test_a_snapshot_of_another_job_is_refused_naming_the_tensor(one_rank):
    from workers.engine.trainer import Trainer

    trainer = Trainer(job())
    trainer.run(on_snapshot=lambda snapshot: None)
    assert trainer.snapshot is not None
    with pytest.raises(ValueError, match=r"snapshot tensor model\.\S+ is \[\d+(, \d+)*\] "
                                         r"torch.float32, this trainer's is"):
        Trainer(job(d_model=64), restore=trainer.snapshot.payload())
    with pytest.raises(ValueError, match=r"has no tensor model\.blocks\.2\."):
        Trainer(job(n_layers=3), restore=trainer.snapshot.payload())


def test_a_payload_pickles_its_tensors_out_of_band_and_restores_from_read_only_memory(one_rank):
    from workers.engine.trainer import Trainer

    trainer = Trainer(job())
    trainer.run(on_snapshot=lambda snapshot: None)
    assert trainer.snapshot is not None
    payload = trainer.snapshot.payload()
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(payload, protocol=5, buffer_callback=buffers.append)  # as Ray pickles
    assert len(buffers) == len(payload.tensors) and len(head) < payload.nbytes / 20
    # read-only, as Ray's object store hands them to a receiver
    held = pickle.loads(head, buffers=[memoryview(bytes(memoryview(b))) for b in buffers])
    assert held.step == 6 and held.nbytes == payload.nbytes
    assert Trainer(job(), restore=held).state_digests() == trainer.state_digests()


def test_no_snapshot_is_taken_without_a_consumer_or_with_the_option_off(one_rank):
    from workers.engine.trainer import Trainer

    unheld = Trainer(job())
    unheld.run()
    assert unheld.snapshot is None
    taken: list[int] = []
    off = Trainer(job(memory_every_steps=0))
    off.run(on_snapshot=lambda snapshot: taken.append(snapshot.step))
    assert off.snapshot is None and taken == []


def test_a_capture_waits_an_interval_while_a_copy_is_still_on_its_way(one_rank):
    # The previous copy not yet with the peer: the capture due is skipped, not
    # taken over the older snapshot (which the peer's copy may still pair with).
    from workers.engine.trainer import Trainer

    taken: list[int] = []
    arrived = {4: False, 6: True, 8: True, 10: False, 12: True}  # asked at each step due after the first
    trainer = Trainer(job(steps=12))
    trainer.run(on_snapshot=lambda snapshot: taken.append(snapshot.step),
                delivered=lambda: arrived[trainer.step])
    assert taken == [2, 6, 8, 12]  # 4 and 10 skipped
    assert trainer.snapshots_skipped == 2
    assert [kept.step for kept in trainer.snapshots] == [12, 8]


def test_the_automatic_interval_is_measured_once_and_then_kept(one_rank):
    from workers.engine.trainer import Trainer

    taken: list[int] = []
    trainer = Trainer(job(steps=12, memory_every_steps=None))
    trainer.run(on_snapshot=lambda snapshot: taken.append(snapshot.step))
    every = trainer.snapshot_every
    assert every is not None and every >= 1
    assert taken == [s for s in range(1, 13) if s % every == 0 and s >= 3]


@pytest.mark.parametrize("handover_s, every_steps, after", [
    (0.0, 0, "kept"),  # a copy that costs nothing: the capture's interval stays
    (1e3, 0, "none"),  # a copy that costs 1000 s: no capture before the run's end
    (1e3, 5, 5),  # ... but none older than the disk checkpoint's interval
])
def test_an_automatic_interval_counts_the_copy_to_the_peer_once_two_arrived(
        one_rank, handover_s, every_steps, after):
    from workers.engine.trainer import Trainer

    taken: list[int] = []
    spec = engine_job(24, data={"source": "synthetic"},
                      checkpoint={"every_steps": every_steps, "memory_every_steps": None})
    trainer = Trainer(spec)
    trainer.run(on_snapshot=lambda snapshot: taken.append(snapshot.step), delivered=lambda: True,
                handover_s=lambda: handover_s)
    every = trainer.snapshot_every
    first = [s for s in range(3, 25) if s % every == 0][:2] if after == "kept" else taken[:2]
    assert len(first) == 2 and first[0] >= 3
    settled = 2 * first[1] - first[0]  # the next step due after the second capture settles it
    if after == "kept":
        assert taken == [s for s in range(3, 25) if s % every == 0]
    elif after == "none":
        assert every > 24 and taken == first
    else:
        assert every == max(after, first[1] - first[0])  # never below the capture's own interval
        assert taken == first + [s for s in range(settled, 25) if s % every == 0]


def test_a_lent_payload_holds_the_next_capture_until_released(one_rank):
    from workers.engine.trainer import Trainer

    trainer = Trainer(job())
    trainer.train_step()
    snapshot = trainer._snapshots[0]  # one of the two it captures into in turn
    snapshot.capture(trainer)
    lease = snapshot.lend()
    before = {k: t.clone() for k, t in lease.payload.tensors.items()}
    trainer.train_step()
    captured = threading.Event()
    capture = threading.Thread(target=lambda: (snapshot.capture(trainer), captured.set()))
    capture.start()
    time.sleep(0.2)
    assert not captured.is_set()  # waiting: the lent buffers are still being sent
    assert all(t.equal(before[k]) for k, t in lease.payload.tensors.items())
    lease.release()
    capture.join(10)
    assert captured.is_set() and snapshot.step == 2 and snapshot.waited_s >= 0.1
    assert not all(t.equal(before[k]) for k, t in snapshot.payload().tensors.items())


# -- the automatic interval's rule ---------------------------------------------------


@pytest.mark.parametrize("capture_s, step_s, every", [
    (0.0, 1.0, 1),  # free: every step
    (0.02, 1.0, 1),  # exactly 2% of a step
    (0.021, 1.0, 2),  # just over: every other step
    (0.001, 0.01, 5),  # 10% of a step -> 2% over five
    (0.1, 0.05, 100),  # twice a step
    (0.03, 0.1, 15),  # 0.3 of a step: 0.3 / 0.02 = 15 exactly, whatever the float's last bit
    (1e6, 1e-6, 10_000_000),  # bounded as the schema's option is
])
def test_the_automatic_interval_is_the_smallest_within_two_percent(capture_s, step_s, every):
    got = automatic_interval(capture_s, step_s)
    assert got == every
    if 1 < got < 10_000_000:
        assert capture_s / (got * step_s) <= 0.02 < capture_s / ((got - 1) * step_s)


def test_the_automatic_interval_needs_a_step_time():
    with pytest.raises(ValueError, match="step time"):
        automatic_interval(0.01, 0.0)


# -- the schema ------------------------------------------------------------------------


BASE = {"model": {}, "train": {"steps": 1}}


def test_memory_snapshots_are_automatic_and_disk_saves_async_by_default():
    checkpoint = JobSpec.model_validate(BASE).checkpoint
    assert checkpoint.memory_every_steps is None and checkpoint.async_ is True
    assert JobSpec.model_validate(BASE | {"checkpoint": {"async": False}}).checkpoint.async_ is False


@pytest.mark.parametrize("value, message", [
    (-1, "greater than or equal to 0"),
    (10_000_001, "less than or equal to 10000000"),
    (2.5, "valid integer"),  # strict: no float is an integer
])
def test_memory_every_steps_is_bounded_like_every_steps(value, message):
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(BASE | {"checkpoint": {"memory_every_steps": value}})
    errors = caught.value.errors()
    assert [e["loc"] for e in errors] == [("checkpoint", "memory_every_steps")]
    assert message in errors[0]["msg"]
    for ok in (0, 1, 10_000_000):
        assert JobSpec.model_validate(
            BASE | {"checkpoint": {"memory_every_steps": ok}}).checkpoint.memory_every_steps == ok
