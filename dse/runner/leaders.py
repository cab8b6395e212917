"""The candidates a view lists first, with their key figures and ratios to the baseline.

From the one judgement (`acceptance.judge_experiment`): the baseline, then the passing
candidates best first by the first objective (the best is the headline's), then those a
decision accepted; when none passes, the feasible ones best by the first objective, said
so. Key figures: every objective's analytical figure and each figure an acceptance clause
names (emulator cycles stay their own column), each with its ratio to the candidate's
reference (the baseline, or its design at the candidate's workload point). `dse show
EXPERIMENT` prints them, so a first look needs no `dse compare`.

No pandas, no SQL: the figures are those the judgement read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .acceptance import RATIO_KINDS, Judgement, objectives_of
from .criteria import NAMES


@dataclass(frozen=True)
class Figure:
    kind: str
    metric: str

    @property
    def label(self) -> str:
        return f"{self.metric} ({RATIO_KINDS.get(self.kind, self.kind)})"


@dataclass(frozen=True)
class Leader:
    candidate_id: int
    role: str  # "baseline", "best", "passes", "accepted", "feasible"
    outcome: str | None  # the judgement's: pass, fail, waiting; None for the baseline
    values: tuple[float, ...]  # one per figure (NaN: not recorded)
    ratios: tuple[float, ...]  # value over the reference's (NaN: either lacks it)


@dataclass(frozen=True)
class Leaders:
    figures: tuple[Figure, ...]
    rows: tuple[Leader, ...]
    passing: bool  # whether the rows after the baseline pass (else: best feasible, none passing)
    more: int  # passing (or feasible) candidates not listed


def key_figures(j: Judgement, exp: Mapping) -> list[Figure]:
    """Every objective's analytical figure, then the figures the clauses name (not numerics)."""
    named = [("analytical", o["metric"]) for o in objectives_of(exp.get("spec_text"))]
    for clause in j.criteria.clauses:
        for variable in sorted(clause.formula.used):
            _, kind, metric = NAMES[variable]
            named.append((kind, metric))
    return [Figure(k, m) for k, m in dict.fromkeys(named) if k in RATIO_KINDS]


def _by_objective(j: Judgement, chosen: np.ndarray) -> list[int]:
    values = j.values("analytical", j.objective["metric"])
    sign = 1.0 if j.objective.get("direction", "minimize") == "minimize" else -1.0
    order = sorted(np.flatnonzero(chosen), key=lambda i: (bool(np.isnan(values[i])),
                                                           0.0 if np.isnan(values[i]) else sign * values[i],
                                                           int(j.ids[i])))
    return [int(j.ids[i]) for i in order]


def leaders(j: Judgement, exp: Mapping, accepted: Sequence[int] = (), limit: int = 5) -> Leaders:
    """The baseline, then up to `limit` passing candidates (best first), then the accepted
    ones not among them; or, when none passes, up to `limit` feasible ones by the first objective."""
    figures = tuple(key_figures(j, exp))
    passing = bool(j.passing.any())
    ranked = _by_objective(j, j.passing if passing else j.eligible)
    shown = ranked[:limit]
    ids: list[tuple[int, str]] = []
    if j.baseline_id is not None and j.position(j.baseline_id) is not None:
        ids.append((j.baseline_id, "baseline"))
    for cid in shown:
        ids.append((cid, "best" if cid == j.best else "passes" if passing else "feasible"))
    for cid in accepted:
        if cid not in shown and cid != j.baseline_id and j.position(cid) is not None:
            ids.append((int(cid), "accepted"))
    rows = []
    for cid, role in ids:
        ref = j.reference_of(cid)
        values, ratios = [], []
        for f in figures:
            mine = j.value(cid, f.kind, f.metric)
            theirs = j.value(ref, f.kind, f.metric)
            values.append(mine)
            ratios.append(mine / theirs if theirs and not math.isnan(theirs) and not math.isnan(mine) else math.nan)
        rows.append(Leader(cid, role, None if role == "baseline" else j.outcome(cid), tuple(values), tuple(ratios)))
    return Leaders(figures, tuple(rows), passing, max(0, len(ranked) - len(shown)))
