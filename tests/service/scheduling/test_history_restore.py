"""The fair-share history survives a control-plane restart: rebuilt from the
job events in the store (SQLite and Postgres), it charges each tenant for
what its jobs held before the restart, and a job still running is charged
from when it started, not from the restart."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from store_harness import submit

from service.run.scheduling_pass import SchedulingPass
from service.scheduling import Resources
from service.scheduling.service_history import spans_holding_workers
from service.settings import Settings
from service.states import ACTIVE
from service.states import JobState as S
from service.store.records import EventRecord

TOTAL = Resources(cpu=8)


def event(seconds: float, to: S, frm: S | None = None) -> EventRecord:
    at = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=seconds)
    return EventRecord(id=0, job_id="j", time=at, from_state=frm, to_state=to, reason="")


T0 = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(("states", "spans"), [
    ([(0, S.QUEUED)], []),  # never started
    ([(0, S.QUEUED), (5, S.CANCELLED)], []),
    ([(0, S.QUEUED), (1, S.STARTING), (2, S.RUNNING), (9, S.SUCCEEDED)], [(1, 9)]),
    ([(0, S.QUEUED), (1, S.STARTING), (2, S.RUNNING)], [(1, None)]),  # running still
    # Preempted and requeued, then run again: two stretches, none while queued.
    ([(0, S.QUEUED), (1, S.STARTING), (2, S.RUNNING), (4, S.PREEMPTING), (5, S.QUEUED),
      (7, S.STARTING), (8, S.RUNNING), (12, S.SUCCEEDED)], [(1, 5), (7, 12)]),
    # A restart keeps the workers held (RESTARTING is active); a suspend gives them back.
    ([(0, S.QUEUED), (1, S.STARTING), (2, S.RUNNING), (3, S.RESTARTING), (4, S.RUNNING),
      (6, S.SUSPENDING), (7, S.SUSPENDED), (9, S.QUEUED), (10, S.STARTING), (11, S.FAILED)],
     [(1, 7), (10, 11)]),
])
def test_the_stretches_a_job_held_workers(states, spans):
    got = spans_holding_workers([event(t, s) for t, s in states], ACTIVE)
    assert got == [(T0 + a, None if b is None else T0 + b) for a, b in spans]


def run_to(store, job, *states: S) -> None:
    for state in states:
        store.transition(job.id, state, reason="test", **({"workers": 2} if state is S.STARTING else {}))


def test_a_restarted_control_plane_charges_what_each_tenant_had(store, tmp_path):
    settings = Settings(data_dir=str(tmp_path))
    busy = submit(store, tenant="busy", name="done")  # 1 CPU a worker, 1..4 workers
    run_to(store, busy, S.STARTING, S.RUNNING)
    running = submit(store, tenant="busy", name="still-running")
    run_to(store, running, S.STARTING, S.RUNNING)
    queued = submit(store, tenant="idle", name="queued")
    time.sleep(0.5)
    run_to(store, busy, S.SUCCEEDED)

    # A new control plane on the same store, as after a restart.
    history = SchedulingPass(settings, store).history
    now = time.time()
    owed = history.owed(TOTAL, now, expected_s=0.0)
    assert set(owed) == {"busy"}, owed  # the idle tenant's job never held workers
    # Two jobs of 2 workers x 1 CPU for >= 0.5 s each: >= 2 x 2/8 x 0.5 share-seconds.
    assert owed["busy"] >= 2 * (2 / 8) * 0.5, owed
    # The running job is charged from its start, not from the restart.
    started = next(e for e in store.events(running.id) if e.to_state is S.STARTING)
    later = history.owed(TOTAL, now + 10, expected_s=0.0)["busy"]
    assert later - owed["busy"] == pytest.approx((2 / 8) * 10, rel=1e-6)
    assert history.typical_run_s(default=99.0) >= 0.5  # the finished run's length
    assert started.time.timestamp() < now - 0.5
    assert store.get_job(queued.id).state is S.QUEUED


def test_what_ended_before_the_window_is_not_charged(store, tmp_path):
    job = submit(store, tenant="old", name="old")
    run_to(store, job, S.STARTING, S.RUNNING, S.SUCCEEDED)
    time.sleep(0.3)
    history = SchedulingPass(Settings(data_dir=str(tmp_path), fair_share_window_s=0.2), store).history
    assert history.owed(TOTAL, time.time(), expected_s=0.0) == {}
