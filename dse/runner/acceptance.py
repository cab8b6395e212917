"""Acceptance, judged once: the spec's criteria over every evidence kind they name, for
every candidate of an experiment; the best passing candidate; the sweep's proposal; and
the headline every view shows.

`judge_experiment` is the one judgement. It reads each candidate's latest total figures of
the kinds the clauses name (analytical, emulator, numerics; `dse.runner.criteria`) and
judges every clause for every candidate at once: pass, fail, or waiting while a candidate
lacks the evidence a clause names (an `emulator.` clause before its emulator run). A
candidate passes when it is feasible (its latest analytical run ok), is not its own
reference (the baseline, or the baseline's design at its workload point) and passes every
clause; the best is the passing one best by the first objective (ties: the lowest id).
The sweep's proposal (`propose`), `dse decide`'s refusal (`dse.runner.decisions`), the
report, the UI, `dse show` and the notebooks all read this judgement, so they name the
same passing candidates and the same best.

The hypothesis is *proposed* confirmed when some candidate passes, refuted when none of
those with the evidence does, and waiting while none has it yet. A proposal never sets the
hypothesis' status: a person's decision does (`dse.runner.decisions.decide`).

Imports neither pandas nor SQLAlchemy: `dse show` judges through the light read
(`dse.records.light`), whose methods of these names run the same SQL as the Store's.
"""

from __future__ import annotations

import ast
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from emulator.formula import FUNCTIONS, Formula

from ..identity import candidate_hash
from ..records.outcomes import NOT_RUN_YET, not_run_yet
from .criteria import (FAIL, MISSING, NAMES, PASS, ClauseCheck, Criteria, CriterionError, _shown,
                       compile_criteria)

if TYPE_CHECKING:  # the spec module brings recipes and torch; a report reads no spec
    from ..records import Store
    from .spec import Spec

AUTHOR = "dse sweep (automatic)"
WAITING = "waiting"  # a candidate lacking evidence a clause names (a clause's outcome: criteria.MISSING)
DEFAULT_OBJECTIVE = {"metric": "latency_cycles", "direction": "minimize"}


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


_GLOBALS = {"__builtins__": {}, **FUNCTIONS, "logical_and": np.logical_and, "logical_or": np.logical_or}


def _met(formula: Formula, values: dict[str, np.ndarray], n: int) -> np.ndarray:
    """Whether `formula` holds, element by element (NaN meets nothing here only by the
    caller's mask: the truth of NaN is True). A formula numpy cannot evaluate over whole
    columns is evaluated row by row, a row that raises failing, as `Criteria.evaluate` does."""
    tree = ast.fix_missing_locations(_Elementwise().visit(ast.parse(formula.text, mode="eval")))
    code = compile(tree, f"<acceptance {formula.text}>", "eval")
    try:
        with np.errstate(all="ignore"):
            result = eval(code, _GLOBALS, values)  # noqa: S307 - the formula's AST is checked
        return np.broadcast_to(np.asarray(result, dtype=bool), (n,)).copy()
    except Exception:  # noqa: BLE001 - row by row, as a candidate's checks evaluate it
        out = np.zeros(n, dtype=bool)
        for i in range(n):
            try:
                with np.errstate(all="ignore"):
                    out[i] = bool(formula(**{k: np.float64(v[i]) for k, v in values.items()}))
            except Exception:  # noqa: BLE001 - a clause that cannot be evaluated does not pass
                out[i] = False
        return out


def elementwise(exprs: list[str], columns: dict[str, np.ndarray]) -> np.ndarray:
    """Every clause met, element by element, over arrays named by the criteria's variables
    (a missing column is NaN, and NaN meets nothing: a clause without its evidence does not
    pass). The acceptance region a Pareto plot shades."""
    n = len(next(iter(columns.values()))) if columns else 0
    met = np.ones(n, dtype=bool)
    for check in formulas(exprs):
        values = {name: np.asarray(columns.get(name, np.full(n, np.nan)), dtype=float) for name in check.used}
        lacking = np.zeros(n, dtype=bool)
        for value in values.values():
            lacking |= np.isnan(value)
        met &= _met(check, values, n) & ~lacking
    return met


