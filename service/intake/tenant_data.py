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

The files are listed under a part of the prefix (`listing`, by path), and
removed one at a time (`remove`). An upload's sha256 is kept beside the
prefix (`tenants/{tenant}/checksums/`, one small JSON file a path) and
answered while the file is the one uploaded (the same size and time); a
file put there otherwise (a prepare job's shards) has none.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from service.intake.data_access import DataUriRefused, check_data_uri, data_prefix
from workers.datasets.storage import data_storage_options
from workers.schema import SpecError

MAX_PATH = 1024  # characters of a path under the prefix
MAX_NAME = 255  # bytes of one of its segments (a file or folder name, as most filesystems allow)
# A path under the prefix: names of 1 to MAX_NAME of these ASCII characters (so bytes and
# characters agree), neither `.` nor `..`, joined by '/'. What `check_data_uri` refuses
# (control characters, `\`, `::`, `?`, `#`, percent-encodings, empty segments) cannot be
# written with them; the OpenAPI document states the same pattern (`PATH_PATTERN`).
NAME_CHARACTERS = "A-Za-z0-9 ()+,.=@_~-"
_C, _NOT_DOT = f"[{NAME_CHARACTERS}]", f"[{NAME_CHARACTERS.replace('.', '')}]"
NAME_PATTERN = (f"(?:{_NOT_DOT}{_C}{{0,{MAX_NAME - 1}}}|\\.{_NOT_DOT}{_C}{{0,{MAX_NAME - 2}}}"
                f"|\\.\\.{_C}{{1,{MAX_NAME - 2}}})")
PATH_PATTERN = f"^{NAME_PATTERN}(?:/{NAME_PATTERN})*$"
# What a listing's `prefix` may be: folders, then the start of a name (or nothing).
PREFIX_PATTERN = f"^(?:{NAME_PATTERN}/)*{_C}{{0,{MAX_NAME}}}$"
_PATH, _PREFIX = re.compile(PATH_PATTERN), re.compile(PREFIX_PATTERN)
ALLOWED = (f"names of 1 to {MAX_NAME} of the characters A-Z a-z 0-9 and ' ()+,.=@_~-' "
           "(not '.' or '..') joined by '/'")
READ_CHUNK = 1 << 20


class DataPathRefused(SpecError):
    """A path that is not a file under the tenant's prefix (the API's 422)."""

    def __init__(self, path: str, reason: str):
        super().__init__("path", f"path {path[:200]!r} {reason}")


class DataConflict(Exception):
    """A path where a folder is, or under a file (the API's 409)."""


class DataFolder(Exception):
    """A path that names a folder where a file is asked for (the API's 404, saying so)."""

    def __init__(self, path: str):
        super().__init__(f"path {path[:200]!r} is a folder, not a file: list what is under it "
                         f"with GET /v1/data?prefix={path.rstrip('/')[:200]}/")


@dataclass(frozen=True)
class StoredFile:
    path: str  # relative to the prefix
    uri: str  # what a spec's `data.uri` names
    bytes: int
    sha256: str | None = None  # of an upload, as received
    replaced: bool = False  # an upload that replaced a file of that path
    modified: datetime | None = None  # when it was last written (where the store says)


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
        if not _PATH.fullmatch(path):
            raise DataPathRefused(path, f"must be {ALLOWED}")
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
                      StoredFile(path=path, uri=uri, bytes=0), self._checksum_of(path))

    def stat(self, path: str) -> StoredFile | None:
        """The file at `path`, or None where there is no file (`DataFolder`
        where a folder is)."""
        uri = self.uri_of(path)
        target = self.fs._strip_protocol(uri)
        if not self.fs.isfile(target):
            if self.fs.isdir(target):
                raise DataFolder(path)
            return None
        return self._file(path, self.fs.info(target))

    def listing(self, under: str = "") -> list[StoredFile]:
        """Every file whose path starts with `under` (a folder ending in '/',
        or the start of a name: `raw/part-`), by path; `under` is checked like
        a path ('' is the whole prefix)."""
        folder = under.rpartition("/")[0]
        if folder:
            self.uri_of(folder)  # refused as a path would be
        if len(under) > MAX_PATH or not _PREFIX.fullmatch(under):
            raise DataPathRefused(under, f"must be {ALLOWED}, then the start of a name")
        base = self._prefix_path.rstrip("/")
        top = f"{base}/{folder}" if folder else base
        if not self.fs.isdir(top):
            return []
        found = self.fs.find(top, detail=True)
        files = []
        for name, info in found.items():
            path = name[len(base) + 1:]
            if info.get("type") == "file" and path.startswith(under):
                files.append(self._file(path, info))
        return sorted(files, key=lambda f: f.path)

    def remove(self, path: str) -> StoredFile:
        """Remove the file at `path` (with its kept sha256); FileNotFoundError
        where there is none, `DataFolder` where a folder is."""
        found = self.stat(path)
        if found is None:
            raise FileNotFoundError(path)
        self.fs.rm(self.fs._strip_protocol(found.uri))
        checksum = self._checksum_of(path)
        if self.fs.exists(checksum):
            self.fs.rm(checksum)
        return found

    def forms_of(self, path: str) -> tuple[str, ...]:
        """What a spec may call the file at `path`: its URI, and its plain path where local."""
        uri = self.uri_of(path)
        return (uri, self.fs._strip_protocol(uri)) if isinstance(self.fs, LocalFileSystem) else (uri,)

    def _checksum_of(self, path: str) -> str:
        """Where an upload's sha256 is kept: named by a digest of the path
        (a path's names may be 255 bytes each), outside the prefix."""
        name = hashlib.sha256(path.encode()).hexdigest()
        return self.fs._strip_protocol(f"{self.root}/tenants/{self.tenant}/checksums/{name}.json")

    def _file(self, path: str, info: Mapping[str, Any]) -> StoredFile:
        size, modified = int(info.get("size") or 0), _modified(info)
        return StoredFile(path=path, uri=self.prefix + path, bytes=size, modified=modified,
                          sha256=self._known_sha256(path, size, modified))

    def _known_sha256(self, path: str, size: int, modified: datetime | None) -> str | None:
        """The upload's sha256, while the file is still that upload's."""
        try:
            with self.fs.open(self._checksum_of(path), "r") as f:
                kept = json.load(f)
        except (FileNotFoundError, ValueError):
            return None
        stamp = modified.timestamp() if modified else None
        if kept.get("path") != path or kept.get("bytes") != size or kept.get("modified") != stamp:
            return None
        return kept.get("sha256")

    def read(self, path: str) -> Iterator[bytes]:
        with self.fs.open(self.fs._strip_protocol(self.uri_of(path)), "rb") as f:
            while chunk := f.read(READ_CHUNK):
                yield chunk


