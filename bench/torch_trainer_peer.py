"""The peer of bench/startup.py: Ray Train's `TorchTrainer` on the same job,
with its cluster up, from `fit()` to the first step's report.

    .venv/bin/python -m bench.torch_trainer_peer --spec SPEC.json --out RESULT.json

One trial in this process: `ray.init` a local cluster (`--cpus` logical
CPUs, no dashboard), let it settle (`--settle` s: Ray's prestarted idle
workers are up, as on a cluster that has been up a while), then time
`TorchTrainer(...).fit()` of 2 workers x 1 CPU on gloo. Each worker runs
Brigade's own engine on the process group Ray Train made (`workers.engine.trainer
.Trainer`: the same model build and step as a Brigade rank), takes one step
and reports it with `ray.train.report`; rank 0 notes when its function began,
the model was built, the step ended and the report returned. The result:
those times, and when `fit()` was called and returned (epoch seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time


def train_func(config: dict) -> None:
    """One Ray Train worker: build the job's model, take one step, report it."""
    entered = time.time()
    import ray.train
    import torch.distributed as dist

    from workers.schema import JobSpec
    from workers.engine.trainer import Trainer

    trainer = Trainer(JobSpec.model_validate(config["spec"]))
    built = time.time()
    row = trainer.train_step().as_dict()
    stepped = time.time()
    ray.train.report({"step": row["step"], "loss": row["loss"]})
    reported = time.time()
    if dist.get_rank() == 0:
        with open(config["out"], "w") as f:
            json.dump({"entered": entered, "built": built, "first_step": stepped,
                       "reported": reported, "loss": row["loss"]}, f)


def trial(spec: dict, cpus: int, settle_s: float) -> dict:
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    t_init = time.time()
    # A cluster of its own (never one another process started on this machine).
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, logging_level="WARNING")
    t_up = time.time()
    time.sleep(settle_s)
    with tempfile.TemporaryDirectory(prefix="torch-trainer-") as tmp:
        out = os.path.join(tmp, "rank0.json")
        trainer = TorchTrainer(
            train_func,
            train_loop_config={"spec": spec, "out": out},
            scaling_config=ScalingConfig(num_workers=spec["workers"], use_gpu=False,
                                         resources_per_worker={"CPU": 1}),
            torch_config=TorchConfig(backend="gloo"),
            run_config=RunConfig(storage_path=tmp, name="startup-peer"),
        )
        t_fit = time.time()
        trainer.fit()
        t_done = time.time()
        with open(out) as f:
            rank0 = json.load(f)
    ray.shutdown()
    return {"ray_init": t_init, "cluster_up": t_up, "fit": t_fit, "fit_returned": t_done, **rank0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", required=True, help="the job spec, JSON")
    parser.add_argument("--out", required=True, help="where the trial's times go, JSON")
    parser.add_argument("--cpus", type=int, default=4)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after ray.init")
    args = parser.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    result = trial(spec, args.cpus, args.settle)
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
