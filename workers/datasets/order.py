"""The data order's one hash: sample i of a job is drawn by mix64(seed, i),
so the order depends on (seed, i) only. Torch- and numpy-free (the CLI's
`brigade data show` draws the samples a job would read)."""

from __future__ import annotations

_MASK64 = (1 << 64) - 1


def mix64(seed: int, index: int) -> int:
    """splitmix64 of (seed, index): a stateless, platform-independent hash."""
    z = (seed * 0x9E3779B97F4A7C15 + index + 1) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)
