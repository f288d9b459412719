"""A list route's `state` filter (`GET /v1/jobs`, `GET /v1/sweeps`):
`?state=RUNNING&state=QUEUED` or `?state=RUNNING,QUEUED`, a state's name in
any case. The OpenAPI document states exactly what is taken (each value a
pattern of the enum's names, comma-joined); anything else is a 422 naming
the unknown state."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, TypeVar

from pydantic import WithJsonSchema

from api.server.errors import ApiError
from service.states import JobState, SweepState

E = TypeVar("E", bound=Enum)


def _any_case(name: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in name)


def state_names(states: type[Enum]) -> WithJsonSchema:
    """The schema of one `state` value: the enum's names, any case, comma-joined."""
    one = "(?:" + "|".join(_any_case(name) for name in states.__members__) + ")"
    return WithJsonSchema({"type": "string", "pattern": f"^{one}(?:,{one})*$",
                           "description": f"any of {', '.join(states.__members__)}, any case, "
                                          "comma-separated"})


JobStates = Annotated[str, state_names(JobState)]
SweepStates = Annotated[str, state_names(SweepState)]
DESCRIPTION = "repeated or comma-separated, any case"


def parse_state_filter(values: list[str] | None, states: type[E]) -> list[E] | None:
    """The states asked for (None: no filter); a name not of the enum is a 422."""
    # ASCII only: `'runnıng'.upper()` is RUNNING, which the document's pattern does not take
    names = [name.upper() if name.isascii() else name
             for value in values or () for name in value.split(",")]
    unknown = [name for name in names if name not in states.__members__]
    if unknown:
        known = ", ".join(states.__members__)
        raise ApiError(422, f"state: unknown state {unknown[0][:40]!r} (known: {known})", "state")
    return [states[name] for name in names] or None
