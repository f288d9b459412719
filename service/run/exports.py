"""Exports of jobs' checkpoints as Hugging Face models: asked for over the
API (`POST /v1/jobs/{id}/exports`) or made when a job succeeds (the
`BRIGADE_EXPORT_ON_SUCCESS` dtype, at its final checkpoint), each written
by one Ray task (`service.run.ray_cluster.run_export`, running
`workers.engine.export.export_checkpoint`: no torch here) on a thread of its own,
and committed by its manifest (`checkpoints.exports`).

An export has a kind. A job that trains every weight exports a "model"; a
job with an `adapter` section (LoRA) holds only its adapters in its
checkpoints, so it exports an "adapter" (PEFT's directory, loaded onto the
base it was trained on) or a "merged" model (the base, read again from the
job's `init.uri`, with the adapters folded in). The kind is checked first,
before any storage is read: it depends on the job's spec alone.

Only committed exports are listed. A torn one (its writer killed, its
control plane gone midway) is removed when the job's exports are next
listed, unless this control plane is still writing it. A file is verified
against the manifest's sha256 before it is streamed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from checkpoints import CheckpointTarget
from checkpoints.errors import CheckpointInvalid, TornCheckpoint
from checkpoints.exports import ExportInfo, export_id
from service.log_text import printable
from service.states import JobState
from workers.engine.export import export_problem, export_request
from workers.schema.hf_format import NoHuggingFaceArchitecture, hf_config

if TYPE_CHECKING:
    from service.settings import Settings
    from service.store import JobRecord, JobStore

logger = logging.getLogger(__name__)


def default_kind(job: JobRecord) -> str:
    """The export a job makes unless asked for another: its adapter if it trains one."""
    return "adapter" if job.spec.adapter is not None else "model"


class ExportRefused(Exception):
    """An export that cannot be made: `status` (409, 422) and the reason, at `field`."""

    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status, self.field = status, field


@dataclass(frozen=True)
class ExportStarted:
    id: str
    step: int
    dtype: str
    kind: str
    state: str  # "writing" (started now or already), or "committed" (there already)


RunExport = Callable[[dict[str, Any], float], dict[str, Any]]


class ExportService:
    def __init__(self, settings: Settings, store: JobStore,
                 target_of: Callable[[JobRecord], CheckpointTarget],
                 run: RunExport, on_done: Callable[[JobRecord, str, str | None], None] | None = None):
        self.settings, self.store, self._target_of, self._run = settings, store, target_of, run
        self._on_done = on_done  # (job, export id, error or None), e.g. an audit record
        self._writing: dict[tuple[str, str], threading.Thread] = {}
        self._lock = threading.Lock()

    def start(self, job: JobRecord, step: int | None, dtype: str, kind: str | None = None, *,
              by: str) -> ExportStarted:
        """Start writing the `kind` (None: the job's own, `default_kind`) of export of
        `job`'s committed `step` (None: its latest) in `dtype`, unless it is there or
        being written."""
        kind = kind or default_kind(job)
        self._check_kind(job, kind)
        try:
            hf_config(job.spec.model, dtype)
        except NoHuggingFaceArchitecture as e:
            raise ExportRefused(422, f"model: {e}", "model") from None
        target = self._target_of(job)
        committed = [c.step for c in target.open_store().list_committed()]
        if step is None:
            if not committed:
                raise ExportRefused(409, f"job {job.id} has no committed checkpoint to export",
                                    "step")
            step = committed[-1]
        elif step not in committed:
            raise ExportRefused(409, f"step: job {job.id} has no committed checkpoint at step "
                                     f"{step} (committed: {committed[-5:]})", "step")
        ident = export_id(step, dtype, kind)
        exports = target.open_exports()
        with self._lock:
            if (job.id, ident) in self._writing:
                return ExportStarted(ident, step, dtype, kind, "writing")
            if ident in {e.id for e in exports.list_committed()}:
                return ExportStarted(ident, step, dtype, kind, "committed")
            thread = threading.Thread(target=self._write,
                                      args=(job, ident, step, dtype, kind, by),
                                      name=f"export-{job.id}-{ident}", daemon=True)
            self._writing[(job.id, ident)] = thread
        thread.start()
        return ExportStarted(ident, step, dtype, kind, "writing")

    def _check_kind(self, job: JobRecord, kind: str) -> None:
        """Refuse a kind the job's checkpoints cannot make (a 422 at `kind`), by
        the export's own rules (`export_problem`)."""
        adapter = None if job.spec.adapter is None else job.spec.adapter.model_dump(mode="json")
        problem = export_problem(kind, adapter, self._base_uri(job))
        if problem is not None:
            raise ExportRefused(422, f"kind: job {job.id}: {problem}", "kind")

    def after_run(self, job: JobRecord) -> None:
        """A job whose runner ended: export its final checkpoint if it succeeded (an
        adapter job: its adapter, the smallest export and the one it trained)."""
        dtype = self.settings.export_on_success
        if not dtype or job.state is not JobState.SUCCEEDED:
            return
        try:
            hf_config(job.spec.model, dtype)
        except NoHuggingFaceArchitecture:
            return  # nothing to export to (a GPT): not an error of the job's
        try:
            self.start(job, None, dtype, by="the service (the job succeeded)")
        except ExportRefused as e:
            self.store.append_log(job.id, [f"export on success not made: {e}"])

    def committed(self, job: JobRecord) -> list[ExportInfo]:
        """Committed exports, oldest step first; torn ones not being written are removed."""
        exports = self._target_of(job).open_exports()
        with self._lock:
            writing = {ident for (job_id, ident) in self._writing if job_id == job.id}
        for ident in exports.cleanup_torn(keep=writing):
            logger.info("job %s: removed torn export %s", job.id, ident)
        return exports.list_committed()

    def being_written(self, job: JobRecord) -> list[str]:
        with self._lock:
            return sorted(ident for (job_id, ident) in self._writing if job_id == job.id)

    def file(self, job: JobRecord, ident: str, name: str) -> tuple[int, Iterator[bytes]]:
        """(size, chunks) of one committed export's file, once its sha256 is checked."""
        exports = self._target_of(job).open_exports()
        try:
            entry = exports.verify_file(ident, name)
        except TornCheckpoint:
            raise FileNotFoundError(f"export {ident} is not committed") from None
        except CheckpointInvalid as e:
            raise ExportRefused(409, str(e)) from None
        return entry.size, exports.stream(ident, name)

    def _base_uri(self, job: JobRecord) -> str | None:
        """The Hugging Face directory the job's weights came from, through the jobs it was
        initialised from (`init.job`, the same tenant's), whose config and tokenizer an
        export keeps; None for a model trained from scratch."""
        seen = {job.id}
        while job.spec.init is not None:
            if job.spec.init.uri:
                return job.spec.init.uri
            parent = self.store.get_job(job.spec.init.job or "", tenant=job.tenant)
            if parent is None or parent.id in seen:
                return None
            seen.add(parent.id)
            job = parent
        return None

    def _write(self, job: JobRecord, ident: str, step: int, dtype: str, kind: str,
               by: str) -> None:
        adapter = job.spec.adapter.model_dump(mode="json") if job.spec.adapter else None
        request = export_request(self._target_of(job).to_dict(), job.spec.model, step, dtype,
                                 self.settings.export_max_shard_bytes, self._base_uri(job),
                                 kind=kind, adapter=adapter)
        error = None
        try:
            self.store.append_log(job.id, [
                f"export {ident} ({kind}, {dtype}, step {step}) started by {by}"])
            done = self._run(request, self.settings.export_timeout_s)
            self.store.append_log(job.id, [
                f"export {ident} committed: {done['bytes']} bytes in {done['seconds']:.1f} s"])
        except Exception as e:  # the task failed or was lost: what it wrote is torn, not listed
            error = printable(f"{type(e).__name__}: {e}")[:1000]
            logger.warning("job %s: export %s failed: %s", job.id, ident, error)
            try:
                self.store.append_log(job.id, [f"export {ident} failed: {error}"])
                self._target_of(job).open_exports().delete(ident)
            except Exception:
                logger.exception("job %s: cleaning up export %s", job.id, ident)
        finally:
            with self._lock:
                self._writing.pop((job.id, ident), None)
        if self._on_done is not None:
            self._on_done(job, ident, error)
