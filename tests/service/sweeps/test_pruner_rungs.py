"""ASHA and the median pruner compare like with like: scripted loss curves,
their rows reaching the store in uneven batches as a runner's polls bring
them, on SQLite and Postgres studies.

Every trial's loss is one shared curve (the same batches at the same steps:
a batch's loss swings by more than the trials differ) plus the trial's own
offset, so the leader is better at every step. It must never be pruned, by
either pruner, however its rows are batched; a trial is pruned at a rung
step (ASHA) or at the first step it falls behind (median), on its value at
that step, and the example's rungs (4, 8, 16 for min_steps 4, reduction
factor 2, 24 steps) are the ones used."""

from __future__ import annotations

import math

import pytest
from optuna.trial import TrialState as OptunaState

from service.settings import Settings
from service.states import JobState as S
from service.states import TrialState
from service.supervisor import Supervisor
from service.sweeps.objective import ObjectiveSeries, rung_steps, to_report
from service.sweeps.service import SweepService
from tests.api.conftest import ADMIN_KEY
from tests.service.sweeps.test_sweep_controller import BASE, StoreJobs, checked
from workers.schema.sweep import Objective, SweepSpec

STEPS = 24
# lr -> the trial's offset from the shared curve: 1e-3 leads at every step, 2e-3 trails it by a
# hair (less than a batch's swing), the others by more
OFFSETS = {1e-3: 0.0, 2e-3: 0.05, 3e-3: 0.3, 4e-3: 0.8}
# each trial's rows reach the store in batches of these sizes (one batch a pass), in turn; an
# odd-numbered trial's in halves (its polls come oftener, or it trains slower)
BATCHES = [5, 4, 8, 1, 3, 9, 2, 7]


def shared(step: int) -> float:
    """The loss every trial's batch at `step` has in common: falling, swinging by +-0.3."""
    return 5.0 * math.exp(-step / 20) + 0.3 * math.sin(step * 1.7)


def loss(lr: float, step: int) -> float:
    return shared(step) + OFFSETS[lr]


def spec(pruner: str, options: dict) -> SweepSpec:
    return SweepSpec.model_validate({
        "name": "curves", "sampler": "grid", "seed": 0, "max_trials": 4, "max_concurrent": 2,
        "base": {**BASE, "train": {"steps": STEPS, "global_batch_size": 4}},
        "space": {"train.lr": {"grid": sorted(OFFSETS)}}, "objective": {"metric": "loss"},
        "pruner": pruner, "pruner_options": options})


