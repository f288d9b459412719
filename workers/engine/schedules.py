"""The built-in learning-rate schedules (the `brigade.schedules` entry points
name them through `workers/schema/recipes.py`): `lr(step, total_steps, train)`,
where `step` counts the optimizer steps taken before this one (0 first).

Each warms up linearly over `train.warmup_steps` (step s gives
lr x (s + 1) / warmup_steps), then:

    cosine    half a cosine from lr to lr x min_lr_ratio over the remaining steps
    linear    a straight line from lr to lr x min_lr_ratio over the remaining steps
    constant  lr
    wsd       lr (stable), then over the last decay_fraction of the steps a
              decay to lr x min_lr_ratio, its shape decay_shape (linear or cosine)

A decay's progress is (step - its start) / (total_steps - its start), so the
last step (total_steps - 1) stays one step short of the floor, as cosine
always did.
"""

from __future__ import annotations

import math

from workers.schema import TrainSpec


def warmup(step: int, train: TrainSpec) -> float | None:
    """The warmup's lr at `step`, or None once it is over."""
    if step < train.warmup_steps:
        return train.lr * (step + 1) / train.warmup_steps
    return None


def _progress(step: int, start: int, total_steps: int) -> float:
    return min(1.0, (step - start) / max(1, total_steps - start))


def _decayed(train: TrainSpec, progress: float, shape: str) -> float:
    floor = train.lr * train.min_lr_ratio
    if shape == "cosine":
        return floor + 0.5 * (train.lr - floor) * (1 + math.cos(math.pi * progress))
    return train.lr - (train.lr - floor) * progress


def cosine(step: int, total_steps: int, train: TrainSpec) -> float:
    """Linear warmup to lr, then cosine decay to lr x min_lr_ratio (the default)."""
    lr = warmup(step, train)
    if lr is not None:
        return lr
    return _decayed(train, _progress(step, train.warmup_steps, total_steps), "cosine")


def linear(step: int, total_steps: int, train: TrainSpec) -> float:
    lr = warmup(step, train)
    if lr is not None:
        return lr
    return _decayed(train, _progress(step, train.warmup_steps, total_steps), "linear")


def constant(step: int, total_steps: int, train: TrainSpec) -> float:
    lr = warmup(step, train)
    return train.lr if lr is None else lr


def wsd_decay_start(total_steps: int, train: TrainSpec) -> int:
    """The first step of wsd's decay: the last decay_fraction of the steps
    (at least one), never inside the warmup."""
    decay_steps = max(1, round(train.decay_fraction * total_steps))
    return max(train.warmup_steps, total_steps - decay_steps)


def wsd(step: int, total_steps: int, train: TrainSpec) -> float:
    """Warmup, a stable phase at lr, then the decay over the last decay_fraction."""
    lr = warmup(step, train)
    if lr is not None:
        return lr
    start = wsd_decay_start(total_steps, train)
    if step < start:
        return train.lr
    return _decayed(train, _progress(step, start, total_steps), train.decay_shape)
