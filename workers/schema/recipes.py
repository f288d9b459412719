"""The training recipe's optimizers and learning-rate schedules, found by name
through the `brigade.optimizers` and `brigade.schedules` entry-point groups.

An optimizer is an `OptimizerKind`: its name, the builder the engine calls
with the model and the `TrainSpec` (it returns a `torch.optim.Optimizer`),
the knobs of `train` it reads, and the bytes of state it keeps per rank,
counted from the spec alone. A schedule is a `ScheduleKind`: its name, the
function the engine calls for each step's learning rate,
`lr(step, total_steps, train) -> float`, and the knobs it reads. The
built-ins are registered exactly as an operator's own are, in a
distribution's metadata (no edit of Brigade):

    [project.entry-points."brigade.optimizers"]
    adamw = "workers.schema.recipes:ADAMW"
    lion = "mylion.recipe:LION"        # an operator's package

    [project.entry-points."brigade.schedules"]
    cosine = "workers.schema.recipes:COSINE"

Torch-free, as `workers/schema/families.py` is: the spec validates a name
against the entry points' names and reads the descriptor they name, so the
module that holds a descriptor must not import torch; only `build` and `lr`
import the engine's module.

A knob of `train` that the chosen optimizer (or schedule) does not read, set
by a spec to other than its default, is refused naming it (`TrainSpec`).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workers.schema.registry import Registry

OPTIMIZER_GROUP = "brigade.optimizers"
SCHEDULE_GROUP = "brigade.schedules"

# The fields of TrainSpec that only some optimizers read, and those only some
# schedules read: a spec that sets one its choice does not read is refused.
OPTIMIZER_KNOBS = ("beta1", "beta2", "eps", "weight_decay", "momentum", "nesterov",
                   "beta2_decay", "ns_steps", "adjust_lr_fn")
SCHEDULE_KNOBS = ("warmup_steps", "min_lr_ratio", "decay_fraction", "decay_shape")

# (model spec, train spec, parameters, shard degree) -> the optimizer's state
# bytes on one rank. `parameters` are those one rank's tensor-parallel piece
# holds before FSDP shards them (the model's own count at tp 1); the shard
# degree is FSDP's. Torch-free: admission counts it before any rank exists.
StateBytes = Callable[[Any, Any, int, int], float]


def _no_problem(train: Any) -> tuple[str, str] | None:
    return None


def _load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class OptimizerKind:
    name: str
    # "module:attribute" of a function (model, train spec) -> torch.optim.Optimizer;
    # imported only when built
    builder: str
    state_bytes: StateBytes
    reads: tuple[str, ...] = ()  # of OPTIMIZER_KNOBS
    # the optimizer's own rules over its knobs: (field, why) a spec cannot run, or None
    check: Callable[[Any], tuple[str, str] | None] = _no_problem
    # it updates each parameter element by element, so it can train adapters alone
    # (an optimizer over whole matrices of the model cannot: workers/schema/adapter.py)
    adapters: bool = True

    def build(self, model: Any, train: Any) -> Any:
        return _load(self.builder)(model, train)


@dataclass(frozen=True)
class ScheduleKind:
    name: str
    # "module:attribute" of a function (step, total steps, train spec) -> lr;
    # `step` counts the optimizer steps taken before this one (0 first)
    function: str
    reads: tuple[str, ...] = ("warmup_steps",)  # of SCHEDULE_KNOBS

    def load(self) -> Callable[[int, int, Any], float]:
        """The function itself (imported now): what a train loop calls each step."""
        return _load(self.function)

    def lr(self, step: int, total_steps: int, train: Any) -> float:
        return float(self.load()(step, total_steps, train))


class RecipeNotFound(LookupError):
    def __init__(self, field: str, what: str, name: str, known: list[str]):
        super().__init__(f"train.{field} {name!r} is not a registered {what} "
                         f"(registered: {', '.join(known) or 'none'})")


_optimizers = Registry(OPTIMIZER_GROUP, OptimizerKind, "optimizer",
                       lambda name, known: RecipeNotFound("optimizer", "optimizer", name, known))
_schedules = Registry(SCHEDULE_GROUP, ScheduleKind, "schedule",
                      lambda name, known: RecipeNotFound("schedule", "schedule", name, known))


def registered_optimizers() -> list[str]:
    """The registered optimizers' names, sorted (nothing is imported)."""
    return _optimizers.names()


def registered_schedules() -> list[str]:
    """The registered schedules' names, sorted (nothing is imported)."""
    return _schedules.names()


def optimizer_kind(name: str) -> OptimizerKind:
    """The registered optimizer `name`; `RecipeNotFound` naming those there are."""
    return _optimizers.get(name)


def schedule_kind(name: str) -> ScheduleKind:
    """The registered schedule `name`; `RecipeNotFound` naming those there are."""
    return _schedules.get(name)


# -- the built-in optimizers ---------------------------------------------------------


PARAM_GRAD_BYTES = 2 * 4  # fp32 param and its gradient, per parameter


