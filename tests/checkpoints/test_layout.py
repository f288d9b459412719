"""Paths and names: one job's checkpoints under any fsspec root."""

from __future__ import annotations

import subprocess
import sys

import pytest

from checkpoints import CheckpointStore
from checkpoints.layout import JobLayout, parse_step_dirname, step_dirname


def test_step_directories_sort_in_step_order():
    assert step_dirname(42) == "step-000000042"
    assert parse_step_dirname("step-000000042") == 42
    names = [step_dirname(s) for s in (9, 10, 100, 1)]
    assert sorted(names) == [step_dirname(s) for s in (1, 9, 10, 100)]


@pytest.mark.parametrize("name", ["step-42", "step-0000000042", "manifest.json", "step-00000004x"])
def test_other_names_are_not_steps(name):
    assert parse_step_dirname(name) is None


@pytest.mark.parametrize("step", [-1, 1_000_000_000, 1.0, True, "3"])
def test_bad_steps_are_refused(step):
    with pytest.raises(ValueError):
        step_dirname(step)


@pytest.mark.parametrize("name", ["", "..", "../other", "a/b", ".hidden", "-x", "x" * 129, "a b"])
def test_tenant_and_job_names_must_be_one_safe_segment(name):
    with pytest.raises(ValueError):
        JobLayout("/root", name, "job")
    with pytest.raises(ValueError):
        JobLayout("/root", "tenant", name)


def test_job_layout():
    layout = JobLayout("/data/", "acme", "job-1")
    assert layout.checkpoints == "/data/tenants/acme/jobs/job-1/checkpoints"
    assert layout.manifest(3) == f"{layout.checkpoints}/step-000000003/manifest.json"


@pytest.mark.parametrize(
    "root, uri",
    [
        ("s3://bucket/prefix", "s3://bucket/prefix/tenants/t/jobs/j/checkpoints/step-000000005"),
        ("s3://bucket/", "s3://bucket/tenants/t/jobs/j/checkpoints/step-000000005"),
        ("memory://area", "memory:///area/tenants/t/jobs/j/checkpoints/step-000000005"),
        ("file:///srv/ckpt", "file:///srv/ckpt/tenants/t/jobs/j/checkpoints/step-000000005"),
        ("/srv/ckpt", "file:///srv/ckpt/tenants/t/jobs/j/checkpoints/step-000000005"),
    ],
)
def test_step_uris_keep_their_protocol(root, uri, secret):
    store = CheckpointStore(root, tenant="t", job="j", secret=secret)
    assert store.step_uri(5) == uri


def test_importing_the_package_does_not_import_torch():
    code = "import sys, checkpoints; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
