"""A job, as the REST API takes and returns it, and what it leaves behind:
its events, per-step metrics rows, log lines and the progress a log stream
reports, committed checkpoints and workers (`api.server.routes.jobs`,
`api.server.routes.logs`).

A job's request body is the one job schema (`workers.schema.JobSpec`, as
`JobCreate`), so the API refuses exactly what the control plane and the
engine would; a metrics row is the one row schema the engine writes
(`workers.schema.metrics_row.MetricRow`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.base import Public, Request
from service.states import JobState
from workers.schema import MAX_WORKERS, JobSpec
from workers.schema.labels import Labels, Note
from workers.schema.metrics_row import MetricRow as MetricRow  # a metrics row, served as it is

JobCreate = JobSpec


class CheckpointRef(Public):
    step: int
    world_size: int


class JobTrialPublic(Public):
    """A sweep's trial, on its job: its objective as the sweep shows it
    (`GET /v1/sweeps/{id}`'s trial, `brigade sweep status`)."""

    sweep: str
    number: int  # the study's trial number: the job is named `{sweep name}-t{number}`
    metric: str  # what the sweep judges by (`objective.metric`; smoothed as its spec says)
    # its objective at its newest step; a pruned trial's: at `pruned_step`, the value it was
    # pruned on, which may differ from the job's `latest_loss` (its ranks' last step)
    objective: float | None = None
    pruned_step: int | None = None


class JobPublic(Public):
    id: str
    tenant: str  # whose job it is
    name: str
    state: JobState
    spec: JobSpec
    priority: int = 0
    workers: int | None = None  # the current world size; None before a group is launched
    step: int = 0
    restarts: int = 0  # whole-group restarts after a failure
    recoveries: int = 0  # lost ranks replaced while the others trained on (no restart)
    preemptions: int = 0
    latest_checkpoint: CheckpointRef | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    waiting: str | None = None  # a queued job: why it did not start at the latest scheduling pass
    # A queued job: when the scheduler's rules, run forward over the running jobs' remaining
    # steps, start it; null with `expected_start_reason` where they never do or cannot tell.
    expected_start: datetime | None = None
    expected_start_reason: str | None = None
    latest_loss: float | None = None  # the newest metrics row's loss (a training job's); None: none yet
    sweep: str | None = None  # the sweep this job is a trial of; None: a job of its own
    # the current labels and note: the spec's as submitted, or as changed since (PATCH)
    labels: dict[str, str] = {}
    note: str | None = None
    trial: JobTrialPublic | None = None  # a sweep's trial: its objective; None: not a trial


class JobUpdate(Request):
    """`PATCH /v1/jobs/{id}`: what is given is set, what is left out is kept.
    `labels` replaces all of the job's labels ({} removes them); `note: null` removes it.
    An update that gives neither is refused (the schema says so: minProperties)."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    labels: Labels | None = None
    note: Note | None = None


class JobsPublic(BaseModel):
    items: list[JobPublic]
    total: int
    limit: int
    offset: int


class ResumeRequest(Request):
    workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | None = None


class EventPublic(Public):
    id: int
    time: datetime
    from_state: JobState | None = None
    to_state: JobState
    reason: str = ""
    workers: int | None = None  # the world size the job holds after it
    replica: str | None = None  # the control-plane replica that wrote it (None: before replicas)
    # what it is besides a state change: "recovery" (from and to the job's state); null: a
    # state change, or a note
    kind: str | None = None
    # a recovery's: ranks, from_step, to_step (the in-memory snapshot's step, or null),
    # seconds, in_place (false: it fell back to a whole-group restart), reason
    detail: dict[str, Any] | None = None



class LogLine(Public):
    id: int
    time: datetime
    line: str


class JobProgress(BaseModel):
    """What a log stream says besides its lines: the job's state and step."""

    state: JobState
    step: int
    steps: int | None = None  # the spec's train.steps


class CheckpointPublic(Public):
    step: int
    world_size: int
    bytes: int
    created_at: datetime | None = None
    uri: str


class WorkerPublic(Public):
    rank: int
    node: str | None = None  # the node's address
    node_id: str | None = None  # Ray's id of the node (`GET /v1/cluster/nodes`)
    pid: int | None = None
    state: str
