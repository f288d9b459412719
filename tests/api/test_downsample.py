"""The series downsampling the job page draws from: at most `points` points,
every bucket's minimum and maximum kept, in step order."""

from __future__ import annotations

import math
import random

import pytest

from api.server.downsample import min_max


def test_a_short_series_comes_back_whole():
    assert min_max([1, 2, 3], [5.0, 4.0, 6.0], 3) == ([1, 2, 3], [5.0, 4.0, 6.0])
    assert min_max([], [], 2) == ([], [])


@pytest.mark.parametrize("n,points", [(100_000, 2000), (2001, 2000), (10_001, 7), (5, 4), (4, 2)])
def test_at_most_points_in_order_with_every_extreme(n, points):
    rng = random.Random(n)
    xs = list(range(n))
    ys = [math.sin(i / 50) + rng.gauss(0, 0.1) for i in xs]
    ys[n // 3] = 50.0  # a spike
    ys[n // 2] = -50.0  # a dip
    out_x, out_y = min_max(xs, ys, points)
    assert len(out_x) == len(out_y) <= points
    assert out_x == sorted(out_x) and len(set(out_x)) == len(out_x)
    assert 50.0 in out_y and -50.0 in out_y
    assert all(ys[x] == y for x, y in zip(out_x, out_y, strict=True))  # real points, not averages
    buckets = points // 2
    for b in range(buckets):  # each bucket's own extremes survive
        start, end = b * n // buckets, (b + 1) * n // buckets
        chunk = ys[start:end]
        kept = [y for x, y in zip(out_x, out_y, strict=True) if start <= x < end]
        assert min(chunk) in kept and max(chunk) in kept


def test_a_flat_bucket_keeps_one_point():
    out_x, out_y = min_max(list(range(10)), [1.0] * 10, 4)
    assert out_x == [0, 5] and out_y == [1.0, 1.0]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="points must be at least 2"):
        min_max([1, 2, 3], [1, 2, 3], 1)
    with pytest.raises(ValueError, match="differ in length"):
        min_max([1, 2], [1], 5)