# ---- the judgement ---------------------------------------------------------------------------

@dataclass
class Judgement:
    """Every candidate of an experiment (or those named) judged clause by clause.

    Arrays are aligned with `ids` (candidate ids, ascending). `outcomes[i, j]` is clause j's
    outcome for candidate i: 1 pass, 0 fail, -1 waiting (evidence lacking)."""

    criteria: Criteria
    objective: dict  # the first objective: {"metric", "direction"} (an analytical metric)
    ids: np.ndarray  # int64
    status: list  # each candidate's latest analytical run's status (None: no analytical run)
    reference: np.ndarray  # int64: the candidate each is compared with (-1: not recorded)
    figures: dict[str, dict[str, np.ndarray]]  # kind -> metric -> values (NaN: lacking)
    outcomes: np.ndarray  # int8 (candidates x clauses)
    baseline_id: int | None
    error: str = ""  # the acceptance cannot be evaluated (then nothing passes)
    _index: dict[int, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._index = {int(c): i for i, c in enumerate(self.ids)}

    # -- who passes -----------------------------------------------------------------------

    @property
    def clauses(self) -> int:
        return len(self.criteria.clauses)

    @cached_property
    def baseline_ok(self) -> bool:
        i = self._index.get(self.baseline_id) if self.baseline_id is not None else None
        return i is not None and self.status[i] == "ok"

    @cached_property
    def eligible(self) -> np.ndarray:
        """Feasible by the model and not its own reference (the baseline and its designs at
        the workload points are what the others are compared with)."""
        feasible = np.array([s == "ok" for s in self.status], dtype=bool)
        return feasible & (self.reference != self.ids)

    @cached_property
    def passing(self) -> np.ndarray:
        if self.error or not self.baseline_ok:
            return np.zeros(len(self.ids), dtype=bool)
        return self.eligible & (self.outcomes == 1).all(axis=1)

    @cached_property
    def failing(self) -> np.ndarray:
        """Eligible candidates that fail some clause (with the evidence for it)."""
        return self.eligible & (self.outcomes == 0).any(axis=1) & ~self.passing

    @cached_property
    def waiting(self) -> np.ndarray:
        """Eligible candidates failing no clause and lacking the evidence of some."""
        return self.eligible & ~self.failing & ~self.passing

    @cached_property
    def best(self) -> int | None:
        """Of the passing candidates, the best by the first objective (ties: the lowest id;
        one without the objective's value last)."""
        chosen = np.flatnonzero(self.passing)
        if not len(chosen):
            return None
        values = self.values("analytical", self.objective["metric"])[chosen]
        sign = 1.0 if self.objective.get("direction", "minimize") == "minimize" else -1.0
        order = sorted(range(len(chosen)), key=lambda k: (bool(np.isnan(values[k])),
                                                          0.0 if np.isnan(values[k]) else sign * values[k],
                                                          int(self.ids[chosen[k]])))
        return int(self.ids[chosen[order[0]]])

    @property
    def passing_ids(self) -> list[int]:
        return [int(c) for c in self.ids[self.passing]]

    @property
    def eligible_count(self) -> int:
        return int(self.eligible.sum())

    @property
    def judged_count(self) -> int:
        """Eligible candidates judged: passing or failing (not waiting for evidence)."""
        return int((self.passing | self.failing).sum())

    @property
    def verdict(self) -> str:
        """What the evidence says: confirmed (a candidate passes), waiting (no eligible
        candidate has the evidence yet) or refuted."""
        if not self.baseline_ok:
            return "refuted"
        if self.passing.any():
            return "confirmed"
        if self.eligible.any() and not self.failing.any():
            return WAITING
        return "refuted"

    @property
    def lacking_kinds(self) -> list[str]:
        """The evidence kinds the waiting candidates' clauses lack."""
        kinds = set()
        for j, clause in enumerate(self.criteria.clauses):
            if ((self.outcomes[:, j] == -1) & self.waiting).any():
                kinds |= clause.kinds
        return sorted(kinds - {"analytical"}) or sorted(kinds)

    # -- one candidate ----------------------------------------------------------------------

    def position(self, candidate_id: int) -> int | None:
        return self._index.get(int(candidate_id))

    def outcome(self, candidate_id: int) -> str | None:
        """"pass", "fail" or "waiting"; None for a candidate not judged (infeasible, a
        reference, or not among the judged)."""
        i = self.position(candidate_id)
        if i is None or not self.eligible[i]:
            return None
        return PASS if self.passing[i] else FAIL if self.failing[i] else WAITING

    def outcomes_of(self, candidate_ids: Sequence[int]) -> list[str | None]:
        return [self.outcome(c) for c in candidate_ids]

    def mask(self, candidate_ids: Sequence[int]) -> np.ndarray:
        """Which of these candidates pass (a bool per id, in their order)."""
        passing = set(self.passing_ids)
        return np.array([int(c) in passing for c in candidate_ids], dtype=bool)

    def values(self, kind: str, metric: str) -> np.ndarray:
        return self.figures.get(kind, {}).get(metric, np.full(len(self.ids), np.nan))

    def value(self, candidate_id: int | None, kind: str, metric: str) -> float:
        i = None if candidate_id is None else self.position(candidate_id)
        return math.nan if i is None else float(self.values(kind, metric)[i])

    def reference_of(self, candidate_id: int) -> int | None:
        i = self.position(candidate_id)
        return None if i is None or self.reference[i] < 0 else int(self.reference[i])

    def ratio(self, candidate_id: int, kind: str, metric: str) -> float:
        """The candidate's figure over its reference's (the baseline's), NaN when either lacks it."""
        mine, theirs = self.value(candidate_id, kind, metric), self.value(self.reference_of(candidate_id), kind, metric)
        return mine / theirs if theirs and not math.isnan(theirs) and not math.isnan(mine) else math.nan

    def checks(self, candidate_id: int) -> list[ClauseCheck]:
        """The clauses as evaluated for one candidate, with the values they read."""
        i = self.position(candidate_id)
        if i is None:
            raise KeyError(f"candidate {candidate_id} was not judged")
        ref = self.reference[i]
        j_ref = self._index.get(int(ref)) if ref >= 0 else None
        out = []
        for j, clause in enumerate(self.criteria.clauses):
            shown = {}
            for variable in sorted(clause.formula.used):
                side, kind, metric = NAMES[variable]
                row = i if side == "candidate" else j_ref
                value = math.nan if row is None else float(self.values(kind, metric)[row])
                shown[_shown(variable)] = None if math.isnan(value) else value
            code = int(self.outcomes[i, j])
            out.append(ClauseCheck(clause.criterion, clause.text, PASS if code == 1 else FAIL if code == 0 else MISSING,
                                   shown))
        return out


def judge(criteria: Criteria, ids: Sequence[int], status: Sequence[str | None],
          figures: Mapping[str, Mapping[str, np.ndarray]], references: Mapping[int, int | None],
          baseline_id: int | None, objective: Mapping | None = None, error: str = "") -> Judgement:
    """Judge every candidate (`ids`, with their analytical `status` and their latest total
    `figures[kind][metric]`, aligned) on every clause of `criteria` against its reference
    (`references[candidate]`, the baseline where absent; None: not recorded, so the
    baseline's side of a clause waits). A reference must be among `ids`."""
    ids = np.asarray([int(c) for c in ids], dtype=np.int64)
    n = len(ids)
    index = {int(c): i for i, c in enumerate(ids)}
    default = -1 if baseline_id is None else int(baseline_id)
    reference = np.array([(-1 if r is None else int(r)) for r in
                          (references.get(int(c), default) for c in ids)], dtype=np.int64)
    ref_row = np.array([index.get(int(r), -1) for r in reference], dtype=np.int64)
    figs = {kind: {metric: np.asarray(v, dtype=float) for metric, v in metrics.items()}
            for kind, metrics in figures.items()}
    outcomes = np.full((n, len(criteria.clauses)), -1, dtype=np.int8)
    for j, clause in enumerate(criteria.clauses):
        values = {}
        for variable in clause.formula.used:
            side, kind, metric = NAMES[variable]
            column = figs.get(kind, {}).get(metric)
            column = np.full(n, np.nan) if column is None else column
            if side == "baseline":
                column = np.where(ref_row >= 0, column[np.maximum(ref_row, 0)] if n else column, np.nan)
            values[variable] = column
        lacking = np.zeros(n, dtype=bool)
        for value in values.values():
            lacking |= np.isnan(value)
        met = _met(clause.formula, values, n) if n else np.zeros(0, dtype=bool)
        outcomes[:, j] = np.where(lacking, -1, np.where(met, 1, 0))
    return Judgement(criteria, dict(objective or DEFAULT_OBJECTIVE), ids, list(status), reference, figs, outcomes,
                     None if baseline_id is None else int(baseline_id), error)


def objectives_of(spec_text: str | None) -> list[dict]:
    """The spec's objectives (as recorded in its text), latency first by default."""
    try:
        spec = tomllib.loads(spec_text) if spec_text else {}
    except tomllib.TOMLDecodeError:
        spec = {}
    return [{"direction": "minimize", **o} for o in spec.get("objectives") or []] or [dict(DEFAULT_OBJECTIVE)]


def _acceptance_of(exp: Mapping) -> list[dict]:
    acceptance = exp.get("acceptance") or []
    return json.loads(acceptance) if isinstance(acceptance, str) else list(acceptance)


def criteria_of(exp: Mapping) -> tuple[Criteria, str]:
    """(the experiment's criteria, "" or why they cannot be evaluated: then no clause)."""
    try:
        return compile_criteria(_acceptance_of(exp)), ""
    except CriterionError as exc:
        return Criteria(()), (f"the experiment's acceptance[{exc.index}] `{exc.expr}` cannot be evaluated ({exc})")


def _wanted(criteria: Criteria, objectives: Sequence[Mapping]) -> dict[str, set[str]]:
    """{kind: metrics} the judgement and the headline read: what the clauses name (either
    side) and every objective's analytical figure."""
    wanted: dict[str, set[str]] = {"analytical": {o["metric"] for o in objectives}}
    for clause in criteria.clauses:
        for variable in clause.formula.used:
            _, kind, metric = NAMES[variable]
            wanted.setdefault(kind, set()).add(metric)
    return wanted


def _read(store: Any, wanted: dict[str, set[str]], ids: list[int], experiment_id: int | None,
          candidate_ids: list[int] | None, read: dict | None = None) -> dict[str, dict[str, np.ndarray]]:
    """The figures `wanted` of the candidates `ids`, as arrays aligned with them (`read`:
    `store.figure_columns`' answer of at least these kinds and names, already read)."""
    figures = {kind: {metric: np.full(len(ids), np.nan) for metric in metrics} for kind, metrics in wanted.items()}
    names = sorted(set().union(*wanted.values())) if wanted else []
    if read is None:
        read = store.figure_columns(sorted(wanted), names, experiment_id=experiment_id, candidate_ids=candidate_ids)
    order = np.asarray(ids, dtype=np.int64)
    for kind, (cids, columns, *_runs) in read.items():
        if not len(cids) or not len(order):
            continue
        at = np.minimum(np.searchsorted(order, cids), len(order) - 1)  # each row's place among `ids`
        known = order[at] == cids
        for metric, column in figures.get(kind, {}).items():
            column[at[known]] = columns[metric][known]
    return figures


def references(store: Any, exp: Mapping, ids: Sequence[int] | None = None) -> dict[int, int | None]:
    """{candidate: the candidate its acceptance clauses compare with}: the baseline, or, for
    a candidate at another workload point (mapping.workload), the baseline's design at that
    point (None when not recorded): a comparison always runs identical submitted work. Of
    the experiment's candidates (`ids`: of these)."""
    base_id = exp["baseline_candidate_id"]
    if base_id is None:
        return {}
    if ids is None:
        ids = [c for c, _ in store.analytical_statuses(int(exp["id"]))]
    out: dict[int, int | None] = {int(c): int(base_id) for c in ids}
    points = store.workload_points(int(exp["id"]))
    if points:
        base = store.candidate(int(base_id))
        by_hash = {digest: cid for cid, digest, _ in points}
        for cid, _, point in points:
            if cid in out:
                out[cid] = by_hash.get(candidate_hash(base["config"], {**base["mapping"], "workload": point}))
    return out


def figures_wanted(exp: Mapping, objective: Mapping | None = None, metrics: Sequence[str] = ()
                   ) -> dict[str, set[str]]:
    """{kind: metrics} `judge_experiment(store, exp, objective, metrics)` reads: for a view
    that reads them (and more) itself and hands them over, so they are read once."""
    objectives = objectives_of(exp.get("spec_text"))
    wanted = _wanted(criteria_of(exp)[0], [objective if objective is not None else objectives[0], *objectives])
    wanted["analytical"] |= set(metrics)
    return wanted


def judge_experiment(store: Any, experiment: Mapping | int | str, objective: Mapping | None = None,
                     metrics: Sequence[str] = (), figures: dict | None = None) -> Judgement:
    """The one judgement of an experiment's candidates (see the module's doc), read from
    `store`: a `dse.records.Store` or the light read of `dse show`. `experiment`: its id,
    name or row; `objective`: the first objective (default: the spec's); `metrics`: more
    analytical figures to read along (`Judgement.values`), for a view's own use;
    `figures`: `store.figure_columns`' answer for the experiment's candidates, already read,
    of at least the kinds and names of `figures_wanted` (else read here)."""
    exp = experiment if isinstance(experiment, Mapping) else store.experiment(experiment)
    criteria, error = criteria_of(exp)
    objectives = objectives_of(exp.get("spec_text"))
    objective = dict(objective) if objective is not None else objectives[0]
    statuses = store.analytical_statuses(int(exp["id"]))
    ids = [c for c, _ in statuses]
    base_id = exp.get("baseline_candidate_id")
    wanted = figures_wanted(exp, objective, metrics)
    figures = _read(store, wanted, ids, int(exp["id"]), None, figures)
    return judge(criteria, ids, [s for _, s in statuses], figures, references(store, exp, ids),
                 None if base_id is None else int(base_id), objective, error)


def judge_candidate(store: Any, exp: Mapping, candidate_id: int, reference_id: int,
                    status: str | None = None) -> Judgement:
    """One candidate (of this experiment or another) judged against `reference_id` (the
    baseline, or its design at the candidate's workload point), as `judge_experiment`
    judges it: `dse decide`'s test."""
    criteria, error = criteria_of(exp)
    ids = sorted({int(candidate_id), int(reference_id)})
    figures = _read(store, _wanted(criteria, objectives_of(exp.get("spec_text"))), ids, None, ids)
    statuses = dict(store.analytical_statuses(candidate_ids=ids))
    return judge(criteria, ids, [statuses.get(c) for c in ids], figures,
                 {int(candidate_id): int(reference_id), int(reference_id): int(reference_id)},
                 int(reference_id), objectives_of(exp.get("spec_text"))[0], error)


# What the judgement says of a candidate (`Judgement.outcome`), as every table shows it.
OUTCOME_MARKS = {PASS: "✓ pass", FAIL: "✗ fail", WAITING: "… waiting"}


def outcome_mark(outcome: str | None) -> str:
    """"✓ pass", "✗ fail", "… waiting" (for evidence), "—" (not judged: infeasible, the baseline)."""
    return OUTCOME_MARKS.get(outcome, "—")


# ---- the headline ------------------------------------------------------------------------------

# How a headline names a metric's ratio to the baseline's ("0.30x private SRAM").
SHORT_NAMES = {
    "compute_cycles": "compute cycles", "dma_cycles": "DMA cycles", "core_cycles": "core cycles",
    "dma_bytes": "DMA bytes", "peak_sram_bytes": "peak SRAM", "shared_sram_bytes": "shared SRAM",
    "private_sram_bytes": "private SRAM", "private_sram_per_core_bytes": "private SRAM per core",
    "unaddressable_sram_bytes": "unaddressable SRAM", "area_mm2": "area", "energy_uj": "energy",
    "leakage_energy_uj": "leakage energy", "power_mw": "power", "edp": "EDP",
    "inferences_per_joule": "inferences per joule", "total_sram_bytes": "total SRAM",
    "dram_footprint_bytes": "DRAM footprint",
}
# The evidence kinds a headline's ratios may come from (numerics' figures are pass/fail and
# errors, not quantities to scale), and how it names them.
RATIO_KINDS = {"analytical": "model", "emulator_cycles": "emulator"}


def times(ratio: float) -> str:
    """A ratio as a headline writes it: "3.0", "0.30", "1.02" (three digits near 1), "12"."""
    if ratio >= 10:
        return f"{ratio:.0f}"
    return f"{ratio:#.{3 if abs(ratio - 1) < 0.1 else 2}g}".rstrip(".")


def ratio_words(metric: str, ratio: float) -> str:
    """"3.0x faster" (latency: the baseline's over the candidate's), "1.2x slower", "0.30x
    private SRAM" (any other metric: the candidate's over the baseline's)."""
    if metric == "latency_cycles":
        if ratio == 1:
            return "as fast"
        return f"{times(1 / ratio)}x faster" if ratio < 1 else f"{times(ratio)}x slower"
    return f"{times(ratio)}x {SHORT_NAMES.get(metric, metric.replace('_', ' '))}"


@dataclass(frozen=True)
class Ratio:
    kind: str  # the evidence kind both figures are of
    metric: str
    baseline: float  # the reference's figure (the baseline's, or its design's at the workload point)
    value: float  # the candidate's
    ratio: float  # value / baseline
    words: str  # "3.0x faster (emulator)"


def _missing(value: Any) -> bool:
    """None, NaN, or pandas' NA (whose truth is undefined), without importing pandas."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except (TypeError, ValueError):
        return True


def _cand(d: Mapping) -> str:
    """" c12" for a decision naming candidate 12 (of another experiment: said), else ""."""
    if _missing(d.get("candidate_id")):
        return ""
    out = f" c{int(d['candidate_id'])}"
    other = d.get("candidate_experiment_id")
    if not _missing(other) and not _missing(d.get("experiment_id")) and int(other) != int(d["experiment_id"]):
        out += f" (of experiment {int(other)})"
    return out


@dataclass(frozen=True)
class Headline:
    """The answer at a glance, built once (`headline`) and rendered by every view: the
    sweep's proposal and a person's decision apart, and the best passing candidate with its
    ratios to the baseline and the clauses it passes."""

    proposed: str  # "proposed: confirmed c5 (sweep)"
    decided: str  # "decided: accepted c5 by ana"
    best: int | None
    ratios: tuple[Ratio, ...]
    clauses: int  # how many the acceptance has (the best passes them all)
    passing: int
    failing: int
    waiting: int
    eligible: int  # feasible candidates other than the baseline, judged
    verdict: str  # what the evidence says now (the judgement's)
    summary: str  # "c5: 3.0x faster, 0.30x private SRAM, passes both clauses" or why none passes
    accepted: tuple[int, ...]  # candidates whose latest decision accepts them
    lacking: tuple[str, ...] = ()  # evidence kinds the waiting candidates lack

    @property
    def lines(self) -> list[str]:
        return [self.proposed, self.decided, ("best passing candidate " if self.best is not None else "") + self.summary]

    @property
    def counts(self) -> str:
        """"4 of 5 pass, 1 fails, 0 wait for evidence"."""
        return (f"{self.passing} of {self.eligible} pass, {self.failing} fail{'s' if self.failing == 1 else ''}, "
                f"{self.waiting} wait{'s' if self.waiting == 1 else ''} for evidence"
                + (f" ({', '.join(self.lacking)})" if self.waiting and self.lacking else ""))


def _passes(clauses: int) -> str:
    if clauses == 0:
        return "no acceptance criteria stated"
    return {1: "passes its clause", 2: "passes both clauses"}.get(clauses, f"passes all {clauses} clauses")


def _ratios(j: Judgement, candidate_id: int, objectives: Sequence[Mapping]) -> list[Ratio]:
    """The candidate's ratios to its reference on the metrics the objectives and the clauses
    name (objectives first; numerics left out), each kind apart."""
    named: list[tuple[str, str]] = [("analytical", o["metric"]) for o in objectives]
    for clause in j.criteria.clauses:
        for variable in sorted(clause.formula.used):
            side, kind, metric = NAMES[variable]
            named.append((kind, metric))
    named = [n for n in dict.fromkeys(named) if n[0] in RATIO_KINDS]
    kinds = {k for k, _ in named}
    out = []
    for kind, metric in named:
        value, base = j.value(candidate_id, kind, metric), j.value(j.reference_of(candidate_id), kind, metric)
        if math.isnan(value) or math.isnan(base) or base == 0:
            continue
        words = ratio_words(metric, value / base) + (f" ({RATIO_KINDS[kind]})" if len(kinds) > 1 else "")
        out.append(Ratio(kind, metric, base, value, value / base, words))
    return out


def decided(decisions: Sequence[Mapping], status: str | None) -> tuple[str, tuple[int, ...]]:
    """("decided: ...", the accepted candidates): the person's decision that stands (of an
    experiment's `decisions`, oldest first; the sweep's proposals among them are skipped)."""
    people = [d for d in decisions if d.get("kind", "decision") == "decision"]
    latest: dict[int, Mapping] = {}
    standing, refuted = None, None
    for d in people:
        cid = None if _missing(d.get("candidate_id")) else int(d["candidate_id"])
        if cid is not None:
            latest[cid] = d
        if d["verdict"] == "accepted":
            standing, refuted = d, None
        elif d["verdict"] == "refuted":
            standing, refuted = None, d
        elif d["verdict"] == "rejected" and standing is not None and cid == int(standing["candidate_id"]):
            standing = None
    accepted = tuple(sorted(c for c, d in latest.items() if d["verdict"] == "accepted"))
    if standing is not None:
        others = [c for c in accepted if c != int(standing["candidate_id"])]
        return (f"decided: accepted{_cand(standing)} by {standing['author']}"
                + (f" (also accepted: {', '.join(f'c{c}' for c in others)})" if others else ""), accepted)
    if refuted is not None:
        return f"decided: refuted by {refuted['author']}", accepted
    if people:
        last = people[-1]
        return (f"decided: nothing stands (hypothesis {status or 'testing'}; latest: {last['verdict']}{_cand(last)} "
                f"by {last['author']})", accepted)
    return "decided: no decision yet (people decide: dse decide)", accepted


def proposal_line(decisions: Sequence[Mapping]) -> str:
    """"proposed: confirmed c5 (sweep)": the sweep's latest proposal among an experiment's
    `decisions` (oldest first), apart from people's decisions."""
    proposals = [d for d in decisions if d.get("kind") == "proposal"]
    if not proposals:
        return "proposed: nothing yet (no sweep has judged the evidence)"
    return f"proposed: {proposals[-1]['verdict']}{_cand(proposals[-1])} (sweep)"


