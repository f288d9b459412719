"""What every section of the job spec shares: limits, the section base
(frozen, no unknown fields), field-located refusals and `SpecError`, the
nearest allowed names for an unknown field, and the even split of a batch."""

from __future__ import annotations

import difflib
import types
from collections.abc import Callable, Container, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.json_schema import JsonDict, JsonValue
from pydantic_core import InitErrorDetails, PydanticCustomError

from workers.schema.flavor import FLAVOR_NAME_PATTERN

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_WORKERS = 1024
MAX_PRIORITY = 1000  # a job's priority, and a tenant's max_priority, lie in 0..MAX_PRIORITY
DEFAULT_MAX_RESTARTS = 3
OPERATOR_ONLY: JsonDict = {"operator_only": True}  # json_schema_extra of a knob a tenant may not set
BYTE_VOCAB = 256  # builtin and uri data are bytes

Strategy = Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"]
Dtype = Literal["float32", "bfloat16", "float16"]
DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}  # a Dtype's bytes per value
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
    # Strict: a JSON `false` is no integer, `"5"` no number (what the OpenAPI document calls
    # invalid is refused, never coerced); a tuple field takes a JSON list (`Field(strict=False)`).
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False,
                              frozen=True, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _json_integers(cls, data: Any) -> Any:
        return json_integers(cls, data)

    def set_unread(self, names: Sequence[str], reads: Container[str]) -> str | None:
        """The first of `names` that `reads` (what the chosen family, optimizer
        or schedule reads) leaves out and this spec sets to other than its default."""
        for name in names:
            if (name not in reads and name in self.model_fields_set
                    and getattr(self, name) != type(self).model_fields[name].default):
                return name
        return None


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
    # the kind of node every worker runs on, by name (a flavor the admin put: `PUT
    # /v1/flavors/{name}`, its Ray node labels); None: any node. Never labels themselves:
    # which nodes a flavor is, is the admin's to say (service/store/flavors.py)
    flavor: Annotated[str, Field(pattern=FLAVOR_NAME_PATTERN)] | None = None


def registered(names: Callable[[], list[str]]) -> Callable[[JsonDict], None]:
    """A field's `json_schema_extra`: the names registered when the schema is
    made (entry points included) as its enum, the rule its validator holds."""

    def extra(schema: JsonDict) -> None:
        enum: list[JsonValue] = [*sorted(names())]
        schema["enum"] = enum

    return extra


def json_integers(model: type[BaseModel], data: Any) -> Any:
    """`data` for `model` with JSON Schema's integers made Python's: an
    integer is any number without a fraction there (`818.0` is one), which
    strict pydantic would refuse. Where a field (or a list's or tuple's items)
    takes an integer and no float, such a number becomes that integer; a
    fraction, a bool or a string stays what it is, and is refused."""
    if not isinstance(data, dict):
        return data
    fixed: dict | None = None
    for name, field in model.model_fields.items():
        for key in {name, field.alias} - {None}:
            if key in data and (value := _as_integer(field.annotation, data[key])) is not data[key]:
                fixed = fixed if fixed is not None else dict(data)
                fixed[key] = value
    return data if fixed is None else fixed


def _as_integer(annotation: Any, value: Any) -> Any:
    members = _members(annotation)
    if isinstance(value, float):
        integral = value.is_integer() and int in members and float not in members
        return int(value) if integral else value
    if isinstance(value, list):
        items = [a for m in members if get_origin(m) in (list, tuple) for a in get_args(m)
                 if a is not Ellipsis]
        if items and any(isinstance(v, float) for v in value):
            union = Union[tuple(items)] if len(items) > 1 else items[0]  # noqa: UP007 - built at run time
            return [_as_integer(union, v) for v in value]
    return value


def explain(error: ValidationError | SpecError, model: type[BaseModel] | None = None) -> str:
    """A refusal as one line, each problem led by its field (for the CLIs);
    given the model validated, an unknown field says the nearest allowed names."""
    if isinstance(error, SpecError):
        return f"{error.field}: {error}"
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: "
        f"{(model and e['type'] == 'extra_forbidden' and unknown_field(model, e['loc'])) or e['msg']}"
        for e in error.errors())


def unknown_field(model: Any, loc: Sequence[str | int]) -> str | None:
    """What to say of the key `loc[-1]` that the model at `loc[:-1]` under
    `model` (a model class, or a type such as `Model | None`) does not have:
    the nearest allowed names (`did you mean global_batch_size?`), else all of
    them. None where `loc` leads to no model. Parts of `loc` that name the
    member of a union pydantic tried (`function-after[_ordered(), WorkerRange]`)
    pick that member."""
    if not loc or not isinstance(loc[-1], str):
        return None
    found = [c for c in _models_at(model, loc[:-1]) if isinstance(c, type) and issubclass(c, BaseModel)]
    names = sorted({name for c in found for f_name, f in c.model_fields.items()
                    for name in (f_name, f.alias) if name})
    if not names:
        return None
    if close := difflib.get_close_matches(loc[-1], names, n=3, cutoff=0.6):
        return f"unknown field (did you mean {' or '.join(close)}?)"
    return f"unknown field (allowed: {', '.join(names)})"


def _models_at(annotation: Any, path: Sequence[str | int]) -> list[Any]:
    candidates = _members(annotation)
    for part in path:
        if isinstance(part, int):
            candidates = [m for c in candidates for arg in _items(c) for m in _members(arg)]
            continue
        fields = [f for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)
                  for name, f in c.model_fields.items() if part in (name, f.alias)]
        if fields:
            candidates = [m for f in fields for m in _members(f.annotation)]
        elif named := [c for c in candidates if getattr(c, "__name__", None) and (
                part == c.__name__ or part.endswith(f" {c.__name__}]"))]:
            candidates = named  # a union's member, as pydantic names it in a location
        elif keyed := [c for c in candidates if get_origin(c) is dict]:
            candidates = [m for c in keyed for m in _members(get_args(c)[-1])]
        # else a tag naming no model (`constrained-int`): the candidates stay
    return candidates


def _members(annotation: Any) -> list[Any]:
    """The types an annotation admits: Annotated and unions unwrapped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(annotation) for m in _members(arg)]
    return [annotation]


def _items(container: Any) -> tuple:
    """The item types of a list, tuple, set or dict annotation (dict: its values)."""
    origin, args = get_origin(container), get_args(container)
    if origin is dict:
        return args[-1:]
    return args if origin in (list, tuple, set, frozenset, Sequence) else ()


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
