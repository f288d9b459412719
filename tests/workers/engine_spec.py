"""The engine tests' job: a tiny GPT with the engine's former defaults
(d_model 48, seq_len 32, lr 3e-3, a global batch of 12), so world sizes 1..4
all divide the batch and a step takes milliseconds."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from workers.schema import JobSpec

if TYPE_CHECKING:
    from workers.cluster.group import WorkerGroup
    from workers.cluster.pool import RankPool

TINY_MODEL = {"n_layers": 2, "d_model": 48, "n_heads": 4, "seq_len": 32, "vocab_size": 256}

# The optimizers the equivalence tests run, each as the `train` fields that
# choose it (its lr and warmup such that a few steps move the loss): sharded at
# world sizes 2 and 3 under every strategy (tests/workers/cluster/test_ray_engine.py),
# at (dp, tp) = (1, 2) (tests/workers/engine/test_tensor_parallel.py) and resumed at
# another world size (tests/workers/cluster/test_resume.py), each against one
# process. An optimizer added to Brigade adds its entry here. The schedules ride
# along: the schedule is the same function of the step on every rank.
RECIPES: dict[str, dict] = {
    "adamw": {},
    "adam": {"optimizer": "adam", "warmup_steps": 2, "schedule": "wsd"},
    "sgd": {"optimizer": "sgd", "momentum": 0.9, "nesterov": True, "lr": 0.5, "warmup_steps": 2,
            "schedule": "linear"},
    # each update computed on the whole matrix (workers/engine/whole_matrix.py)
    "muon": {"optimizer": "muon", "momentum": 0.9, "warmup_steps": 2},
    "adafactor": {"optimizer": "adafactor", "beta2_decay": -0.7, "lr": 0.01, "warmup_steps": 2,
                  "schedule": "constant"},
}
RECIPE_STEPS = 8  # steps of each equivalence run of a recipe other than the default
# How close each recipe's sharded losses come to one process's: 1e-5, but Muon's.
# torch's Newton-Schulz runs in bfloat16, which amplifies the last-bit differences
# of every sharding's gradient (the reduction's order): in one process, one ulp
# more on half of the gradient's elements moves Muon's 8-step curve here by
# 1.7e-5 (AdamW's by 1e-6), and world size 3 lands 1e-5 from one process. Each
# update is still the whole matrix's, bit for bit (tests/workers/engine/test_whole_matrix.py).
RECIPE_TOLERANCE = {"muon": 1e-4}


def recipe_tolerance(recipe: str) -> float:
    return RECIPE_TOLERANCE.get(recipe, 1e-5)


def engine_spec(steps: int = 20, **sections) -> dict:
    """A job spec dict; each keyword updates (not replaces) its section."""
    raw: dict = {
        "model": dict(TINY_MODEL),
        "train": {"steps": steps, "global_batch_size": 12, "lr": 3e-3},
        "checkpoint": {"every_steps": 0},
    }
    for section, values in sections.items():
        if isinstance(values, dict):
            raw.setdefault(section, {}).update(copy.deepcopy(values))
        else:
            raw[section] = values
    return raw


def engine_job(steps: int = 20, **sections) -> JobSpec:
    return JobSpec.model_validate(engine_spec(steps, **sections))


class Groups:
    """One live group at a time (the cluster has 4 CPUs), reused across tests;
    its ranks forked from `pool`'s fork server (tests/conftest.py fork_pool)."""

    def __init__(self, pool: RankPool | None = None):
        self.pool = pool
        self.current: WorkerGroup | None = None

    def get(self, world_size: int) -> WorkerGroup:
        if self.current is None or self.current.num_workers != world_size:
            from workers.cluster.group import WorkerGroup

            self.close()
            self.current = WorkerGroup(world_size, pool=self.pool).start()
        return self.current

    def close(self):
        if self.current is not None:
            self.current.shutdown()
            self.current = None
