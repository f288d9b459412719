"""The sweep controller's pass on a real store and a real (unstarted)
supervisor, without Ray: trial jobs are moved through their states by the
test as a runner would, and their metrics rows written as the ranks would.
The seam is the submit (`StoreJobs`): the job goes to the store directly,
not through the cluster checks, which need Ray (tests/service/sweeps/test_sweeps_on_ray.py
and tests/api/test_sweeps.py run sweeps on Ray)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState as OptunaState

from service.settings import Settings
from service.states import JobState as S
from service.states import SweepState, TrialState
from service.store.errors import SweepNotFound, SweepUnfinished
from service.store.tenants import ADMIN_TENANT
from service.supervisor import Supervisor
from service.sweeps.controller import idempotency_key
from service.sweeps.service import SweepService
from service.sweeps.study import distributions, open_storage, study_url
from tests.api.conftest import ADMIN_KEY, make_supervisor
from workers.schema import JobSpec, SpecError
from workers.schema.sweep import SweepSpec

BASE = {"model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
        "train": {"steps": 3, "global_batch_size": 4}}


def sweep_spec(**changes) -> SweepSpec:
    return SweepSpec.model_validate({
        "name": "lr", "base": BASE, "sampler": "grid", "objective": {"metric": "loss"},
        "space": {"train.lr": {"grid": [1e-3, 3e-3, 1e-2]}}, "max_trials": 3,
        "max_concurrent": 2, **changes})


class StoreJobs:
    """The supervisor's job calls, its submit straight to the store (`checked`: no cluster check)."""

    def __init__(self, supervisor: Supervisor):
        self.supervisor, self.store = supervisor, supervisor.store
        self.submits = 0

    def submit(self, tenant, spec, idempotency_key, *, sweep=None):
        self.submits += 1
        spec = checked(tenant, spec)
        return self.store.create_job(tenant=tenant, name=spec.name, spec=spec, sweep=sweep,
                                     priority=spec.priority, idempotency_key=idempotency_key)

    def cancel(self, tenant, job_id):
        return self.supervisor.requests.cancel(tenant, job_id)

    def prune(self, job_id, step, reason, decided_at=None):
        return self.supervisor.requests.prune(job_id, step, reason, decided_at)

    def delete(self, tenant, job_id):
        return self.supervisor.requests.delete(tenant, job_id)


def checked(tenant: str, spec: JobSpec) -> JobSpec:
    """The submit checks as far as they need no cluster: a spec with 7 steps is refused."""
    if spec.train.steps == 7:
        raise SpecError("train.steps", "train.steps: 7 is unlucky")
    return spec


@pytest.fixture(scope="module")
def empty_studies(tmp_path_factory) -> Path:
    """An empty Optuna storage file, made once (its schema takes seconds to make)."""
    path = tmp_path_factory.mktemp("studies") / "brigade-optuna.db"
    open_storage(f"sqlite:///{path.with_name('brigade.db')}").engine.dispose()
    return path


@pytest.fixture
def supervisor(tmp_path, empty_studies):
    shutil.copy(empty_studies, tmp_path / empty_studies.name)  # the store's sibling file
    supervisor = make_supervisor(tmp_path)  # not started: the test runs each pass
    assert supervisor.leadership.acquire()  # a prune writes as the leader
    yield supervisor
    supervisor.store.dispose()


def service_of(supervisor: Supervisor) -> tuple[SweepService, StoreJobs]:
    jobs = StoreJobs(supervisor)
    return SweepService(supervisor.store, jobs, check=checked), jobs


def run_job(store, job_id: str, losses: list[float], end: S | None = S.SUCCEEDED) -> None:
    """What a runner and the ranks would write: started, a row a step, ended."""
    store.transition(job_id, S.STARTING, reason="admitted")
    store.transition(job_id, S.RUNNING, reason="training", workers=1)
    store.record_metrics(job_id, 1, [{"step": i + 1, "loss": v} for i, v in enumerate(losses)])
    store.update_job(job_id, step=len(losses))
    if end is not None:
        store.transition(job_id, end, reason="ended by the test")


