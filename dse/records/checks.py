"""Argument checks of the record store, done before any transaction: metrics (MetricIn one
by one, or a sweep's thousands of MetricRows column by column), acceptance criteria, ids,
final run statuses, and what a name or id that matches nothing raises."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from dse.records.not_found import RecordNotFound, as_id  # noqa: F401  (read from here too)
from dse.records.schema import METRIC_KINDS, METRIC_SCOPES, RUN_STATUSES, check_choice

FINAL_RUN_STATUSES = tuple(s for s in RUN_STATUSES if s != "running")


@dataclass(frozen=True)
class MetricIn:
    """One measured or estimated number, as handed to `Store.finish_run`."""

    kind: str
    name: str
    value: float
    unit: str
    scope: str = "total"
    scope_key: str = ""

    def __post_init__(self) -> None:
        check_choice("metric.kind", self.kind, METRIC_KINDS)
        check_choice("metric.scope", self.scope, METRIC_SCOPES)
        if not self.name:
            raise ValueError("metric.name: must not be empty")
        # A total has no key; any other scope must say which op/core/Ball/bank it is.
        if (self.scope == "total") != (self.scope_key == ""):
            raise ValueError(
                f"metric {self.kind}:{self.name}: scope_key {self.scope_key!r} does not suit "
                f"scope {self.scope!r} (empty for 'total', required otherwise)"
            )
        value = float(self.value)
        # SQLite would store NaN as NULL; a missing number is a run status, not a metric.
        if math.isnan(value):
            raise ValueError(f"metric {self.kind}:{self.name}: value is NaN")
        object.__setattr__(self, "value", value)


class MetricRow(NamedTuple):
    """A metric as a plain row, in the metric table's column order: what a stage that
    writes thousands of metrics hands over. The store checks a batch of rows at once, as
    MetricIn checks one (and names the run of a row that does not pass)."""

    kind: str
    name: str
    value: float
    unit: str
    scope: str = "total"
    scope_key: str = ""


METRIC_COLUMNS = MetricRow._fields  # ("kind", "name", "value", "unit", "scope", "scope_key")
_METRIC_KEYS = frozenset(METRIC_COLUMNS)
_METRIC_KIND_SET = frozenset(METRIC_KINDS)
_METRIC_SCOPE_SET = frozenset(METRIC_SCOPES)


class MetricColumns(Sequence):
    """A run's metrics as columns: `shape`, the tuples (kinds, names, units, scopes,
    scope_keys), and `values`, the floats in the same order: what a stage costing thousands
    of candidates hands over (its runs share a handful of shapes, each made and checked
    once), without a MetricRow a metric. Reads as the sequence of those MetricRows."""

    __slots__ = ("shape", "values")

    def __init__(self, shape: tuple, values: Sequence[float]):
        self.shape = shape
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self):
        kinds, names, units, scopes, keys = self.shape
        return map(MetricRow, kinds, names, self.values, units, scopes, keys)

    def __getitem__(self, index):
        rows = list(self)
        return rows[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __add__(self, other: Iterable) -> list:
        return [*self, *other]

    def append(self, row: Sequence) -> None:
        kind, name, value, unit, scope, key = row
        self.shape = tuple(column + (field,) for column, field in zip(self.shape, (kind, name, unit, scope, key)))
        self.values = (*self.values, value)

    def __repr__(self) -> str:
        return f"MetricColumns({list(self)!r})"


def metric_values(metrics: Iterable[MetricIn | Mapping[str, Any]], owner: str, *prefix: Any) -> list[tuple]:
    """Checked metric values as (*prefix, kind, name, value, unit, scope, scope_key) tuples.

    The checks are MetricIn's, done on the whole list at once for plain dicts (a sweep
    writes tens of thousands of rows); a list that does not pass goes through MetricIn
    for its error."""
    metrics = metrics if isinstance(metrics, list) else list(metrics)
    out: list[tuple] | None = None
    if all(type(m) is dict and m.keys() <= _METRIC_KEYS for m in metrics):
        try:
            out = [(*prefix, m["kind"], m["name"], float(m["value"]), m["unit"], m.get("scope", "total"),
                    m.get("scope_key", "")) for m in metrics]
        except (KeyError, TypeError, ValueError):
            out = None
        if out and not columns_pass(*list(zip(*out))[len(prefix):]):
            out = None
    if out is None:  # the slow path, with MetricIn's own error for what is wrong
        out = [(*prefix, m.kind, m.name, m.value, m.unit, m.scope, m.scope_key)
               for m in (m if isinstance(m, MetricIn) else MetricIn(*m) if isinstance(m, MetricRow) else MetricIn(**m)
                         for m in metrics)]
    n = len(prefix)
    idents = {r[n:n + 2] + r[n + 4:n + 6] for r in out}
    if len(idents) != len(out):
        seen: set[tuple] = set()
        duplicates = set()
        for r in out:
            ident = (r[n], r[n + 1], r[n + 4], r[n + 5])
            if ident in seen:
                duplicates.add(ident)
            seen.add(ident)
        raise ValueError(f"{owner}: metrics given twice: {sorted(duplicates)}")
    return out


def metric_rows(metrics: Iterable[MetricIn | Mapping[str, Any]], owner: str) -> list[dict[str, Any]]:
    """`metric_values` as dicts of the metric table's columns (but run_id)."""
    return [dict(zip(METRIC_COLUMNS, v)) for v in metric_values(metrics, owner)]


