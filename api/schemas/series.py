"""What the job page's curves are drawn from (`api.server.routes.series`):
each metric over steps, downsampled, and where each attempt began."""

from __future__ import annotations

from pydantic import BaseModel


class SeriesPublic(BaseModel):
    """One metric over steps, downsampled (`api.server.downsample`)."""

    step: list[int]
    value: list[float]


class StepMark(BaseModel):
    """Where an attempt began on a job's curves: after a restart, a preemption
    or a suspend (`recovered_from` None)."""

    step: int
    kind: str  # "restart" | "preemption" | "resume"


class JobSeriesPublic(BaseModel):
    rows: int  # the job's metrics rows
    points: int  # the most points per series asked for
    series: dict[str, SeriesPublic]  # each numeric metric that has values
    marks: list[StepMark]
