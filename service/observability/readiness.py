"""Whether the control plane can serve: its store answers and Ray does.
Each check runs with a deadline (a database or a Ray GCS that is gone may
not fail fast), and says what is wrong in words. Ray's own check is handed
in (`service.run.ray_cluster.ray_unready`, through the control plane's
views): this package does not talk to Ray."""

from __future__ import annotations

import threading
from collections.abc import Callable

from service.log_text import printable
from service.store import JobStore

CHECK_TIMEOUT_S = 5.0


def readiness_problems(store: JobStore, ray_unready: Callable[[], str | None],
                       timeout_s: float = CHECK_TIMEOUT_S) -> list[str]:
    """What keeps the service from being ready ([]: ready). `ray_unready`:
    why Ray cannot be used now, or None."""
    problems = []
    store_problem = _within(timeout_s, "the job store", lambda: _store_problem(store))
    if store_problem:
        problems.append(store_problem)
    ray_problem = _within(timeout_s, "Ray", ray_unready)
    if ray_problem:
        problems.append(ray_problem)
    return problems


def _store_problem(store: JobStore) -> str | None:
    try:
        store.ping()
    except Exception as e:
        return f"the job store does not answer: {type(e).__name__}: {printable(e, 300)}"
    return None


def _within(timeout_s: float, what: str, check: Callable[[], str | None]) -> str | None:
    """`check()`'s answer, or a problem if it has none within the deadline
    (its thread is left to finish on its own)."""
    answer: list[str | None] = []
    thread = threading.Thread(target=lambda: answer.append(check()), daemon=True,
                              name=f"readiness-{what}")
    thread.start()
    thread.join(timeout_s)
    if not answer:
        return f"{what} did not answer within {timeout_s:g} s"
    return answer[0]
