"""Fixtures for the checkpoint tests: storage roots (memory://, file://, a
moto S3 server), a signing secret, and a one-rank gloo process group.

`moto_s3` is session-scoped and serves S3 on 127.0.0.1, so processes spawned
by a test (ranks, Ray actors) reach it too; the credentials it needs are put
in os.environ, which spawned processes inherit.
"""

from __future__ import annotations

import os
import uuid

import fsspec
import pytest
from ckpt_harness import SECRET, init_single_rank

S3_BUCKET = "brigade-ckpt"
_S3_ENV = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_SESSION_TOKEN": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def moto_s3():
    """A real S3 API (moto) on 127.0.0.1 with bucket `S3_BUCKET`; yields the
    `storage_options` an s3:// CheckpointStore needs."""
    from moto.server import ThreadedMotoServer

    saved = {key: os.environ.get(key) for key in _S3_ENV}
    os.environ.update(_S3_ENV)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {"client_kwargs": {"endpoint_url": f"http://{host}:{port}"}}
    fsspec.filesystem("s3", **options).mkdir(S3_BUCKET)
    try:
        yield options
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def memory_root():
    root = f"memory://ckpt-{uuid.uuid4().hex[:12]}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture
def file_root(tmp_path):
    return f"file://{tmp_path}/storage"


@pytest.fixture
def s3_root(moto_s3):
    return f"s3://{S3_BUCKET}/{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["memory", "file"])
def root(request):
    """A storage root on each of the single-process backends."""
    return request.getfixturevalue(f"{request.param}_root")


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
