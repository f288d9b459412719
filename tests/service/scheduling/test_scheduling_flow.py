"""The policies driven together, pass after pass, as the supervisor would:
admit, start, offer the waits to preemption, let victims leave and requeue.
Time is made up (one tick a pass); no cluster."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from scheduling_cases import cluster, queued, tenants

from service.scheduling import (
    PreemptionPolicy,
    QueuedJob,
    Run,
    RunningJob,
    Scheduler,
    TenantPolicy,
    attained_service,
)


@dataclass
class Cluster:
    """A toy control plane: jobs run for `ticks` once started; a preempted
    job leaves after `grace` ticks and is queued again (keeping its place)."""

    size: int
    tenants: dict[str, TenantPolicy]
    scheduler: Scheduler = field(default_factory=Scheduler)
    grace: int = 1
    now: int = 0
    queue: list[QueuedJob] = field(default_factory=list)
    live: dict[str, tuple[RunningJob, int]] = field(default_factory=dict)  # id -> (job, ends)
    leaving_until: dict[str, int] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)  # ended stretches of holding workers
    open_runs: dict[str, Run] = field(default_factory=dict)  # job id -> its current stretch
    events: list[str] = field(default_factory=list)
    ticks: dict[str, int] = field(default_factory=dict)
    submitted: dict[str, QueuedJob] = field(default_factory=dict)
    fair_share_window: int | None = None

    def submit(self, job: QueuedJob, ticks: int) -> None:
        self.queue.append(job)
        self.ticks[job.id], self.submitted[job.id] = ticks, job

    def step(self) -> None:
        for job_id, until in list(self.leaving_until.items()):
            if until <= self.now:
                del self.live[job_id], self.leaving_until[job_id]
                self._ended(job_id)
                self.queue.append(self.submitted[job_id])
                self.events.append(f"{self.now}: {job_id} requeued")
        for job_id, (job, ends) in list(self.live.items()):
            if ends <= self.now and job_id not in self.leaving_until:
                del self.live[job_id]
                self._ended(job_id)
                self.events.append(f"{self.now}: {job_id} succeeded")
        running = [job for job, _ in self.live.values()]
        total = cluster(self.size).total
        attained = None
        if self.fair_share_window:
            runs = [*self.runs, *self.open_runs.values()]
            attained = attained_service(runs, total, self.now - self.fair_share_window, self.now)
        decision = self.scheduler.admit(self.queue, running, self.tenants,
                                        cluster(self.size, running_jobs=running), attained)
        by_id = {job.id: job for job in self.queue}
        for job_id, workers in decision.start:
            job = by_id[job_id]
            self.live[job_id] = (running_view(job, workers), self.now + self.ticks[job_id])
            self.open_runs[job_id] = Run(job.tenant, job.demand.at(workers), self.now)
            self.events.append(f"{self.now}: {job_id} started at {workers}")
        self.queue = [job for job in self.queue if job.id not in dict(decision.start)]
        running = [job for job, _ in self.live.values()]
        capacity = replace(cluster(self.size), free=decision.free_after)
        for job_id in decision.needs_room:
            verdict = PreemptionPolicy().select_victims(by_id[job_id], running, capacity,
                                                        self.tenants)
            if verdict.victims:
                for victim in verdict.victims:
                    job, ends = self.live[victim]
                    self.live[victim] = (replace(job, leaving=True), ends)
                    self.leaving_until[victim] = self.now + self.grace
                    self.events.append(f"{self.now}: {victim} preempted for {job_id}")
                break
        self.now += 1

    def _ended(self, job_id: str) -> None:
        self.runs.append(replace(self.open_runs.pop(job_id), ended=self.now))


def running_view(job: QueuedJob, workers: int) -> RunningJob:
    return RunningJob(job.id, job.tenant, workers, job.demand)


def test_a_high_priority_job_preempts_the_elastic_one_which_resumes_smaller():
    sim = Cluster(4, tenants("a", "b"))
    sim.submit(queued("a-elastic", "a", workers=[2, 4], priority=0), ticks=20)
    sim.step()
    sim.submit(queued("b-job", "b", workers=2, priority=5), ticks=3)
    for _ in range(8):
        sim.step()
    assert sim.events[:6] == [
        "0: a-elastic started at 4",
        "1: a-elastic preempted for b-job",
        "2: a-elastic requeued",
        "2: b-job started at 2",
        "2: a-elastic started at 2",
        "5: b-job succeeded",
    ]


def test_two_urgent_jobs_preempt_one_victim_each_and_no_more():
    sim = Cluster(6, tenants("low", "high"), grace=2)
    for i in range(3):
        sim.submit(queued(f"low{i}", "low", workers=2, at=i), ticks=50)
    sim.step()
    sim.submit(queued("urgent1", "high", workers=2, priority=5, at=10), ticks=3)
    sim.submit(queued("urgent2", "high", workers=2, priority=5, at=11), ticks=3)
    for _ in range(12):
        sim.step()
    preempted = [event for event in sim.events if "preempted" in event]
    assert preempted == ["1: low0 preempted for urgent1", "3: low1 preempted for urgent2"]
    assert "3: urgent1 started at 2" in sim.events and "5: urgent2 started at 2" in sim.events
    assert "6: low0 started at 2" in sim.events  # back once urgent1 is done


def contention(weights, jobs_each, history):
    """Worker-ticks per tenant while both still have jobs queued: 5-tick jobs,
    2 fit at a time."""
    policy = {name: TenantPolicy(name, weight=w) for name, w in zip("ab", weights)}
    sim = Cluster(2, policy, scheduler=Scheduler(horizon_s=5),
                  fair_share_window=1000 if history else None)
    for i in range(jobs_each):
        for tenant in "ab":
            sim.submit(queued(f"{tenant}{i}", tenant, at=i), ticks=5)
    held = {"a": 0, "b": 0}
    while all(any(job.tenant == t for job in sim.queue) for t in "ab") or sim.now == 0:
        sim.step()
        for job, _ in sim.live.values():
            held[job.tenant] += job.workers
    return held["a"] / held["b"]


@pytest.mark.parametrize("weights,ratio", [((1, 1), 1.0), ((2, 1), 2.0), ((1, 2), 0.5),
                                           ((3, 1), 3.0)])
def test_with_history_weights_hold_when_two_jobs_fit_at_a_time(weights, ratio):
    assert contention(weights, 30, history=True) == pytest.approx(ratio, rel=0.1)


def test_the_issues_eight_jobs_each_within_a_quarter():
    """8 jobs each: the first pass, with no history yet, starts one of each,
    which weighs on so short a run; still within the issue's 25%."""
    assert contention((1, 1), 8, history=True) == pytest.approx(1.0, rel=0.25)
    assert contention((2, 1), 8, history=True) == pytest.approx(2.0, rel=0.25)


def test_without_history_two_slots_alternate_whatever_the_weights():
    """Why `attained` exists: on current shares alone, each freed slot goes
    to the tenant that just lost one."""
    assert contention((2, 1), 30, history=False) == 1.0
