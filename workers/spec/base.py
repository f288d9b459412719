"""What every section of the job spec shares: limits, the section base
(frozen, no unknown fields), field-located refusals and `SpecError`, and
the even split of a batch."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.json_schema import JsonDict
from pydantic_core import InitErrorDetails, PydanticCustomError

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_WORKERS = 1024
MAX_PRIORITY = 1000  # a job's priority, and a tenant's max_priority, lie in 0..MAX_PRIORITY
DEFAULT_MAX_RESTARTS = 3
OPERATOR_ONLY: JsonDict = {"operator_only": True}  # json_schema_extra of a knob a tenant may not set
BYTE_VOCAB = 256  # builtin and uri data are bytes

Strategy = Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"]
Dtype = Literal["float32", "bfloat16", "float16"]
Compression = Literal["none", "bf16", "int8"]


class SpecError(ValueError):
    """A spec that cannot run as asked (e.g. at a world size); `field` is the
    dotted path of the field it is about."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def refusal(field: str, message: str, value: Any = None) -> ValidationError:
    """A pydantic error located at `field` (dotted, relative to the model that
    raises it): raised inside a validator, pydantic keeps the location."""
    loc = tuple(int(p) if p.isdigit() else p for p in field.split("."))
    error = PydanticCustomError("spec", "{reason}", {"reason": message})
    return ValidationError.from_exception_data(
        "JobSpec", [InitErrorDetails(type=error, loc=loc, input=value)]
    )


class _Section(BaseModel):
    # Frozen: a job's spec never changes once submitted (the store shares one
    # parsed copy among the records it hands out; `model_copy(update=...)` makes another).
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False,
                              frozen=True)


class WorkerRange(_Section):
    min: Annotated[int, Field(ge=1, le=MAX_WORKERS)]
    max: Annotated[int, Field(ge=1, le=MAX_WORKERS)]

    @model_validator(mode="after")
    def _ordered(self) -> WorkerRange:
        if self.min > self.max:
            raise refusal("min", f"workers.min ({self.min}) must be <= workers.max ({self.max})",
                          self.min)
        return self


class Resources(_Section):
    cpu: Annotated[float, Field(gt=0, le=1024)] = 1.0
    gpu: Annotated[float, Field(ge=0, le=64)] = 0.0
    # one worker's memory (GB), what admission holds the model's sharded state
    # against; unset: the cluster's smallest per-worker share (service/run/ray_cluster.py)
    memory_gb: Annotated[float, Field(gt=0, le=65536)] | None = None


def explain(error: ValidationError | SpecError) -> str:
    """A refusal as one line, each problem led by its field (for the CLIs)."""
    if isinstance(error, SpecError):
        return f"{error.field}: {error}"
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}"
                     for e in error.errors())


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` as `parts` counts as even as it goes, the larger first (8 over
    3: 3, 3, 2): a rank's share of a global batch, a micro-batch's of a rank's."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def _smallest_prime_factor(n: int) -> int:
    for p in range(2, int(n**0.5) + 1):
        if n % p == 0:
            return p
    return n
