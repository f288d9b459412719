"""Reconciliation after a control-plane restart, against the session's real
Ray cluster: a job whose group was started but never told to train (the
control plane died between the two) is not reattached to idle ranks, where
it would sit STARTING forever holding its workers (seen in tests/soak); its
group is cleared and the job restarts."""

from __future__ import annotations

import pytest
import ray

from service.run.launch import group_name
from service.settings import Settings
from service.states import JobState as S
from service.store import JobStore
from service.supervisor import Supervisor
from workers.cluster.group import WorkerGroup
from workers.spec import JobSpec

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]


def test_a_group_that_never_began_training_is_cleared_and_the_job_restarts(tmp_path):
    settings = Settings(data_dir=str(tmp_path), admin_key="test-admin-key", secret="test-secret",
                        restart_backoff_s=60.0)  # the restart waits: the test sees RESTARTING
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
        supervisor.reconcile()
        after = store.get_job(job.id)
        assert after.state is S.RESTARTING, after.state
        reasons = [e.reason for e in store.events(job.id)]
        assert any(f"worker group {name} is gone" in r for r in reasons), reasons
        with pytest.raises(ValueError):
            ray.get_actor(f"{name}-rank-0", namespace="brigade")
    finally:
        supervisor.stop()
        WorkerGroup.reclaim(name, 1).shutdown()
        store.dispose()
