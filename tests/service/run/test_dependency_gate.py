"""The scheduling pass with jobs that wait on jobs (service/run/dependency_gate.py),
on a real store (SQLite and Postgres) and a made-up cluster of 8 CPUs (no
Ray): a job waits QUEUED, with its reason, until what it names succeeded;
fails naming the job when one did not; an `init.job` it waited for must
then hold the step it starts from. Its forecast gives no start, the reason."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from store_harness import SPEC

import service.run.scheduling_pass as scheduling_pass
import service.run.start_forecast as start_forecast
from checkpoints import CheckpointTarget
from checkpoints.manifest import Manifest
from service.run.scheduling_pass import SchedulingPass
from service.run.start_forecast import StartForecasts
from service.settings import Settings
from service.states import JobState as S
from workers.schema import InitSpec

SECRET = "test-secret"


def capacity(exclude=frozenset()) -> dict[str, float]:
    return {"cpu": 8.0, "gpu": 0.0}


@pytest.fixture
def target(tmp_path):
    root = f"file://{tmp_path}/storage"
    return lambda job_id, tenant="acme": CheckpointTarget(root=root, tenant=tenant, job=job_id,
                                                          secret=SECRET)


@pytest.fixture
def admission(store, tmp_path, target, monkeypatch):
    monkeypatch.setattr(scheduling_pass, "cluster_capacity", capacity)
    monkeypatch.setattr(start_forecast, "cluster_capacity", capacity)
    return SchedulingPass(Settings(data_dir=str(tmp_path)), store,
                     checkpoints_of=lambda job: target(job.id, job.tenant).open_store())


def submit(store, name: str, **fields):
    spec = SPEC.model_copy(update={"name": name, "workers": 1, **fields})
    job, _ = store.create_job(tenant="acme", name=name, spec=spec)
    return job


def finish(store, job, to: S = S.SUCCEEDED) -> None:
    store.transition(job.id, S.RUNNING, reason="test")
    store.transition(job.id, to, reason="test")


def started(admission) -> set[str]:
    return {job.id for job in admission.run_pass()}


def test_a_job_waits_for_its_dependencies_then_starts(store, admission):
    first = submit(store, "first")
    second = submit(store, "second")
    waiting = submit(store, "waiting", after=[first.id, second.id])
    assert started(admission) == {first.id, second.id}  # as they were when the pass read them:
    assert admission.waiting[waiting.id] == (f"waiting for {first.id} (QUEUED), "
                                             f"{second.id} (QUEUED)")
    forecast = StartForecasts(admission, store).of(waiting.id)
    assert forecast is not None and forecast.expected_start is None
    assert forecast.reason == admission.waiting[waiting.id]
    store.transition(first.id, S.RUNNING, reason="test")
    assert started(admission) == set()
    assert admission.waiting[waiting.id] == (f"waiting for {first.id} (RUNNING), "
                                             f"{second.id} (STARTING)")
    store.transition(first.id, S.SUCCEEDED, reason="test")
    assert started(admission) == set()
    assert admission.waiting[waiting.id] == f"waiting for {second.id} (STARTING)"
    finish(store, second)
    assert started(admission) == {waiting.id}
    assert waiting.id not in admission.waiting


def test_a_job_whose_dependency_did_not_succeed_fails_naming_it(store, admission):
    cancelled = submit(store, "cancelled", priority=0, workers=1)
    store.transition(cancelled.id, S.CANCELLED, reason="test")
    waiting = submit(store, "waiting", after=[cancelled.id])
    chained = submit(store, "chained", after=[waiting.id])
    started(admission)
    failed = store.get_job(waiting.id)
    assert failed.state is S.FAILED and failed.error == f"dependency {cancelled.id} CANCELLED"
    assert store.events(waiting.id)[-1].reason == failed.error
    started(admission)  # the next pass: the job waiting on the failed one fails in turn
    assert store.get_job(chained.id).error == f"dependency {waiting.id} FAILED"


def test_a_job_that_ran_once_is_not_held_back_again(store, admission):
    """Preempted back to the queue, its dependency deleted since: it ran on
    what it waited for, and starts again."""
    first = submit(store, "first")
    after = submit(store, "after", after=[first.id])
    started(admission)
    finish(store, first)
    assert started(admission) == {after.id}
    store.transition(after.id, S.PREEMPTING, reason="test")
    store.transition(after.id, S.QUEUED, reason="test")
    store.delete_job(first.id)
    assert started(admission) == {after.id}


def commit(target, job_id: str, step: int) -> None:
    """A committed step (a signed manifest; no files: nothing here loads it)."""
    store = target(job_id).open_store()
    store.fs.makedirs(store.layout.step(step), exist_ok=True)
    store.commit(Manifest(
        tenant="acme", job=job_id, step=step, world_size=1,
        created_at=datetime.now(UTC).isoformat(), files={}))


def test_an_init_job_waited_for_must_hold_the_step_the_job_starts_from(store, admission, target):
    source = submit(store, "source")
    latest = submit(store, "latest", init=InitSpec(job=source.id))
    named = submit(store, "named", init=InitSpec(job=source.id, step=7), after=[source.id])
    absent = submit(store, "absent", init=InitSpec(job=source.id, step=9), after=[source.id])
    assert started(admission) == {source.id}
    assert admission.waiting[latest.id] == f"waiting for {source.id} (QUEUED)"
    for step in (5, 7):
        commit(target, source.id, step)
    finish(store, source)
    assert started(admission) == {latest.id, named.id}
    assert any(e.reason == f"init.job {source.id} succeeded: the job starts from its latest "
                           "committed step, 7" for e in store.events(latest.id))
    failed = store.get_job(absent.id)
    assert failed.state is S.FAILED
    assert failed.error == (f"init.step: job {source.id} SUCCEEDED without a committed checkpoint "
                            "at step 9 (it has [5, 7])")

    bare = submit(store, "bare")  # succeeds with no checkpoint at all
    waits = submit(store, "waits", init=InitSpec(job=bare.id))
    started(admission)
    finish(store, bare)
    started(admission)
    assert store.get_job(waits.id).error == (f"init.job {bare.id} SUCCEEDED without a committed "
                                             "checkpoint: no weights to start from")
