"""What the REST API takes and returns: one schema family per resource.

The client (`api.client`) parses responses with these same models. A job's
request body is the one job schema (`workers.spec.JobSpec`, as `JobCreate`),
so the API refuses exactly what the control plane and the engine would.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.states import JobState
from workers.spec import MAX_PRIORITY, MAX_WORKERS, JobSpec

JobCreate = JobSpec


class _Public(BaseModel):
    """Built from the store's records (attributes) or the supervisor's dicts."""

    model_config = ConfigDict(from_attributes=True, extra="ignore")


class CheckpointRef(_Public):
    step: int
    world_size: int


class JobPublic(_Public):
    id: str
    tenant: str  # whose job it is
    name: str
    state: JobState
    spec: JobSpec
    priority: int = 0
    workers: int | None = None  # the current world size; None before a group is launched
    step: int = 0
    restarts: int = 0
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


class JobsPublic(BaseModel):
    items: list[JobPublic]
    total: int
    limit: int
    offset: int


class ResumeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | None = None


class EventPublic(_Public):
    id: int
    time: datetime
    from_state: JobState | None = None
    to_state: JobState
    reason: str = ""
    workers: int | None = None  # the world size the job holds after it
    replica: str | None = None  # the control-plane replica that wrote it (None: before replicas)


class UsagePublic(_Public):
    """One tenant's usage over a window (the cluster's: `tenant` is "*")."""

    tenant: str
    worker_seconds: float  # workers held x seconds
    cpu_seconds: float
    gpu_seconds: float
    jobs: dict[str, int]  # final state -> its jobs that ended within the window
    preemptions: int  # times its jobs were preempted within the window
    # worker_seconds by goodput phase (queued ... suspended; they sum to it): each phase's
    # time x the workers held over it, so a phase that holds none (queued) counts 0
    phases: dict[str, float] = Field(default_factory=dict)
    goodput: float | None = None  # training / (worker_seconds - suspended); None: held nothing


class UsageReport(BaseModel):
    window_s: float
    since: datetime
    until: datetime
    tenants: list[UsagePublic]
    cluster: UsagePublic | None = None  # every tenant's added up: the admin's report of all


class GoodputPublic(_Public):
    """Where a job's time since submit went (service/observability/goodput.py
    says how each interval is attributed): seconds by phase, summing to
    `wall_s`; `goodput` = training / (wall_s - suspended)."""

    wall_s: float  # submit to the end, or to now
    phases: dict[str, float]  # queued, starting, training, data_wait, eval, checkpoint_stall,
    #                           recovering, lost, suspended
    starting_phases: dict[str, float]  # the start-ups' sub-phases, over the attempts
    goodput: float | None  # None: no time outside suspensions yet


class JobGoodputPublic(_Public):
    """A listed job's goodput (`GoodputPublic` less the start-ups' sub-phases)."""

    id: str
    wall_s: float
    phases: dict[str, float]
    goodput: float | None


class JobsGoodputPublic(BaseModel):
    items: list[JobGoodputPublic]  # the jobs asked for that the caller may see, in its order


class GoodputBucketPublic(_Public):
    start: datetime
    end: datetime
    phases: dict[str, float]  # worker-seconds by goodput phase within [start, end)
    goodput: float | None  # training / (held - suspended); None: no workers held


class GoodputOverTime(BaseModel):
    """The goodput of the caller's jobs (the admin's: every tenant's, or
    `tenant`'s) in equal buckets of the window, oldest first."""

    window_s: float
    since: datetime
    until: datetime
    tenant: str | None  # None: every tenant
    buckets: list[GoodputBucketPublic]


