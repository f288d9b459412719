"""Reconciliation after a control-plane restart, against the session's real
Ray cluster: a job whose group was started but never told to train (the
control plane died between the two) is not reattached to idle ranks, where
it would sit STARTING forever holding its workers (seen in tests/soak); its
group is cleared and the same attempt launched again: nothing of it trained,
so no restart is counted and the job is launched once (a leader lost
mid-launch, tests/soak's replicas)."""

from __future__ import annotations

import time

import pytest

from service.run.launch import group_name
from service.settings import Settings
from service.states import JobState as S
from service.store import JobStore
from service.supervisor import Supervisor
from workers.cluster.group import WorkerGroup
from workers.schema import JobSpec

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]


def test_a_group_that_never_began_training_is_launched_again_as_the_same_attempt(tmp_path):
    settings = Settings(data_dir=str(tmp_path), admin_key="test-admin-key", secret="test-secret",
                        rank_pool_size=0)
    store = JobStore(settings.resolved_database_url)
    store.migrate()
    supervisor = Supervisor(settings, store)
    spec = JobSpec.model_validate({"name": "idle", "workers": 1, "resources_per_worker": {"cpu": 1},
                                   "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
                                   "train": {"steps": 4, "global_batch_size": 4}})
    job, _ = store.create_job(tenant="admin", name="idle", spec=spec)
    store.transition(job.id, S.STARTING, expect=S.QUEUED, workers=1, attempt=1, reason="admitted")
    name = group_name(job.id, 1)
    WorkerGroup(1, cpus_per_worker=1, name_prefix=name, detached=True).start()  # no start_training
    assert supervisor.leadership.acquire()  # reconcile writes as the leader
    try:
        supervisor.leader.reconcile()
        deadline = time.monotonic() + 180
        while not (after := store.get_job(job.id)).state.is_terminal and time.monotonic() < deadline:
            time.sleep(0.5)
        assert after.state is S.SUCCEEDED, (after.state, after.error)
        assert (after.attempt, after.restarts) == (1, 0)  # launched once: the same attempt
        reasons = [e.reason for e in store.events(job.id)]
        assert any(f"launch of worker group {name} was cut short" in r for r in reasons), reasons
        assert not any(e.to_state is S.RESTARTING for e in store.events(job.id))
        assert store.metrics(job.id)[-1]["step"] == 4
    finally:
        supervisor.stop()
        WorkerGroup.reclaim(name, 1).shutdown()
        store.dispose()