# A run's metrics as the writes take them (dse.records.packed): (run_id, shape, values),
# shape the columns (kinds, names, units, scopes, scope_keys) as tuples, values the floats
# in the same order. A sweep's runs share a shape: it is checked once.
Pack = tuple


def batch_metric_values(results: list[Mapping[str, Any]], run_ids: Sequence | None = None) -> list[Pack]:
    """`metric_values` of every result's metrics, as a pack per run with metrics: checked
    at once for a batch of MetricRows (each distinct shape once), else run by run
    (MetricIn's checks, the error naming the run). `run_ids`: each result's run id, when
    not its "run_id"."""
    ids = [r["run_id"] for r in results] if run_ids is None else run_ids
    packs = _checked_metric_packs(results, ids)
    if packs is not None:
        return packs
    rows: list[tuple] = []
    for r, run_id in zip(results, ids):
        owner = f"run {run_id}"
        try:
            rows += metric_values(r.get("metrics", ()), owner, run_id)
        except (TypeError, ValueError, OverflowError) as exc:  # (Overflow: an int no float holds)
            message = str(exc)
            raise type(exc)(message if message.startswith(owner) else f"{owner}: {message}") from None
    return packs_of(rows)


def packs_of(rows: Sequence[Sequence]) -> list[Pack]:
    """(run_id, kind, name, value, unit, scope, scope_key) rows (checked) as packs, a run's
    rows in their order."""
    by_run: dict[Any, list] = {}
    for row in rows:
        by_run.setdefault(row[0], []).append(row)
    packs = []
    for run_id, mine in by_run.items():
        _, kinds, names, values, units, scopes, keys = zip(*mine)
        packs.append((run_id, (kinds, names, units, scopes, keys), values))
    return packs


_SHAPES_PASSED: dict[tuple, bool] = {}  # shapes checked already (a sweep has a handful)
_SHAPES_KEPT = 256


