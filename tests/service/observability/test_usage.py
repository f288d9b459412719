"""Usage from job events (pure): each size held for as long as it was held,
clipped to the window; notes change nothing; final states and preemptions
counted within the window only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.states import JobState as S
from service.store.records import EventRecord, JobRecord
from service.observability.usage import held_worker_seconds, usage_by_tenant

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = {"model": {"n_layers": 2, "d_model": 64, "n_heads": 4}, "train": {"steps": 5},
        "workers": {"min": 2, "max": 4}, "resources_per_worker": {"cpu": 2, "gpu": 1}}


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def event(s: float, frm, to, workers=None) -> EventRecord:
    return EventRecord(id=int(s * 10), job_id="j", time=at(s), from_state=frm, to_state=to,
                       reason="", workers=workers)


def job(tenant: str, state=S.SUCCEEDED, finished: float | None = 100) -> JobRecord:
    return JobRecord(
        id=f"j-{tenant}", tenant=tenant, name="n", state=state, stored_spec=SPEC, priority=0,
        workers=None, requested_workers=None, step=0, restarts=0, preemptions=0,
        latest_checkpoint=None, attempt=1, error=None, idempotency_key=None, created_at=T0,
        started_at=at(10), finished_at=None if finished is None else at(finished), updated_at=at(100),
    )


ELASTIC = [  # 4 workers 10..40, lost a node: 2 workers 45..100 (a note in between changes nothing)
    event(0, None, S.QUEUED),
    event(10, S.QUEUED, S.STARTING, 4), event(12, S.STARTING, S.RUNNING, 4),
    event(20, S.RUNNING, S.RUNNING, None),
    event(40, S.RUNNING, S.RESTARTING, 4), event(45, S.RESTARTING, S.STARTING, 2),
    event(46, S.STARTING, S.RUNNING, 2),
    event(60, S.RUNNING, S.PREEMPTING, 2), event(70, S.PREEMPTING, S.QUEUED),
    event(80, S.QUEUED, S.STARTING, 2), event(100, S.RUNNING, S.SUCCEEDED),
]


def test_each_size_counts_for_as_long_as_it_was_held():
    assert held_worker_seconds(ELASTIC, at(0), at(200), fallback=2) == 4 * 30 + 2 * 25 + 2 * 20


def test_the_window_clips_the_stretches():
    assert held_worker_seconds(ELASTIC, at(30), at(50), fallback=2) == 4 * 10 + 2 * 5


def test_a_job_still_running_counts_until_now_and_an_old_event_uses_the_smallest_size():
    events = [event(0, None, S.QUEUED), event(10, S.QUEUED, S.STARTING, None)]
    assert held_worker_seconds(events, at(0), at(25), fallback=2) == 2 * 15


def test_usage_by_tenant():
    found = usage_by_tenant([job("a"), job("b", S.FAILED, finished=5)],
                            {"j-a": ELASTIC}, since=at(8), now=at(200), tenants=["c"])
    assert list(found) == ["a", "b", "c"]
    a = found["a"]
    assert (a.worker_seconds, a.cpu_seconds, a.gpu_seconds) == (210, 420, 210)
    assert (a.jobs, a.preemptions) == ({"SUCCEEDED": 1}, 1)
    assert found["b"].jobs == {}  # ended before the window
    assert found["c"].worker_seconds == 0 and found["c"].jobs == {}
