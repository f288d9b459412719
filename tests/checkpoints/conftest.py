"""Fixtures for the checkpoint tests: storage on memory://, file:// and S3
(the moto server of `s3_server`, provided by tests/conftest.py to every test
directory: one per session, as moto's backend is shared in-process), a signing secret, stores and checkpointers
of one job, and a one-rank gloo process group."""

from __future__ import annotations

import uuid

import fsspec
import pytest
from ckpt_harness import SECRET, init_single_rank


@pytest.fixture
def memory_storage():
    root = f"memory://ckpt-{uuid.uuid4().hex[:12]}"
    yield {"root": root}
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture
def file_storage(tmp_path):
    return {"root": f"file://{tmp_path}/storage"}


@pytest.fixture
def s3_storage(moto_s3, s3_bucket):
    return {"root": f"s3://{s3_bucket}/{uuid.uuid4().hex[:12]}", "storage_options": moto_s3}


@pytest.fixture(params=["memory", "file", "s3"])
def storage(request):
    """A storage root (CheckpointStore's `root` and `storage_options`) on each backend."""
    return request.getfixturevalue(f"{request.param}_storage")


@pytest.fixture
def gloo_group():
    """A one-rank gloo default process group, for the code paths that need one."""
    import torch.distributed as dist

    init_single_rank()
    yield
    dist.destroy_process_group()


@pytest.fixture
def secret():
    return SECRET


@pytest.fixture
def make_store(storage, secret):
    """CheckpointStore(s) of job acme/j1 on the test's storage."""
    from checkpoints import CheckpointStore

    def make(**kwargs):
        job = {"tenant": "acme", "job": "j1", "secret": secret}
        return CheckpointStore(**(storage | job | kwargs))

    return make


@pytest.fixture
def make_checkpointer(make_store):
    """Checkpointers of job acme/j1, closed after the test."""
    from checkpoints.checkpointer import Checkpointer

    made = []

    def make(*, keep_last=None, **store_kwargs):
        made.append(Checkpointer(make_store(**store_kwargs), keep_last=keep_last))
        return made[-1]

    yield make
    for checkpointer in made:
        checkpointer.close()