def test_a_grid_sweep_runs_its_trials_as_jobs_max_concurrent_at_a_time(supervisor):
    service, _ = service_of(supervisor)
    store = supervisor.store
    sweep, created = service.submit("acme", sweep_spec(), "key-1")
    assert created and sweep.state is SweepState.QUEUED
    assert service.submit("acme", sweep_spec(), "key-1") == (sweep, False)

    service.run_pass()
    trials = store.sweeps.trials(sweep.id)
    assert [t.number for t in trials] == [0, 1] and all(t.job_id for t in trials)
    jobs, _ = store.list_jobs(tenant="acme", sweep=sweep.id)
    assert sorted(j.name for j in jobs) == ["lr-t0", "lr-t1"]
    assert {j.idempotency_key for j in jobs} == {idempotency_key(sweep.id, 0),
                                                 idempotency_key(sweep.id, 1)}
    assert all(j.spec.train.lr == t.params["train.lr"] for t in trials for j in jobs
               if j.id == t.job_id)
    assert service.get("acme", sweep.id).state is SweepState.RUNNING
    service.run_pass()
    assert len(store.sweeps.trials(sweep.id)) == 2  # two live: the third waits

    run_job(store, trials[0].job_id, [2.0, 1.5, 1.25])
    service.run_pass()
    trials = store.sweeps.trials(sweep.id)
    assert (trials[0].state, trials[0].objective) == (TrialState.SUCCEEDED, 1.25)
    assert len(trials) == 3 and trials[2].state is TrialState.QUEUED
    run_job(store, trials[1].job_id, [2.0, 1.0], end=S.FAILED)
    run_job(store, trials[2].job_id, [1.5, 1.1])
    service.run_pass()

    view = service.view("acme", sweep.id)
    assert view["state"] == "SUCCEEDED" and view["finished_at"] is not None
    assert view["counts"] == {"QUEUED": 0, "RUNNING": 0, "SUCCEEDED": 2, "FAILED": 1,
                              "PRUNED": 0, "CANCELLED": 0, "total": 3}
    assert view["best"] == {"job": trials[2].job_id, "number": 2,
                            "params": trials[2].params, "objective": 1.1}
    assert [t["name"] for t in view["trials"]] == ["lr-t0", "lr-t1", "lr-t2"]
    assert view["trials"][1]["objective"] == 1.0 and view["trials"][0]["step"] == 3
    assert view["objective"] == {"metric": "loss", "mode": "min"}
    study = service.studies.study(sweep.study, sweep.spec)
    assert [t.state for t in study.get_trials()] == [
        OptunaState.COMPLETE, OptunaState.FAIL, OptunaState.COMPLETE]

    assert [s.id for s in service.list("acme")] == [sweep.id]
    assert service.list("beta") == [] and service.list(ADMIN_TENANT)[0].id == sweep.id
    with pytest.raises(SweepNotFound):
        service.view("beta", sweep.id)


def test_asha_prunes_a_trial_behind_the_others_and_the_next_one_starts(supervisor):
    service, _ = service_of(supervisor)
    store = supervisor.store
    spec = sweep_spec(max_concurrent=1, pruner="asha",
                      pruner_options={"min_steps": 1, "reduction_factor": 2})
    sweep, _ = service.submit("acme", spec, None)
    service.run_pass()
    first = store.sweeps.trials(sweep.id)[0]
    run_job(store, first.job_id, [1.0, 0.8, 0.6])
    service.run_pass()
    second = store.sweeps.trials(sweep.id)[1]
    run_job(store, second.job_id, [9.0], end=None)  # far behind at the first rung
    service.run_pass()

    pruned = store.sweeps.trials(sweep.id)[1]
    assert (pruned.state, pruned.pruned_step, pruned.objective) == (TrialState.PRUNED, 1, 9.0)
    job = store.get_job(second.job_id)
    assert job.state is S.PRUNING  # its runner stops it at once, then PRUNED
    assert store.events(job.id)[-1].reason.startswith("pruned at step 1: ")
    third = store.sweeps.trials(sweep.id)[2]
    assert third.job_id and third.state is TrialState.QUEUED  # the next trial at once
    trial = service.studies.study(sweep.study, spec).get_trials()[1]
    assert trial.state is OptunaState.PRUNED and trial.intermediate_values == {1: 9.0}

    run_job(store, third.job_id, [1.0, 0.7, 0.5])  # the budget's last trial ends
    service.run_pass()
    assert store.sweeps.get(sweep.id).state is SweepState.RUNNING  # a trial's job still stopping
    store.transition(second.job_id, S.PRUNED, reason="its ranks stopped")
    service.run_pass()
    assert store.sweeps.get(sweep.id).state is SweepState.SUCCEEDED  # every job of it ended


