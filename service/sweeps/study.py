"""A sweep's Optuna study: its storage in Brigade's own database, its
sampler and pruner, and the ask / report / tell calls the controller makes.

Optuna's RDB storage keeps each study's trials, their sampled params,
intermediate values and states: the sampler's whole history. It lives beside
the service's tables, so it survives `brigade serve` restarts as they do. Not
in the same tables' namespace: Optuna migrates its schema with Alembic and
its own `alembic_version` table, which would collide with the service's
(docs/architecture.md, "Sweeps"). So on SQLite the studies have a sibling
file (`brigade.db` -> `brigade-optuna.db`), and on Postgres the same
database's schema `optuna` (created if missing; the connection's
`search_path` points there).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import create_engine
from sqlalchemy.engine import URL

from service.store.engine import normalize_url
from workers.schema.sweep import Domain, SweepSpec

POSTGRES_SCHEMA = "optuna"

optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per trial is the jobs' to tell


def study_url(url: str | URL) -> tuple[str, dict[str, Any]]:
    """(the URL, RDBStorage's engine_kwargs) of the studies' storage for the
    job store at `url`."""
    url = normalize_url(url)
    if url.get_backend_name() == "sqlite":
        path = Path(url.database or "brigade.db")
        sibling = path.with_name(f"{path.stem}-optuna{path.suffix or '.db'}")
        return str(url.set(database=str(sibling)).render_as_string(hide_password=False)), {
            "connect_args": {"timeout": 30}}
    return url.render_as_string(hide_password=False), {
        "connect_args": {"options": f"-csearch_path={POSTGRES_SCHEMA}"}, "pool_pre_ping": True}


def open_storage(url: str | URL) -> RDBStorage:
    """The studies' storage for the job store at `url` (its tables made if missing)."""
    target, engine_kwargs = study_url(url)
    if normalize_url(url).get_backend_name() == "postgresql":
        engine = create_engine(normalize_url(url))
        try:
            with engine.begin() as connection:
                connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {POSTGRES_SCHEMA}")
        finally:
            engine.dispose()
    return RDBStorage(target, engine_kwargs=engine_kwargs)


def distributions(spec: SweepSpec) -> dict[str, BaseDistribution]:
    """Each space key's Optuna distribution."""
    return {key: _distribution(domain) for key, domain in spec.space.items()}


def _distribution(domain: Domain) -> BaseDistribution:
    if domain.values is not None:
        return CategoricalDistribution(domain.values)
    if domain.uniform is not None:
        return FloatDistribution(*domain.uniform)
    if domain.loguniform is not None:
        return FloatDistribution(*domain.loguniform, log=True)
    assert domain.int is not None
    return IntDistribution(*domain.int)


class _GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler, less its stop once the grid is covered: that
    calls `Study.stop`, which only `optimize()` may (with ask and tell it
    raises). The controller asks no more than the grid has points
    (`SweepSpec.trial_budget`)."""

    def after_trial(self, study, trial, state, values) -> None:
        pass


def sampler(spec: SweepSpec) -> optuna.samplers.BaseSampler:
    if spec.sampler == "grid":
        return _GridSampler(
            {key: list(d.values or ()) for key, d in spec.space.items()}, seed=spec.seed)
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=spec.seed)
    return optuna.samplers.TPESampler(seed=spec.seed)


def pruner(spec: SweepSpec) -> optuna.pruners.BasePruner:
    options = spec.pruner_options
    if spec.pruner == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=options.min_steps, reduction_factor=options.reduction_factor)
    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=options.startup_trials,
                                           n_warmup_steps=options.warmup_steps)
    return optuna.pruners.NopPruner()


class Studies:
    """The sweeps' studies on one storage, each loaded once per process (its
    sampler's random state carries on from pass to pass) and created on
    first use. The storage is opened at the first call: a service with no
    sweep never touches it."""

    def __init__(self, url: str | URL):
        self.url = url
        self._storage: RDBStorage | None = None
        self._studies: dict[str, optuna.Study] = {}
        self._lock = threading.Lock()

    @property
    def storage(self) -> RDBStorage:
        with self._lock:
            if self._storage is None:
                self._storage = open_storage(self.url)
            return self._storage

    def study(self, name: str, spec: SweepSpec) -> optuna.Study:
        if (found := self._studies.get(name)) is not None:
            return found
        study = optuna.create_study(
            study_name=name, storage=self.storage, load_if_exists=True,
            direction="minimize" if spec.objective.mode == "min" else "maximize",
            sampler=sampler(spec), pruner=pruner(spec))
        self._studies[name] = study
        return study

    def forget(self, name: str) -> None:
        """Drop the study from this process's cache (its sweep ended)."""
        self._studies.pop(name, None)

    def delete(self, name: str) -> None:
        """Remove the study and its trials from the storage (if it is there)."""
        self.forget(name)
        with contextlib.suppress(KeyError):  # no such study
            optuna.delete_study(study_name=name, storage=self.storage)

    def judge(self, study: optuna.Study, number: int, values: Sequence[tuple[int, float]], *,
              stop: bool = True) -> int | None:
        """Tell the pruner each (step, value) of trial `number` (NaN: it
        diverged, which both pruners stop), in step order, a step once
        (across restarts: Optuna keeps what it was told), asking it after
        each whether the trial is to stop: the step of the first report it
        says so at (the rest are not told, unless `stop` is False: a trial
        that ended already, whose every rung the others are compared with),
        or None."""
        storage = self.storage
        trial_id = storage.get_trial_id_from_study_id_trial_number(
            storage.get_study_id_from_name(study.study_name), number)
        trial = optuna.trial.Trial(study, trial_id)  # the trial re-opened by its id
        reported = storage.get_trial(trial_id).intermediate_values
        first = None
        for step, value in sorted(values):
            if step in reported:
                continue
            trial.report(value, step)
            if trial.should_prune() and first is None:  # ASHA records the rung as it is asked
                first = step
                if stop:
                    break
        return first


def running_trials(study: optuna.Study) -> dict[int, FrozenTrial]:
    """The study's trials not yet told, by number (what a pass reads of it)."""
    return {t.number: t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}


def tell(study: optuna.Study, number: int, *, value: float | None = None,
         state: TrialState = TrialState.COMPLETE) -> None:
    """End trial `number` (a no-op for a trial ended already: a pass
    restarted after telling, before recording it)."""
    if state is TrialState.COMPLETE:
        study.tell(number, value, skip_if_finished=True)
    else:
        study.tell(number, state=state, skip_if_finished=True)
