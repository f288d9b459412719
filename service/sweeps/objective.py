"""A trial's objective as its metrics rows arrive, and the steps of it its
pruner is told.

Optuna's pruners compare a trial with the others at a step: ASHA
(`SuccessiveHalvingPruner`) records, at each of its rungs, the value the
trial reported last when it was asked, and promotes the trial only if that
value is within the best 1/reduction_factor of the values the other trials
recorded at that rung; the median pruner compares a trial's best value with
the finished trials' values at the step it reported last. So what is
reported, and when the pruner is asked, decide whether like is compared
with like:

- ASHA is told one value a rung: the objective at the rung's step
  (`min_steps * reduction_factor**k`), or where no row of that step carries
  the metric (an eval every few steps), the first after it, reported at its
  own step, and asked at once. A pass that finds many new rows (the rows
  reach the store in batches) still records each rung at its own step, never
  a later step's value under an earlier rung.
- The median pruner (and none) is told every value at its own step, and
  asked after each, in step order: the trial is judged at the first step
  where it falls behind, not at the last of a batch.

The objective at a step is the metric's value there, or its exponential
moving average so far (`objective.smoothing: ema`): a loss of one batch
swings from step to step by more than the trials differ.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

from workers.schema.sweep import Objective, SweepSpec


class ObjectiveSeries:
    """One trial's objective, step by step, fed its job's metrics rows in
    step order (a row of a step already fed is left out: a restarted
    attempt's rows again)."""

    def __init__(self, objective: Objective):
        self.objective = objective
        self.values: dict[int, float] = {}  # step -> the objective there
        self.last_step = 0  # the newest row fed, with the metric or not
        self._weighted = 0.0  # the EMA's running sums (debiased: divided by the weights')
        self._weights = 0.0

    def feed(self, rows: Iterable[dict]) -> dict[int, float]:
        """Take the rows after `last_step`; the new (step -> objective), in step order."""
        new: dict[int, float] = {}
        for row in rows:
            step = row["step"]
            if step <= self.last_step:
                continue
            self.last_step = step
            value = metric_value(row, self.objective.metric)
            if value is None:
                continue
            if not math.isfinite(value):  # diverged: judged as such (a pruner stops a NaN)
                new[step] = self.values[step] = math.nan
                continue
            if self.objective.smoothing == "ema":
                factor = self.objective.ema_factor
                self._weighted = factor * self._weighted + (1 - factor) * value
                self._weights = factor * self._weights + (1 - factor)
                value = self._weighted / self._weights
            new[step] = self.values[step] = value
        return new

    @property
    def latest(self) -> tuple[int, float] | None:
        """(step, value) of the newest finite objective, or None before any."""
        finite = [step for step, value in self.values.items() if math.isfinite(value)]
        if not finite:
            return None
        step = max(finite)
        return step, self.values[step]


def metric_value(row: dict, metric: str) -> float | None:
    """The row's value of `metric` as a float (NaN or infinite where it
    diverged), or None (absent, not a number)."""
    value = row.get(metric)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return float(value)


def rung_steps(spec: SweepSpec) -> list[int]:
    """ASHA's rungs within the base's steps: min_steps * reduction_factor**k."""
    options = spec.pruner_options
    rungs, rung = [], options.min_steps
    while rung <= spec.base.train.steps:
        rungs.append(rung)
        rung *= options.reduction_factor
    return rungs


def to_report(spec: SweepSpec, series: ObjectiveSeries, reported: Iterable[int]) -> list[tuple[int, float]]:
    """The (step, value)s of the trial's objective the pruner is to be told
    now, in step order: never a step told already, nor one before it (Optuna
    keeps what it was told, across restarts)."""
    after = max(reported, default=0)
    steps = sorted(series.values)
    if spec.pruner == "asha":
        picked: list[int] = []
        for rung in rung_steps(spec):
            at = bisect.bisect_left(steps, rung)
            if at == len(steps):
                break
            first = steps[at]
            if not picked or first != picked[-1]:
                picked.append(first)
        steps = picked
    return [(step, series.values[step]) for step in steps if step > after]
