"""Where jobs' specs differ: each field, by its dotted name
(`train.lr`, `labels.team`), whose value is not the same in every spec, with
each spec's value (None where a spec has no such field). A list is one value,
compared whole; a section set in one spec and unset (null) in another differs
as the section, not field by field."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Difference:
    field: str  # dotted
    values: tuple[Any, ...]  # each spec's, in the order given


def flatten(spec: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{dotted name: value} of every leaf (a mapping is walked into, an empty one has
    none: `labels: {}` is no label; anything else is a leaf)."""
    out: dict[str, Any] = {}
    for key, value in spec.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def spec_differences(specs: Sequence[Mapping[str, Any]]) -> list[Difference]:
    """The fields whose values are not all equal, in the first spec's order of fields
    (then the others' new ones); none for fewer than two specs."""
    if len(specs) < 2:
        return []
    flat = [flatten(spec) for spec in specs]
    names = list(dict.fromkeys(name for f in flat for name in f))
    found: list[Difference] = []
    for name in names:
        values = tuple(f.get(name) for f in flat)
        if any(v != values[0] for v in values[1:]):
            found.append(Difference(name, values))
    return _fold_sections(found, flat)


def _fold_sections(found: list[Difference], flat: list[dict[str, Any]]) -> list[Difference]:
    """Fields under a section that one spec leaves unset (null) shown as that section
    (each spec's value the section's own, as a mapping), once."""
    unset = {name for f in flat for name, value in f.items() if value is None}
    out: list[Difference] = []
    folded: set[str] = set()
    for diff in found:
        parts = diff.field.split(".")
        section = next((".".join(parts[:i]) for i in range(1, len(parts))
                        if ".".join(parts[:i]) in unset), None)
        if section is None:
            out.append(diff)
        elif section not in folded:
            folded.add(section)
            out.append(Difference(section, tuple(_section(f, section) for f in flat)))
    return out


def _section(flat: dict[str, Any], section: str) -> Any:
    """The section's value rebuilt from its flattened fields (None where it is unset)."""
    if flat.get(section, ...) is None:
        return None
    prefix = f"{section}."
    inner = {name[len(prefix):]: value for name, value in flat.items() if name.startswith(prefix)}
    return inner or flat.get(section)
