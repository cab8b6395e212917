"""Acceptance criteria: the spec's expressions, split into clauses, over evidence of named kinds.

An expression names a candidate's total metrics and the baseline's. A bare name is the
analytical estimate (`latency_cycles`, `baseline_latency_cycles`); a name may also say the
evidence kind it needs: `emulator.latency_cycles`, `numerics.passed`,
`baseline.emulator.latency_cycles` (`analytical.` is the bare name spelt out). Each
top-level `and` operand is a clause, evaluated and reported on its own, so a refusal can
say which clause fails and with which values. A clause whose evidence a candidate lacks
(no emulator run yet) neither passes nor fails: it waits.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emulator.formula import Formula, FormulaError

from .metrics import METRICS

# Total metrics of each evidence kind an expression may name: the spec's prefix -> the
# store's metric kind and its names. The analytical ones are also the objectives'.
EVIDENCE = {
    "analytical": ("analytical", METRICS),
    # the emulator's cycles, and its counted activity priced as the model prices its own (`dse.ppa`)
    "emulator": ("emulator_cycles", ("latency_cycles", "peak_sram_bytes", "dma_bytes", "area_mm2", "energy_uj",
                                     "leakage_energy_uj", "power_mw", "edp", "inferences_per_joule",
                                     "total_sram_bytes", "dram_footprint_bytes")),
    "numerics": ("numerics", ("passed", "integer_bit_exact", "max_abs_error", "max_rel_error")),
}
_QUALIFIED = re.compile(r"(?<![\w.])(baseline\.)?(" + "|".join(EVIDENCE) + r")\.(\w+)")
_VARIABLE = re.compile(r"\b(baseline__)?(" + "|".join(EVIDENCE) + r")__(\w+)\b")

PASS, FAIL, MISSING = "pass", "fail", "missing"


class CriterionError(ValueError):
    """An acceptance expression that is not one over the known evidence."""

    def __init__(self, message: str, index: int = 0, expr: str = ""):
        super().__init__(message)
        self.index, self.expr = index, expr


def _variable(baseline: bool, prefix: str, metric: str) -> str:
    return f"{'baseline__' if baseline else ''}{prefix}__{metric}"


def _shown(text: str) -> str:
    """An expression with its internal variable names written back as the user wrote them."""
    return _VARIABLE.sub(lambda m: f"{'baseline.' if m.group(1) else ''}{m.group(2)}.{m.group(3)}", text)


# Every name an expression may use -> (side, store kind, metric).
NAMES: dict[str, tuple[str, str, str]] = {}
for _prefix, (_kind, _metrics) in EVIDENCE.items():
    for _metric in _metrics:
        NAMES[_variable(False, _prefix, _metric)] = ("candidate", _kind, _metric)
        NAMES[_variable(True, _prefix, _metric)] = ("baseline", _kind, _metric)
for _metric in METRICS:
    NAMES[_metric] = ("candidate", "analytical", _metric)
    NAMES[f"baseline_{_metric}"] = ("baseline", "analytical", _metric)


def allowed_names() -> str:
    """The names an expression may use, for an error's "allowed" part."""
    kinds = "; ".join(f"{p}.<{'|'.join(m)}>" for p, (_, m) in EVIDENCE.items() if p != "analytical")
    return (f"an expression over {', '.join(METRICS)} (analytical) and their baseline_ forms, "
            f"or names of other evidence: {kinds} (baseline.<kind>.<metric> for the baseline's)")


@dataclass(frozen=True)
class Clause:
    criterion: int  # index of its expression in the acceptance list
    text: str  # as the user reads it
    formula: Formula

    @property
    def kinds(self) -> set[str]:
        return {NAMES[v][1] for v in self.formula.used}


