"""A job's metrics sent on to experiment trackers, as the runner records them:

- TensorBoard (`tracking: {tensorboard: true}` in the job's spec): event
  files under the job's storage prefix, `{prefix}/tensorboard/`, one file a
  runner, rewritten whole at each flush (object stores cannot append; a
  flush at most every FLUSH_S and at the end), readable by TensorBoard's own
  reader (`tensorboard --logdir` on the prefix, or a copy of it).
- MLflow (the operator's `BRIGADE_MLFLOW_TRACKING_URI`): an experiment per
  tenant (`brigade/{tenant}`), a run per job named by its id (found again
  after a control-plane restart by its `brigade.job` tag), each row's
  numeric metrics at its step, and the run ended with the job.
- Weights & Biases (`tracking: {wandb: {project, entity, mode}}` in the
  job's spec; the `wandb` extra): a run per job whose id is the job's (so a
  second runner, after a control-plane restart, resumes it), the spec as its
  config, each row's numeric metrics at its step, the job's state in its
  summary, and the export made when the job succeeded (`WandbRun.log_export`,
  the run resumed once more). The key is the operator's (WANDB_API_KEY); an
  offline run is written under WANDB_DIR (default: the service's data_dir), for `wandb sync`. The run never
  captures the service's console, system metrics, git state or code.

A tracker that fails is logged and left off for the rest of the runner's
life: it never fails the job. The writers' libraries (tensorboardX for the
event protos, mlflow) are imported when a job asks for them.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import struct
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from service.states import JobState

if TYPE_CHECKING:
    from workers.schema import WandbSpec

logger = logging.getLogger(__name__)
FLUSH_S = 10.0
EXPERIMENT_PREFIX = "brigade/"
_MLFLOW_STATUS = {JobState.SUCCEEDED: "FINISHED", JobState.FAILED: "FAILED",
                  JobState.CANCELLED: "KILLED", JobState.PRUNED: "KILLED"}


# A mixture's per-member metrics, plotted one series a member: `mix_tokens/wiki`
PER_MEMBER = ("mix_tokens", "mix_eval_loss")


def numeric_metrics(row: dict) -> dict[str, float]:
    """The row's metrics a tracker plots: numbers, not the step, not flags
    (and a mixture's, a series a member)."""
    flat = {k: v for k, v in row.items() if k not in PER_MEMBER}
    for key in PER_MEMBER:
        for member, value in (row.get(key) or {}).items():
            flat[f"{key}/{re.sub(r'[^A-Za-z0-9_./ -]', '_', member)}"] = value
    return {k: float(v) for k, v in flat.items()
            if k != "step" and isinstance(v, int | float) and not isinstance(v, bool)}


class TensorBoardFiles:
    """One event file of scalars under `directory` (a path on `fs`)."""

    def __init__(self, fs, directory: str, run: str):
        from tensorboardX.proto import event_pb2

        self.fs, self.directory = fs, directory.rstrip("/")
        started = time.time()
        self.path = f"{self.directory}/events.out.tfevents.{started:.0f}.{socket.gethostname()}.{run}"
        self._event = event_pb2.Event
        self._records = [self._record(self._event(wall_time=started, file_version="brain.Event:2"))]
        self._flushed_at, self._dirty = 0.0, True

    def add(self, rows: Iterable[dict]) -> None:
        from tensorboardX.proto.summary_pb2 import Summary

        now = time.time()
        for row in rows:
            values = [Summary.Value(tag=name, simple_value=value)
                      for name, value in sorted(numeric_metrics(row).items())]
            if values:
                event = self._event(wall_time=now, step=int(row["step"]), summary=Summary(value=values))
                self._records.append(self._record(event))
                self._dirty = True

    def flush(self, force: bool = False) -> None:
        if self._dirty and (force or time.monotonic() - self._flushed_at >= FLUSH_S):
            self.fs.makedirs(self.directory, exist_ok=True)
            self.fs.pipe_file(self.path, b"".join(self._records))
            self._flushed_at, self._dirty = time.monotonic(), False

    @staticmethod
    def _record(event) -> bytes:
        """TFRecord framing: length, its masked crc32c, the data, its masked crc32c."""
        from tensorboardX.record_writer import masked_crc32c

        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        return (header + struct.pack("<I", masked_crc32c(header)) + data
                + struct.pack("<I", masked_crc32c(data)))


class MlflowRun:
    """The job's run on an MLflow tracking server."""

    def __init__(self, tracking_uri: str, tenant: str, job_id: str, job_name: str):
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=tracking_uri)
        name = f"{EXPERIMENT_PREFIX}{tenant}"
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = (experiment.experiment_id if experiment is not None
                         else self.client.create_experiment(name))
        found = self.client.search_runs([experiment_id], f"tags.`brigade.job` = '{job_id}'",
                                        max_results=1)
        if found:
            self.run_id = found[0].info.run_id
        else:
            run = self.client.create_run(experiment_id, run_name=job_id, tags={
                "brigade.job": job_id, "brigade.tenant": tenant, "brigade.job_name": job_name})
            self.run_id = run.info.run_id

    def add(self, rows: Iterable[dict]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(key=name, value=value, timestamp=now, step=int(row["step"]))
                   for row in rows for name, value in numeric_metrics(row).items()]
        for start in range(0, len(metrics), 1000):  # MLflow's batch limit
            self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000])

    def end(self, state: JobState) -> None:
        if state in _MLFLOW_STATUS:
            self.client.set_terminated(self.run_id, status=_MLFLOW_STATUS[state])


