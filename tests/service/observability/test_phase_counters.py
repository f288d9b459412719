"""`brigade_job_phase_seconds_total`: the tally (pure) counts each job's
phase seconds from when counting began, adds only what a phase grew by and
never takes back; the collector, over a real store, counts a job while it
runs and its last stretch once it ended, then leaves it alone."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry
from store_harness import submit

from service.observability.phase_counters import PhaseSecondsCollector, PhaseTally
from service.states import JobState as S


def test_the_tally_counts_from_when_it_began_and_never_takes_back():
    tally = PhaseTally(began=100.0)
    tally.count("j1", "acme", [(90, 105, "queued"), (105, 120, "training")])
    assert tally.totals == {("acme", "queued"): 5, ("acme", "training"): 15}
    # the same job later: a fault turned 5 s of training into lost; a new stretch trains
    tally.count("j1", "acme", [(90, 105, "queued"), (105, 115, "training"), (115, 120, "lost"),
                               (120, 125, "recovering"), (125, 130, "training")])
    assert tally.totals == {("acme", "queued"): 5, ("acme", "training"): 15, ("acme", "lost"): 5,
                            ("acme", "recovering"): 5}  # training is back at 15: nothing added yet
    tally.count("j1", "acme", [(90, 105, "queued"), (105, 115, "training"), (115, 120, "lost"),
                               (120, 125, "recovering"), (125, 140, "training")])
    assert tally.totals[("acme", "training")] == 25  # grew past what was counted: 10 more
    tally.count("j2", "other", [(100, 110, "training")])
    assert tally.totals[("other", "training")] == 10 and tally.totals[("acme", "training")] == 25


def samples(collector) -> dict[tuple[str, str], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    return {(s.labels["tenant"], s.labels["phase"]): s.value
            for metric in registry.collect() for s in metric.samples
            if s.name == "brigade_job_phase_seconds_total"}


def test_the_collector_counts_a_job_while_it_runs_and_once_it_ended(store):
    earlier = submit(store, tenant="early")
    store.transition(earlier.id, S.CANCELLED, reason="cancelled")  # ended before counting began
    collector = PhaseSecondsCollector(store)
    began = time.time()
    job = submit(store)
    waiting = submit(store, tenant="waits")
    time.sleep(0.2)
    store.transition(job.id, S.STARTING, reason="admitted", workers=2, attempt=1)
    store.transition(job.id, S.RUNNING, reason="started")
    store.record_metrics(job.id, 1, [{"step": 1, "wall_time": time.time(), "step_time_s": 0.01}])
    time.sleep(0.3)
    store.record_metrics(job.id, 1, [{"step": 2, "wall_time": time.time(), "step_time_s": 0.3}])
    running = samples(collector)
    assert running[("acme", "training")] > 0.25 and running[("acme", "queued")] > 0.15
    assert ("early", "queued") not in running and running[("waits", "queued")] > 0.45

    time.sleep(0.2)
    store.transition(job.id, S.SUCCEEDED, reason="done")
    ended = samples(collector)
    wall = store.get_job(job.id).finished_at.timestamp() - max(began, job.created_at.timestamp())
    acme = sum(v for (tenant, _), v in ended.items() if tenant == "acme")
    assert acme == pytest.approx(wall, abs=0.05)  # every second of its life since counting began, once
    assert ended[("acme", "training")] > running[("acme", "training")] + 0.15

    time.sleep(0.1)
    again = samples(collector)
    assert {k: v for k, v in again.items() if k[0] == "acme"} == {
        k: v for k, v in ended.items() if k[0] == "acme"}  # ended: not counted again
    assert again[("waits", "queued")] > ended[("waits", "queued")]  # still waiting: still counted
    store.transition(waiting.id, S.CANCELLED, reason="cancelled")
