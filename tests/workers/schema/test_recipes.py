"""Optimizers and lr schedules through the `brigade.optimizers` and
`brigade.schedules` entry points (workers/schema/recipes.py): the built-ins
registered as an operator's own are, an optimizer and a schedule added by a
distribution that Brigade knows nothing of (a dist-info on sys.path), and the
refusals: an unknown name lists the registered ones, a knob the choice does
not read is named."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from pydantic import ValidationError

from tests.workers.engine_spec import engine_job
from tests.workers.schema.distribution import distribution_on_path
from workers.schema import JobSpec, TrainSpec
from workers.schema.recipes import (
    OPTIMIZER_GROUP,
    SCHEDULE_GROUP,
    optimizer_kind,
    registered_optimizers,
    registered_schedules,
    schedule_kind,
)

OPERATOR_RECIPE = '''
"""An operator's optimizer and schedule: torch-free here, the torch in rmsrecipe_impl."""
from workers.schema.recipes import OptimizerKind, ScheduleKind, elementwise_state

RMSPROP = OptimizerKind("rmsprop", "rmsrecipe_impl:build", elementwise_state(lambda train: 4),
                        ("eps", "weight_decay"))
HALVING = ScheduleKind("halving", "rmsrecipe_impl:halving", reads=())
'''

OPERATOR_IMPL = '''
import torch

def build(model, train):
    return torch.optim.RMSprop(model.parameters(), lr=train.lr, eps=train.eps,
                               weight_decay=train.weight_decay)

def halving(step, total_steps, train):
    return train.lr * 0.5 ** step
