"""The bases of the API's models. `Public`, of what it answers (`JobPublic`,
`TenantPublic`, ...): read from attributes as well as from dicts, and blind
to what they do not show, so a record of the store or a view of the
supervisor validates as it is. `Request`, of every request body it parses
(the job's own sections have the same config: `workers.schema.base`): no
unknown field, and types strict where pydantic would coerce (a JSON `false`
is no integer, `"5"` no number, `1.0` no integer), so a body the OpenAPI
document calls invalid is refused, never taken as another value."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from workers.schema.base import json_integers


class Public(BaseModel):
    """Built from the store's records (attributes) or the supervisor's dicts."""

    model_config = ConfigDict(from_attributes=True, extra="ignore")


class Request(BaseModel):
    """A request body: unknown fields and coerced types refused (a JSON
    number without a fraction is an integer, as JSON Schema has it)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _json_integers(cls, data: Any) -> Any:
        return json_integers(cls, data)
