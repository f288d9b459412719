"""A job, described once: what a tenant submits (`POST /v1/jobs`, `brigade
submit`), what the store hands back, and what the engine reads (`brigade
train`, `python -m workers.engine.local`, the rank actors). Torch-free pydantic, in
the lowest layer that both the control plane and the engine import.

Every default and every allowed value is written here and nowhere else.
Pydantic refuses unknown fields, wrong types and out-of-range values with the
field's path; the checks that span fields (heads that do not divide the
width, a batch smaller than every world size in `workers`) raise at the field
they are about, so every refusal names its field from pydantic's own error
location.

What depends on the world size a job gets (a resume at another size, a
`brigade train --workers N`) is checked by `JobSpec.check_world_size(n)`,
which raises `SpecError` naming the field.

A knob marked `OPERATOR_ONLY` is for the engine's own tools (benchmarks, an
engine YAML); the service refuses it from a tenant (`operator_only_set`).
"""

from workers.schema.adapter import AdapterSpec
from workers.schema.base import (
    BYTE_VOCAB,
    DEFAULT_MAX_RESTARTS,
    MAX_PRIORITY,
    MAX_WORKERS,
    NAME_PATTERN,
    OPERATOR_ONLY,
    Compression,
    Dtype,
    Resources,
    SpecError,
    Strategy,
    WorkerRange,
    explain,
    refusal,
    split_evenly,
    unknown_field,
)
from workers.schema.data import (
    MAX_PREPARE_FILES,
    TOKEN_DATA_FIELDS,
    TOKEN_SOURCES,
    URI_SOURCES,
    DataSpec,
    EvalSpec,
    MixMember,
    PrepareSpec,
)
from workers.schema.job import CURVE_SECTIONS, JobSpec
from workers.schema.model import CONFIG_URI_FIELDS, LLAMA_FIELDS, ModelSpec
from workers.schema.sweep import Domain, Objective, PrunerOptions, SweepSpec, trial_name, trial_spec
from workers.schema.training import (
    JOB_ID_PATTERN,
    MAX_AFTER,
    CheckpointSpec,
    InitSpec,
    JobIds,
    ParallelismSpec,
    ShardingSpec,
    TrackingSpec,
    TrainSpec,
    WandbSpec,
)

__all__ = [
    "AdapterSpec", "BYTE_VOCAB", "CONFIG_URI_FIELDS", "CURVE_SECTIONS", "DEFAULT_MAX_RESTARTS",
    "JOB_ID_PATTERN", "MAX_AFTER", "JobIds",
    "LLAMA_FIELDS", "MAX_PREPARE_FILES", "MAX_PRIORITY", "MAX_WORKERS", "NAME_PATTERN",
    "OPERATOR_ONLY", "TOKEN_DATA_FIELDS", "TOKEN_SOURCES", "URI_SOURCES", "CheckpointSpec",
    "Compression", "DataSpec", "Dtype", "EvalSpec", "InitSpec", "JobSpec", "MixMember", "ModelSpec",
    "ParallelismSpec", "PrepareSpec", "Resources", "ShardingSpec", "SpecError", "Strategy",
    "TrackingSpec", "TrainSpec", "WandbSpec", "WorkerRange", "explain", "refusal", "split_evenly",
    "unknown_field", "Domain", "Objective", "PrunerOptions", "SweepSpec", "trial_name",
    "trial_spec",
]
