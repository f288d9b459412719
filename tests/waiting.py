"""Polling a condition until it holds or a deadline passes: what tests that
watch a real process, thread or the page cache wait with."""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], within_s: float, every_s: float = 0.05) -> bool:
    """True once `condition()` holds; False if it still does not after `within_s`."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)
    return True


def alive(pid: int) -> bool:
    """Whether a process of this pid exists (a zombie included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