def test_a_pruned_trials_ranks_are_told_before_the_store_writes_its_pruning(supervisor):
    """The verdict goes to the job's runner (`stop_now`) while the job is still RUNNING in
    the store, then PRUNING is written, dated at the verdict: the stop waits on no write."""
    store = supervisor.store
    told: list[tuple[str, S, float]] = []
    service = SweepService(store, StoreJobs(supervisor), check=checked, stop_now=lambda job_id: told.append(
        (job_id, store.get_job(job_id).state, time.time())))
    spec = sweep_spec(max_concurrent=1, pruner="asha",
                      pruner_options={"min_steps": 1, "reduction_factor": 2})
    sweep, _ = service.submit("acme", spec, None)
    service.run_pass()
    run_job(store, store.sweeps.trials(sweep.id)[0].job_id, [1.0, 0.8, 0.6])
    service.run_pass()
    second = store.sweeps.trials(sweep.id)[1].job_id
    run_job(store, second, [9.0], end=None)
    before = time.time()
    service.run_pass()

    assert [(job, state) for job, state, _ in told] == [(second, S.RUNNING)]
    pruning = next(e for e in store.events(second) if e.to_state is S.PRUNING)
    assert before <= pruning.time.timestamp() <= told[0][2]  # the verdict's time, not the write's
    assert store.get_job(second).state is S.PRUNING


def more_rows(store, job_id: str, rows: dict[int, float]) -> None:
    """A running job's next metrics rows (step -> loss), as its ranks would write them."""
    store.record_metrics(job_id, 1, [{"step": step, "loss": v} for step, v in rows.items()])
    store.update_job(job_id, step=max(rows))


def test_the_median_pruner_prunes_a_trial_behind_the_median_after_startup_and_warmup(supervisor):
    """`pruner: median` (Optuna's MedianPruner): no trial is pruned before
    `startup_trials` trials have finished, nor at a step before its
    `warmup_steps`; after both, a trial whose best value is worse than the
    finished trials' median at its step is pruned (PRUNING, `pruned at step N`
    naming the median pruner) and one at or better than it runs on."""
    service, _ = service_of(supervisor)
    store = supervisor.store
    spec = sweep_spec(max_trials=4, max_concurrent=2, pruner="median",
                      pruner_options={"startup_trials": 2, "warmup_steps": 2},
                      space={"train.lr": {"grid": [1e-3, 3e-3, 1e-2, 3e-2]}})
    sweep, _ = service.submit("acme", spec, None)
    service.run_pass()

    def trial(number: int):
        return store.sweeps.trials(sweep.id)[number]

    behind = trial(1).job_id
    run_job(store, behind, [9.0], end=None)  # far behind, but no trial has finished yet
    service.run_pass()
    assert (trial(1).state, store.get_job(behind).state) == (TrialState.RUNNING, S.RUNNING)

    run_job(store, trial(0).job_id, [1.0, 0.8, 0.6, 0.5, 0.4, 0.3])
    service.run_pass()
    assert trial(0).state is TrialState.SUCCEEDED and trial(2).job_id  # the next one at once
    more_rows(store, behind, {2: 9.0})  # one trial finished: still short of startup_trials (2)
    service.run_pass()
    assert (trial(1).state, store.get_job(behind).state) == (TrialState.RUNNING, S.RUNNING)

    run_job(store, trial(2).job_id, [1.2, 1.0, 0.9, 0.8, 0.7, 0.6])
    service.run_pass()
    assert trial(2).state is TrialState.SUCCEEDED and trial(3).job_id
    ahead = trial(3).job_id
    run_job(store, ahead, [5.0], end=None)  # behind the median 1.1 at step 1: in its warmup
    service.run_pass()
    assert (trial(3).state, store.get_job(ahead).state) == (TrialState.RUNNING, S.RUNNING)

    more_rows(store, behind, {3: 9.0})  # 9.0 against the median 0.75 at step 3: pruned
    more_rows(store, ahead, {2: 0.85})  # 0.85 against the median 0.9 at step 2: runs on
    service.run_pass()
    pruned = trial(1)
    assert (pruned.state, pruned.pruned_step, pruned.objective) == (TrialState.PRUNED, 3, 9.0)
    assert store.get_job(behind).state is S.PRUNING  # its runner stops it, then PRUNED
    reason = store.events(behind)[-1].reason
    assert reason.startswith("pruned at step 3: sweep lr's median pruner: loss 9 "), reason
    assert (trial(3).state, store.get_job(ahead).state) == (TrialState.RUNNING, S.RUNNING)
    assert all(e.to_state is not S.PRUNING for e in store.events(ahead))

    more_rows(store, ahead, {3: 0.7, 4: 0.5})
    store.transition(ahead, S.SUCCEEDED, reason="ended by the test")
    store.transition(behind, S.PRUNED, reason="its group stopped")
    service.run_pass()
    view = service.view("acme", sweep.id)
    assert view["state"] == "SUCCEEDED"
    assert [t["state"] for t in view["trials"]] == ["SUCCEEDED", "PRUNED", "SUCCEEDED", "SUCCEEDED"]
    assert view["best"]["number"] == 0 and view["best"]["objective"] == 0.3
    history = service.studies.study(sweep.study, spec).get_trials()
    assert [t.state for t in history] == [OptunaState.COMPLETE, OptunaState.PRUNED,
                                          OptunaState.COMPLETE, OptunaState.COMPLETE]
    assert history[1].intermediate_values == {1: 9.0, 2: 9.0, 3: 9.0}


