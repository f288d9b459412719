"""Model FLOPs utilisation: the peak table's lookup (workers/engine/peak_flops.py)
and a real engine step's row (workers/engine/trainer.py)."""

import pytest
import torch

from tests.workers.engine_spec import engine_job
from workers.engine.local import run_single_process
from workers.engine.metrics import achieved_flops
from workers.engine.peak_flops import (
    ENV,
    device_peak_flops,
    env_peak,
    matmul_dtype,
    table_peak,
)
from workers.schema.flops import job_flops_per_token


@pytest.mark.parametrize(("name", "dtype", "tflops"), [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.5),  # SXM
    ("NVIDIA H100 PCIe", "bf16", 756),
    ("NVIDIA H100 NVL", "fp16", 835.5),
    ("NVIDIA H200", "bf16", 989.5),
    ("NVIDIA H200", "fp32", 67),
    ("NVIDIA H200", "tf32", 494.5),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312),
    ("NVIDIA A100 80GB PCIe", "tf32", 156),
    ("NVIDIA L4", "bf16", 121),
    ("NVIDIA L40S", "bf16", 362.05),  # not the L4's, which its name contains
    ("NVIDIA A10G", "fp32", 31.2),
    ("Tesla V100-SXM2-16GB", "fp16", 125),
    ("Tesla V100-PCIE-32GB", "fp16", 112),
    ("NVIDIA B200", "bf16", 2250),
])
def test_the_table_by_device_name_and_dtype(name, dtype, tflops):
    assert table_peak(name, dtype) == pytest.approx(tflops * 1e12)


def test_no_peak_for_a_device_or_dtype_the_table_lacks():
    assert table_peak("AMD Instinct MI300X", "bf16") is None
    assert table_peak("Tesla V100-SXM2-16GB", "bf16") is None  # no bf16 units


def test_the_dtype_column_follows_param_dtype_and_fp32_precision():
    assert matmul_dtype("bfloat16") == "bf16" and matmul_dtype("float16") == "fp16"
    assert matmul_dtype("float32", "highest") == "fp32"
    assert matmul_dtype("float32", "high") == "tf32"  # cuBLAS may use TF32


def test_a_cpu_has_no_peak_unless_the_environment_says(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert device_peak_flops(torch.device("cpu"), "float32") is None
    monkeypatch.setenv(ENV, "2.5e12")
    assert device_peak_flops(torch.device("cpu"), "float32") == 2.5e12


@pytest.mark.parametrize("raw", ["fast", "0", "-1e12", "inf"])
def test_a_bad_override_is_refused_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(ENV, raw)
    with pytest.raises(ValueError, match=ENV):
        env_peak()


def test_flops_per_rank_share_the_global_batch():
    assert achieved_flops(1e6, tokens=400, step_time_s=0.5, world_size=4) == 2e8


def test_a_real_step_carries_its_flops_and_mfu(monkeypatch):
    job = engine_job(2, data={"source": "synthetic"})
    tokens = job.train.global_batch_size * job.model.seq_len
    monkeypatch.delenv(ENV, raising=False)
    for row in run_single_process(job):  # a CPU: FLOP/s alone
        assert row["flops_per_token"] == job_flops_per_token(job) > 0
        assert row["flops_per_s"] == row["flops_per_token"] * tokens / row["step_time_s"] / 1
        assert row["mfu"] is None

    monkeypatch.setenv(ENV, "1e12")  # this process is the rank: it reads its own environment
    for row in run_single_process(job):
        assert row["flops_per_s"] == row["flops_per_token"] * tokens / row["step_time_s"]
        assert row["mfu"] == row["flops_per_s"] / 1e12
        assert 0 < row["mfu"] < 1
