"""What the sweep store hands back: a sweep's and a trial's plain frozen
records (`service.store.sweeps`); their states are `service.states`'."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from service.states import SweepState, TrialState
from workers.schema.sweep import SweepSpec


class _ParsedSweepSpecs:
    """A sweep's spec never changes: parsed once per process while in use."""

    def __init__(self, size: int = 512):
        self._size, self._specs = size, OrderedDict[str, SweepSpec]()
        self._lock = threading.Lock()

    def parse(self, sweep_id: str, raw: dict[str, Any]) -> SweepSpec:
        with self._lock:
            if (spec := self._specs.get(sweep_id)) is not None:
                self._specs.move_to_end(sweep_id)
                return spec
        spec = SweepSpec.model_validate(raw)
        with self._lock:
            self._specs[sweep_id] = spec
            if len(self._specs) > self._size:
                self._specs.popitem(last=False)
        return spec


PARSED_SWEEP_SPECS = _ParsedSweepSpecs()


@dataclass(frozen=True)
class SweepRecord:
    id: str
    tenant: str
    name: str
    state: SweepState
    spec: SweepSpec
    study: str  # the Optuna study's name (`service.sweeps.study`)
    error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    idempotency_key: str | None = None
    # the current labels and note (workers/schema/labels.py): the spec's as submitted, or as
    # changed since (PATCH); the trials made from then on inherit these labels
    labels: dict[str, str] = field(default_factory=dict)
    note: str | None = None


@dataclass(frozen=True)
class SweepTrialRecord:
    sweep_id: str
    number: int  # Optuna's trial number: 0, 1, ...; its job is named `{sweep}-t{number}`
    job_id: str | None  # None: not submitted yet, or its spec was refused (`error`)
    params: dict[str, Any]  # dotted job spec field -> the sampled value
    state: TrialState
    objective: float | None  # what the study was told (a pruned trial: its last report)
    pruned_step: int | None
    error: str | None
    created_at: datetime
    updated_at: datetime