class MetricRow(_Public):
    """One training step, as the ranks measured it (see the README)."""

    step: int
    loss: float | None = None
    lr: float | None = None
    tokens_per_s: float | None = None
    step_time_s: float | None = None
    peak_mem_bytes: int | None = None
    mem_theory_bytes: int | None = None
    comm_bytes: int | None = None
    comm_bytes_theory: float | None = None
    comm_bytes_by_op: dict[str, int] | None = None
    collectives: int | None = None
    comm_time_s: float | None = None
    exposed_comm_s: float | None = None
    # model FLOPs utilisation (workers/spec/flops.py, workers/engine/peak_flops.py): the
    # training FLOPs a token, one rank's FLOP/s, and that over its device's peak
    # (None where the peak is unknown: a CPU without BRIGADE_PEAK_FLOPS)
    flops_per_token: float | None = None
    flops_per_s: float | None = None
    mfu: float | None = None
    # checkpoints: the step saved on this step, or why the save failed (training goes on)
    checkpoint_step: int | None = None
    checkpoint_error: str | None = None
    checkpoint_failures: int | None = None  # failed saves so far in this attempt
    checkpoint_stall_s: float | None = None  # how long the save held training (async: its staging)
    # the first step of an attempt: where it resumed, and (after a failure or
    # a preemption) what the interruption cost
    resumed_from: int | None = None
    recovered_from: str | None = None  # "restart" | "preemption"
    recovery_s: float | None = None  # from the failure seen (or the notice) to this step's end
    lost_steps: int | None = None  # steps taken before the interruption and taken again
    # ... and the seconds its start-up phases took, launch to this step's end (service/run/launch.py)
    startup: dict[str, float] | None = None
    wall_time: float | None = None  # when the step ended, Unix seconds (the ranks' clock)
    # data: how long the step waited for its batch (read ahead while the step before ran)
    data_wait_s: float | None = None
    # eval steps (every eval.every_steps): the validation loss over a fixed set of samples
    eval_loss: float | None = None
    eval_perplexity: float | None = None
    eval_s: float | None = None  # the seconds the evaluation took (after the step, apart from it)
    # a mixture (data.mix), by member name (the last part of its uri): the tokens
    # trained on from each member so far, and (eval steps) each member's held-out loss
    mix_tokens: dict[str, int] | None = None
    mix_eval_loss: dict[str, float | None] | None = None
    # a dataset's preparation (kind 'prepare'): one row a file, `step` = files done
    file: str | None = None  # the file's name
    tokens: int | None = None
    documents: int | None = None
    shards: int | None = None  # token shards written from it
    file_s: float | None = None  # seconds it took


class LogLine(_Public):
    id: int
    time: datetime
    line: str


class JobProgress(BaseModel):
    """What a log stream says besides its lines: the job's state and step."""

    state: JobState
    step: int
    steps: int | None = None  # the spec's train.steps


class CheckpointPublic(_Public):
    step: int
    world_size: int
    bytes: int
    created_at: datetime | None = None
    uri: str


class ExportCreate(BaseModel):
    """`POST /v1/jobs/{id}/exports`: a committed step (unset: the latest) in a dtype, as a
    `kind` of export: "model" (a job that trains every weight), "adapter" (a PEFT adapter
    directory) or "merged" (the base with the adapters merged in); unset: "adapter" for a
    job with an `adapter` section, else "model"."""

    model_config = ConfigDict(extra="forbid")
    step: Annotated[int, Field(ge=0, le=999_999_999)] | None = None
    dtype: Literal["bfloat16", "float32"] = "float32"
    kind: Literal["model", "adapter", "merged"] | None = None


class ExportFile(_Public):
    size: int
    sha256: str


class ExportPublic(_Public):
    """A committed export: a Hugging Face model directory (its files, with sizes and sha256)."""

    id: str
    step: int
    dtype: str
    kind: str  # "model", "adapter" (PEFT's files) or "merged"
    bytes: int
    files: dict[str, ExportFile]
    created_at: datetime | None = None
    uri: str


class ExportStartedPublic(_Public):
    id: str
    step: int
    dtype: str
    kind: str
    state: str  # "writing", or "committed" (it was there already)


class WorkerPublic(_Public):
    rank: int
    node: str | None = None
    pid: int | None = None
    state: str


class QueuedJob(_Public):
    id: str
    name: str
    position: int  # 1: the next to start
    waiting: str | None = None  # why it did not start at the latest scheduling pass
    expected_start: datetime | None = None  # see JobPublic
    expected_start_reason: str | None = None


class ClusterPublic(_Public):
    capacity: dict[str, float]  # "cpu", "gpu": the live nodes' totals
    usage: dict[str, float]  # what active jobs hold
    running_jobs: int  # active jobs (holding workers), every tenant's
    queued_jobs: int  # queued jobs, every tenant's
    queue: list[QueuedJob]  # the caller's own queued jobs, with their place in line


TenantName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$",
                                   description="lower-case letters, digits and '-'; not 'admin'")]
Limit = Annotated[int, Field(ge=0, le=1_000_000)] | None  # None: no limit
Priority = Annotated[int, Field(ge=0, le=MAX_PRIORITY)]
Weight = Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)]


class TenantQuota(BaseModel):
    """A tenant's limits; a missing or null one is no limit."""

    model_config = ConfigDict(extra="forbid", from_attributes=True)

    max_workers: Limit = None
    max_gpus: Annotated[float, Field(ge=0, le=1_000_000, allow_inf_nan=False)] | None = None
    max_running_jobs: Limit = None
    max_queued_jobs: Limit = None


class TenantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: TenantName
    quota: TenantQuota = Field(default_factory=TenantQuota)
    max_priority: Priority = MAX_PRIORITY
    weight: Weight = 1.0


class TenantUpdate(BaseModel):
    """What to change; `quota` changes only the limits it names."""

    model_config = ConfigDict(extra="forbid")

    quota: TenantQuota | None = None
    max_priority: Priority | None = None
    weight: Weight | None = None


class TenantPublic(_Public):
    id: str
    name: str
    quota: TenantQuota
    max_priority: int
    weight: float
    created_at: datetime
    updated_at: datetime
    # where its data goes: the only place its specs' data uris may name (None: a server before it)
    data_prefix: str | None = None


class TenantKey(TenantPublic):
    """A tenant with its API key: answered once, at creation or rotation."""

    api_key: str


class TenantsPublic(BaseModel):
    items: list[TenantPublic]
    total: int


class HealthPublic(BaseModel):
    status: str


class ReadyPublic(HealthPublic):
    """GET /readyz: ready, and this replica's part (`Supervisor.role`)."""

    role: Literal["leader", "follower"]  # whether this replica runs the control loop
    leader: str | None  # the replica holding the leader lease (None: none now)
    replica: str  # this replica's name (BRIGADE_REPLICA_NAME)


class ErrorBody(BaseModel):
    message: str
    field: str | None = None  # the offending field's dotted path, where there is one


class ErrorPublic(BaseModel):
    """Every error the API returns, whatever the status."""

    error: ErrorBody


class SeriesPublic(BaseModel):
    """One metric over steps, downsampled (`api.downsample`)."""

    step: list[int]
    value: list[float]


class StepMark(BaseModel):
    """Where an attempt began on a job's curves: after a restart, a preemption
    or a suspend (`recovered_from` None)."""

    step: int
    kind: str  # "restart" | "preemption" | "resume"


class JobSeriesPublic(BaseModel):
    rows: int  # the job's metrics rows
    points: int  # the most points per series asked for
    series: dict[str, SeriesPublic]  # each numeric metric that has values
    marks: list[StepMark]


class TenantSharePublic(_Public):
    tenant: str
    weight: float
    quota: TenantQuota
    running_jobs: int
    queued_jobs: int
    workers: int
    cpu: float
    gpu: float
    share_now: float  # dominant share of the cluster held now, 0..1
    entitled: float  # weight over the weights of the tenants wanting something now
    service: float  # dominant share-seconds over the fair-share window (latest pass)
    data_prefix: str | None = None  # where its data goes


class TenantSharesPublic(BaseModel):
    items: list[TenantSharePublic]


class TenantUsageNow(_Public):
    """What a tenant's jobs hold and wait for now, against its quota."""

    running_jobs: int = 0
    queued_jobs: int = 0
    workers: int = 0
    cpu: float = 0.0
    gpu: float = 0.0


class WhoamiPublic(BaseModel):
    """`GET /v1/whoami`: the caller's tenant (the admin key: "admin"), where
    its data goes, its limits and what it uses of them now."""

    tenant: str
    tenant_id: str | None = None  # None for the admin, which has no tenant record
    admin: bool
    data_prefix: str  # `data.uri` in a spec, inputs and outputs of a dataset: under here
    quota: TenantQuota
    max_priority: int
    weight: float
    usage: TenantUsageNow


class DataFilePublic(_Public):
    """A file under the caller's data prefix (`PUT`/`GET /v1/data/{path}`)."""

    path: str  # relative to the prefix
    uri: str  # what a spec's `data.uri` (or a dataset's input) names
    bytes: int
    sha256: str | None = None  # an upload's, as the server received it
    replaced: bool = False  # the upload replaced a file of that path


class SessionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    api_key: Annotated[str, Field(min_length=1, max_length=512)]


class SessionPublic(BaseModel):
    tenant: str
    expires_in_s: float


class AuditEventPublic(_Public):
    """One action of the audit trail: who (a tenant's name, or "admin"), when,
    what (`action` on `target`, `detail`), concerning which tenant, from where."""

    id: int
    time: datetime
    actor: str
    tenant: str | None = None
    action: str
    target: str | None = None
    detail: dict = Field(default_factory=dict)
    client: str | None = None
    replica: str | None = None  # the control-plane replica that recorded it


class AuditPublic(BaseModel):
    items: list[AuditEventPublic]  # newest first
    total: int
    limit: int
    offset: int

