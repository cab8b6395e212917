"""Acceptance: evaluate the spec's criteria over the recorded evidence and set the verdict.

A criterion is an expression over a candidate's total metrics and the baseline's
(``latency_cycles <= 0.5 * baseline_latency_cycles``). The hypothesis is confirmed when a
feasible candidate other than the baseline meets every criterion (the best such candidate
by the first objective is the deciding evidence), refuted when none does.
"""

from __future__ import annotations

import ast
import math

import numpy as np
import pandas as pd

from emulator.formula import FUNCTIONS, Formula

from ..records import Store
from .spec import METRICS, Spec

AUTHOR = "dse sweep (automatic)"


NAMES = frozenset(METRICS) | {f"baseline_{m}" for m in METRICS}


def formulas(exprs: list[str]) -> list[Formula]:
    """The acceptance expressions, checked once."""
    return [Formula(e, NAMES) for e in exprs]


def _meets(checks: list[Formula], row: dict, baseline: dict) -> bool:
    values = {m: row.get(m, math.nan) for m in METRICS} | {f"baseline_{m}": baseline.get(m, math.nan) for m in METRICS}
    return all(bool(f(**values)) for f in checks)


def meets(spec: Spec, row: dict, baseline: dict) -> bool:
    return _meets(formulas([c.expr for c in spec.model.acceptance]), row, baseline)


class _Elementwise(ast.NodeTransformer):
    """`a and b` -> logical_and(a, b), `a < b < c` -> logical_and(a < b, b < c): the same
    expression over whole numpy columns (Python's `and` needs one truth value)."""

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        name = "logical_and" if isinstance(node.op, ast.And) else "logical_or"
        out = node.values[0]
        for value in node.values[1:]:
            out = ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=[out, value], keywords=[])
        return out

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if len(node.ops) == 1:
            return node
        lefts = [node.left, *node.comparators[:-1]]
        parts = [ast.Compare(left=a, ops=[op], comparators=[b]) for a, op, b in zip(lefts, node.ops, node.comparators)]
        return self.visit_BoolOp(ast.BoolOp(op=ast.And(), values=parts))


def elementwise(exprs: list[str], columns: dict[str, np.ndarray]) -> np.ndarray:
    """Every criterion met, element by element, over arrays named as in the expressions
    (checked by `Formula` first; a missing value is NaN, and NaN meets nothing)."""
    n = len(next(iter(columns.values()))) if columns else 0
    met = np.ones(n, dtype=bool)
    for check in formulas(exprs):
        tree = ast.fix_missing_locations(_Elementwise().visit(ast.parse(check.text, mode="eval")))
        code = compile(tree, f"<acceptance {check.text}>", "eval")
        values = {name: columns.get(name, np.full(n, np.nan)) for name in check.used}
        with np.errstate(invalid="ignore", divide="ignore"):
            result = eval(code, {"__builtins__": {}, **FUNCTIONS, "logical_and": np.logical_and,  # noqa: S307 - checked
                                 "logical_or": np.logical_or}, values)
        met &= np.broadcast_to(np.asarray(result, dtype=bool), (n,))
    return met


def passing_mask(exprs: list[str], table: pd.DataFrame, baseline: dict) -> np.ndarray:
    """Per row of `table` (a metric table): feasible, not the baseline, and meeting every
    criterion. The candidates that can confirm the hypothesis."""
    base_id = baseline.get("candidate_id")
    ok = (table["status"] == "ok").to_numpy() & (table["candidate_id"] != base_id).to_numpy()
    n = len(table)
    columns = {m: (pd.to_numeric(table[m], errors="coerce").to_numpy(dtype=float) if m in table
                   else np.full(n, np.nan)) for m in METRICS}
    for m in METRICS:
        value = baseline.get(m, math.nan)
        columns[f"baseline_{m}"] = np.full(n, math.nan if value is None or pd.isna(value) else float(value))
    return ok & elementwise(exprs, columns)


def best_candidate(table: pd.DataFrame, passing: np.ndarray, metric: str, direction: str) -> int | None:
    """The best candidate: of the passing ones, the best by the first objective (ties: the
    lowest id). The one definition of "best": the verdict's, the report's and the UI's."""
    chosen = table[passing]
    if chosen.empty or metric not in chosen:
        return None
    chosen = chosen.sort_values([metric, "candidate_id"], ascending=[direction == "minimize", True])
    return int(chosen.iloc[0]["candidate_id"])


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
        exprs = [c.expr for c in spec.model.acceptance]
        mask = passing_mask(exprs, table, baseline)
        passing = table[mask]
        crit = "; ".join(exprs)
        obj = spec.model.objectives[0]
        if passing.empty:
            status = verdict = "refuted"
            rationale = f"none of {len(ok)} feasible candidates meets: {crit}"
            evidence = [int(base_rows.iloc[0]["metric_run_id"])]
        else:
            best_id = best_candidate(table, mask, obj.metric, obj.direction)
            best = table[table["candidate_id"] == best_id].iloc[0]
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
