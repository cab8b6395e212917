"""The sweep's proposed verdict: the acceptance criteria over the recorded evidence.

The hypothesis is *proposed* confirmed when a feasible candidate other than the baseline
meets every clause (the best such candidate by the first objective is the evidence),
proposed refuted when none of the candidates that have the evidence the clauses name
does, and waiting while no candidate has it yet (an `emulator.` clause before any
emulator run). A proposal never sets the hypothesis' status: a person's decision does
(`dse.runner.decisions.decide`).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from emulator.formula import FUNCTIONS, Formula

from ..records import Store
from .criteria import FAIL, MISSING, NAMES, PASS, compile_criteria

if TYPE_CHECKING:  # the spec module brings recipes and torch; a report reads no spec
    from .spec import Spec

AUTHOR = "dse sweep (automatic)"


@dataclass(frozen=True)
class Proposal:
    verdict: str  # confirmed, refuted or waiting
    rationale: str
    candidate_id: int | None
    evidence_kinds: list[str]


def formulas(exprs: list[str]) -> list[Formula]:
    """The clauses of the acceptance expressions as formulas over the criteria's variable
    names (`latency_cycles`, `baseline_latency_cycles`, `emulator__latency_cycles`, ...)."""
    criteria = compile_criteria([{"expr": e} for e in exprs])
    return [clause.formula for clause in criteria.clauses]


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
    """Every clause met, element by element, over arrays named by the criteria's variables
    (a missing column is NaN, and NaN meets nothing: a clause without its evidence does not
    pass, it waits)."""
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
    """Per row of `table` (an analytical metric table): feasible, not the baseline, and
    meeting every clause on the analytical evidence (a clause naming another kind of
    evidence passes only where the table carries it, as a `<kind>.<metric>` column)."""
    base_id = baseline.get("candidate_id")
    ok = (table["status"] == "ok").to_numpy() & (table["candidate_id"] != base_id).to_numpy()
    n = len(table)
    columns = {}
    for variable, (side, kind, metric) in NAMES.items():
        prefix = variable.split("__")[-2] if "__" in variable else "analytical"  # emulator__latency_cycles
        column = metric if prefix == "analytical" else f"{prefix}.{metric}"
        if side == "candidate":
            columns[variable] = (pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=float)
                                 if column in table else np.full(n, np.nan))
        else:
            value = baseline.get(column, math.nan)
            columns[variable] = np.full(n, math.nan if value is None or pd.isna(value) else float(value))
    return ok & elementwise(exprs, columns)


def best_candidate(table: pd.DataFrame, passing: np.ndarray, metric: str, direction: str) -> int | None:
    """The best candidate: of the passing ones, the best by the first objective (ties: the
    lowest id). The one definition of "best": the proposal's, the report's and the UI's."""
    chosen = table[passing]
    if chosen.empty or metric not in chosen:
        return None
    chosen = chosen.sort_values([metric, "candidate_id"], ascending=[direction == "minimize", True])
    return int(chosen.iloc[0]["candidate_id"])


def outcome(checks) -> str:
    """pass when every clause passes, fail when one fails, else missing (evidence lacking)."""
    outcomes = {c.outcome for c in checks}
    return FAIL if FAIL in outcomes else MISSING if MISSING in outcomes else PASS


def references(store: Store, exp: dict) -> dict[int, int | None]:
    """{candidate: the candidate its acceptance clauses compare with}: the baseline, or, for
    a candidate at another workload point (mapping.workload), the baseline's design at that
    point (None when not recorded): a comparison always runs identical submitted work."""
    import json

    from ..identity import candidate_hash

    cands = store.candidates(exp["id"])
    base_id = exp["baseline_candidate_id"]
    by_hash = dict(zip(cands["hash"], cands["id"].astype(int)))
    base = cands[cands["id"] == base_id]
    if base.empty:
        return {}
    base_config, base_mapping = json.loads(base.iloc[0]["config"]), json.loads(base.iloc[0]["mapping"])
    out = {}
    for cid, mapping in zip(cands["id"].astype(int), cands["mapping"]):
        point = json.loads(mapping).get("workload")
        out[cid] = int(base_id) if not point else by_hash.get(
            candidate_hash(base_config, {**base_mapping, "workload": point}))
    return out


def propose(store: Store, experiment_id: int, spec: Spec) -> Proposal | None:
    """The verdict the evidence suggests, recorded as a proposal when it differs from the
    latest one; None when the spec states no acceptance criteria."""
    exp = store.experiment(experiment_id)
    if not exp["acceptance"]:
        return None
    criteria = compile_criteria(exp["acceptance"])
    kinds = criteria.kinds
    crit = "; ".join(c["expr"] for c in exp["acceptance"])
    base_id = exp["baseline_candidate_id"]
    table = store.metric_table(experiment_id, "analytical")
    base_rows = table[table["candidate_id"] == base_id]
    evidence: list[int] = []
    candidate = None
    if base_rows.empty or base_rows.iloc[0]["status"] != "ok":
        verdict, rationale = "refuted", "the baseline itself is not feasible"
    else:
        refs = references(store, exp)
        ok = table[(table["status"] == "ok") & table["candidate_id"].map(lambda c: refs.get(int(c)) != int(c))]
        ids = [int(c) for c in ok["candidate_id"]]
        totals = store.totals(ids + [r for r in set(refs.values()) if r is not None], kinds)
        outcomes = {c: outcome(criteria.evaluate(totals[c], totals.get(refs.get(c), {}))) for c in ids}
        passing = ok[ok["candidate_id"].map(lambda c: outcomes[int(c)] == PASS).astype(bool)] if ids else ok
        judged = sum(o != MISSING for o in outcomes.values())
        lacking = len(ids) - judged
        obj = spec.model.objectives[0]
        if not passing.empty:
            candidate = best_candidate(passing, np.ones(len(passing), dtype=bool), obj.metric, obj.direction)
            best = passing[passing["candidate_id"] == candidate].iloc[0]
            verdict = "confirmed"
            ref_rows = table[table["candidate_id"] == refs.get(candidate)]
            ref_value = ref_rows.iloc[0][obj.metric] if len(ref_rows) else float("nan")
            rationale = (f"{len(passing)} of {len(ids)} feasible candidates meet: {crit}; best is candidate "
                         f"{candidate} with {obj.metric} {best[obj.metric]:.6g} vs baseline "
                         f"{ref_value:.6g}" + ("" if refs.get(candidate) == int(base_id) else
                                               f" (candidate {refs.get(candidate)}: the baseline at its workload point)"))
            _, evidence = store.decision_evidence(experiment_id, candidate)
        elif ids and judged == 0:
            verdict = "waiting"
            rationale = (f"none of {len(ids)} feasible candidates has yet the evidence that {crit} needs "
                         f"({', '.join(kinds)})")
        else:
            verdict = "refuted"
            rationale = f"none of {judged} feasible candidates with the evidence meets: {crit}" + (
                f" ({lacking} more lack evidence: {', '.join(k for k in kinds if k != 'analytical')})" if lacking else "")
        if not evidence:
            evidence = [int(base_rows.iloc[0]["metric_run_id"])]
    proposal = Proposal(verdict, rationale, candidate, kinds)
    last = store.decisions(experiment_id)
    last = last[last["kind"] == "proposal"]
    # A rerun that reaches the same conclusion adds no second proposal.
    if last.empty or last.iloc[-1]["verdict"] != verdict or last.iloc[-1]["rationale"] != rationale:
        store.add_decision(experiment_id, verdict, rationale, AUTHOR, evidence, candidate, kind="proposal",
                           evidence_kinds=kinds)
    return proposal
