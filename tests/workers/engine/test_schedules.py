"""The lr schedules' shapes (workers/engine/schedules.py), pure: each step's
lr from the spec alone, as the trainer asks for it and the metrics row carries it."""

import math

import pytest

from workers.engine import schedules
from workers.schema import TrainSpec


def curve(steps: int = 20, **train) -> list[float]:
    cfg = TrainSpec(steps=steps, lr=1.0, **train)
    return [cfg.schedule_kind.lr(s, steps, cfg) for s in range(steps)]


def old_lr_at(step: int, total_steps: int, cfg: TrainSpec) -> float:
    """The trainer's schedule before schedules were registered (cosine)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.lr - floor) * (1 + math.cos(math.pi * progress))


@pytest.mark.parametrize("train", [{}, {"warmup_steps": 0}, {"warmup_steps": 25, "lr": 3e-3},
                                   {"min_lr_ratio": 0.0, "lr": 7e-4, "warmup_steps": 3}])
def test_the_default_is_the_former_cosine_bit_for_bit(train):
    cfg = TrainSpec(steps=40, **train)
    assert cfg.schedule == "cosine"
    assert [cfg.schedule_kind.lr(s, 40, cfg) for s in range(41)] == \
        [old_lr_at(s, 40, cfg) for s in range(41)]


def test_cosine_warms_up_then_decays_to_the_floor():
    lrs = curve(warmup_steps=4, min_lr_ratio=0.1)
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    assert all(a > b for a, b in zip(lrs[4:], lrs[5:]))
    cfg = TrainSpec(steps=20, lr=1.0, warmup_steps=4, min_lr_ratio=0.1)
    assert schedules.cosine(20, 20, cfg) == pytest.approx(0.1)
    assert lrs[12] == pytest.approx(0.55)  # halfway down: the cosine's midpoint


def test_linear_falls_by_equal_steps_to_the_floor():
    lrs = curve(schedule="linear", warmup_steps=4, min_lr_ratio=0.2)
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    drops = [a - b for a, b in zip(lrs[4:], lrs[5:])]
    assert drops == pytest.approx([0.8 / 16] * 15)
    assert lrs[-1] == pytest.approx(0.2 + 0.8 / 16)  # one step short of the floor


def test_constant_holds_lr_after_warmup():
    assert curve(schedule="constant", warmup_steps=2) == [0.5] + [1.0] * 19
    assert curve(schedule="constant", warmup_steps=0) == [1.0] * 20


@pytest.mark.parametrize("shape", ["linear", "cosine"])
def test_wsd_warms_up_holds_then_decays_over_the_last_fraction(shape):
    lrs = curve(steps=40, schedule="wsd", warmup_steps=4, decay_fraction=0.25, decay_shape=shape,
                min_lr_ratio=0.1)
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    assert lrs[4:31] == [1.0] * 27  # stable through step 30: the decay is the last 10 of 40
    decay = lrs[30:]
    assert decay[0] == 1.0 and all(a > b for a, b in zip(decay, decay[1:]))
    progress = [i / 10 for i in range(10)]
    if shape == "linear":
        want = [1.0 - 0.9 * p for p in progress]
    else:
        want = [0.1 + 0.45 * (1 + math.cos(math.pi * p)) for p in progress]
    assert decay == pytest.approx(want)
    cfg = TrainSpec(steps=40, lr=1.0, schedule="wsd", decay_shape=shape)
    assert schedules.wsd(40, 40, cfg) == pytest.approx(0.1)


def test_wsd_decay_never_starts_inside_the_warmup():
    lrs = curve(steps=10, schedule="wsd", warmup_steps=6, decay_fraction=1.0)
    assert lrs[:6] == pytest.approx([(s + 1) / 6 for s in range(6)])
    assert lrs[6] == 1.0 and lrs[7] < 1.0
