"""Resource flavors (`api.server.routes.flavors`, the admin's): a kind of
node, named by the Ray node labels it has, with its price per worker-hour.
A job asks for one by name (`resources_per_worker.flavor`), never by labels."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field, field_validator

from api.schemas.base import Public, Request
from workers.schema.flavor import LABEL_KEY, LABEL_VALUE, MAX_LABELS, labels_problem

# Ray's label syntax (Kubernetes'), as JSON Schema states it: an optional DNS prefix and '/',
# then a name; a value of 1-63 characters, letters and digits at both ends
LabelKey = Annotated[str, Field(pattern=LABEL_KEY.pattern, max_length=317)]
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE.pattern, max_length=63)]

MAX_DESCRIPTION = 500  # as service/store/flavors.py keeps it


class FlavorPut(Request):
    """`PUT /v1/flavors/{name}`: the flavor, made or replaced whole."""

    model_config = {"json_schema_extra": {"examples": [{
        "labels": {"brigade.io/gpu": "a100"}, "price_per_worker_hour": 2.5,
        "description": "A100 80GB nodes"}]}}

    labels: Annotated[dict[LabelKey, LabelValue], Field(min_length=1, max_length=MAX_LABELS, description=(
        "the Ray node labels (`ray start --labels k=v`) a node of this flavor has; exact "
        "matches, each a valid Ray label"))]
    price_per_worker_hour: Annotated[float, Field(ge=0, le=1_000_000, allow_inf_nan=False)] = 0.0
    description: Annotated[str, Field(max_length=MAX_DESCRIPTION,
                                      pattern=r"^[^\x00-\x1f\x7f]*$")] = ""

    @field_validator("labels")
    @classmethod
    def _ray_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        if (why := labels_problem(labels)) is not None:
            raise ValueError(why)
        return labels


class FlavorPublic(Public):
    name: str
    labels: dict[str, str]
    price_per_worker_hour: float  # now (a price changed applies from then on)
    description: str
    created_at: datetime
    updated_at: datetime


class FlavorsPublic(BaseModel):
    items: list[FlavorPublic]
    total: int
