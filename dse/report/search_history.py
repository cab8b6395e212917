"""What the search did, computed once for the report and the UI: the first objective
candidate after candidate with the best so far (objective-vs-trial history), and which knobs
mattered to it (parameter importance: optuna's PED-ANOVA evaluator on the recorded
candidates, rebuilt from the store as optuna trials).

PED-ANOVA rather than fANOVA or mean decrease impurity: those two need scikit-learn, which
dse does not depend on; PED-ANOVA is optuna's own (numpy only) and asks which knobs' values
the best candidates (the top 10% by the objective, at least two) concentrate on. Its
figures are deterministic: the same records give the same importances in every view."""

from __future__ import annotations

import datetime
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .interactive import knob_values

# Fewer feasible candidates than this and importance says nothing: PED-ANOVA compares the
# best (at least two) with the rest.
MIN_TRIALS = 3
# The importance of at most this many candidates (the first by id): optuna builds a trial
# object a candidate, and the figure needs no more.
MAX_TRIALS = 5000
EVALUATOR = "PED-ANOVA (optuna.importance.PedAnovaImportanceEvaluator)"


@dataclass(frozen=True)
class SearchHistory:
    metric: str
    direction: str
    ids: list[int]  # every candidate with an analytical run, by id (the order they were proposed in)
    values: list[float | None]  # its objective (None: infeasible, failed, not run)
    best_so_far: list[float | None]  # the best feasible objective up to it (None before the first)
    importances: dict[str, float] = field(default_factory=dict)  # knob -> importance (sum 1), most first
    note: str = ""  # why there are no importances ("not enough trials: ...")
    trials: int = 0  # the feasible candidates the importances were computed from

    @property
    def best(self) -> float | None:
        return self.best_so_far[-1] if self.best_so_far else None


def _knob_name(path: str) -> str:
    return path.removeprefix("config.").removeprefix("mapping.")


def search_history(table: pd.DataFrame, objective: dict) -> SearchHistory:
    """The history and the knobs' importance of an experiment's candidates: `table` has
    one row per candidate with candidate_id, status, diff (JSON text or dict, as recorded)
    and the objective's analytical figure (`Store.candidate_metrics`)."""
    metric, direction = objective["metric"], objective.get("direction", "minimize")
    rows = table.sort_values("candidate_id")
    rows = rows[rows["status"].notna()]
    value = pd.to_numeric(rows[metric], errors="coerce") if metric in rows else pd.Series(np.nan, index=rows.index)
    feasible = (rows["status"] == "ok") & value.notna() & np.isfinite(value)
    values = [float(v) if ok else None for v, ok in zip(value, feasible)]
    best, best_so_far = None, []
    for v in values:
        if v is not None and (best is None or (v < best if direction == "minimize" else v > best)):
            best = v
        best_so_far.append(best)
    history = dict(metric=metric, direction=direction, ids=[int(i) for i in rows["candidate_id"]], values=values,
                   best_so_far=best_so_far)
    used = rows[feasible].head(MAX_TRIALS)
    n = len(used)
    if n < MIN_TRIALS:
        return SearchHistory(**history, note=f"not enough trials: {n} feasible candidate{'s' if n != 1 else ''} "
                                             f"with {metric}; importance needs at least {MIN_TRIALS}")
    objective_values = value[used.index].astype(float)
    if objective_values.nunique() == 1:
        return SearchHistory(**history, trials=n, note=f"not enough trials: all {n} feasible candidates have the "
                                                       f"same {metric} ({objective_values.iloc[0]:.6g})")
    knobs = knob_values(used)
    knobs = knobs[[c for c in knobs.columns if knobs[c].map(repr).nunique() > 1]]
    if knobs.empty:
        return SearchHistory(**history, trials=n, note="not enough trials: no knob takes two values among the "
                                                       "feasible candidates")
    return SearchHistory(**history, trials=n, importances=_importances(knobs, objective_values, direction))


class _Completed:
    """Completed trials as PED-ANOVA reads a study (`get_trials`, `directions`): a study's
    `add_trials` deep-copies each trial, most of the importance's time at 5,000 trials."""

    def __init__(self, trials: list, direction: str):
        from optuna.study import StudyDirection

        self._trials = trials
        self.directions = [StudyDirection.MINIMIZE if direction == "minimize" else StudyDirection.MAXIMIZE]

    def get_trials(self, deepcopy: bool = True, states=None) -> list:
        return [t for t in self._trials if states is None or t.state in states]


def _trials(columns: dict[str, list], distributions: dict, values: pd.Series) -> list:
    """Completed optuna trials of these parameters and objective values, as
    `optuna.trial.create_trial` makes them. It checks each trial's parameters against their
    distributions, half the importance's time at 5,000 trials; the distributions are the
    parameters' own range and categories, so the first trial is checked and the rest built
    alike."""
    import optuna
    from optuna.trial import FrozenTrial, TrialState

    if not len(values):
        return []
    params = [{path: columns[path][i] for path in columns} for i in range(len(values))]
    first = optuna.trial.create_trial(params=params[0], distributions=distributions, value=float(values.iloc[0]))
    now = datetime.datetime.now()
    return [first] + [FrozenTrial(number=-1, trial_id=-1, state=TrialState.COMPLETE, value=float(v), values=None,
                                  datetime_start=now, datetime_complete=now, params=p,
                                  distributions=first.distributions, user_attrs={}, system_attrs={},
                                  intermediate_values={})
                      for p, v in zip(params[1:], values.iloc[1:])]


def _importances(knobs: pd.DataFrame, values: pd.Series, direction: str) -> dict[str, float]:
    """PED-ANOVA's importance of each knob (columns of `knobs`) to `values`."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

    distributions, columns = {}, {}
    for path in knobs.columns:
        column = knobs[path]
        numbers = pd.to_numeric(column, errors="coerce")
        if numbers.notna().all() and not column.map(lambda v: isinstance(v, bool)).any():
            columns[path] = [float(v) for v in numbers]
            distributions[path] = FloatDistribution(min(columns[path]), max(columns[path]))
        else:  # a policy name, a Ball set, a list: categories by their text
            columns[path] = [v if isinstance(v, str) else repr(v) for v in column]
            distributions[path] = CategoricalDistribution(sorted(set(columns[path])))
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            trials = _trials(columns, distributions, values)
            try:
                found = get_param_importances(_Completed(trials, direction), evaluator=PedAnovaImportanceEvaluator(),
                                              normalize=True)
            except AttributeError:  # an Optuna whose evaluator reads more of a study: a real one
                study = optuna.create_study(direction=direction)
                study.add_trials(trials)
                found = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator(), normalize=True)
    finally:
        optuna.logging.set_verbosity(verbosity)
    out = {_knob_name(path): float(v) for path, v in found.items()}
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def importance_rows(history: SearchHistory) -> list[tuple[str, str]]:
    """(knob, importance as every view prints it: "0.731")."""
    return [(knob, f"{v:.3f}") for knob, v in history.importances.items()]


def best_words(history: SearchHistory) -> str:
    """"best latency_cycles of any feasible candidate (acceptance aside): 1.07e+07, reached at
    candidate 28 (28th of 90)" (or that none is feasible)."""
    if history.best is None:
        return f"no feasible candidate has {history.metric} yet"
    first = next(i for i, b in enumerate(history.best_so_far) if b == history.best)
    return (f"best {history.metric} of any feasible candidate (acceptance aside): {history.best:.6g}, reached at "
            f"candidate {history.ids[first]} (number {first + 1} of {len(history.ids)})")

