"""A tenant's data folder, `{data_uri_root}/tenants/{tenant}/data/`
(`data_access.data_prefix`): made with the tenant where the root is local,
and the files a tenant puts there through the API (`PUT /v1/data/{path}`).

An upload names a path relative to the prefix; one that would leave it (an
absolute path, a scheme, `..`, control characters, what `check_data_uri`
refuses) is a `SpecError` at `path` naming it. It is written to a temporary
name outside the prefix (`tenants/{tenant}/uploads/`) and moved into place
only once whole: a broken or refused upload leaves nothing under the prefix.
Paths are fsspec URIs with the data's storage options
(BRIGADE_DATA_STORAGE_OPTIONS), as the ranks read them.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from service.intake.data_access import DataUriRefused, check_data_uri, data_prefix
from workers.datasets.storage import data_storage_options
from workers.spec import SpecError

MAX_PATH = 1024  # characters of a path under the prefix
MAX_NAME = 255  # bytes of one of its segments (a file or folder name, as most filesystems allow)
READ_CHUNK = 1 << 20


class DataPathRefused(SpecError):
    """A path that is not a file under the tenant's prefix (the API's 422)."""

    def __init__(self, path: str, reason: str):
        super().__init__("path", f"path {path[:200]!r} {reason}")


class DataConflict(Exception):
    """A path where a folder is, or under a file (the API's 409)."""


@dataclass(frozen=True)
class StoredFile:
    path: str  # relative to the prefix
    uri: str  # what a spec's `data.uri` names
    bytes: int
    sha256: str | None = None  # of an upload, as received
    replaced: bool = False  # an upload that replaced a file of that path


class TenantData:
    """One tenant's files under its data prefix."""

    def __init__(self, root: str, tenant: str, storage_options: dict | None = None):
        self.root, self.tenant = root.rstrip("/"), tenant
        self.prefix = data_prefix(self.root, tenant)
        self.fs, self._prefix_path = url_to_fs(self.prefix, **data_storage_options(storage_options))

    def make_folder(self) -> None:
        """The prefix as a folder, where the root is local (object stores have none)."""
        if isinstance(self.fs, LocalFileSystem):
            self.fs.makedirs(self._prefix_path, exist_ok=True)

    def uri_of(self, path: str) -> str:
        """The file's URI under the prefix; `DataPathRefused` for a path that leaves it."""
        if not path or len(path) > MAX_PATH:
            raise DataPathRefused(path, f"must be 1 to {MAX_PATH} characters")
        if any(len(name.encode()) > MAX_NAME for name in path.split("/")):
            raise DataPathRefused(path, f"has a name over {MAX_NAME} bytes")
        if path.startswith("/") or "://" in path:
            raise DataPathRefused(path, "must be relative to your data prefix (no leading '/', "
                                        "no scheme)")
        try:
            return check_data_uri(self.prefix + path, self.tenant, self.root, field="path")
        except DataUriRefused as refused:
            raise DataPathRefused(path, str(refused).removeprefix("path ")) from None

    def upload(self, path: str) -> Upload:
        """An upload to `path` (checked now): write its chunks, then commit it."""
        uri = self.uri_of(path)
        final = self.fs._strip_protocol(uri)
        if self.fs.isdir(final):
            raise DataConflict(f"path {path!r}: a folder is there")
        staging = self.fs._strip_protocol(f"{self.root}/tenants/{self.tenant}/uploads")
        return Upload(self.fs, f"{staging}/{uuid.uuid4().hex}.partial", final,
                      StoredFile(path=path, uri=uri, bytes=0))

    def stat(self, path: str) -> StoredFile | None:
        """The file at `path`, or None where there is no file."""
        uri = self.uri_of(path)
        target = self.fs._strip_protocol(uri)
        if not self.fs.isfile(target):
            return None
        return StoredFile(path=path, uri=uri, bytes=int(self.fs.size(target)))

    def read(self, path: str) -> Iterator[bytes]:
        with self.fs.open(self.fs._strip_protocol(self.uri_of(path)), "rb") as f:
            while chunk := f.read(READ_CHUNK):
                yield chunk


class Upload:
    """One file on its way: `write` chunks, then `commit` (moves it into
    place); `discard` removes what was written. Each once."""

    def __init__(self, fs, staging: str, final: str, file: StoredFile):
        self.fs, self.staging, self.final, self.file = fs, staging, final, file
        self.fs.makedirs(self.fs._parent(staging), exist_ok=True)
        self._out = self.fs.open(staging, "wb")
        self._digest, self._bytes = hashlib.sha256(), 0

    def write(self, chunk: bytes) -> None:
        self._out.write(chunk)
        self._digest.update(chunk)
        self._bytes += len(chunk)

    def commit(self) -> StoredFile:
        self._out.close()
        replaced = self.fs.isfile(self.final)
        try:
            self.fs.makedirs(self.fs._parent(self.final), exist_ok=True)
            self.fs.mv(self.staging, self.final)
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            self.discard()
            raise DataConflict(f"path {self.file.path!r}: a file or folder is in the way") from None
        return StoredFile(path=self.file.path, uri=self.file.uri, bytes=self._bytes,
                          sha256=self._digest.hexdigest(), replaced=replaced)

    def discard(self) -> None:
        self._out.close()
        if self.fs.exists(self.staging):
            self.fs.rm(self.staging)