def test_a_point_whose_spec_is_refused_is_a_failed_trial_and_the_sweep_ends(supervisor):
    """Every value passed the submit checks alone; a point is still refused when
    its values are refused together (pydantic's, at the job's field) or when a
    check answers otherwise by the time the trial is submitted."""
    service, _ = service_of(supervisor)
    spec = sweep_spec(space={"model.d_model": {"grid": [30, 34]}, "model.n_heads": {"grid": [4]}},
                      max_concurrent=2)
    sweep, _ = service.submit("acme", spec, None)  # 30 and 34 with 2 heads, 4 heads with 32: fine
    service.run_pass()
    trials = supervisor.store.sweeps.trials(sweep.id)
    assert len(trials) == 2 and all(t.state is TrialState.FAILED and t.job_id is None for t in trials)
    assert all(t.error.startswith("model.d_model: ") and "divisible by model.n_heads (4)" in t.error
               for t in trials)
    done = service.get("acme", sweep.id)
    assert done.state is SweepState.FAILED and "no trial succeeded (2 FAILED)" in done.error
    assert supervisor.store.list_jobs(tenant=None, sweep=sweep.id)[1] == 0

    lenient = SweepService(supervisor.store, StoreJobs(supervisor), check=lambda tenant, spec: spec)
    sweep, _ = lenient.submit("acme", sweep_spec(space={"train.steps": {"grid": [7]}}), None)
    lenient.run_pass()  # the trial's submit checks (`checked`) refuse what the sweep's passed
    (trial,) = supervisor.store.sweeps.trials(sweep.id)
    assert trial.state is TrialState.FAILED and trial.error == "train.steps: train.steps: 7 is unlucky"


def test_submit_refuses_a_value_of_the_space_naming_the_field_and_the_value(supervisor):
    """Each value of a grid or a choice and each bound of a range, alone on the
    base, goes through the submit checks: pydantic's and the service's."""
    service, _ = service_of(supervisor)
    for space, field, says in (
            ({"train.steps": {"grid": [3, 7]}}, "space.train.steps",
             "space.train.steps: grid value 7 is refused: train.steps: train.steps: 7 is unlucky"),
            ({"train.steps": {"int": [0, 5]}}, "space.train.steps",
             "space.train.steps: int bound 0 is refused: train.steps: Input should be greater than "
             "or equal to 1"),
            ({"train.lr": {"uniform": [0.001, 11.0]}}, "space.train.lr",
             "space.train.lr: uniform bound 11.0 is refused: train.lr: "),
            ({"model.n_heads": {"choice": [2, 3]}}, "space.model.n_heads",
             "space.model.n_heads: choice value 3 is refused: model.d_model: ")):
        with pytest.raises(SpecError) as refused:
            service.submit("acme", sweep_spec(space=space, sampler="random"), None)
        assert refused.value.field == field and str(refused.value).startswith(says), str(refused.value)
    assert supervisor.store.sweeps.list(tenant=None) == []


