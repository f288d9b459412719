"""Labels and a note on a run: `labels` is at most MAX_LABELS `key: value`
pairs, both short strings (a key as a name: letters, digits, `.`, `_`, `-`;
a value printable, one line), which lists filter on (`GET
/v1/jobs?label=team=nlp`, `GET /v1/sweeps?label=...`); `note` free text. A
job's and a sweep's are set at submit (a sweep's trials inherit the sweep's)
and may be changed after (`PATCH /v1/jobs/{id}`, `PATCH /v1/sweeps/{id}`):
the record holds the current ones."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

MAX_LABELS = 16
LABEL_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
LABEL_VALUE_MAX = 128
NOTE_MAX = 4000

LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
# printable, one line: no control characters
LabelValue = Annotated[str, StringConstraints(max_length=LABEL_VALUE_MAX,
                                              pattern=r"^[^\x00-\x1f\x7f]*$")]
# additionalProperties false: the schema says a key outside the pattern is refused, as it is
Labels = Annotated[dict[LabelKey, LabelValue],
                   Field(max_length=MAX_LABELS, json_schema_extra={"additionalProperties": False})]
Note = Annotated[str, StringConstraints(max_length=NOTE_MAX, pattern=r"^[^\x00-\x08\x0b-\x1f\x7f]*$")]


def parse_label(text: str) -> tuple[str, str]:
    """`key=value` (the value may hold `=`) as (key, value); ValueError if it is not one."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"label {text[:80]!r}: expected key=value")
    return key, value
