"""A real S3 API for tests: a moto server on 127.0.0.1, as pytest fixtures.

The server runs in the test process; processes started by a test (ranks,
Ray actors on this machine) reach it on 127.0.0.1 too, with the credentials
that travel in the storage options.

Use it from any test directory (`pythonpath = ["."]` makes this importable):

    from tests.checkpoints.s3_server import moto_s3, s3_bucket  # noqa: F401  (in a conftest.py)

`moto_s3` yields the `storage_options` of an s3:// root; `s3_bucket` names a
bucket that exists on it.
"""

from __future__ import annotations

import fsspec
import pytest

S3_BUCKET = "brigade-ckpt"  # bucket names need >= 3 characters


@pytest.fixture(scope="session")
def moto_s3():
    """The server, with bucket `S3_BUCKET`; yields s3fs `storage_options`.
    They carry the credentials, so no process depends on its environment."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {
        "key": "test",
        "secret": "test",
        "client_kwargs": {"endpoint_url": f"http://{host}:{port}"},
    }
    fs = fsspec.filesystem("s3", **options)
    if not fs.exists(S3_BUCKET):  # moto's backend is per process, shared by its servers
        fs.mkdir(S3_BUCKET)
    try:
        yield options
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_bucket(moto_s3):
    return S3_BUCKET