def model_state_bytes(model: Any, train: Any, params: int, shard_degree: int) -> float:
    """One rank's model state, the memory theory's (the engine's
    `mem_theory_bytes` metric, admission's memory fit): fp32 params and
    grads and the optimizer's state as its descriptor counts it, sharded
    `shard_degree` ways (AdamW: 16 B/param / N); `params` is one
    tensor-parallel rank's piece."""
    state = optimizer_kind(train.optimizer).state_bytes(model, train, params, shard_degree)
    return PARAM_GRAD_BYTES * params / shard_degree + state


def elementwise_state(bytes_per_param: Callable[[Any], int]) -> StateBytes:
    """The state of an optimizer that keeps `bytes_per_param(train)` bytes for
    every parameter, in the parameter's own shape: sharded as FSDP shards it."""

    def state_bytes(model: Any, train: Any, params: int, shard_degree: int) -> float:
        return bytes_per_param(train) * params / shard_degree

    return state_bytes


ADAM_FIELDS = ("beta1", "beta2", "eps", "weight_decay")
FP32 = 4


def _sgd_state(train: Any) -> int:
    return FP32 if train.momentum else 0  # the momentum buffer, if any (unset: torch's 0)


def _sgd_check(train: Any) -> tuple[str, str] | None:
    if train.nesterov and not train.momentum:
        return "nesterov", "train.nesterov needs train.momentum > 0 with sgd"
    return None


# AdamW (decoupled weight decay) and Adam (the decay added to the gradient):
# fp32 exp_avg and exp_avg_sq.
ADAMW = OptimizerKind("adamw", "workers.engine.optimizers:build_adamw",
                      elementwise_state(lambda train: 2 * FP32), ADAM_FIELDS)
ADAM = OptimizerKind("adam", "workers.engine.optimizers:build_adam",
                     elementwise_state(lambda train: 2 * FP32), ADAM_FIELDS)
# SGD (momentum, nesterov): one momentum buffer, none without momentum.
SGD = OptimizerKind("sgd", "workers.engine.optimizers:build_sgd", elementwise_state(_sgd_state),
                    ("momentum", "nesterov", "weight_decay"), _sgd_check)

# Muon and Adafactor update each matrix from statistics of the whole matrix, never
# of a shard (workers/engine/whole_matrix.py); their state follows the shapes.


def _shapes(model: Any) -> Any:
    """The model's parameter shapes (workers/schema/families.py TensorShapes), or None."""
    shapes = model.family_spec.shapes
    return None if shapes is None else shapes(model)


def _muon_state(model: Any, train: Any, params: int, shard_degree: int) -> float:
    """Muon's momentum (fp32, sharded as its matrix is) for the blocks' matrices,
    AdamW's two moments for the rest. With tensor parallelism `params` is one
    TP rank's piece: the matrices are split, the norms (the 1-D tensors) are
    not, so the piece holds (params - 1-D) / (all - 1-D) of the matrices.
    A family without shapes: every block parameter counted as a matrix."""
    shapes, count = _shapes(model), model.param_count()
    if shapes is None:
        hidden, vectors = count.n_blocks * count.block, 0
    else:
        hidden = shapes.n_blocks * sum(math.prod(s) for s in shapes.block if len(s) == 2)
        vectors = sum(math.prod(s) for s in shapes.all() if len(s) < 2)
    hidden_piece = hidden * (params - vectors) / (count.total - vectors)
    return (FP32 * hidden_piece + 2 * FP32 * (params - hidden_piece)) / shard_degree


def _adafactor_state(model: Any, train: Any, params: int, shard_degree: int) -> float:
    """Adafactor's factored second moment, held whole on every rank whatever
    the sharding: a row and a column vector per matrix, a full one per vector,
    and a step count (a 4-byte scalar) each. A family without shapes: its worst
    case, a full second moment (4 B per parameter, whole)."""
    shapes = _shapes(model)
    if shapes is None:
        return FP32 * model.num_params()
    return FP32 * sum((s[0] + s[1] if len(s) == 2 else math.prod(s)) + 1 for s in shapes.all())


# torch.optim.Muon on the blocks' matrices, each orthogonalized whole; AdamW on
# the embedding, head, norms and biases (its knobs: beta1, beta2, eps, weight_decay).
MUON = OptimizerKind("muon", "workers.engine.whole_matrix:build_muon", _muon_state,
                     ("momentum", "nesterov", "ns_steps", "adjust_lr_fn", *ADAM_FIELDS),
                     adapters=False)
# torch.optim.Adafactor on every parameter whole; eps is its eps1 (the floor of
# the squared-gradient estimate; unset: torch's, the dtype's epsilon).
ADAFACTOR = OptimizerKind("adafactor", "workers.engine.whole_matrix:build_adafactor",
                          _adafactor_state, ("beta2_decay", "eps", "weight_decay"),
                          adapters=False)

# -- the built-in schedules ----------------------------------------------------------

COSINE = ScheduleKind("cosine", "workers.engine.schedules:cosine",
                      ("warmup_steps", "min_lr_ratio"))
LINEAR = ScheduleKind("linear", "workers.engine.schedules:linear",
                      ("warmup_steps", "min_lr_ratio"))
CONSTANT = ScheduleKind("constant", "workers.engine.schedules:constant", ("warmup_steps",))
WSD = ScheduleKind("wsd", "workers.engine.schedules:wsd",
                   ("warmup_steps", "min_lr_ratio", "decay_fraction", "decay_shape"))
