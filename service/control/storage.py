"""Where a job's things live: its checkpoint target (the storage root, the
tenant's and the job's prefix, the secret its manifests are signed with),
the `CheckpointStore` over it, its latest committed checkpoint, and the
experiment trackers its metrics also go to.

One place answers these from the settings, so that the requests (a delete
removes the job's storage), the views (its committed checkpoints), the
leader (a launch hands its ranks the target; a runner reads the latest
checkpoint) and the exports all agree on where a job's files are.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from checkpoints import CheckpointStore, CheckpointTarget
from service.observability.tracking import JobTracking, MlflowRun, TensorBoardFiles, Tracker, WandbRun
from service.settings import Settings
from service.store import JobRecord

logger = logging.getLogger(__name__)


class JobStorage:
    def __init__(self, settings: Settings):
        self.settings = settings

    def checkpoint_target(self, job: JobRecord) -> CheckpointTarget:
        """Where the job's checkpoints and exports are written, and how they are signed."""
        return CheckpointTarget(
            root=self.settings.resolved_storage_uri, tenant=job.tenant, job=job.id,
            secret=self.settings.resolved_secret(), storage_options=self.settings.storage_options,
        )

    def checkpoint_store(self, job: JobRecord) -> CheckpointStore:
        """The job's checkpoints, to list or remove (torch-free)."""
        return self.checkpoint_target(job).open_store()

    def latest_checkpoint(self, job: JobRecord) -> dict | None:
        """The job's newest committed checkpoint ({"step", "world_size"}), or None."""
        latest = self.checkpoint_store(job).latest_committed()
        return None if latest is None else {"step": latest.step, "world_size": latest.world_size}

    def tracking_for(self, job: JobRecord) -> JobTracking | None:
        """The experiment trackers this job's metrics go to: TensorBoard files
        under its storage prefix and a W&B run if its spec asks, the operator's MLflow."""
        makers: dict[str, Callable[[], Tracker]] = {}
        if job.spec.tracking.tensorboard:
            store = self.checkpoint_store(job)
            makers["tensorboard"] = lambda: TensorBoardFiles(
                store.fs, f"{store.layout.prefix}/tensorboard", f"brigade-{job.id}")
        if uri := self.settings.mlflow_tracking_uri:
            makers["mlflow"] = lambda: MlflowRun(uri, job.tenant, job.id, job.name)
        if job.spec.tracking.wandb is not None:
            makers["wandb"] = lambda: self._wandb_run(job)
        return JobTracking(job.id, makers) if makers else None

    def export_done(self, job: JobRecord, ident: str, error: str | None) -> None:
        """A committed export of a job with a W&B run, in that run's summary (a
        tracker that fails says so in the service's log, never fails the export)."""
        if error is not None or job.spec.tracking.wandb is None:
            return
        try:
            exports = self.checkpoint_target(job).open_exports()
            info = next(e for e in exports.list_committed() if e.id == ident)
            self._wandb_run(job).log_export({
                "id": info.id, "step": info.step, "dtype": info.dtype, "kind": info.kind,
                "bytes": info.bytes, "uri": info.uri})
        except Exception as e:
            logger.warning("job %s: export %s not logged to W&B: %s", job.id, ident, e)

    def _wandb_run(self, job: JobRecord) -> WandbRun:
        """The job's W&B run (resumed, if it has one), its files under WANDB_DIR
        (default: the service's data_dir), as W&B writes them: `{dir}/wandb/`."""
        assert job.spec.tracking.wandb is not None
        directory = os.environ.get("WANDB_DIR") or self.settings.data_dir
        return WandbRun(job.spec.tracking.wandb, job.id, job.name, job.tenant,
                        config=job.spec.model_dump(mode="json", by_alias=True), directory=directory,
                        labels=job.labels, note=job.note)
