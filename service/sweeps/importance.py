"""How much each parameter of a sweep's space mattered to its objective, by
Optuna's own evaluator (`optuna.importance.get_param_importances` with
PED-ANOVA, `PedAnovaImportanceEvaluator`: how differently each parameter is
spread over the best trials than over all of them; fANOVA, Optuna's default,
needs scikit-learn, which the service does not otherwise install): over the
sweep's finished trials (SUCCEEDED, with an objective), as
the sweep's rows hold them, put into an in-memory study with the space's own
distributions. The sweep's study in the RDB storage is not read: the rows
are what the API shows, so the importances agree with the trials listed.

An answer is kept for the same spec and the same finished trials (the
sweep page asks every few seconds while trials run; an answer costs a few
milliseconds): the key is the content, not a sweep's id, so two
databases' sweeps never share one by mistake."""

from __future__ import annotations

import json
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import optuna

from service.sweeps.study import distributions
from workers.schema import SweepSpec

EVALUATOR = "ped_anova"
MIN_TRIALS = 3
# The best trials PED-ANOVA compares with all: Optuna's default top 10%, but never fewer than
# BEST_TRIALS of them (nor more than half): of a sweep's tens of trials, the top 10% is one
# trial, whose point alone says nothing of which parameter mattered (seen: a parameter that
# moved the objective by 1% ranked first over one that moved it 100-fold, at 6 and 10 trials).
BEST_TRIALS = 3
_KEPT = 256


class _Kept:
    def __init__(self) -> None:
        self._answers = OrderedDict[str, dict[str, Any]]()
        self._lock = threading.Lock()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._answers.get(key)

    def keep(self, key: str, answer: dict[str, Any]) -> None:
        with self._lock:
            self._answers[key] = answer
            if len(self._answers) > _KEPT:
                self._answers.popitem(last=False)


_ANSWERS = _Kept()


def param_importances(spec: SweepSpec, trials: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """{evaluator, trials (how many were read), importances ({param: share}, largest
    first, summing to 1), reason (why there are none, else None)} of a sweep's
    `trials` (as `SweepService.view` gives them: number, params, objective, state)."""
    finished = sorted(((t["number"], t["params"], t["objective"]) for t in trials
                       if t["state"] == "SUCCEEDED" and t["objective"] is not None),
                      key=lambda t: t[0])
    key = json.dumps([spec.to_json(), finished], sort_keys=True, default=str)
    if (kept := _ANSWERS.get(key)) is not None:
        return kept
    answer: dict[str, Any] = {"evaluator": EVALUATOR, "trials": len(finished), "importances": {},
                              "reason": None}
    if len(finished) < MIN_TRIALS:
        answer["reason"] = (f"{len(finished)} finished trial{'' if len(finished) == 1 else 's'}: "
                            f"importance needs at least {MIN_TRIALS}")
    else:
        space = distributions(spec)
        study = optuna.create_study(  # in memory
            direction="minimize" if spec.objective.mode == "min" else "maximize")
        for _, params, value in finished:
            point = {k: v for k, v in params.items() if k in space}
            study.add_trial(optuna.trial.create_trial(
                params=point, distributions={k: space[k] for k in point}, value=value))
        quantile = min(0.5, max(0.1, BEST_TRIALS / len(finished)))
        with warnings.catch_warnings():  # PED-ANOVA is marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=quantile)
            found = optuna.importance.get_param_importances(study, evaluator=evaluator)
        answer["importances"] = {name: float(share) for name, share in found.items()}
        if not found:
            answer["reason"] = "every finished trial has the same point"
    _ANSWERS.keep(key, answer)
    return answer