def _checked_metric_packs(results: list[Mapping[str, Any]], ids: Sequence) -> list[Pack] | None:
    """MetricIn's checks over a whole batch of MetricRows (what a sweep's stages hand
    over, thousands of rows): each distinct shape once, the values at once; None if a
    metric is of another form or a check fails (then `metric_values` finds which, run by
    run)."""
    packs: list[Pack] = []
    # Runs of a batch share their shape objects: each looked up once by identity (hashing
    # a shape of sixty metrics, 2 us, was a tenth of a sweep's store writes, done thrice).
    # The packs keep the shapes alive, so an id is not reused during the call.
    passed_by_id: dict[int, bool] = {}
    for r, run_id in zip(results, ids):
        metrics = r.get("metrics") or ()
        if not metrics:
            continue
        if type(metrics) is MetricColumns:  # noqa: E721 - columns already: nothing to transpose
            shape, values = metrics.shape, metrics.values
        elif set(map(type, metrics)) != {MetricRow}:
            return None
        else:
            kinds, names, values, units, scopes, keys = zip(*metrics)
            shape = (kinds, names, units, scopes, keys)
        passed = passed_by_id.get(id(shape))
        if passed is None:
            passed = passed_by_id[id(shape)] = _shape_passed(shape)
        if not passed:
            return None
        packs.append((run_id, shape, values))
    if len({p[0] for p in packs}) != len(packs):  # a run given twice: found run by run
        return None
    # Every value a number (a float, or what packs as one exactly: an int, a numpy float),
    # none NaN: NaN anywhere shows in the sum, anything else fails it (run by run then, for
    # MetricIn's error). One pass, not a pass for the types and another for the sum.
    try:
        if packs and math.isnan(sum(map(sum, (p[2] for p in packs)))):
            return None
    except (TypeError, OverflowError):
        return None
    return packs


def _shape_passed(shape: tuple) -> bool:
    """`_shape_passes`, remembered across batches (a sweep has a handful of shapes)."""
    passed = _SHAPES_PASSED.get(shape)
    if passed is None:
        passed = _shape_passes(shape)
        if len(_SHAPES_PASSED) >= _SHAPES_KEPT:
            _SHAPES_PASSED.clear()
        _SHAPES_PASSED[shape] = passed
    return passed


def _shape_passes(shape: tuple) -> bool:
    """MetricIn's checks of a run's metric columns but the values, and no metric twice."""
    kinds, names, units, scopes, keys = shape
    return (set(kinds) <= _METRIC_KIND_SET and set(scopes) <= _METRIC_SCOPE_SET and all(names)
            and None not in set(units)
            and all(map(operator.eq, map("total".__eq__, scopes), map("".__eq__, keys)))
            and len(set(zip(kinds, names, scopes, keys))) == len(kinds))


def columns_pass(kinds: Sequence, names: Sequence, values: Sequence[float], units: Sequence, scopes: Sequence,
                 keys: Sequence) -> bool:
    """MetricIn's checks (but for duplicates) over metric columns at once, `values` floats
    already. False sends the caller to MetricIn itself, for the error."""
    return (set(kinds) <= _METRIC_KIND_SET and set(scopes) <= _METRIC_SCOPE_SET and all(names)
            and None not in set(units) and not math.isnan(sum(values))  # NaN anywhere shows in the sum
            and all(map(operator.eq, map("total".__eq__, scopes), map("".__eq__, keys))))


def checked_notes(notes: Mapping[Any, Any] | None) -> dict[int, str]:
    """Candidates' notes as written: {candidate id (an integer): note text}."""
    return {operator.index(c): str(t) for c, t in (notes or {}).items()}


def checked_results(results: Iterable[Mapping[str, Any]], run_ids: Sequence | None = None
                    ) -> tuple[list[Mapping[str, Any]], list[Pack]]:
    """finish_runs' input checked before any transaction: (results, their metrics' packs).
    `run_ids`: each result's run id, when not its "run_id"."""
    results = list(results)
    for r in results:
        check_choice("finish_run status", r["status"], FINAL_RUN_STATUSES)
    return results, batch_metric_values(results, run_ids)


def checked_acceptance(acceptance: Any) -> list[dict[str, str]]:
    """An experiment's acceptance criteria: a list of {"expr", "prose"} strings, copied."""
    shape = 'a list of {"expr": str, "prose": str}'
    if not isinstance(acceptance, list):
        raise ValueError(f"acceptance: expected {shape}, got {acceptance!r}")
    for item in acceptance:
        if (
            not isinstance(item, dict)
            or set(item) != {"expr", "prose"}
            or not all(isinstance(v, str) for v in item.values())
        ):
            raise ValueError(f"acceptance: expected {shape}, got item {item!r}")
    return [dict(item) for item in acceptance]
