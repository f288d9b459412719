"""Waiting on one call per rank: results in rank order, or the error that
explains the failure, told apart as a lost rank (its process or node died),
a failed one (its code raised, or its answer says so) or a hung one (it did
not answer in time: stopped, say), naming the rank and where it ran.

A gang fails as a whole: the first error ends the wait and the caller's
`shutdown` is run, since the survivors may sit in a collective until the
process-group timeout and must be killed, not joined.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import ray
from ray.exceptions import RayError, RayTaskError

from workers.cluster.errors import RankError, RankFailedError, RankHungError, RankLostError
from workers.cluster.rank_info import RankInfo, rank_where

POLL_S = 0.5  # how often a wait looks at its ranks
PROGRESS_TIMEOUT_S = 30.0  # a quick call to every rank (not a training): its answers within this
BLAME_GRACE_S = 3.0  # once a rank raises, how long to look for a lost rank that made it raise
_ANSI_COLOR = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours the remote function's name


def await_ranks(
    refs: list, timeout_s: float | None, node_infos: Sequence[RankInfo], shutdown: Callable[[], None]
) -> list | None:
    """The results of one call per rank (refs[i] is rank i's), or None if some
    are still running after `timeout_s` (None: no limit). The first lost or
    failed rank runs `shutdown` and raises its RankError."""
    return _wait(refs, timeout_s, node_infos, shutdown)


def await_answers(
    refs: list, timeout_s: float, node_infos: Sequence[RankInfo], shutdown: Callable[[], None],
    failure: Callable[[Any], str | None],
) -> list:
    """The answers of a quick call per rank (a status query), or a RankError
    as soon as one rank is lost, raises, or answers that it failed
    (`failure(answer)` is its reason, else None) — without waiting for the
    others — or when one has not answered within `timeout_s`: a
    `RankHungError` naming it. Any error runs `shutdown` first."""
    results = _wait(refs, timeout_s, node_infos, shutdown, failure)
    assert results is not None  # with `failure`, a rank that does not answer raises
    return results


def _wait(
    refs: list, timeout_s: float | None, node_infos: Sequence[RankInfo], shutdown: Callable[[], None],
    failure: Callable[[Any], str | None] | None = None,
) -> list | None:
    """await_ranks, and with `failure` await_answers."""
    rank_of = {ref: rank for rank, ref in enumerate(refs)}
    results: dict[int, Any] = {}
    pending = list(refs)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while pending:
        left = POLL_S if deadline is None else max(0.0, deadline - time.monotonic())
        done, pending = ray.wait(pending, num_returns=len(pending), timeout=min(POLL_S, left))
        errors = _collect(done, rank_of, results, node_infos)
        if failure is not None:
            errors += [RankFailedError(rank, f"rank {rank} failed: {reason}")
                       for rank, reason in sorted((rank_of[ref], failure(results.get(rank_of[ref])))
                                                  for ref in done) if reason]
        timed_out = bool(pending) and deadline is not None and time.monotonic() >= deadline
        if errors or (timed_out and failure is not None):
            culprit = _blame(errors, pending, rank_of, results, node_infos,
                             hung_after_s=timeout_s if failure is not None else None)
            shutdown()
            raise culprit
        if timed_out:
            return None
    return [results[rank] for rank in range(len(refs))]


def _blame(
    errors: list[RankError], pending: list, rank_of: dict, results: dict, node_infos: Sequence[RankInfo],
    hung_after_s: float | None = None,
) -> RankError:
    """The error to report: a lost rank before a failed one, then the lowest
    rank. With `hung_after_s` (a quick query), a rank that still has not
    answered is hung, and blamed before a failed one: the others' collectives
    time out waiting for it."""
    if pending and not any(isinstance(e, RankLostError) for e in errors):
        # A survivor's "connection reset" (or collective timeout) can come in
        # before the news of the death (or the hang) that caused it: give the
        # news a moment to arrive.
        more, pending = ray.wait(pending, num_returns=len(pending),
                                 timeout=BLAME_GRACE_S if errors else 0)
        errors = errors + _collect(more, rank_of, results, node_infos)
    if hung_after_s is not None and pending and not any(isinstance(e, RankLostError) for e in errors):
        hung = sorted(rank_of[ref] for ref in pending)
        message = "; ".join(f"{rank_where(rank, node_infos)} did not answer within {hung_after_s:g} s: "
                            "hung (stopped, or stuck)" for rank in hung)
        if errors:
            message += "; meanwhile " + "; ".join(str(e).split("\n", 1)[0] for e in errors)
        return RankHungError(hung[0], message)
    return min(errors, key=lambda e: (not isinstance(e, RankLostError), e.rank))


def _collect(
    done: list, rank_of: dict, results: dict[int, Any], node_infos: Sequence[RankInfo]
) -> list[RankError]:
    """Store the finished calls' results; return the errors of the failed ones."""
    errors = []
    for ref in done:
        rank = rank_of[ref]
        try:
            results[rank] = ray.get(ref)
        except RayError as e:
            errors.append(rank_error(rank, e, node_infos))
    return errors


def rank_error(rank: int, e: RayError, node_infos: Sequence[RankInfo]) -> RankError:
    """`e` (from a call on rank `rank`) as RankFailedError or RankLostError."""
    where = node_infos[rank].where if rank < len(node_infos) else "not started"
    text = _ANSI_COLOR.sub("", str(e)).strip()
    if isinstance(e, RayTaskError):  # the rank's code raised: the summary, then its traceback
        summary = f"{type(e.cause).__name__}: {e.cause}"
        message = f"rank {rank} ({where}) failed: {summary}\n{text}"
        error: RankError = RankFailedError(rank, message)
    else:  # the actor (its process or its node) died; tab-indented lines are ids
        lines = [line for line in text.splitlines() if line and line[0] != "\t"]
        reason = " ".join(lines) or type(e).__name__
        error = RankLostError(rank, f"rank {rank} ({where}) was lost: {reason}")
    error.__cause__ = e
    return error