def test_a_restart_mid_sweep_loses_or_doubles_no_trial(tmp_path, store, empty_studies):
    """On SQLite and Postgres (the `store` fixture's legs): the study's history
    is in the database, read again by a new service."""
    if store.dialect == "sqlite":
        shutil.copy(empty_studies, study_url(store.url)[0].removeprefix("sqlite:///"))
    settings = Settings(data_dir=str(tmp_path), admin_key=ADMIN_KEY, secret="test-secret")
    supervisor = Supervisor(settings, store)
    spec = sweep_spec(sampler="tpe", seed=3, max_concurrent=1, max_trials=3,
                      space={"train.lr": {"loguniform": [1e-4, 1e-1]}})
    service, _ = service_of(supervisor)
    sweep, _ = service.submit("acme", spec, None)
    service.run_pass()
    first = store.sweeps.trials(sweep.id)[0]
    run_job(store, first.job_id, [1.0, 0.5])
    # A crash between asking the study and writing the trial's row:
    asked = service.studies.study(sweep.study, spec).ask(distributions(spec))

    restarted, _ = service_of(supervisor)  # a new service on the same database
    restarted.run_pass()
    trials = store.sweeps.trials(sweep.id)
    assert [t.number for t in trials] == [0, 1] and trials[0].state is TrialState.SUCCEEDED
    assert trials[1].number == asked.number and trials[1].params == asked.params
    # A crash between writing a row and its job: submitted again, the same job.
    job_id = trials[1].job_id
    store.sweeps.update_trial(sweep.id, 1, job_id=None)
    restarted.run_pass()
    assert store.sweeps.trials(sweep.id)[1].job_id == job_id
    assert store.list_jobs(tenant=None, sweep=sweep.id)[1] == 2

    run_job(store, job_id, [0.7, 0.4])
    # A crash between telling the study and writing the trial's row: the row follows its job.
    restarted.studies.study(sweep.study, spec).tell(1, 0.4)
    restarted.run_pass()
    assert (store.sweeps.trials(sweep.id)[1].state, store.sweeps.trials(sweep.id)[1].objective) \
        == (TrialState.SUCCEEDED, 0.4)
    run_job(store, store.sweeps.trials(sweep.id)[2].job_id, [0.9, 0.8])
    restarted.run_pass()
    history = service_of(supervisor)[0].studies.study(sweep.study, spec).get_trials()
    assert [t.state for t in history] == [OptunaState.COMPLETE] * 3
    assert [t.value for t in history] == [0.5, 0.4, 0.8]
    assert store.list_jobs(tenant=None, sweep=sweep.id)[1] == 3
    assert store.sweeps.get(sweep.id).state is SweepState.SUCCEEDED


def test_cancel_stops_its_live_trials_and_delete_removes_them(supervisor):
    service, _ = service_of(supervisor)
    store = supervisor.store
    sweep, _ = service.submit("acme", sweep_spec(), None)
    service.run_pass()
    trials = store.sweeps.trials(sweep.id)
    run_job(store, trials[0].job_id, [1.0], end=None)
    with pytest.raises(SweepUnfinished):
        service.delete("acme", sweep.id)

    cancelled = service.cancel("acme", sweep.id)
    assert cancelled.state is SweepState.CANCELLED and service.cancel("acme", sweep.id) == cancelled
    assert [store.get_job(t.job_id).state for t in trials] == [S.CANCELLING, S.CANCELLED]
    assert {t.state for t in store.sweeps.trials(sweep.id)} == {TrialState.CANCELLED}
    service.run_pass()  # a cancelled sweep is not live: nothing more is asked
    assert len(store.sweeps.trials(sweep.id)) == 2
    with pytest.raises(SweepUnfinished, match="still stopping"):
        service.delete("acme", sweep.id)
    store.transition(trials[0].job_id, S.CANCELLED, reason="its group stopped")
    with pytest.raises(SweepNotFound):
        service.delete("beta", sweep.id)
    service.delete("acme", sweep.id)
    assert store.sweeps.get(sweep.id) is None
    assert store.list_jobs(tenant=None, sweep=sweep.id)[1] == 0
    with pytest.raises(KeyError):
        import optuna
        optuna.load_study(study_name=sweep.study, storage=service.studies.storage)