'''


@pytest.fixture
def operator_distribution(tmp_path, monkeypatch):
    """A distribution `rmsrecipe-brigade` with an entry point in each group,
    on sys.path the way an installed package is: no edit of Brigade."""
    with distribution_on_path(
            tmp_path, monkeypatch, "rmsrecipe-brigade",
            {"rmsrecipe": OPERATOR_RECIPE, "rmsrecipe_impl": OPERATOR_IMPL},
            f"[{OPTIMIZER_GROUP}]\nrmsprop = rmsrecipe:RMSPROP\n\n"
            f"[{SCHEDULE_GROUP}]\nhalving = rmsrecipe:HALVING\n") as root:
        yield root


def test_the_built_ins_are_registered_through_entry_points():
    assert {"adamw", "adam", "sgd"} <= set(registered_optimizers())
    assert {"cosine", "linear", "constant", "wsd"} <= set(registered_schedules())
    assert optimizer_kind("sgd").builder == "workers.engine.optimizers:build_sgd"
    assert schedule_kind("wsd").function == "workers.engine.schedules:wsd"


def test_the_defaults_are_adamw_and_cosine():
    train = TrainSpec(steps=5)
    assert (train.optimizer, train.schedule) == ("adamw", "cosine")
    assert train.optimizer_kind.name == "adamw" and train.schedule_kind.name == "cosine"


@pytest.mark.parametrize("field, registered", [("optimizer", registered_optimizers),
                                               ("schedule", registered_schedules)])
def test_an_unknown_name_is_refused_listing_the_registered_ones(field, registered):
    with pytest.raises(ValidationError) as e:
        TrainSpec(steps=5, **{field: "lion"})
    error = e.value.errors()[0]
    assert error["loc"] == (field,)
    assert error["msg"] == (f"train.{field} 'lion' is not a registered {field} "
                            f"(registered: {', '.join(registered())})")


@pytest.mark.parametrize("train, field, message", [
    ({"momentum": 0.9}, "momentum", "train.momentum is not read by the 'adamw' optimizer "
                                    "(it reads beta1, beta2, eps, weight_decay)"),
    ({"optimizer": "adam", "nesterov": True}, "nesterov", "not read by the 'adam' optimizer"),
    ({"optimizer": "sgd", "beta1": 0.8}, "beta1", "train.beta1 is not read by the 'sgd' "
                                                  "optimizer (it reads momentum, nesterov, weight_decay)"),
    ({"optimizer": "sgd", "ns_steps": 3}, "ns_steps", "not read by the 'sgd' optimizer"),
    ({"beta2_decay": -0.5}, "beta2_decay", "not read by the 'adamw' optimizer"),
    ({"adjust_lr_fn": "original"}, "adjust_lr_fn", "not read by the 'adamw' optimizer"),
    ({"decay_fraction": 0.1}, "decay_fraction", "train.decay_fraction is not read by the 'cosine' "
                                                "schedule (it reads warmup_steps, min_lr_ratio)"),
    ({"schedule": "linear", "decay_shape": "cosine"}, "decay_shape", "not read by the 'linear'"),
    ({"schedule": "constant", "min_lr_ratio": 0.5}, "min_lr_ratio",
     "train.min_lr_ratio is not read by the 'constant' schedule (it reads warmup_steps)"),
    ({"optimizer": "sgd", "nesterov": True}, "nesterov",
     "train.nesterov needs train.momentum > 0 with sgd"),
])
def test_a_knob_the_choice_does_not_read_is_refused_naming_it(train, field, message):
    with pytest.raises(ValidationError) as e:
        TrainSpec(steps=5, **train)
    error = e.value.errors()[0]
    assert error["loc"] == (field,), error
    assert message in error["msg"], error["msg"]


@pytest.mark.parametrize("train", [
    {"beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.0},  # today's knobs, adamw
    {"momentum": None, "decay_fraction": 0.2, "ns_steps": 5},  # a foreign knob at its default
    {"optimizer": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 0.0},
    {"optimizer": "sgd", "beta1": 0.9},  # the default, as a spec read back and sent again has it
    {"schedule": "wsd", "decay_fraction": 0.1, "decay_shape": "cosine", "min_lr_ratio": 0.0},
    {"schedule": "constant", "warmup_steps": 0},
])
def test_a_knob_read_or_left_at_its_default_is_taken(train):
    assert TrainSpec(steps=5, **train).model_dump(include=set(train)) == train


def test_a_spec_read_back_is_taken_again():
    spec = JobSpec.model_validate({"model": {}, "train": {"steps": 5, "optimizer": "sgd",
                                                          "momentum": 0.9, "schedule": "wsd"}})
    assert JobSpec.model_validate(spec.to_json()) == spec


def test_the_config_hash_tells_recipes_apart_and_leaves_out_their_defaults():
    def config_hash(**train):
        return JobSpec.model_validate({"model": {}, "train": {"steps": 5, **train}}).config_hash()

    assert config_hash() == config_hash(optimizer="adamw", schedule="cosine", decay_fraction=0.2)
    hashes = {config_hash(), config_hash(optimizer="adam"), config_hash(schedule="wsd"),
              config_hash(optimizer="sgd"), config_hash(optimizer="sgd", momentum=0.5)}
    assert len(hashes) == 5


def hand_written_rmsprop(job: JobSpec, step: bool = True) -> list[float]:
    """The operator's recipe written out by hand, with no Brigade engine: the
    job's model unsharded with its seeded weights, the job's batches in order,
    the mean token loss, the gradient clipped to train.grad_clip, and
    torch.optim.RMSprop at lr x 0.5^step; each step's loss (`step` False: the
    losses of the same batches at the initial weights)."""
    import torch
    import torch.nn.functional as F

    from workers.engine.build import SeededInit
    from workers.engine.data import RankBatches, build_source

    train = job.train
    torch.manual_seed(train.seed)
    model = job.model.family_spec.build(job.model)
    SeededInit(train.seed).fill(model)
    batches = RankBatches(build_source(job.data, job.model, train.seed, job.eval,
                                      global_batch=train.global_batch_size),
                          train.global_batch_size, 0, 1)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=train.lr, eps=train.eps,
                                    weight_decay=train.weight_decay)
    losses = []
    for n in range(train.steps):
        x, y = batches.next_batch()
        with torch.set_grad_enabled(step):
            loss = F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())
        losses.append(loss.item())
        if step:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
            for group in optimizer.param_groups:
                group["lr"] = train.lr * 0.5 ** n
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return losses


def test_an_operator_optimizer_and_schedule_from_their_own_distribution_train(operator_distribution):
    """The engine trains with the operator's optimizer and schedule, found by
    their entry points: its losses are those of RMSprop stepped by hand at the
    halving schedule's rates, and they are not the losses of no step at all."""
    from workers.engine.local import run_single_process

    assert "rmsprop" in registered_optimizers() and "halving" in registered_schedules()
    job = engine_job(3, train={"optimizer": "rmsprop", "schedule": "halving", "lr": 1e-3},
                     data={"source": "synthetic"})
    metrics = run_single_process(job)
    assert [m["lr"] for m in metrics] == [1e-3, 5e-4, 2.5e-4]  # the operator's schedule
    assert metrics[0]["mem_theory_bytes"] == 12 * job.model.num_params()  # 8 + its own 4
    engine = [m["loss"] for m in metrics]
    assert engine == pytest.approx(hand_written_rmsprop(job), rel=1e-6, abs=1e-6)
    # the first step's loss is of the initial weights; each later one has moved well
    # beyond the tolerance above
    unstepped = hand_written_rmsprop(job, step=False)
    assert engine[0] == pytest.approx(unstepped[0], rel=1e-6, abs=1e-6)
    assert all(abs(a - b) > 1e-3 for a, b in zip(engine[1:], unstepped[1:], strict=True)), (
        engine, unstepped)
    with pytest.raises(ValidationError, match="train.momentum is not read by the 'rmsprop'"):
        TrainSpec(steps=5, optimizer="rmsprop", momentum=0.9)
    with pytest.raises(ValidationError, match="train.warmup_steps is not read by the 'halving'"):
        TrainSpec(steps=5, schedule="halving", warmup_steps=3)


def test_validating_a_recipe_imports_no_torch():
    code = textwrap.dedent("""
        import sys
        from workers.schema import JobSpec
        spec = JobSpec.model_validate({"model": {}, "train": {"steps": 1, "optimizer": "sgd",
                                                              "momentum": 0.9, "schedule": "wsd"}})
        spec.train.optimizer_kind.state_bytes(spec.model, spec.train, 100, 2)
        assert "torch" not in sys.modules, sorted(m for m in sys.modules if "torch" in m)[:5]
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
