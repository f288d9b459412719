"""Usage by goodput phase (pure): each phase interval weighted by the workers
held over it, piece by piece, clipped to the window; a phase that holds no
workers counts 0; the phases sum to the worker-seconds held; the tenant's
and the cluster's goodput."""

from __future__ import annotations

import pytest

from service.observability.goodput import PHASES
from service.observability.usage import (
    cluster_usage,
    held_stretches,
    held_worker_seconds,
    phase_goodput,
    phase_worker_seconds,
    usage_by_tenant,
)
from service.states import JobState as S
from tests.service.observability.test_usage import ELASTIC, at, event, job

# ELASTIC's life, phase by phase (seconds since T0), as the goodput rules might split it:
# held 4 workers 10..40, none 40..45 (RESTARTING), 2 workers 45..60, 60..70 (PREEMPTING),
# none 70..80 (QUEUED), 2 workers 80..100.
SPANS = [
    (0, 10, "queued"), (10, 14, "starting"), (14, 16, "data_wait"), (16, 30, "training"),
    (30, 32, "checkpoint_stall"), (32, 40, "lost"), (40, 50, "recovering"), (50, 55, "training"),
    (55, 56, "eval"), (56, 60, "training"), (60, 70, "checkpoint_stall"), (70, 80, "queued"),
    (80, 84, "starting"),
    (84, 100, "training"),
]
T = at(0).timestamp()


def spans(pieces=SPANS):
    return [(T + a, T + b, phase) for a, b, phase in pieces]


def test_each_phase_counts_its_time_times_the_workers_held_over_it():
    held = held_stretches(ELASTIC, at(200), fallback=2)
    assert [(a - T, b - T, n) for a, b, n in held] == [  # one stretch an event that holds
        (10, 12, 4), (12, 40, 4), (45, 46, 2), (46, 60, 2), (60, 70, 2), (80, 100, 2)]
    phases = phase_worker_seconds(spans(), held, at(0), at(200))
    assert phases == {
        "queued": 0,  # QUEUED holds no worker
        "starting": 4 * 4 + 2 * 4, "data_wait": 4 * 2, "training": 4 * 14 + 2 * 5 + 2 * 4 + 2 * 16,
        "eval": 2 * 1, "checkpoint_stall": 4 * 2 + 2 * 10,  # PREEMPTING 60..70 saves on its 2
        "lost": 4 * 8,
        "recovering": 2 * 5,  # 40..45 RESTARTING holds nothing; 45..50 two workers
        "suspended": 0,
    }
    assert sum(phases.values()) == held_worker_seconds(ELASTIC, at(0), at(200), fallback=2)


def test_the_window_clips_each_piece():
    held = held_stretches(ELASTIC, at(200), fallback=2)
    phases = phase_worker_seconds(spans(), held, at(29), at(51))
    assert phases == dict.fromkeys(PHASES, 0.0) | {
        "training": 4 * 1 + 2 * 1, "checkpoint_stall": 4 * 2, "lost": 4 * 8, "recovering": 2 * 5}
    assert sum(phases.values()) == held_worker_seconds(ELASTIC, at(29), at(51), fallback=2)
    assert sum(phase_worker_seconds(spans(), held, at(101), at(200)).values()) == 0


def test_a_job_still_running_counts_until_now():
    events = [event(0, None, S.QUEUED), event(10, S.QUEUED, S.STARTING, 4),
              event(12, S.STARTING, S.RUNNING, 4)]
    held = held_stretches(events, at(30), fallback=2)
    phases = phase_worker_seconds(spans([(0, 10, "queued"), (10, 12, "starting"), (12, 30, "training")]),
                                  held, at(0), at(30))
    assert (phases["queued"], phases["starting"], phases["training"]) == (0, 4 * 2, 4 * 18)


def test_tenants_phases_goodput_and_the_cluster_total():
    rows = [{"step": n, "wall_time": T + 80 + 5 * n, "step_time_s": 5.0} for n in (1, 2, 3)]
    found = usage_by_tenant([job("a"), job("b", S.FAILED, finished=5)], {"j-a": ELASTIC},
                            since=at(0), now=at(200), rows={"j-a": rows})
    a = found["a"]
    assert a.phases["training"] == pytest.approx(2 * 10)  # steps 2 and 3, on 2 workers
    assert set(a.phases) == set(PHASES) and a.phases["queued"] == 0  # QUEUED holds no worker
    assert a.phases["checkpoint_stall"] == pytest.approx(2 * 10)  # PREEMPTING 60..70 on 2
    assert sum(a.phases.values()) == pytest.approx(a.worker_seconds)
    assert a.goodput == pytest.approx(a.phases["training"] / (a.worker_seconds - a.phases["suspended"]))
    assert 0 < a.goodput < 1
    assert found["b"].goodput is None  # held nothing
    total = cluster_usage(found.values())
    assert total.tenant == "*" and total.worker_seconds == a.worker_seconds
    assert total.phases == a.phases and total.jobs == {"SUCCEEDED": 1, "FAILED": 1}


def test_goodput_leaves_suspended_out():
    phases = dict.fromkeys(PHASES, 0.0) | {"training": 60.0, "starting": 20.0, "suspended": 20.0}
    assert phase_goodput(phases) == 0.75
    assert phase_goodput(dict.fromkeys(PHASES, 0.0)) is None
