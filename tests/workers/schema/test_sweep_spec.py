"""The sweep spec: what it accepts, what it refuses (each refusal at its
field), and the trial specs it makes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from workers.schema import NAME_PATTERN, JobSpec
from workers.schema.sweep import MAX_TRIALS, SweepSpec, field_problem, trial_name, trial_spec

BASE = {"model": {"n_layers": 2, "d_model": 32, "n_heads": 4}, "train": {"steps": 4}}


def sweep(**changes) -> dict:
    return {"name": "lr", "base": BASE, "space": {"train.lr": {"loguniform": [1e-4, 1e-1]}},
            "objective": {"metric": "loss"}, "max_trials": 4, **changes}


def refusal(**changes) -> tuple[str, str]:
    with pytest.raises(ValidationError) as caught:
        SweepSpec.model_validate(sweep(**changes))
    error = caught.value.errors()[0]
    return ".".join(str(p) for p in error["loc"]), error["msg"]


def test_defaults_and_every_domain_kind():
    spec = SweepSpec.model_validate(sweep(space={
        "train.lr": {"loguniform": [1e-4, 1e-1]}, "train.weight_decay": {"uniform": [0, 0.1]},
        "train.steps": {"int": [2, 8]}, "sharding.strategy": {"choice": ["full_shard", "no_shard"]},
        "model.d_model": {"grid": [32, 64]},
    }))
    assert (spec.sampler, spec.seed, spec.pruner, spec.max_concurrent, spec.after) == (
        "tpe", 0, "none", 1, [])
    assert spec.objective.mode == "min" and spec.trial_budget == 4 and spec.grid_size is None
    assert spec.space["train.weight_decay"].uniform == (0.0, 0.1)
    assert SweepSpec.model_validate(spec.to_json()) == spec  # stored and read back


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"space": {"train.lr": {"uniform": ["a", 1]}}}, "space.train.lr.uniform.0", "number"),
    ({"space": {"train.lr": {"uniform": [0.1]}}}, "space.train.lr.uniform.1", "Field required"),
    ({"space": {"train.lr": {"uniform": [0.1, 0.01]}}}, "space.train.lr.uniform", "lo < hi"),
    ({"space": {"train.lr": {"uniform": [0.1, 0.1]}}}, "space.train.lr.uniform", "lo < hi"),
    ({"space": {"train.lr": {"loguniform": [0, 0.1]}}}, "space.train.lr.loguniform", "> 0"),
    ({"space": {"train.steps": {"int": [1.5, 4]}}}, "space.train.steps.int.0", "integer"),
    ({"space": {"train.steps": {"int": [True, 4]}}}, "space.train.steps.int.0", "integer"),
    ({"space": {"train.lr": {"grid": []}}}, "space.train.lr.grid", "at least 1"),
    ({"space": {"train.lr": {"choice": [[1]]}}}, "space.train.lr.choice.0", ""),
    ({"space": {"train.lr": {}}}, "space.train.lr.grid", "exactly one"),
    ({"space": {"train.lr": {"grid": [1], "choice": [2]}}}, "space.train.lr.choice", "exactly one"),
    ({"space": {"train.lr": {"normal": [0, 1]}}}, "space.train.lr.normal", "Extra"),
    ({"space": {"train.lx": {"grid": [1]}}}, "space.train.lx", "no field 'lx'"),
    ({"space": {"train.weight_decy": {"grid": [0.1]}}}, "space.train.weight_decy",
     "train has no field 'weight_decy' (did you mean train.weight_decay?)"),
    ({"space": {"trian.lr": {"grid": [1]}}}, "space.trian.lr", "(did you mean train?)"),
    ({"objective": {"metric": "loss", "ema_factor": 0.5}}, "objective.ema_factor",
     "only with smoothing: ema"),
    ({"objective": {"metric": "loss", "smoothing": "ema", "ema_factor": 1.0}},
     "objective.ema_factor", "less than 1"),
    ({"objective": {"metric": "loss", "smoothing": "median"}}, "objective.smoothing", "'none' or 'ema'"),
    ({"space": {"trian.lr": {"grid": [1]}}}, "space.trian.lr", "the job spec has no field"),
    ({"space": {"model": {"grid": [1]}}}, "space.model", "a section"),
    ({"space": {"train.lr.x": {"grid": [1]}}}, "space.train.lr.x", "not a section"),
    ({"space": {"name": {"grid": ["a"]}}}, "space.name", "set by the sweep"),
    ({"space": {}}, "space", "at least 1"),
    ({"sampler": "grid"}, "space.train.lr.loguniform", "grid and choice"),
    ({"sampler": "bayes"}, "sampler", "'grid', 'random' or 'tpe'"),
    ({"pruner": "median", "pruner_options": {"min_steps": 2}}, "pruner_options.min_steps", "median"),
    ({"pruner": "asha", "pruner_options": {"reduction_factor": 1}},
     "pruner_options.reduction_factor", "greater than or equal to 2"),
    ({"objective": {"metric": "loss", "mode": "lowest"}}, "objective.mode", "'min' or 'max'"),
    ({"objective": {"metric": "Loss!"}}, "objective.metric", "pattern"),
    ({"max_trials": 0}, "max_trials", "greater than or equal to 1"),
    ({"max_trials": MAX_TRIALS + 1}, "max_trials", "less than or equal"),
    ({"max_concurrent": 0}, "max_concurrent", "greater than or equal to 1"),
    ({"name": "x" * 121}, "name", "pattern"),
    ({"after": ["j-1", "j-1"]}, "after.1", "twice"),
    ({"after": ["no good"]}, "after.0", "pattern"),
    ({"colour": "blue"}, "colour", "Extra"),
    ({"base": {**BASE, "train": {"steps": 0}}}, "base.train.steps", "greater than or equal to 1"),
    ({"base": {**BASE, "trian": {}}}, "base.trian", "Extra"),
])
def test_refusals_name_their_field(changes, field, words):
    where, message = refusal(**changes)
    # a value of no allowed type is located at each member of the union tried (`.0.bool`)
    assert (where == field or where.startswith(f"{field}.bool")) and words in message, (where, message)


def test_space_paths_walk_the_job_spec():
    assert field_problem("train.lr") is None
    assert field_problem("workers") is None  # an int or a {min, max}: a value may be set
    assert field_problem("workers.max") is None  # WorkerRange's field, through the union
    assert field_problem("init.step") is None  # through an optional section
    assert "no field" in field_problem("eval.bogus")


def test_the_grid_sampler_runs_at_most_its_grid():
    spec = SweepSpec.model_validate(sweep(sampler="grid", max_trials=10, space={
        "train.lr": {"grid": [1e-3, 1e-2]}, "model.d_model": {"choice": [32, 64, 128]}}))
    assert spec.grid_size == 6 and spec.trial_budget == 6


def test_a_trial_spec_is_the_base_with_the_point_set_and_its_name():
    spec = SweepSpec.model_validate(sweep())
    trial = trial_spec(spec, {"train.lr": 0.02, "sharding.strategy": "no_shard"}, 3)
    assert isinstance(trial, JobSpec) and trial.name == "lr-t3" == trial_name("lr", 3)
    assert (trial.train.lr, trial.train.steps, trial.sharding.strategy) == (0.02, 4, "no_shard")
    assert trial.model == spec.base.model
    longest = SweepSpec.model_validate(sweep(name="n" * 120, max_trials=MAX_TRIALS))
    import re
    assert re.match(NAME_PATTERN, trial_name(longest.name, MAX_TRIALS - 1))


def test_a_point_that_makes_the_spec_invalid_is_refused_at_its_field():
    spec = SweepSpec.model_validate(sweep(space={"train.steps": {"int": [-3, -1]}}))
    with pytest.raises(ValidationError) as caught:
        trial_spec(spec, {"train.steps": -2}, 0)
    assert caught.value.errors()[0]["loc"] == ("train", "steps")
