"""The comm clocks of an async collective: what held the training thread
(exposed) is never more than what was in flight (comm), however late the
waiting thread wakes after the collective's completion callback."""

import threading
import time

import torch
import torch.distributed as dist

from workers.engine.comm import CommCounter


class _SlowWakeWork(dist.Work):
    """A collective that completes (its future's callbacks run) on another
    thread after `run_s`, while its waiter resumes `wake_s` after that: what a
    loaded two-core machine does to a gloo wait."""

    def __init__(self, run_s: float, wake_s: float):
        super().__init__()
        self._future: torch.futures.Future = torch.futures.Future()
        self._wake_s = wake_s
        threading.Timer(run_s, self._future.set_result, args=([],)).start()

    def wait(self, timeout=None) -> bool:
        self._future.wait()
        time.sleep(self._wake_s)
        return True

    def get_future(self):
        return self._future


def test_a_late_wakeup_counts_as_in_flight_not_only_as_exposed():
    counter = CommCounter()
    work = counter.timed("all_gather", 8, lambda: _SlowWakeWork(run_s=0.05, wake_s=0.1))
    work.wait()
    tally = counter.take()
    assert tally.exposed_s >= 0.14  # the wait and the late wake-up held the thread
    assert tally.exposed_s <= tally.time_s


def test_a_collective_done_before_its_wait_is_in_flight_until_its_callback():
    counter = CommCounter()
    work = counter.timed("all_gather", 8, lambda: _SlowWakeWork(run_s=0.02, wake_s=0.0))
    time.sleep(1.0)  # compute that the collective overlapped (bounds wide for a loaded machine)
    work.wait()
    tally = counter.take()
    assert tally.exposed_s < 0.3
    assert 0.02 <= tally.time_s < 0.7  # ended at its callback, not at the wait a second later
    assert tally.exposed_s <= tally.time_s