def run_sweep(store, tmp_path, sweep_spec: SweepSpec):
    """Run the sweep pass by pass, each live trial's job fed its next batch of rows before
    each pass, as its runner would; a pruned job stops there. The trials' rows, and the
    study's trials."""
    # a lease that outlasts the test on a loaded machine (no renewal runs: not started)
    settings = Settings(data_dir=str(tmp_path), admin_key=ADMIN_KEY, secret="test-secret",
                        lease_s=3600)
    supervisor = Supervisor(settings, store)
    assert supervisor.leadership.acquire()  # a prune writes as the leader
    service = SweepService(store, StoreJobs(supervisor), check=checked)
    sweep, _ = service.submit("acme", sweep_spec, None)
    fed: dict[str, int] = {}  # job -> the steps its rows reached
    passes: dict[str, int] = {}  # job -> the batches it was fed
    for _ in range(200):
        service.run_pass()
        if store.sweeps.get(sweep.id).state.is_terminal:
            break
        for trial in store.sweeps.trials(sweep.id):
            job = store.get_job(trial.job_id) if trial.job_id else None
            if job is None or job.state.is_terminal:
                continue
            if job.state is S.PRUNING:  # its runner stops it where it is
                store.transition(job.id, S.PRUNED, reason="its group stopped")
                continue
            if job.state is S.QUEUED:
                store.transition(job.id, S.STARTING, reason="admitted")
                store.transition(job.id, S.RUNNING, reason="training", workers=1)
            lr, done = trial.params["train.lr"], fed.get(job.id, 0)
            batch = BATCHES[passes.get(job.id, 0) % len(BATCHES)]
            passes[job.id] = passes.get(job.id, 0) + 1
            upto = min(STEPS, done + (max(1, batch // 2) if trial.number % 2 else batch))
            store.record_metrics(job.id, 1, [{"step": s, "loss": loss(lr, s)}
                                             for s in range(done + 1, upto + 1)])
            store.update_job(job.id, step=upto)
            fed[job.id] = upto
            if upto == STEPS:
                store.transition(job.id, S.SUCCEEDED, reason="ended by the test")
    view = service.view("acme", sweep.id)
    assert view["state"] == "SUCCEEDED", view
    return view, service.studies.study(sweep.study, sweep_spec).get_trials(), store


@pytest.mark.parametrize(("pruner", "options"), [
    ("asha", {"min_steps": 4, "reduction_factor": 2}),
    ("median", {"startup_trials": 1, "warmup_steps": 0}),
])
def test_the_trial_better_at_every_step_is_never_pruned(store, tmp_path, pruner, options):
    view, history, store = run_sweep(store, tmp_path, spec(pruner, options))
    by_lr = {t["params"]["train.lr"]: t for t in view["trials"]}
    leader = by_lr[1e-3]
    assert leader["state"] == "SUCCEEDED" and leader["pruned_step"] is None, view["trials"]
    assert view["best"]["number"] == leader["number"]
    assert leader["objective"] == pytest.approx(loss(1e-3, STEPS))
    pruned = [t for t in view["trials"] if t["state"] == "PRUNED"]
    assert pruned, "the trials far behind are pruned"  # the pruner does prune: it is on
    for trial in pruned:  # each on its value at the step it was judged at, named there
        step, lr = trial["pruned_step"], trial["params"]["train.lr"]
        assert trial["objective"] == pytest.approx(loss(lr, step))
        told = next(t for t in history if t.number == trial["number"])
        assert told.state is OptunaState.PRUNED and max(told.intermediate_values) == step
        if pruner == "asha":
            assert step in (4, 8, 16), trial  # the rungs, whatever the batches
            assert set(told.intermediate_values) <= {4, 8, 16}
        events = [e.reason for e in store.events(trial["job"]) if e.to_state is S.PRUNING]
        assert events[0].startswith(f"pruned at step {step}: sweep curves's {pruner} pruner: "
                                    f"loss {loss(lr, step):.6g} at step {step} "), events
        # the job stopped where its pruner judged it: no row after the batch it was judged in
        assert store.get_job(trial["job"]).state is S.PRUNED
    if pruner == "asha":  # every trial told at the rungs only, each at its own step
        for t in history:
            assert set(t.intermediate_values) <= {4, 8, 16}, t.intermediate_values


def test_the_rungs_are_min_steps_times_the_reduction_factor_within_the_steps():
    asha = spec("asha", {"min_steps": 4, "reduction_factor": 2})
    assert rung_steps(asha) == [4, 8, 16]
    series = ObjectiveSeries(asha.objective)
    series.feed([{"step": s, "loss": loss(1e-3, s)} for s in range(1, 18)])
    assert [s for s, _ in to_report(asha, series, [])] == [4, 8, 16]
    assert [s for s, _ in to_report(asha, series, [4, 8])] == [16]
    # an objective logged every 5 steps: each rung's first value after it, at its own step
    evals = ObjectiveSeries(Objective(metric="eval_loss"))
    evals.feed([{"step": s, "loss": 1.0, **({"eval_loss": 2.0 / s} if s % 5 == 0 else {})}
                for s in range(1, 21)])
    assert [s for s, _ in to_report(asha, evals, [])] == [5, 10, 20]
    median = spec("median", {"startup_trials": 1})
    assert [s for s, _ in to_report(median, series, [3])] == list(range(4, 18))


def test_an_ema_smoothed_objective_is_the_debiased_average_of_the_values_so_far():
    series = ObjectiveSeries(Objective(metric="loss", smoothing="ema", ema_factor=0.5))
    new = series.feed([{"step": 1, "loss": 4.0}, {"step": 2, "loss": 2.0},
                       {"step": 3, "eval_loss": 9.0}, {"step": 4, "loss": float("nan")},
                       {"step": 5, "loss": 1.0}])
    assert math.isnan(new.pop(4))  # diverged: told as NaN (which both pruners stop), not averaged
    # weights 1/2, 1/4, 1/8 (newest most), divided by their sum
    assert new == {1: 4.0, 2: pytest.approx((2.0 * 0.5 + 4.0 * 0.25) / 0.75),
                   5: pytest.approx((1.0 * 0.5 + 2.0 * 0.25 + 4.0 * 0.125) / 0.875)}
    assert series.feed([{"step": 5, "loss": 100.0}]) == {}  # a step fed already: left out
    assert series.latest == (5, new[5]) and series.last_step == 5
