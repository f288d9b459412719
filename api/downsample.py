"""Downsampling a series for drawing: at most `points` points that keep each
stretch's minimum and maximum, so a spike (a loss blow-up, a memory peak)
survives however long the run.

The series is cut into `points // 2` buckets of consecutive points (sizes
differ by at most one); each bucket keeps its minimum and its maximum, in
their own order. A series of at most `points` points is returned as it is.
"""

from __future__ import annotations

from collections.abc import Sequence


def min_max(xs: Sequence[float], ys: Sequence[float], points: int) -> tuple[list[float], list[float]]:
    """(xs, ys) cut to at most `points` (>= 2) pairs, keeping every bucket's
    extremes; xs stay in their order."""
    if len(xs) != len(ys):
        raise ValueError(f"xs and ys differ in length: {len(xs)} != {len(ys)}")
    if points < 2:
        raise ValueError(f"points must be at least 2, not {points}")
    n = len(xs)
    if n <= points:
        return list(xs), list(ys)
    buckets = points // 2
    out_x: list[float] = []
    out_y: list[float] = []
    for b in range(buckets):
        start, end = b * n // buckets, (b + 1) * n // buckets
        low = high = start
        for i in range(start + 1, end):
            if ys[i] < ys[low]:
                low = i
            elif ys[i] > ys[high]:
                high = i
        for i in sorted({low, high}):
            out_x.append(xs[i])
            out_y.append(ys[i])
    return out_x, out_y
