"""A job's metrics as curves for drawing: each numeric metric over steps,
downsampled on the server to at most `points` points per series keeping
each stretch's minimum and maximum (`api.server.downsample`), and the steps where
an attempt resumed from a checkpoint (a restart, a preemption, a resume) to
mark on them. The columns are read once per job and extended as rows come
(`api.server.series_cache`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from api.schemas.series import JobSeriesPublic, SeriesPublic, StepMark
from api.server.deps import OwnedJob, StoreDep
from api.server.downsample import min_max
from api.server.routes.jobs import ERRORS
from api.server.series_cache import JobColumns

SERIES = ("loss", "eval_loss", "lr", "tokens_per_s", "step_time_s", "peak_mem_bytes",
          "mem_theory_bytes", "comm_bytes", "comm_bytes_theory", "flops_per_s", "mfu")
MAX_POINTS = 20_000

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERRORS)


@router.get("/{job_id}/series")
def job_series(
    request: Request,
    job: OwnedJob,
    store: StoreDep,
    points: Annotated[int, Query(ge=2, le=MAX_POINTS, description="the most points per series")] = 2000,
) -> JobSeriesPublic:
    """Each metric of `SERIES` that has values, at most `points` points each."""
    columns = request.app.state.series_cache.columns(store, job)
    with columns.lock:
        return JobSeriesPublic(rows=len(columns.steps), points=points,
                               series=series_of(columns, points), marks=marks_of(columns))


def series_of(columns: JobColumns, points: int) -> dict[str, SeriesPublic]:
    found = {}
    for name in SERIES:
        steps = [s for s, v in zip(columns.steps, columns.values[name], strict=True) if v is not None]
        if not steps:
            continue
        values = [v for v in columns.values[name] if v is not None]
        xs, ys = min_max(steps, values, points)
        found[name] = SeriesPublic(step=[int(x) for x in xs], value=ys)
    return found


def marks_of(columns: JobColumns) -> list[StepMark]:
    """The first step of every attempt that resumed from a checkpoint: what
    brought it there (a restart, a preemption; else a resume after a suspend)."""
    resumed = columns.values["resumed_from"]
    return [StepMark(step=step, kind=why or "resume")
            for step, why, since in zip(columns.steps, columns.recovered_from, resumed, strict=True)
            if why or (since or 0) > 0]
