"""Acceptance: evaluate the spec's criteria over the recorded evidence and set the verdict.

A criterion is an expression over a candidate's total metrics and the baseline's
(``latency_cycles <= 0.5 * baseline_latency_cycles``). The hypothesis is confirmed when a
feasible candidate other than the baseline meets every criterion (the best such candidate
by the first objective is the deciding evidence), refuted when none does.
"""

from __future__ import annotations

import math

import pandas as pd

from emulator.formula import Formula

from ..records import Store
from .spec import METRICS, Spec

AUTHOR = "dse sweep (automatic)"


def meets(spec: Spec, row: dict, baseline: dict) -> bool:
    names = set(METRICS) | {f"baseline_{m}" for m in METRICS}
    values = {m: row.get(m, math.nan) for m in METRICS} | {f"baseline_{m}": baseline.get(m, math.nan) for m in METRICS}
    return all(bool(Formula(c.expr, names)(**values)) for c in spec.model.acceptance)


def decide(store: Store, experiment_id: int, spec: Spec) -> tuple[str, str]:
    if not spec.model.acceptance:
        return "testing", ""
    table = store.metric_table(experiment_id, "analytical")
    exp = store.experiment(experiment_id)
    base_rows = table[table["candidate_id"] == exp["baseline_candidate_id"]]
    if base_rows.empty or base_rows.iloc[0]["status"] != "ok":
        status, verdict, rationale, evidence = "refuted", "refuted", "the baseline itself is not feasible", []
    else:
        baseline = base_rows.iloc[0].to_dict()
        ok = table[(table["status"] == "ok") & (table["candidate_id"] != exp["baseline_candidate_id"])]
        passing = ok[[meets(spec, r, baseline) for r in ok.to_dict("records")]] if len(ok) else ok
        crit = "; ".join(c.expr for c in spec.model.acceptance)
        obj = spec.model.objectives[0]
        if passing.empty:
            status = verdict = "refuted"
            rationale = f"none of {len(ok)} feasible candidates meets: {crit}"
            evidence = [int(base_rows.iloc[0]["metric_run_id"])]
        else:
            best = passing.sort_values(obj.metric, ascending=obj.direction == "minimize").iloc[0]
            status = verdict = "confirmed"
            rationale = (f"{len(passing)} of {len(ok)} feasible candidates meet: {crit}; best is candidate "
                         f"{int(best['candidate_id'])} with {obj.metric} {best[obj.metric]:.6g} vs baseline "
                         f"{baseline[obj.metric]:.6g}")
            evidence = [int(best["metric_run_id"]), int(base_rows.iloc[0]["metric_run_id"])]
    store.set_status(experiment_id, status)
    last = store.decisions(experiment_id)
    last = last[last["author"] == AUTHOR]
    # A rerun that reaches the same conclusion adds no second decision.
    if last.empty or last.iloc[-1]["verdict"] != verdict or last.iloc[-1]["rationale"] != rationale:
        store.add_decision(experiment_id, verdict, rationale, AUTHOR, evidence)
    return status, rationale
