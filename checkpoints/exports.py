"""A job's exports: consolidated Hugging Face-format models, committed like
checkpoints. Plain file I/O through fsspec, no torch.

    {root}/tenants/{tenant}/jobs/{job}/exports/step-{step:09d}-{dtype}[-{kind}]/
        config.json
        model.safetensors                      or shards model-0000k-of-0000n.safetensors
        model.safetensors.index.json           (with shards)
        manifest.json                          ours, signed, written LAST

An export's `kind` (`EXPORT_KINDS`) says what it holds: "model", the job's
weights (its id has no suffix, as before kinds existed); "adapter", an
adapter job's LoRA adapters as a PEFT adapter directory
(adapter_config.json, adapter_model.safetensors); "merged", the base with
the adapters merged into it, a plain Hugging Face model as "model" is.

An export is committed when its manifest verifies (signature; this tenant,
job, step and dtype; every listed file there with its size). A directory
without one is a torn export: never listed, and removed by `cleanup_torn`
(where no writer of it can still be running). A file that fails its sha256
is refused at download (`verify_file`).

An export's files are hashed with sha256 (`EXPORT_DIGEST`), not the BLAKE3
of a checkpoint's: they are handed to tenants, whose tools check sha256
(`sha256sum`, the Hugging Face Hub's LFS object ids), and the API's and the
client's `sha256` is this digest. Writing one is not on the training path.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO

from fsspec.core import url_to_fs

from checkpoints import layout
from checkpoints.digest import entry_of_stream
from checkpoints.errors import CheckpointInvalid, TornCheckpoint
from checkpoints.manifest import FileEntry, Manifest, check_secret, utc_now

EXPORTS_DIR = "exports"
EXPORT_DTYPES = ("bfloat16", "float32")
EXPORT_KINDS = ("model", "adapter", "merged")
EXPORT_FORMAT = "huggingface"
_EXPORT_ID = re.compile(r"^step-(\d{9})-(bfloat16|float32)(?:-(adapter|merged))?$")
EXPORT_DIGEST = "sha256"


def export_id(step: int, dtype: str, kind: str = "model") -> str:
    """'step-000000020-float32' for a model export, '...-float32-adapter' or '-merged' else."""
    if dtype not in EXPORT_DTYPES:
        raise ValueError(f"an export's dtype is one of {', '.join(EXPORT_DTYPES)}, not {dtype!r}")
    if kind not in EXPORT_KINDS:
        raise ValueError(f"an export's kind is one of {', '.join(EXPORT_KINDS)}, not {kind!r}")
    suffix = "" if kind == "model" else f"-{kind}"
    return f"{layout.step_dirname(step)}-{dtype}{suffix}"


def parse_export_id(value: str) -> tuple[int, str, str] | None:
    """(step, dtype, kind) of an export id such as 'step-000000020-float32' (kind
    "model") or 'step-000000020-float32-adapter', else None."""
    match = _EXPORT_ID.match(value)
    return (int(match.group(1)), match.group(2), match.group(3) or "model") if match else None


@dataclass(frozen=True, kw_only=True)
class ExportInfo:
    """A committed export, as the API lists it."""

    id: str
    step: int
    dtype: str
    kind: str  # one of EXPORT_KINDS
    bytes: int
    files: dict[str, FileEntry]
    created_at: datetime
    uri: str


class ExportStore:
    """The exports of one job under `root` (any fsspec URI)."""

    def __init__(self, root: str, *, tenant: str, job: str, secret: bytes,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.storage_options = dict(storage_options or {})
        self._secret = check_secret(secret)
        self.fs, root_path = url_to_fs(root, **self.storage_options)
        self.layout = layout.JobLayout(root_path, tenant, job)
        self.tenant, self.job = tenant, job

    @property
    def directory(self) -> str:
        return f"{self.layout.prefix}/{EXPORTS_DIR}"

    def path(self, ident: str, name: str | None = None) -> str:
        if parse_export_id(ident) is None:
            raise ValueError(f"{ident!r} is not an export id (step-NNNNNNNNN-dtype[-kind])")
        base = f"{self.directory}/{ident}"
        return base if name is None else f"{base}/{layout.validate_name('file', name)}"

    def uri(self, ident: str) -> str:
        return self.fs.unstrip_protocol(self.path(ident))

    # -- listing -------------------------------------------------------------------

    def ids(self) -> list[str]:
        """Every export directory, committed or not, in (step, dtype, kind) order."""
        return sorted(name for name in (layout.basename(e["name"]) for e in self._ls(self.directory))
                      if parse_export_id(name) is not None)

    def list_committed(self) -> list[ExportInfo]:
        out = []
        for ident in self.ids():
            try:
                manifest = self.read_manifest(ident)
            except CheckpointInvalid:
                continue
            out.append(self._info(ident, manifest))
        return out

    def torn(self) -> list[str]:
        """Export directories without a manifest (a writer that never finished, or is still writing)."""
        torn = []
        for ident in self.ids():
            try:
                self.read_manifest(ident)
            except TornCheckpoint:
                torn.append(ident)
            except CheckpointInvalid:
                pass
        return torn

    def read_manifest(self, ident: str) -> Manifest:
        """The export's manifest if it is committed; `CheckpointInvalid` with the reason otherwise."""
        step, dtype, kind = parse_export_id(ident) or (None, None, None)
        sizes = {layout.basename(e["name"]): e.get("size") for e in self._ls(self.path(ident))}
        if layout.MANIFEST_NAME not in sizes:
            raise TornCheckpoint(f"export {ident}: no manifest (a write that never finished)")
        manifest = Manifest.from_json(self.fs.cat_file(self.path(ident, layout.MANIFEST_NAME)),
                                      self._secret)
        where = (manifest.tenant, manifest.job, manifest.step, manifest.extra.get("export"),
                 manifest.extra.get("kind", "model"))
        if where != (self.tenant, self.job, step, dtype, kind):
            raise CheckpointInvalid(f"export {ident}: manifest is for {where}, not this directory")
        for name, entry in sorted(manifest.files.items()):
            if sizes.get(name) != entry.size:
                raise CheckpointInvalid(f"export {ident}: file {name} is missing or has "
                                        f"{sizes.get(name)} bytes, manifest says {entry.size}")
        return manifest

    def committed(self, ident: str) -> ExportInfo:
        return self._info(ident, self.read_manifest(ident))

    def verify_file(self, ident: str, name: str) -> FileEntry:
        """The file's entry, once its size and digest match the manifest; else `CheckpointInvalid`."""
        manifest = self.read_manifest(ident)
        if name not in manifest.files:
            raise FileNotFoundError(f"export {ident} has no file {name!r}")
        expected = manifest.files[name]
        actual = self.hash_file(ident, name, expected.algo)
        if actual != expected:
            raise CheckpointInvalid(f"export {ident}: file {name} fails its manifest check "
                                    f"({actual.algo} {actual.digest[:12]}..., manifest says "
                                    f"{expected.digest[:12]}...)")
        return actual

    def stream(self, ident: str, name: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        with self.open(ident, name) as f:
            while block := f.read(chunk):
                yield block

    def open(self, ident: str, name: str) -> BinaryIO:
        return self.fs.open(self.path(ident, name), "rb")

    # -- writing -------------------------------------------------------------------

    def begin(self, ident: str) -> str:
        """A fresh directory for the export (leftovers of a torn one removed); its path."""
        self.delete(ident)
        self.fs.makedirs(self.path(ident), exist_ok=True)
        return self.path(ident)

    def hash_file(self, ident: str, name: str, algo: str = EXPORT_DIGEST) -> FileEntry:
        with self.open(ident, name) as f:
            return entry_of_stream(f, algo)

    def commit(self, ident: str, *, world_size: int, files: dict[str, FileEntry],
               extra: dict[str, Any]) -> Manifest:
        """Write the signed manifest, last: the export is committed."""
        step, dtype, kind = parse_export_id(ident) or (0, "", "model")
        manifest = Manifest(tenant=self.tenant, job=self.job, step=step, world_size=world_size,
                            created_at=utc_now(), files=files,
                            extra={**extra, "export": dtype, "kind": kind,
                                   "format_name": EXPORT_FORMAT})
        self.fs.pipe_file(self.path(ident, layout.MANIFEST_NAME), manifest.to_json(self._secret))
        return manifest

    def delete(self, ident: str) -> None:
        """Un-commit first (the manifest), then the rest."""
        for path, recursive in ((self.path(ident, layout.MANIFEST_NAME), False),
                                (self.path(ident), True)):
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(path, recursive=recursive)
        self.fs.invalidate_cache(self.path(ident))

    def cleanup_torn(self, keep: frozenset[str] | set[str] = frozenset()) -> list[str]:
        """Remove the torn exports but those in `keep` (being written now); their ids."""
        doomed = [ident for ident in self.torn() if ident not in keep]
        for ident in doomed:
            self.delete(ident)
        return doomed

    # -- internals -------------------------------------------------------------------

    def _info(self, ident: str, manifest: Manifest) -> ExportInfo:
        files = {n: e for n, e in manifest.files.items()}
        return ExportInfo(id=ident, step=manifest.step, dtype=manifest.extra["export"],
                          kind=manifest.extra.get("kind", "model"), bytes=manifest.total_bytes, files=files,
                          created_at=manifest.created_at_datetime, uri=self.uri(ident))

    def _ls(self, path: str) -> list[dict[str, Any]]:
        self.fs.invalidate_cache(path)
        try:
            return self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
