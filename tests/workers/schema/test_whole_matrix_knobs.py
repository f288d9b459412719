"""Muon's and Adafactor's knobs through the spec: each reads its own (and Muon
AdamW's, for the rest of the model), another's is refused naming it; their
state counts follow the model's shapes (workers/schema/recipes.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from workers.schema import JobSpec

MODEL = {"n_layers": 2, "d_model": 48, "n_heads": 4, "seq_len": 32, "vocab_size": 256}


def spec(**train) -> JobSpec:
    return JobSpec.model_validate({"model": MODEL, "train": {"steps": 1, **train}})


MUON_KNOBS = {"momentum": 0.9, "nesterov": False, "ns_steps": 3, "adjust_lr_fn": "original",
              "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.05}
ADAFACTOR_KNOBS = {"beta2_decay": -0.5, "eps": 1e-6, "weight_decay": 0.05}


def built(job: JobSpec):
    """The job's optimizer, built by its registered builder over the job's model (on the CPU)."""
    model = job.model.family_spec.build(job.model)
    return model, job.train.optimizer_kind.build(model, job.train)


def test_each_reads_its_knobs():
    """Every knob set (none at its default) is taken by the spec and reaches
    the optimizer built: Muon's own on the blocks' matrices, AdamW's on the
    rest of the model; Adafactor's on every parameter."""
    from workers.engine.whole_matrix import hidden_matrices

    muon = spec(optimizer="muon", **MUON_KNOBS)
    assert muon.train.model_dump(include=set(MUON_KNOBS)) == MUON_KNOBS
    model, optimizer = built(muon)
    [hidden] = [g for g in optimizer.param_groups if g["part"] == "muon"]
    rest = [g for g in optimizer.param_groups if g["part"] == "adamw"]
    assert {id(p) for p in hidden["params"]} == {id(p) for p in hidden_matrices(model)}
    assert {k: hidden[k] for k in ("momentum", "nesterov", "ns_steps", "adjust_lr_fn",
                                   "weight_decay")} == {
        "momentum": 0.9, "nesterov": False, "ns_steps": 3, "adjust_lr_fn": "original",
        "weight_decay": 0.05}
    assert {id(p) for g in rest for p in g["params"]} == (
        {id(p) for p in model.parameters()} - {id(p) for p in hidden["params"]})
    for group in rest:  # the matrices decayed by train.weight_decay, norms and biases not
        decay = 0.05 if group["params"][0].dim() >= 2 else 0.0
        assert (group["betas"], group["eps"], group["weight_decay"]) == ((0.8, 0.99), 1e-6, decay)
    # the AdamW that runs the rest is handed these very groups
    assert optimizer.parts["adamw"].param_groups == rest

    adafactor = spec(optimizer="adafactor", **ADAFACTOR_KNOBS)
    assert adafactor.train.model_dump(include=set(ADAFACTOR_KNOBS)) == ADAFACTOR_KNOBS
    model, optimizer = built(adafactor)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))
    for group in optimizer.param_groups:
        decay = 0.05 if group["params"][0].dim() >= 2 else 0.0
        # train.eps is torch's eps1; eps2 stays torch's 1e-3
        assert (group["beta2_decay"], group["eps"], group["weight_decay"]) == (-0.5, (1e-6, 1e-3),
                                                                              decay)


@pytest.mark.parametrize(("optimizer", "field", "value"), [
    ("adafactor", "momentum", 0.9), ("adafactor", "ns_steps", 3), ("adafactor", "beta1", 0.8),
    ("muon", "beta2_decay", -0.5), ("adamw", "ns_steps", 3), ("adamw", "adjust_lr_fn", "original"),
])
def test_a_knob_of_another_optimizer_is_refused_naming_it(optimizer, field, value):
    with pytest.raises(ValidationError) as refused:
        spec(optimizer=optimizer, **{field: value})
    assert refused.value.errors()[0]["loc"][-1] == field
    assert f"train.{field}" in str(refused.value)


def test_the_state_counts_follow_the_shapes():
    d, v, seq, layers = MODEL["d_model"], MODEL["vocab_size"], MODEL["seq_len"], MODEL["n_layers"]
    muon, adafactor = spec(optimizer="muon"), spec(optimizer="adafactor")
    params = muon.model.num_params()
    hidden = layers * (3 * d * d + d * d + 2 * 4 * d * d)  # qkv, proj, the MLP's two
    count = muon.train.optimizer_kind.state_bytes
    assert count(muon.model, muon.train, params, 4) == (4 * hidden + 8 * (params - hidden)) / 4
    # whole on every rank: a row and a column per matrix, a vector's own size, a step each
    matrices = [(3 * d, d), (d, d), (4 * d, d), (d, 4 * d)] * layers + [(seq, d), (v, d), (v, d)]
    vectors = 4 * layers + 2
    whole = 4 * (sum(r + c + 1 for r, c in matrices) + vectors * (d + 1))
    for shard_degree in (1, 3):
        assert adafactor.train.optimizer_kind.state_bytes(
            adafactor.model, adafactor.train, params, shard_degree) == whole