def test_submit_refuses_a_base_or_a_dependency_at_its_field(supervisor):
    service, _ = service_of(supervisor)
    with pytest.raises(SpecError) as refused:
        service.submit("acme", sweep_spec(base={**BASE, "train": {"steps": 7}}), None)
    assert refused.value.field == "base.train.steps"
    with pytest.raises(SpecError) as refused:
        service.submit("acme", sweep_spec(after=["j-000000000000"]), None)
    assert refused.value.field == "after.0"
    assert supervisor.store.sweeps.list(tenant=None) == []


def test_a_sweep_waits_for_its_after_jobs_and_fails_with_one(supervisor):
    service, _ = service_of(supervisor)
    store = supervisor.store
    first, _ = store.create_job(tenant="acme", name="prep", spec=JobSpec.model_validate(BASE))
    second, _ = store.create_job(tenant="acme", name="prep2", spec=JobSpec.model_validate(BASE))
    waits, _ = service.submit("acme", sweep_spec(after=[first.id]), None)
    fails, _ = service.submit("acme", sweep_spec(after=[second.id]), None)
    run_job(store, first.id, [1.0], end=None)
    store.transition(second.id, S.CANCELLED, reason="cancelled")
    service.run_pass()
    assert service.get("acme", waits.id).state is SweepState.QUEUED
    assert service.view("acme", waits.id)["waiting"] == f"waiting for {first.id} (RUNNING)"
    assert store.sweeps.trials(waits.id) == []
    failed = service.get("acme", fails.id)
    assert failed.state is SweepState.FAILED and second.id in failed.error
    store.transition(first.id, S.SUCCEEDED, reason="done")
    service.run_pass()
    assert len(store.sweeps.trials(waits.id)) == 2


def test_trials_inherit_the_sweeps_labels_as_they_stand_when_each_is_made(supervisor):
    """The trial's labels are the sweep's over the base's; a sweep relabelled
    (`PATCH /v1/sweeps/{id}`) gives its new labels to the trials made from then
    on, and those made already keep theirs; labels too many with the base's are
    refused at `labels`, as at submit."""
    service, _ = service_of(supervisor)
    store = supervisor.store
    spec = sweep_spec(base={**BASE, "labels": {"team": "nlp", "stage": "base"}},
                      labels={"stage": "sweep", "study": "lr"}, note="why", max_concurrent=2)
    sweep, _ = service.submit("acme", spec, None)
    assert (sweep.labels, sweep.note) == ({"stage": "sweep", "study": "lr"}, "why")
    service.run_pass()
    first = [store.get_job(t.job_id) for t in store.sweeps.trials(sweep.id)]
    assert [j.labels for j in first] == [{"team": "nlp", "stage": "sweep", "study": "lr"}] * 2

    changed = service.relabel("acme", sweep.id, {"labels": {"study": "lr-2"}, "note": None})
    assert (changed.labels, changed.note) == ({"study": "lr-2"}, None)
    assert [s.id for s in service.list("acme", labels=[("study", "lr-2")])] == [sweep.id]
    run_job(store, first[0].id, [3.0, 2.0])
    service.run_pass()
    third = store.get_job(store.sweeps.trial(sweep.id, 2).job_id)
    assert third.labels == {"team": "nlp", "stage": "base", "study": "lr-2"}
    assert store.get_job(first[1].id).labels == first[1].labels  # made already: its own

    with pytest.raises(SpecError) as refused:
        service.relabel("acme", sweep.id, {"labels": {f"k{i}": "v" for i in range(15)}})
    assert refused.value.field == "labels" and "17 labels" in str(refused.value)
    with pytest.raises(SweepNotFound):
        service.relabel("other", sweep.id, {"note": "not theirs"})
