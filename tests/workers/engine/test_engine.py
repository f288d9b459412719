"""The engine in one process (a world of one) and under torchrun."""

import json
import os
import subprocess
import sys

import pytest

from tests.workers.engine_spec import engine_job, engine_spec
from workers.engine.local import run_single_process
from workers.schema import JobSpec


def job(**overrides) -> JobSpec:
    return engine_job(6, **({"data": {"source": "synthetic"}} | overrides))


def losses(metrics):
    return [m["loss"] for m in metrics]


@pytest.fixture(scope="module")
def reference():
    return run_single_process(job())


def test_metrics_carry_every_named_field(reference):
    names = {"loss", "lr", "tokens_per_s", "step_time_s", "peak_mem_bytes", "mem_theory_bytes",
             "comm_bytes", "comm_bytes_theory", "comm_bytes_by_op", "collectives", "comm_time_s",
             "exposed_comm_s", "flops_per_token", "flops_per_s", "mfu"}
    assert [m["step"] for m in reference] == list(range(1, 7))
    for m in reference:
        assert names <= set(m)
        assert m["tokens_per_s"] > 0 and m["peak_mem_bytes"] > 0
        assert m["mem_theory_bytes"] == 16 * job().model.num_params()
        assert m["flops_per_s"] > 0 and m["mfu"] is None  # no peak known on a CPU


def test_loss_falls_on_the_builtin_corpus():
    metrics = run_single_process(
        job(data={"source": "builtin"}, train={"steps": 200, "global_batch_size": 8})
    )
    assert metrics[-1]["loss"] < 0.7 * metrics[0]["loss"], losses(metrics)[::20]


def test_gradient_accumulation_follows_the_same_curve(reference):
    accumulated = run_single_process(job(train={"micro_batch_size": 3}))
    assert losses(accumulated) == pytest.approx(losses(reference), abs=1e-5)


def test_activation_checkpointing_and_offload_change_nothing_numerically(reference):
    got = run_single_process(job(sharding={"activation_checkpointing": True, "cpu_offload": True}))
    assert losses(got) == pytest.approx(losses(reference), abs=1e-5)


def test_bf16_mixed_precision_trains():
    got = run_single_process(
        job(sharding={"param_dtype": "bfloat16", "reduce_dtype": "float32"}, train={"steps": 30})
    )
    assert all(m["loss"] == m["loss"] for m in got)  # no NaN
    assert got[-1]["loss"] < got[0]["loss"]


def test_the_same_engine_runs_under_torchrun(reference, tmp_path):
    config = tmp_path / "job.json"  # JSON is YAML: the same spec `brigade submit` takes
    config.write_text(json.dumps(engine_spec(6, data={"source": "synthetic"})))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--standalone",  # its store at a port the kernel picks as it binds
         "-m", "workers.engine.local", "--config", str(config)],
        capture_output=True, text=True, timeout=180, env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert losses(metrics) == pytest.approx(losses(reference), abs=1e-5)
    assert all(m["comm_bytes"] == pytest.approx(m["comm_bytes_theory"], rel=0.02) for m in metrics)


def test_local_runner_refuses_a_bad_spec_naming_the_field(tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text(json.dumps(engine_spec(6)))
    out = subprocess.run(
        [sys.executable, "-m", "workers.engine.local", "--config", str(config),
         "--set", "sharding.strategy=zero9", "--set", "train.global_batch_size=7"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "sharding.strategy: Input should be 'full_shard'" in out.stderr
