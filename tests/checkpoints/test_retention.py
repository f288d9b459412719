"""Retention and clean-up: the last K committed steps stay, torn steps go,
and there is never a moment without a committed checkpoint."""

from __future__ import annotations

import threading

import pytest
from ckpt_harness import blank, flip_byte, saved, state, unsign

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def committed_steps(store) -> list[int]:
    return [c.step for c in store.list_committed()]


@pytest.mark.parametrize("keep_last", [1, 2, 3])
def test_keeps_exactly_the_last_k_committed(make_checkpointer, keep_last):
    checkpointer = make_checkpointer(keep_last=keep_last)
    saved(checkpointer, *range(1, 6))
    assert committed_steps(checkpointer.store) == list(range(1, 6))[-keep_last:]
    assert checkpointer.store.steps() == list(range(1, 6))[-keep_last:]


def test_keep_last_must_keep_something(make_checkpointer, make_store):
    with pytest.raises(ValueError):
        make_checkpointer(keep_last=0)
    with pytest.raises(ValueError):
        make_store().retain(0)


def test_keep_last_1_never_leaves_zero_committed(make_checkpointer, make_store, storage):
    """Another process's view (a second store) is polled while async saves
    commit and retention deletes: once there is a committed step, there is
    always one."""
    if storage["root"].startswith("memory://"):
        pytest.skip("memory:// is one process's; its listing races a concurrent delete")
    checkpointer = make_checkpointer(keep_last=1)
    watcher = make_store()
    seen: list[list[int]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def watch() -> None:
        try:
            while not done.is_set():
                seen.append(committed_steps(watcher))
        except BaseException as exc:  # fail the test, not just the thread
            errors.append(exc)

    thread = threading.Thread(target=watch)
    thread.start()
    try:
        for step in range(1, 7):
            checkpointer.async_save(step, state(float(step)))
        checkpointer.wait()
    finally:
        done.set()
        thread.join()
    assert not errors
    first = next(i for i, steps in enumerate(seen) if steps)
    assert all(seen[first:]), "a moment with no committed checkpoint"
    assert len(seen) > 10 and max(map(len, seen)) <= 2
    assert committed_steps(watcher) == [6]


def test_torn_steps_are_ignored_and_cleaned_up(make_checkpointer, caplog):
    checkpointer = make_checkpointer()
    store = checkpointer.store
    saved(checkpointer, 1, 2, 3, 4)
    unsign(store, 2)  # a crash before the commit
    unsign(store, 4)  # or a save still in flight
    assert committed_steps(store) == [1, 3]
    result = checkpointer.load(blank())
    assert result.step == 3
    assert [(r.step, r.torn) for r in result.skipped] == [(4, True)]

    # After a commit: only torn steps older than the newest committed go;
    # a newer one may be a save another rank is still writing.
    assert checkpointer.cleanup_uncommitted() == [2]
    assert store.steps() == [1, 3, 4]
    # At start, nobody writes: the newer torn steps go too.
    assert checkpointer.cleanup_uncommitted(including_newer=True) == [4]
    assert store.steps() == [1, 3]


def test_a_commit_cleans_up_older_torn_steps(make_checkpointer):
    checkpointer = make_checkpointer()
    saved(checkpointer, 1, 2)
    unsign(checkpointer.store, 2)
    saved(checkpointer, 3)
    assert checkpointer.store.steps() == [1, 3]


def test_torn_steps_of_a_first_save_go_at_resume(make_checkpointer):
    checkpointer = make_checkpointer()
    saved(checkpointer, 5)
    unsign(checkpointer.store, 5)
    assert checkpointer.resume(blank()) is None
    assert checkpointer.store.steps() == []
    saved(checkpointer, 5)


def test_resume_discards_the_dead_branch_after_the_loaded_step(make_checkpointer):
    checkpointer = make_checkpointer()
    store = checkpointer.store
    saved(checkpointer, 1, 2, 3, 4, 5)
    unsign(store, 1)
    flip_byte(store, 4, "__0_0.distcp")
    unsign(store, 5)
    loaded = blank()
    result = checkpointer.resume(loaded)
    assert result.step == 3 and loaded["cursor"] == 3
    assert [(r.step, r.torn) for r in result.skipped] == [(4, False), (5, True)]
    assert store.steps() == [2, 3]
    saved(checkpointer, 4)  # the run goes on from 3 and saves 4 again
    assert committed_steps(store) == [2, 3, 4]