def headline(j: Judgement, exp: Mapping, decisions: Sequence[Mapping]) -> Headline:
    """The headline of an experiment from its judgement and its decision log (dicts, oldest
    first: people's decisions and the sweep's proposals, `kind` telling them apart)."""
    objectives = objectives_of(exp.get("spec_text"))
    proposals = [d for d in decisions if d.get("kind") == "proposal"]
    proposed = proposal_line(decisions)
    if proposals:
        last = proposals[-1]
        said = (last["verdict"], None if _missing(last.get("candidate_id")) else int(last["candidate_id"]))
        if j.clauses and said != (j.verdict, j.best):
            proposed += f"; the evidence now says {j.verdict}" + (f" c{j.best}" if j.best is not None else "")
    elif not j.clauses:
        proposed = "proposed: nothing (no acceptance criteria)"
    decision, accepted = decided(decisions, exp.get("status"))
    ratios: list[Ratio] = []
    if not_run_yet(exp.get("status"), len(j.ids)):
        summary = f"{NOT_RUN_YET}: an untested hypothesis (dse propose); `dse sweep` of its spec runs it"
    elif j.error:
        summary = f"nothing passes: {j.error}"
    elif not j.baseline_ok:
        summary = "nothing passes: the baseline is not feasible"
    elif j.best is not None:
        ratios = _ratios(j, j.best, objectives)
        summary = f"c{j.best}: " + ", ".join([*(r.words for r in ratios), _passes(j.clauses)])
        ref = j.reference_of(j.best)
        if ref is not None and ref != j.baseline_id:
            summary += f" (against c{ref}, the baseline's design at its workload point)"
    elif not j.eligible.any():
        summary = "nothing passes: no feasible candidate besides the baseline"
    else:
        waiting = int(j.waiting.sum())
        summary = (f"nothing passes yet: {waiting} of {j.eligible_count} wait for evidence "
                   f"({', '.join(j.lacking_kinds)})" if j.verdict == WAITING else
                   f"nothing passes: {int(j.failing.sum())} of {j.eligible_count} fail"
                   + (f", {waiting} wait for evidence" if waiting else ""))
    return Headline(proposed, decision, j.best, tuple(ratios), j.clauses, int(j.passing.sum()),
                    int(j.failing.sum()), int(j.waiting.sum()), j.eligible_count, j.verdict, summary, accepted,
                    tuple(j.lacking_kinds if j.waiting.any() else ()))


