"""One job's checkpoints on an fsspec filesystem: listing, verification,
commit, retention and clean-up. Plain file I/O, no torch, no collectives:
the control plane lists checkpoints with this, and the checkpointer's rank 0
uses it to commit.

Commit is the manifest: a step is committed when its `manifest.json` is
present, its HMAC verifies, it names this tenant, job and step, and every file
it lists is there with the listed size (`scan`). Loading also checks every
file's digest (`verify_files`, with the algorithm the manifest names: BLAKE3,
or sha256 for a step written before it). Nothing relies on rename (object stores have
none), and a delete removes the manifest first, so a half-deleted step is
never taken for a committed one.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fsspec.core import url_to_fs

from checkpoints import layout
from checkpoints.digest import entry_of_stream
from checkpoints.errors import CheckpointExistsError, CheckpointInvalid, TornCheckpoint
from checkpoints.manifest import CHECKPOINT_DIGEST, FileEntry, Manifest, check_secret

logger = logging.getLogger(__name__)

_SCAN_ATTEMPTS = 3


@dataclass(frozen=True, kw_only=True)
class CheckpointInfo:
    """A committed checkpoint, as the API lists it."""

    step: int
    world_size: int
    bytes: int
    created_at: datetime
    uri: str

    @classmethod
    def of(cls, manifest: Manifest, uri: str) -> CheckpointInfo:
        return cls(
            step=manifest.step,
            world_size=manifest.world_size,
            bytes=manifest.total_bytes,
            created_at=manifest.created_at_datetime,
            uri=uri,
        )


@dataclass(frozen=True)
class Rejection:
    """A step directory that is not committed, and why."""

    step: int
    reason: str
    torn: bool = False  # no manifest, or a half-written one: a save that never finished


class CheckpointStore:
    """The checkpoints of one job under `root` (any fsspec URI: a local path,
    file://, s3://, gs://, memory://)."""

    def __init__(
        self,
        root: str,
        *,
        tenant: str,
        job: str,
        secret: bytes,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.root = root
        # No listings cache: fsspec shares one filesystem instance per set of
        # options, so this store, DCP's writer and reader (given these options)
        # and any other view in the process see one another's writes and
        # deletes at once (a cached listing hid the `.metadata.tmp` DCP
        # renames at commit on S3, failing the save).
        self.storage_options = {**(storage_options or {}), "use_listings_cache": False}
        self._secret = check_secret(secret)
        self.fs, root_path = url_to_fs(root, **self.storage_options)
        self.layout = layout.JobLayout(root_path, tenant, job)

    @property
    def tenant(self) -> str:
        return self.layout.tenant

    @property
    def job(self) -> str:
        return self.layout.job

    def step_uri(self, step: int) -> str:
        """The step directory as a URI (with its protocol), for DCP's fsspec reader and writer."""
        return self.fs.unstrip_protocol(self.layout.step(step))

    # -- listing ---------------------------------------------------------------

    def steps(self) -> list[int]:
        """Every step directory, committed or not, in step order."""
        found = self._ls(self.layout.checkpoints)
        steps = (layout.parse_step_dirname(layout.basename(entry["name"])) for entry in found)
        return sorted(step for step in steps if step is not None)

    def scan(self) -> tuple[list[Manifest], list[Rejection]]:
        """(committed manifests, rejected steps), each in step order.

        Scanned again if the step directories changed meanwhile: a commit and
        the retention after it (the old step deleted) must not both fall
        between listing the directories and reading their manifests."""
        steps = self.steps()
        for _ in range(_SCAN_ATTEMPTS):
            committed: list[Manifest] = []
            rejected: list[Rejection] = []
            for step in steps:
                try:
                    committed.append(self.read_manifest(step))
                except CheckpointInvalid as exc:
                    rejected.append(Rejection(step, str(exc), torn=isinstance(exc, TornCheckpoint)))
            steps, scanned = self.steps(), steps
            if steps == scanned:
                break
        return committed, rejected

    def list_committed(self) -> list[CheckpointInfo]:
        committed, _ = self.scan()
        return [CheckpointInfo.of(m, self.step_uri(m.step)) for m in committed]

    def latest_committed(self) -> CheckpointInfo | None:
        committed = self.list_committed()
        return committed[-1] if committed else None

    # -- verification ----------------------------------------------------------

    def read_manifest(self, step: int) -> Manifest:
        """The step's manifest if the step is committed (signature, location,
        file sizes); raises `CheckpointInvalid` with the reason otherwise."""
        listing = self._ls(self.layout.step(step))
        sizes = {layout.basename(entry["name"]): entry.get("size") for entry in listing}
        try:
            if layout.MANIFEST_NAME not in sizes:
                raise FileNotFoundError(self.layout.manifest(step))
            data = self.fs.cat_file(self.layout.manifest(step))
        except FileNotFoundError:
            raise TornCheckpoint(f"step {step}: no manifest (a save that never finished)") from None
        try:
            manifest = Manifest.from_json(data, self._secret)
        except CheckpointInvalid as exc:
            raise type(exc)(f"step {step}: {exc}") from None
        where = (manifest.tenant, manifest.job, manifest.step)
        if where != (self.tenant, self.job, step):
            raise CheckpointInvalid(f"step {step}: manifest is for {where}, not this directory")
        for name, entry in sorted(manifest.files.items()):
            if name not in sizes:
                raise CheckpointInvalid(f"step {step}: file {name} is missing")
            if sizes[name] != entry.size:
                raise CheckpointInvalid(
                    f"step {step}: file {name} has {sizes[name]} bytes, manifest says {entry.size}"
                )
        return manifest

    def verify_files(self, manifest: Manifest, names: Iterable[str] | None = None) -> list[str]:
        """Size and digest of the named files (all by default) against the
        manifest: the reasons they do not match, empty when they all do.
        I/O errors other than a missing file propagate."""
        reasons = []
        for name in sorted(manifest.files if names is None else names):
            expected = manifest.files[name]
            try:
                actual = self._hash(self.layout.file(manifest.step, name), expected.algo)
            except FileNotFoundError:
                reasons.append(f"step {manifest.step}: file {name} is missing")
                continue
            if actual != expected:
                what = "size" if actual.size != expected.size else expected.algo
                reasons.append(f"step {manifest.step}: file {name} {what} mismatch")
        return reasons

    def hash_files(self, step: int, names: Iterable[str]) -> dict[str, FileEntry]:
        """The named files' entries for a new manifest, read back from storage."""
        return {name: self._hash(self.layout.file(step, name), CHECKPOINT_DIGEST) for name in names}

    # -- writing ---------------------------------------------------------------

    def ensure_fresh(self, step: int) -> None:
        """Refuse a save into a step directory that already has files."""
        if self._ls(self.layout.step(step)):
            raise CheckpointExistsError(
                f"step {step} of {self.tenant}/{self.job} already has files; "
                "a save always goes to a fresh step directory"
            )

    def commit(self, manifest: Manifest) -> None:
        """Write the signed manifest: the last write of a save, and the commit."""
        path = self.layout.manifest(manifest.step)
        self.fs.invalidate_cache(path)
        if self.fs.exists(path):
            raise CheckpointExistsError(f"step {manifest.step} already has a manifest")
        self.fs.pipe_file(path, manifest.to_json(self._secret))

    def delete_step(self, step: int) -> None:
        """Un-commit first (the manifest), then the rest."""
        manifest, directory = self.layout.manifest(step), self.layout.step(step)
        for path, recursive in ((manifest, False), (directory, True)):
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(path, recursive=recursive)
        self.fs.invalidate_cache(self.layout.step(step))

    def remove_job(self) -> None:
        """Remove everything stored under the job's prefix: its checkpoints
        (each un-committed first), then the rest (exports, tracking files)."""
        for step in self.steps():
            self.delete_step(step)
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.layout.prefix, recursive=True)
        self.fs.invalidate_cache(self.layout.prefix)

    def retain(self, keep_last: int) -> list[int]:
        """Delete all but the newest `keep_last` committed steps. Run it after a
        commit: with keep_last=1 the new step is committed before the old goes."""
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1 (never delete the newest), got {keep_last}")
        committed, _ = self.scan()
        doomed = [m.step for m in committed[:-keep_last]]
        self._delete(doomed, "retention")
        return doomed

    def cleanup_uncommitted(self, *, including_newer: bool = False) -> list[int]:
        """Delete step directories that are not committed; returns their steps.

        By default only those older than the newest committed step: a newer one
        may be a save still in flight. `including_newer=True` deletes the newer
        ones too; call it only where no rank of this job can be writing (at
        start or resume, before the first save). A step whose manifest is there
        but does not verify is deleted only where some step does verify: with a
        wrong secret every step fails, and nothing must go then.
        """
        committed, rejected = self.scan()
        newest = committed[-1].step if committed else None
        doomed = [r.step for r in rejected if r.torn or newest is not None]
        if not including_newer:
            doomed = [s for s in doomed if newest is not None and s < newest]
        if newest is None and any(not r.torn for r in rejected):
            logger.warning(
                "%s/%s: no step verifies, and some have a manifest that does not: "
                "those are kept (is the signing secret right?)",
                self.tenant,
                self.job,
            )
        self._delete(doomed, "uncommitted")
        return doomed

    def discard_newer_than(self, step: int) -> list[int]:
        """Delete every step directory after `step` (a resume from `step` makes
        them a dead branch, and a later save would collide with them)."""
        doomed = [s for s in self.steps() if s > step]
        self._delete(doomed, f"newer than the resumed step {step}")
        return doomed

    # -- internals -------------------------------------------------------------

    def _delete(self, steps: list[int], why: str) -> None:
        for step in steps:
            logger.info("%s/%s: deleting step %d (%s)", self.tenant, self.job, step, why)
            self.delete_step(step)

    def _ls(self, path: str) -> list[dict[str, Any]]:
        # Other processes write here: never answer from fsspec's listing cache.
        self.fs.invalidate_cache(path)
        try:
            return self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):  # a file where a directory should be
            return []

    def _hash(self, path: str, algo: str) -> FileEntry:
        with self.fs.open(path, "rb") as f:
            return entry_of_stream(f, algo)
