"""Where candidates come from: the baseline, a full grid, or Optuna's TPE.

Optuna is only a sampler here: its study lives in memory and is rebuilt from the records
(`seed_study`), so the store stays the one source of truth and a rerun resumes.
"""

from __future__ import annotations

import itertools
import math
import warnings
from typing import Iterator, Sequence

import optuna
from optuna.distributions import CategoricalDistribution

from .spec import Spec

INFEASIBLE_VALUE = math.inf


def grid(spec: Spec) -> Iterator[dict]:
    knobs = spec.model.space
    for values in itertools.product(*(k.values for k in knobs)):
        yield {k.name: v for k, v in zip(knobs, values)}


def use_grid(spec: Spec) -> bool:
    s = spec.model.search
    return s.sampler == "grid" or (s.sampler == "auto" and spec.grid_size() <= s.max_grid)


def distributions(spec: Spec) -> dict[str, CategoricalDistribution]:
    return {k.name: CategoricalDistribution(k.values) for k in spec.model.space}


def _constraint(trial: optuna.trial.FrozenTrial) -> Sequence[float]:
    # Optuna reads <= 0 as feasible: infeasible candidates steer TPE away from their region.
    return trial.user_attrs.get("constraint", (0.0,))


def new_study(spec: Spec) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():  # both options are marked experimental; we pin optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=spec.model.search.seed, constraints_func=_constraint, n_startup_trials=8, multivariate=True)
    return optuna.create_study(directions=[o.direction for o in spec.model.objectives], sampler=sampler)


def objective_values(spec: Spec, feasible: bool, totals: dict) -> list[float]:
    values = []
    for obj in spec.model.objectives:
        v = totals.get(obj.metric)
        if not feasible or v is None or math.isnan(v):
            v = INFEASIBLE_VALUE if obj.direction == "minimize" else -INFEASIBLE_VALUE
        values.append(float(v))
    return values


def seed_study(study: optuna.Study, spec: Spec, evaluated: Sequence[tuple[dict, bool, dict, str]]) -> None:
    """Replay recorded candidates (params, feasible, totals, origin) into a fresh study."""
    dists = distributions(spec)
    for params, feasible, totals, _origin in evaluated:
        if set(params) != set(dists) or any(params[n] not in dists[n].choices for n in dists):
            continue  # e.g. a baseline whose values lie outside the space
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions=dists, values=objective_values(spec, feasible, totals),
            user_attrs={"constraint": (0.0 if feasible else 1.0,)}))