# ---- the sweep's proposal ------------------------------------------------------------------


def propose(store: Store, experiment_id: int, spec: Spec) -> Proposal | None:
    """The verdict the evidence suggests (`judge_experiment`'s), recorded as a proposal when
    it differs from the latest one; None when the spec states no acceptance criteria."""
    exp = store.experiment(experiment_id)
    if not exp["acceptance"]:
        return None
    obj = spec.model.objectives[0]
    j = judge_experiment(store, exp, {"metric": obj.metric, "direction": obj.direction})
    kinds = j.criteria.kinds
    crit = "; ".join(c["expr"] for c in _acceptance_of(exp))
    base_id = exp["baseline_candidate_id"]
    evidence: list[int] = []
    candidate = None
    if not j.baseline_ok:
        verdict, rationale = "refuted", "the baseline itself is not feasible"
    else:
        n, judged = j.eligible_count, j.judged_count
        lacking = n - judged
        verdict = j.verdict
        if verdict == "confirmed":
            candidate = j.best
            ref = j.reference_of(candidate)
            rationale = (f"{int(j.passing.sum())} of {n} feasible candidates meet: {crit}; best is candidate "
                         f"{candidate} with {obj.metric} {j.value(candidate, 'analytical', obj.metric):.6g} vs baseline "
                         f"{j.value(ref, 'analytical', obj.metric):.6g}"
                         + ("" if ref == int(base_id) else
                            f" (candidate {ref}: the baseline at its workload point)"))
            _, evidence = store.decision_evidence(experiment_id, candidate)
        elif verdict == WAITING:
            rationale = (f"none of {n} feasible candidates has yet the evidence that {crit} needs "
                         f"({', '.join(kinds)})")
        else:
            rationale = f"none of {judged} feasible candidates with the evidence meets: {crit}" + (
                f" ({lacking} more lack evidence: {', '.join(k for k in kinds if k != 'analytical')})" if lacking else "")
        if not evidence:  # the baseline's analytical run
            runs = [r["id"] for r in store.run_rows(int(base_id)) if r["stage"] == "analytical" and r["status"] == "ok"]
            evidence = [max(runs)] if runs else []
    proposal = Proposal(verdict, rationale, candidate, kinds)
    last = [d for d in store.decision_rows(experiment_id) if d["kind"] == "proposal"]
    # A rerun that reaches the same conclusion adds no second proposal.
    if not last or last[-1]["verdict"] != verdict or last[-1]["rationale"] != rationale:
        store.add_decision(experiment_id, verdict, rationale, AUTHOR, evidence, candidate, kind="proposal",
                           evidence_kinds=kinds)
    return proposal
