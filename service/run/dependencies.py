"""Jobs that wait on jobs: what a job (or a sweep) waits for, and whether it
may start, wait, or never will.

A job names `after: [job ids]` of its tenant; an `init: {job: ID}` whose
step is not fixed yet (its source had not ended at submit) waits for that
job too. It may start once every one SUCCEEDED; it waits while one is
unfinished; it fails, naming the job, once one ended otherwise (FAILED,
CANCELLED, PRUNED) or is gone (deleted). Ids are checked at submit
(service/intake/dependencies.py) and name only older jobs, so they form no
cycle.

Pure but for `read_dependency_status`, which reads the states in one query.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.states import JobState

if TYPE_CHECKING:
    from service.store import JobStore


@dataclass(frozen=True)
class Waiting:
    """Some dependency has not finished: the reason, as a queued job's `waiting` shows it."""

    reason: str  # "waiting for j-... (RUNNING)"


@dataclass(frozen=True)
class Broken:
    """A dependency ended without succeeding (or was deleted): it never will."""

    reason: str  # "dependency j-... FAILED"


def dependency_ids(spec: Any) -> list[str]:
    """The jobs `spec` waits for, in order, each once: its `after`, then its
    `init.job` where the step is not fixed yet. A JobSpec, or a spec with
    `after` and a JobSpec `base` (a sweep's: its base's init)."""
    ids = list(getattr(spec, "after", None) or ())
    init = getattr(spec, "init", None)
    if init is None and (base := getattr(spec, "base", None)) is not None:
        init = getattr(base, "init", None)
    if init is not None and init.job is not None and init.step is None:
        ids.append(init.job)
    return list(dict.fromkeys(ids))


def dependency_status(ids: Iterable[str],
                      states: Mapping[str, JobState | None]) -> Waiting | Broken | None:
    """None: every job in `ids` SUCCEEDED (or there are none); `Broken` for
    the first one that ended otherwise or is missing from `states` (deleted);
    else `Waiting` for those unfinished."""
    unfinished = []
    for job_id in ids:
        state = states.get(job_id)
        if state is None:
            return Broken(f"dependency {job_id} no longer exists (deleted)")
        if state is JobState.SUCCEEDED:
            continue
        if state.is_terminal:
            return Broken(f"dependency {job_id} {state.value}")
        unfinished.append(f"{job_id} ({state.value})")
    if unfinished:
        return Waiting(f"waiting for {', '.join(unfinished)}")
    return None


def read_dependency_status(store: JobStore, ids: Iterable[str]) -> Waiting | Broken | None:
    """`dependency_status` of `ids` as the store has them now."""
    ids = list(ids)
    if not ids:
        return None
    return dependency_status(ids, store.reads.states_of(ids))