@dataclass
class ClauseCheck:
    """One clause evaluated for one candidate: pass, fail or missing (evidence lacking)."""

    criterion: int
    clause: str
    outcome: str
    values: dict[str, float | None] = field(default_factory=dict)  # shown name -> value (None: lacking)
    error: str = ""

    def describe(self) -> str:
        shown = ", ".join(f"{name} = {_number(v)}" for name, v in sorted(self.values.items()))
        if self.outcome == MISSING:
            lacking = ", ".join(sorted(n for n, v in self.values.items() if v is None))
            return f"acceptance[{self.criterion}] clause `{self.clause}` has no evidence yet for {lacking}"
        verb = "passes" if self.outcome == PASS else "fails"
        return f"acceptance[{self.criterion}] clause `{self.clause}` {verb} with {shown}" + (
            f" ({self.error})" if self.error else "")

    def as_record(self) -> dict[str, Any]:
        return {"criterion": self.criterion, "clause": self.clause, "outcome": self.outcome,
                "values": self.values, **({"error": self.error} if self.error else {})}


def _number(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{int(value):,}" if float(value).is_integer() and abs(value) < 1e15 else f"{value:.6g}"


@dataclass(frozen=True)
class Criteria:
    clauses: tuple[Clause, ...]

    @property
    def kinds(self) -> list[str]:
        """The store's metric kinds the verdict rests on (analytical always: feasibility)."""
        return sorted({"analytical"}.union(*(c.kinds for c in self.clauses)))

    def evaluate(self, candidate: dict[str, dict[str, float]], baseline: dict[str, dict[str, float]]
                 ) -> list[ClauseCheck]:
        """Each clause for a candidate: `candidate` and `baseline` are {kind: {metric: value}}."""
        sides = {"candidate": candidate, "baseline": baseline}
        checks = []
        for clause in self.clauses:
            values, shown = {}, {}
            for variable in sorted(clause.formula.used):
                side, kind, metric = NAMES[variable]
                value = sides[side].get(kind, {}).get(metric)
                value = None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
                shown[_shown(variable)] = value
                values[variable] = np.float64(value if value is not None else math.nan)
            if any(v is None for v in shown.values()):
                checks.append(ClauseCheck(clause.criterion, clause.text, MISSING, shown))
                continue
            try:
                with np.errstate(all="ignore"):
                    ok = bool(clause.formula(**values))
                checks.append(ClauseCheck(clause.criterion, clause.text, PASS if ok else FAIL, shown))
            except Exception as exc:  # noqa: BLE001 - a clause that cannot be evaluated does not pass
                checks.append(ClauseCheck(clause.criterion, clause.text, FAIL, shown, f"{type(exc).__name__}: {exc}"))
        return checks


def compile_expression(index: int, expr: str) -> list[Clause]:
    """The clauses of one acceptance expression; CriterionError when it is not valid."""
    if not isinstance(expr, str):
        raise CriterionError(f"an expression is text, not {expr!r}")
    for match in _QUALIFIED.finditer(expr):
        prefix, metric = match.group(2), match.group(3)
        known = EVIDENCE[prefix][1]
        if metric not in known:
            article = "an" if prefix[0] in "aeiou" else "a"
            raise CriterionError(f"{prefix}.{metric} is not {article} {prefix} metric "
                                 f"({prefix} metrics: {', '.join(known)})")
    text = _QUALIFIED.sub(lambda m: _variable(bool(m.group(1)), m.group(2), m.group(3)), expr)
    try:
        whole = Formula(text, NAMES)
    except FormulaError as exc:
        raise CriterionError(_shown(str(exc)).split("; allowed names")[0]) from None
    body = ast.parse(text, mode="eval").body
    parts = body.values if isinstance(body, ast.BoolOp) and isinstance(body.op, ast.And) else [body]
    if len(parts) == 1:
        return [Clause(index, _shown(text.strip()), whole)]
    return [Clause(index, _shown(ast.unparse(part)), Formula(ast.unparse(part), NAMES)) for part in parts]


def compile_criteria(acceptance: list[dict[str, Any]]) -> Criteria:
    """The clauses of every acceptance expression ({"expr", "prose"} each), in order."""
    clauses: list[Clause] = []
    for index, criterion in enumerate(acceptance):
        try:
            clauses += compile_expression(index, criterion["expr"])
        except CriterionError as exc:
            raise CriterionError(str(exc), index, criterion["expr"]) from None
    return Criteria(tuple(clauses))
