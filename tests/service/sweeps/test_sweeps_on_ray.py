"""Sweeps run for real: a started supervisor's loop runs the controller's
pass, its trials are jobs trained by rank actors on the session's Ray
cluster. A grid sweep survives a restart of the control plane mid-sweep (a
new supervisor on the same store) with no trial lost or doubled, the trials
that were training reattached, not launched again; ASHA prunes
a diverging trial, which stops PRUNED with its checkpoint kept."""

from __future__ import annotations

import time

import pytest

from service.run.launch import group_name
from service.states import JobState as S
from service.states import SweepState, TrialState
from service.supervisor import Supervisor
from tests.api.conftest import make_supervisor
from workers.schema.sweep import SweepSpec

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

BASE = {"workers": 1, "resources_per_worker": {"cpu": 1},
        "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
        "train": {"steps": 3, "global_batch_size": 4}}
# The restart test's trials: long enough that both first trials still train when the control
# plane stops (they start up to a launch apart), on a machine twice as slow as this one too.
RESTART_STEPS = 120


def wait_for(read, until, timeout_s=180.0):
    deadline = time.monotonic() + timeout_s
    while not until(found := read()):
        assert time.monotonic() < deadline, f"still {found}"
        time.sleep(0.1)
    return found


def started(supervisor: Supervisor) -> Supervisor:
    supervisor.start()
    return supervisor


def test_a_grid_sweep_runs_its_trials_on_ray_across_a_restart(tmp_path):
    """The control plane stops while the first two trials train; the new one
    reattaches to their worker groups (their first attempt runs on: attempt 1,
    no restart, one launch each), and the sweep ends with each trial once."""
    spec = SweepSpec.model_validate({
        "name": "grid", "base": {**BASE, "train": {"steps": RESTART_STEPS, "global_batch_size": 4}},
        "sampler": "grid", "max_trials": 3, "max_concurrent": 2,
        "space": {"train.lr": {"grid": [1e-3, 3e-3, 1e-2]}}, "objective": {"metric": "loss"}})
    first = started(make_supervisor(tmp_path, export_on_success=""))
    store = first.store
    try:
        sweep, _ = first.sweeps.submit("acme", spec, None)

        def trial_jobs():
            return [store.get_job(t.job_id) for t in store.sweeps.trials(sweep.id) if t.job_id]

        wait_for(trial_jobs, lambda jobs: len(jobs) == 2
                 and all(j.state is S.RUNNING and j.step >= 1 for j in jobs))
        first.stop()  # the control plane goes down mid-sweep: its jobs' groups live on
        at_stop = trial_jobs()
        # Still training as it stopped (RESTART_STEPS is long enough): each is reattached or
        # relaunched by the next control plane, which is what this test tells apart.
        assert all(j.state is S.RUNNING and j.step < RESTART_STEPS for j in at_stop), at_stop
        second = started(Supervisor(first.settings, store))  # a restart on the same store
        try:
            done = wait_for(lambda: store.sweeps.get(sweep.id), lambda s: s.state.is_terminal)
            view = second.sweeps.view("acme", sweep.id)
        finally:
            second.stop()
        assert done.state is SweepState.SUCCEEDED, (done.error, view["trials"])
        jobs, total = store.list_jobs(tenant="acme", sweep=sweep.id)
        assert total == 3 and sorted(j.name for j in jobs) == ["grid-t0", "grid-t1", "grid-t2"]
        assert all(j.state is S.SUCCEEDED and j.step == RESTART_STEPS for j in jobs)
        for job in jobs:  # each launched once, its first attempt run to the end, every step once
            events = store.events(job.id)
            assert (job.attempt, job.restarts) == (1, 0), (job, [e.reason for e in events])
            assert [e.to_state for e in events if e.from_state != e.to_state] == [
                S.QUEUED, S.STARTING, S.RUNNING, S.SUCCEEDED], [e.reason for e in events]
            assert [r["step"] for r in store.metrics(job.id)] == list(range(1, RESTART_STEPS + 1))
        for job in at_stop:  # the two that trained across the restart: reattached
            reasons = [e.reason for e in store.events(job.id)]
            assert ("reconciled after a control-plane restart: reattached to worker group "
                    f"{group_name(job.id, 1)}") in reasons, reasons
        assert view["counts"]["SUCCEEDED"] == view["counts"]["total"] == 3
        assert sorted(t["params"]["train.lr"] for t in view["trials"]) == [1e-3, 3e-3, 1e-2]
        for trial in view["trials"]:  # the objective: the newest row's loss
            assert trial["objective"] == store.metrics(trial["job"])[-1]["loss"]
        best = min(view["trials"], key=lambda t: t["objective"])
        assert view["best"]["job"] == best["job"] and view["best"]["objective"] == best["objective"]
        history = second.sweeps.studies.study(sweep.study, spec).get_trials()
        assert len(history) == 3 and all(t.value is not None for t in history)
    finally:
        store.dispose()


def test_asha_prunes_a_diverging_trial_which_stops_with_its_checkpoint_kept(tmp_path):
    # seed 1: the grid's first point is 1e-3, so the diverging 10.0 runs second, against it
    spec = SweepSpec.model_validate({
        "name": "asha", "sampler": "grid", "seed": 1, "max_trials": 2, "max_concurrent": 1,
        "base": {**BASE, "train": {"steps": 16, "global_batch_size": 4},
                 "checkpoint": {"every_steps": 2}},
        "space": {"train.lr": {"grid": [1e-3, 10.0]}}, "objective": {"metric": "loss"},
        "pruner": "asha", "pruner_options": {"min_steps": 4, "reduction_factor": 2}})
    supervisor = started(make_supervisor(tmp_path))
    store = supervisor.store
    try:
        sweep, _ = supervisor.sweeps.submit("acme", spec, None)
        done = wait_for(lambda: store.sweeps.get(sweep.id), lambda s: s.state.is_terminal)
        assert done.state is SweepState.SUCCEEDED, done.error
        good, bad = store.sweeps.trials(sweep.id)
        assert (good.params, good.state) == ({"train.lr": 1e-3}, TrialState.SUCCEEDED)
        assert (bad.params, bad.state) == ({"train.lr": 10.0}, TrialState.PRUNED)
        job = wait_for(lambda: store.get_job(bad.job_id), lambda j: j.state.is_terminal, 60)
        assert job.state is S.PRUNED and 4 <= bad.pruned_step < 16 and job.step < 16
        assert bad.objective > good.objective
        reasons = [e.reason for e in store.events(job.id) if e.to_state is S.PRUNING]
        assert reasons and reasons[0].startswith(f"pruned at step {bad.pruned_step}: ")
        kept = [c["step"] for c in supervisor.views.checkpoints("acme", job.id)]
        # kept, not removed (a save in flight as it stopped may commit one step later still)
        assert kept and job.latest_checkpoint["step"] in kept
    finally:
        supervisor.stop()
        store.dispose()