class WandbRun:
    """The job's run on Weights & Biases, as the job's spec names it."""

    def __init__(self, spec: WandbSpec, job_id: str, job_name: str, tenant: str,
                 config: dict[str, Any], directory: str, labels: dict[str, str] | None = None,
                 note: str | None = None):
        import wandb

        os.makedirs(directory, exist_ok=True)
        self.run = wandb.init(
            dir=directory, project=spec.project, entity=spec.entity, mode=spec.mode, id=job_id, name=job_name,
            config={**config, "brigade": {"job": job_id, "tenant": tenant}},
            tags=[f"{k}={v}"[:64] for k, v in sorted((labels or {}).items())], notes=note,
            resume="allow", reinit="create_new", settings=wandb.Settings(
                silent=True, console="off", x_disable_stats=True, x_disable_meta=True,
                x_disable_machine_info=True, x_save_requirements=False, disable_git=True,
                save_code=False, disable_job_creation=True))
        self._last_step = -1

    def add(self, rows: Iterable[dict]) -> None:
        for row in rows:
            step = int(row["step"])
            if step <= self._last_step:  # W&B keeps a run's steps rising: a step done again is dropped
                continue
            metrics = numeric_metrics(row)
            if metrics:
                self.run.log(metrics, step=step)
                self._last_step = step

    def end(self, state: JobState) -> None:
        self.run.summary["brigade_state"] = state.value
        failed = state in (JobState.FAILED, JobState.CANCELLED)
        self.run.finish(exit_code=1 if failed else 0)

    def log_export(self, export: dict[str, Any]) -> None:
        """An export of the job (its id, step, dtype, kind, bytes, uri) in the run's summary."""
        self.run.summary["export"] = export
        self.run.finish(exit_code=0)


Tracker = TensorBoardFiles | MlflowRun | WandbRun


class JobTracking:
    """The trackers one job's runner feeds, each made at first use from its
    maker (a tracker that fails is left off, and says why in `problems`)."""

    def __init__(self, job_id: str, makers: dict[str, Callable[[], Tracker]]):
        self.job_id, self._makers = job_id, dict(makers)
        self._sinks: dict[str, Tracker] = {}
        self.problems: list[str] = []  # what failed since last read, for the job's log

    def record(self, rows: list[dict]) -> None:
        for name in list(self._makers):
            self._use(name, lambda sink: sink.add(rows))
        self.flush()

    def flush(self, force: bool = False) -> None:
        self._use("tensorboard", lambda sink: sink.flush(force) if isinstance(sink, TensorBoardFiles)
                  else None)

    def end(self, state: JobState) -> None:
        """The runner is done: write out what is left; end the run of a job that ended
        (W&B's run is finished either way: a later runner resumes it by the job's id)."""
        self.flush(force=True)
        if state.is_terminal:
            self._use("mlflow", lambda sink: sink.end(state) if isinstance(sink, MlflowRun) else None)
        if "wandb" in self._sinks:
            self._use("wandb", lambda sink: sink.end(state) if isinstance(sink, WandbRun) else None)

    def _use(self, name: str, act: Callable) -> None:
        if name not in self._makers:
            return  # not asked for, or failed before
        try:
            if name not in self._sinks:
                self._sinks[name] = self._makers[name]()
            act(self._sinks[name])
        except Exception as e:  # a tracker must never fail the job
            logger.warning("job %s: %s tracking failed, left off: %s", self.job_id, name, e)
            self.problems.append(f"{name} tracking failed and is left off: {type(e).__name__}: {e}")
            self._makers.pop(name, None)
            self._sinks.pop(name, None)
