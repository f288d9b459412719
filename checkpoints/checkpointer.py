"""Collective save and load of sharded state through DCP and fsspec.

Every rank calls every public method, in the same order. A save:

1. rank 0 checks the step directory is fresh and snapshots `extra` (all ranks
   learn the outcome: one refusal raises everywhere); an async save snapshots
   `extra` at once and checks the directory on its background thread, so a
   refusal is raised like its other errors, by `wait()` or the next call;
2. DCP writes each rank's shards and rank 0's `.metadata` (`dcp.save`; for
   an async save on a thread while training goes on, from a staging copy of
   the state kept and reused from one async save to the next: `StateStager`);
3. the digests of every rank's files are gathered: each rank's writer
   counted its files' BLAKE3 digests as it wrote them (`HashingWriter`), so
   no file is read back;
4. rank 0 writes the signed manifest, last: the commit. Retention and the
   clean-up of torn steps older than it run after, on rank 0's housekeeping
   thread, off the training path (`wait()` and the next save wait for them).

Steps 1-4 of an async save run on a background thread once the state is
staged, on the checkpointer's own gloo group; at most one save is in flight,
and its error is raised by `wait()` or by the next call. A load checks the candidate step's signature
(rank 0) and the digest of `.metadata` (a pickle) before DCP reads anything,
and every other file's as DCP reads it, each file hashed by one rank
(`VerifyingReader`), with the algorithm its manifest names (BLAKE3; sha256
for a step written before BLAKE3). A step whose file fails is passed over
for the next older one, which DCP reads over the whole state; if none
loads, the state holds part of a failed step, and the load raises rather
than report a fresh start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.stateful import Stateful

from checkpoints import layout
from checkpoints.collective import CheckpointGroup
from checkpoints.errors import CheckpointError, CheckpointInvalid
from checkpoints.hashing_writer import HashingWriter
from checkpoints.manifest import FileEntry, Manifest, snapshot_extra, utc_now
from checkpoints.staging import StateStager
from checkpoints.store import CheckpointStore, Rejection
from checkpoints.verifying_reader import VerifyingReader, load_verified

logger = logging.getLogger(__name__)

StateDict = dict[str, Any]  # DCP's: tensors, DTensors, Stateful objects, plain values
Extra = dict[str, Any] | None  # JSON for the manifest: data cursor, RNG, config hash...


@dataclass(frozen=True)
class LoadResult:
    """What a load restored, and the newer steps it passed over (with why)."""

    manifest: Manifest
    skipped: list[Rejection] = field(default_factory=list)

    @property
    def step(self) -> int:
        return self.manifest.step

    @property
    def extra(self) -> dict[str, Any]:
        return self.manifest.extra


class Checkpointer:
    """Saves and loads one job's checkpoints from every rank of its process group.

    Constructing it is collective (it makes the checkpoint process group).
    `keep_last` committed steps are kept after each commit (None keeps all).
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        keep_last: int | None = 3,
        timeout_s: float = 1800.0,
    ) -> None:
        if keep_last is not None and keep_last < 1:
            raise ValueError(f"keep_last must be >= 1 or None, got {keep_last}")
        self.store = store
        self.keep_last = keep_last
        self.group = CheckpointGroup(timeout_s=timeout_s)
        self._in_flight: tuple[int, Future[Manifest]] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._stager: StateStager | None = None
        self._housekeeper: ThreadPoolExecutor | None = None
        self._housekeeping: Future[None] | None = None

    # -- save ------------------------------------------------------------------

    def save(self, step: int, state_dict: StateDict, *, extra: Extra = None) -> Manifest:
        """Save and commit `step`; returns its manifest. Rank 0's `extra` is recorded."""
        self.wait()
        snapshot = self._prepare(step, partial(snapshot_extra, extra))
        writer = self._writer(step)

        def write() -> Metadata:
            return dcp.save(state_dict, storage_writer=writer, **self._dist_args())

        return self._write_and_commit(step, snapshot, write, writer)

    def async_save(self, step: int, state_dict: StateDict, *, extra: Extra = None) -> None:
        """Start saving `step` and return once the state is staged (copied):
        training may then change it. Waits for the previous save first. A
        refusal (a step directory that is not fresh, an `extra` that is not
        JSON) is raised by `wait()` or the next call, as the save's other
        errors are: rank 0's check of the directory is a listing and a
        collective, run on the background thread, off the training path."""
        self.wait()
        snapshot = self._snapshot(extra)  # now: the caller may change `extra` from here on
        if self._stager is None:
            # Keeps the staging copy between saves: a save copies the state
            # into it, nothing else, when the state has the same tensors as
            # last time. It costs one copy of this rank's state in CPU memory
            # while the checkpointer lives. Reuse is safe: the previous save
            # is over (`wait` above).
            self._stager = StateStager()
        # The state is on CPU once staged: no copy-ahead buffer in the writer
        # (what FileSystemWriter's own stage() sets).
        writer = self._writer(step, per_thread_copy_ahead=0)
        plain = {key: value.state_dict() if isinstance(value, Stateful) else value
                 for key, value in state_dict.items()}
        staged = self._stager.stage(plain)  # training may change the state from here on

        def write() -> Metadata:
            # What dcp.async_save does after staging, on the commit thread.
            return dcp.save(staged, storage_writer=writer, **self._dist_args())

        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-commit")
        def prepare_write_and_commit() -> Manifest:
            return self._write_and_commit(step, self._prepare(step, snapshot), write, writer)

        commit = self._executor.submit(prepare_write_and_commit)
        self._in_flight = (step, commit)

    @property
    def in_flight(self) -> int | None:
        """The step of the save in flight, if any."""
        return self._in_flight[0] if self._in_flight else None

    def wait(self) -> Manifest | None:
        """Block until the save in flight has committed and the housekeeping
        after the last commit (retention, clean-up) is done; returns the
        save's manifest (None if there was none), or raises its error on
        every rank."""
        manifest = None
        if self._in_flight is not None:
            _, commit = self._in_flight
            self._in_flight = None
            manifest = commit.result()
        if self._housekeeping is not None:
            self._housekeeping.result()  # never raises: `_tidy_after_commit` logs its errors
            self._housekeeping = None
        return manifest

    # -- load ------------------------------------------------------------------

    def load(self, state_dict: StateDict, *, step: int | None = None) -> LoadResult | None:
        """Load the newest committed step that verifies (or `step`) into
        `state_dict`, built at the current world size (DCP reshards). Steps that
        do not verify are logged and passed over; a named one raises instead.
        Returns None when there is no committed step at all."""
        self.wait()
        committed, rejected = self.group.on_rank0(
            "listing checkpoints", lambda: self._candidates(step)
        )
        skipped = list(rejected)
        loaded = None
        touched = False  # a step that failed had been read, in part, into the state
        for manifest in reversed(committed):
            reasons, read = self._load_verified(manifest, state_dict)
            if not reasons:
                loaded = manifest
                break
            skipped.append(Rejection(manifest.step, "; ".join(reasons)))
            touched = touched or read
        passed_over = sorted(
            (r for r in skipped if loaded is None or r.step > loaded.step), key=lambda r: r.step
        )
        self._log_passed_over(passed_over)
        if loaded is None and (step is not None or touched):
            why = "; ".join(r.reason for r in skipped)
            if step is None:
                # Not a fresh start: the tensors hold part of a step that failed.
                why += ("; no older step verifies, and the state was partly overwritten "
                        "by the step that failed: it must not be used")
            raise CheckpointInvalid(why)
        return None if loaded is None else LoadResult(loaded, passed_over)

    def resume(self, state_dict: StateDict) -> LoadResult | None:
        """What a job does at start: load the newest step that verifies, then
        delete the steps after it (torn or corrupt: a dead branch a later save
        would collide with) and older torn ones. None on a fresh start."""
        result = self.load(state_dict)

        def tidy() -> None:
            if result is None:
                self.store.cleanup_uncommitted(including_newer=True)
            else:
                self.store.discard_newer_than(result.step)
                self.store.cleanup_uncommitted()

        self.group.on_rank0("cleaning up at resume", tidy)
        return result

    def rewind(self, step: int) -> None:
        """What a job does when it goes on from an in-memory snapshot of `step`
        (recovery in place): the steps saved after it are a dead branch its
        next saves would collide with, and torn ones are left over: delete
        them, as `resume` does after the step it loads."""

        def tidy() -> None:
            self.store.discard_newer_than(step)
            self.store.cleanup_uncommitted()

        self.group.on_rank0("cleaning up at a rewind", tidy)

    # -- housekeeping (collective; rank 0 does the I/O) ------------------------

    def cleanup_uncommitted(self, *, including_newer: bool = False) -> list[int]:
        """Delete torn steps (see `CheckpointStore.cleanup_uncommitted`).
        `including_newer=True` only where no rank can be writing: at start."""
        self.wait()
        return self.group.on_rank0(
            "cleaning up uncommitted steps",
            lambda: self.store.cleanup_uncommitted(including_newer=including_newer),
        )

    def close(self) -> None:
        """Wait for the save in flight, then release the checkpoint group."""
        try:
            self.wait()
        finally:
            if self._executor is not None:
                self._executor.shutdown()
            if self._housekeeper is not None:
                self._housekeeper.shutdown()
            if self._stager is not None:
                self._stager.close()
                self._stager = None
            self.group.close()

    # -- internals -------------------------------------------------------------

    def _prepare(self, step: int, snapshot: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Rank 0 checks the step and its directory and takes `snapshot()`
        (rank 0's `extra`, as JSON); every rank returns it, or raises."""
        def check() -> dict[str, Any]:
            layout.validate_step(step)
            self.store.ensure_fresh(step)
            return snapshot()

        return self.group.on_rank0(f"saving step {step}", check)

    def _snapshot(self, extra: Extra) -> Callable[[], dict[str, Any]]:
        """Rank 0's `extra` as JSON, taken now, for `_prepare` to hand out
        later (its error too, so that every rank raises it together then)."""
        if self.group.rank != 0:
            return dict
        try:
            taken = snapshot_extra(extra)
        except ValueError as exc:
            error = exc

            def refuse() -> dict[str, Any]:
                raise error

            return refuse
        return lambda: taken

    def _write_and_commit(
        self, step: int, extra: dict[str, Any], write: Callable[[], Metadata],
        writer: HashingWriter,
    ) -> Manifest:
        written_by_all: set[str] = set()  # DCP's global metadata names every rank's files

        def write_and_hash() -> dict[str, FileEntry]:
            """The DCP write; the digests of this rank's own files, counted as they were written."""
            metadata = write()
            storage = metadata.storage_data
            if storage is None:  # some torch releases hand back the plan without the files
                storage = FsspecReader(writer.path, **self.store.storage_options).read_metadata().storage_data
            names = {info.relative_path for info in storage.values()}
            written_by_all.update(names)
            own = sorted(n for n in names if n.startswith(layout.rank_file_prefix(self.group.rank)))
            return self._digests(step, writer, own)

        per_rank = self.group.agree(f"writing step {step}", write_and_hash)

        def commit() -> Manifest:
            files = {name: entry for digests in per_rank for name, entry in digests.items()}
            if written_by_all - files.keys():
                raise CheckpointError(f"no rank hashed {sorted(written_by_all - files.keys())}")
            files.update(self._digests(step, writer, [layout.DCP_METADATA_NAME]))
            manifest = Manifest(
                tenant=self.store.tenant,
                job=self.store.job,
                step=step,
                world_size=self.group.world_size,
                created_at=utc_now(),
                files=files,
                extra=extra,
            )
            self.store.commit(manifest)
            if self._housekeeper is None:
                self._housekeeper = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-housekeeping")
            self._housekeeping = self._housekeeper.submit(self._tidy_after_commit)
            return manifest

        return self.group.on_rank0(f"committing step {step}", commit)

    def _tidy_after_commit(self) -> None:
        # The step is committed: a failure here must not fail the save.
        try:
            if self.keep_last is not None:
                self.store.retain(self.keep_last)
            self.store.cleanup_uncommitted()
        except Exception:
            where = f"{self.store.tenant}/{self.store.job}"
            logger.exception("%s: retention or clean-up after a commit failed", where)

    def _candidates(self, step: int | None) -> tuple[list[Manifest], list[Rejection]]:
        if step is None:
            return self.store.scan()
        try:
            return [self.store.read_manifest(step)], []
        except CheckpointInvalid as exc:
            return [], [Rejection(step, str(exc))]

    def _load_verified(self, manifest: Manifest, state_dict: StateDict) -> tuple[list[str], bool]:
        """Load the step into `state_dict`, every file checked as it is read
        (`VerifyingReader`): ([], True) once loaded; else the reasons its files
        failed, and whether DCP had begun reading into the state. Every rank
        gets every reason, so they all take the same decision."""
        step = manifest.step
        reader = VerifyingReader(self.store.step_uri(step), manifest, **self.store.storage_options)
        per_rank = self.group.agree(f"verifying step {step}", reader.verify_metadata)
        if reasons := sorted({reason for rank in per_rank for reason in rank}):
            return reasons, False  # before DCP unpickled or read anything
        per_rank = self.group.agree(
            f"loading step {step}", partial(load_verified, state_dict, reader, **self._dist_args())
        )
        return sorted({reason for rank in per_rank for reason in rank}), True

    def _log_passed_over(self, rejections: list[Rejection]) -> None:
        if self.group.rank != 0:
            return
        for rejection in rejections:
            logger.warning(
                "%s/%s: not loading step %d: %s",
                self.store.tenant, self.store.job, rejection.step, rejection.reason,
            )

    def _dist_args(self) -> dict[str, Any]:
        return {"process_group": self.group.pg, "no_dist": not self.group.distributed}

    def _writer(self, step: int, **writer_args: Any) -> HashingWriter:
        uri, options = self.store.step_uri(step), self.store.storage_options
        return HashingWriter(uri, overwrite=False, **writer_args, **options)

    def _digests(self, step: int, writer: HashingWriter, names: list[str]) -> dict[str, FileEntry]:
        """The named files' entries as the writer counted them; any it did not
        write whole (none, with this torch) are hashed from storage."""
        counted = writer.digests
        missing = [name for name in names if name not in counted]
        return {name: counted[name] for name in names if name in counted} | (
            self.store.hash_files(step, missing) if missing else {}
        )
