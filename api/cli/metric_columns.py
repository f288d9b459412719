"""The columns of `brigade metrics`'s table: a set chosen for people by
default (step, loss, eval loss, lr, tokens/s, step time, memory, MFU where
the device's peak is known), any of
`MetricRow`'s fields by `--columns`, each value written for reading
(`wall_time` as a local time, bytes in KiB/MiB/GiB, seconds in ms or s)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from api.schemas.jobs import MetricRow

DEFAULT = ("step", "loss", "eval_loss", "lr", "tokens_per_s", "step_time_s", "peak_mem_bytes", "mfu")
ALWAYS = frozenset({"step", "loss"})  # shown by default even where empty throughout
ALL = "all"  # --columns all: every field some row has


def _number(value: float) -> str:
    return f"{value:.4g}"


def _loss(value: float) -> str:
    return f"{value:.4f}"


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _lr(value: float) -> str:
    return f"{value:.2e}"


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if abs(value) < 1 else f"{value:.2f} s"


def _bytes(value: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def flops(value: float, unit: str = "FLOP/s") -> str:
    """FLOPs with an SI prefix: 3.2 TFLOP/s."""
    for prefix in ("", "K", "M", "G", "T", "P"):
        if abs(value) < 1000:
            return f"{value:.3g} {prefix}{unit}"
        value /= 1000
    return f"{value:.3g} E{unit}"


def percent(value: float) -> str:
    return f"{value * 100:.1f}%"


def _local_time(value: float) -> str:
    return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class Column:
    header: str
    cell: Callable[[Any], str] = str


COLUMNS: dict[str, Column] = {
    "step": Column("STEP"),
    "loss": Column("LOSS", _loss),
    "eval_loss": Column("EVAL LOSS", _loss),
    "eval_perplexity": Column("EVAL PPL", _number),
    "lr": Column("LR", _lr),
    "tokens_per_s": Column("TOKENS/S", _rate),
    "step_time_s": Column("STEP TIME", _seconds),
    "data_wait_s": Column("DATA WAIT", _seconds),
    "comm_time_s": Column("COMM TIME", _seconds),
    "exposed_comm_s": Column("EXPOSED COMM", _seconds),
    "recovery_s": Column("RECOVERY", _seconds),
    "peak_mem_bytes": Column("MEMORY", _bytes),
    "mem_theory_bytes": Column("MEMORY THEORY", _bytes),
    "comm_bytes": Column("COMM", _bytes),
    "comm_bytes_theory": Column("COMM THEORY", _bytes),
    "flops_per_token": Column("FLOPS/TOKEN", lambda v: flops(v, "FLOP")),
    "flops_per_s": Column("FLOP/S PER RANK", flops),
    "mfu": Column("MFU", percent),
    "wall_time": Column("TIME", _local_time),
}


class UnknownColumn(ValueError):
    pass


def chosen(columns: str | None, rows: Sequence[MetricRow]) -> list[str]:
    """The fields to show: those named (comma-separated; `all`: every field
    some row has), else the default set less what no row has."""
    if columns is None:
        return [c for c in DEFAULT if c in ALWAYS or any(getattr(r, c) is not None for r in rows)]
    names = [c.strip() for c in columns.split(",") if c.strip()]
    if names == [ALL]:
        return [c for c in MetricRow.model_fields if any(getattr(r, c) is not None for r in rows)] \
            or ["step"]
    for name in names:
        if name not in MetricRow.model_fields:
            close = difflib.get_close_matches(name, list(MetricRow.model_fields), n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(close)}?" if close else \
                f"the columns: {', '.join(MetricRow.model_fields)}, or {ALL}"
            raise UnknownColumn(f"no metrics column {name!r} ({hint})")
    return names


def header(name: str) -> str:
    return COLUMNS[name].header if name in COLUMNS else name.upper()


def cell(name: str, value: Any) -> str:
    """A value for the table: none as '-', nested values as JSON, the rest as its column writes it."""
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    if name in COLUMNS:
        return COLUMNS[name].cell(value)
    return _number(value) if isinstance(value, float) else str(value)