class Upload:
    """One file on its way: `write` chunks, then `commit` (moves it into
    place); `discard` removes what was written. Each once."""

    def __init__(self, fs, staging: str, final: str, file: StoredFile, checksum: str):
        self.fs, self.staging, self.final, self.file = fs, staging, final, file
        self.checksum = checksum  # where its sha256 is kept once committed
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
        modified = _modified(self.fs.info(self.final))
        sha256 = self._digest.hexdigest()
        self.fs.makedirs(self.fs._parent(self.checksum), exist_ok=True)
        with self.fs.open(self.checksum, "w") as f:
            json.dump({"path": self.file.path, "bytes": self._bytes, "sha256": sha256,
                       "modified": modified.timestamp() if modified else None}, f)
        return StoredFile(path=self.file.path, uri=self.file.uri, bytes=self._bytes,
                          sha256=sha256, replaced=replaced, modified=modified)

    def discard(self) -> None:
        self._out.close()
        if self.fs.exists(self.staging):
            self.fs.rm(self.staging)


def _modified(info: Mapping[str, Any]) -> datetime | None:
    """A file's last write, from fsspec's info: `mtime` (local, a POSIX
    time), `LastModified` (S3) or `created` (memory)."""
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
    return None


def names_file(spec: Any, uris: tuple[str, ...], field: str = "") -> str | None:
    """The dotted field of a job's stored spec (JSON) that names the file
    known by any of `uris` (its URI, its plain path where local): the file
    itself, a folder or dataset prefix it lies under, or a glob that matches
    it (a prepare job's inputs); None where none does. Every string of the
    spec is looked at, so a source added to the spec later counts unchanged."""
    if isinstance(spec, str):
        named = spec.rstrip("/")
        return field if named and any(_names(named, uri) for uri in uris) else None
    items = spec.items() if isinstance(spec, dict) else enumerate(spec) if isinstance(spec, list) else ()
    for key, value in items:
        if found := names_file(value, uris, f"{field}.{key}" if field else str(key)):
            return found
    return None


def _names(named: str, uri: str) -> bool:
    if uri == named or uri.startswith(named + "/"):
        return True
    return any(c in named for c in "*?[") and fnmatch.fnmatchcase(uri, named)
