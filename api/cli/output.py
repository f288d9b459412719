"""How the `brigade` read commands print: a table for people (the default),
or the API's own JSON or YAML for scripts (`--output json|yaml`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from enum import Enum
from typing import Annotated, Any

import typer
import yaml
from pydantic import BaseModel


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


Output = Annotated[OutputFormat, typer.Option(
    "--output", "-o", case_sensitive=False, help="table for people, json or yaml for scripts")]

Rows = tuple[Sequence[str], list[tuple]]  # (header, rows)


def plain(value: Any) -> Any:
    """A model (or a list or dict of them) as JSON-ready data."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, datetime):  # a field taken out of a model (`brigade status`'s)
        return value.isoformat()
    return value


def emit(value: Any, output: OutputFormat, table: Callable[[], Rows] | None = None) -> None:
    """Print `value` as asked; `table` gives its (header, rows) for people
    (without one, a table prints as YAML: nested values read best so)."""
    if output is OutputFormat.json:
        typer.echo(json.dumps(plain(value), indent=2))
    elif output is OutputFormat.yaml or table is None:
        typer.echo(yaml.safe_dump(plain(value), sort_keys=False, allow_unicode=True).rstrip())
    else:
        print_table(*table())


def print_table(header: Sequence[str], rows: list[tuple]) -> None:
    cells = [tuple(str(c) for c in row) for row in [tuple(header), *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def or_dash(value) -> str:
    return "-" if value is None or value == "" else str(value)


def when(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S}"


def number(value: float | None) -> str:
    """A loss or an objective for reading: 4 significant digits, '-' for none."""
    return "-" if value is None else f"{value:.4g}"


def trial_objective(metric: str, objective: float | None, pruned_step: int | None) -> str:
    """A sweep trial's objective named as its sweep shows it: `loss 3.667`, or a
    pruned trial's `loss 3.667 (at pruning step 16)`, the value it was pruned on."""
    at = "" if pruned_step is None else f" (at pruning step {pruned_step})"
    return f"{metric} {number(objective)}{at}"
