"""A job's metrics as curves for drawing: each numeric metric over steps,
downsampled on the server to at most `points` points per series keeping
each stretch's minimum and maximum (`api.downsample`), and the steps where
an attempt began (a restart, a preemption, a resume) to mark on them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import OwnedJob, StoreDep
from api.downsample import min_max
from api.routes.jobs import ERRORS
from api.schemas import JobSeriesPublic, SeriesPublic, StepMark

# What the job page draws; a metric a row lacks (eval_loss before evals run) is left out.
SERIES = ("loss", "eval_loss", "lr", "tokens_per_s", "step_time_s", "peak_mem_bytes",
          "mem_theory_bytes", "comm_bytes", "comm_bytes_theory")
MAX_POINTS = 20_000

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERRORS)


@router.get("/{job_id}/series")
def job_series(
    job: OwnedJob,
    store: StoreDep,
    points: Annotated[int, Query(ge=2, le=MAX_POINTS, description="the most points per series")] = 2000,
) -> JobSeriesPublic:
    """Each metric of `SERIES` that has values, at most `points` points each."""
    rows = store.metrics(job.id)
    return JobSeriesPublic(rows=len(rows), points=points, series=series_of(rows, points),
                           marks=marks_of(rows))


def series_of(rows: list[dict], points: int) -> dict[str, SeriesPublic]:
    found = {}
    for name in SERIES:
        steps = [row["step"] for row in rows if _number(row.get(name))]
        if not steps:
            continue
        values = [float(row[name]) for row in rows if _number(row.get(name))]
        xs, ys = min_max(steps, values, points)
        found[name] = SeriesPublic(step=[int(x) for x in xs], value=ys)
    return found


def marks_of(rows: list[dict]) -> list[StepMark]:
    """The first step of every attempt that resumed from a checkpoint: what
    brought it there (a restart, a preemption; else a resume after a suspend)."""
    return [StepMark(step=row["step"], kind=row.get("recovered_from") or "resume")
            for row in rows if row.get("recovered_from") or (row.get("resumed_from") or 0) > 0]


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
