"""The report's reads (`dse report` and the workbench's figures and JSON views: the candidate
table with its figures, where the cycles and the energy go op by op, area and energy by
component) written once, as SQL text with named parameters (`:name`), run by every reader of
`dse.records.contract.ReportReader` through its one way of running SQL (`sql_reads.Run`).

Each read is a whole experiment's, or a few candidates' of it, as pandas frames: the Store
implements them (`ReportReads`); the light readers do not, as the commands they answer
(`dse history`, `dse show`, a rerun's shortcut) show none of these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dse.ppa.names import COMPONENTS
from dse.records import packed, sql_reads
from dse.records.reuse import METRIC_RUN_SQL
from dse.records.sql_reads import Run

_T = TypeVar("_T")

# Each candidate of an experiment, by id, with its latest analytical run (candidate_run: one key
# probe a candidate; grouping the runs was a fifth of the read at 100,000 candidates).
CANDIDATE_TABLE = (
    "SELECT c.id AS candidate_id, c.origin, CAST(c.diff AS TEXT) AS diff, cr.run_id AS metric_run_id, cr.status, "
    "cr.reason FROM candidate c LEFT OUTER JOIN candidate_run cr ON cr.candidate_id = c.id "
    "AND cr.role = 'analytical' WHERE c.experiment_id = :experiment_id ORDER BY c.id")
BASELINE = "SELECT baseline_candidate_id FROM experiment WHERE id = :experiment_id"
# The packed figures of every run of an experiment's candidates (of some: `{which}`), by run; a
# linking run's are the run's it reuses (dse.records.reuse).
RUN_FIGURES = (
    "SELECT r.candidate_id, r.id AS run_id, p.layout_id, p.figures FROM run_metrics p "
    f"JOIN run r ON p.run_id = {METRIC_RUN_SQL} JOIN candidate c ON r.candidate_id = c.id "
    "WHERE c.experiment_id = :experiment_id{which} ORDER BY r.id")
# The newest run of an experiment's candidates (whose provenance a report shows).
LAST_RUN = ("SELECT max(r.id) FROM run r JOIN candidate c ON r.candidate_id = c.id "
            "WHERE c.experiment_id = :experiment_id")

# What the by-component figures show, and their units; the totals read beside them.
COMPONENT_METRICS = {"area_mm2": "mm2", "energy_uj": "uJ"}
COMPONENT_TOTALS = ("area_mm2", "energy_uj", "power_mw")


def _frame(run: Run, sql: str, params: dict[str, Any]):
    import pandas as pd

    columns, rows = run(sql, params)
    return pd.DataFrame.from_records(rows, columns=list(columns))


def _run_figures(run: Run, experiment_id: int, candidate_ids: Sequence[int] | None, **wanted: Any):
    """`RUN_FIGURES` of these candidates (None: all) in long form (`packed.explode`): columns
    candidate_id, run_id, kind, name, value, unit, scope, scope_key."""
    which = "" if candidate_ids is None else f" AND r.candidate_id IN ({', '.join(str(int(i)) for i in candidate_ids)})"
    frame = _frame(run, RUN_FIGURES.format(which=which), {"experiment_id": int(experiment_id)})
    return packed.explode(run, frame, **wanted)


def last_run_id(run: Run, experiment_id: int) -> int | None:
    rows = run(LAST_RUN, {"experiment_id": int(experiment_id)})[1]
    return None if not rows or rows[0][0] is None else int(rows[0][0])


def candidate_metrics(run: Run, experiment_id: int, names: Sequence[str], found: dict | None = None):
    """One row per candidate: id, origin, is_baseline, the status, reason and id of its latest
    analytical run, its diff (JSON text) and the named analytical total metrics of that run.
    `found`: `sql_reads.figure_columns(..., with_runs=True)` of the experiment, already read
    (of at least the analytical kind and these names).

    What `Store.metric_table` gives for these columns, read narrowly (three columns per
    metric, only these names): at 100,000 candidates the difference is 20 s of a report."""
    import numpy as np

    names = list(names)
    table = _frame(run, CANDIDATE_TABLE, {"experiment_id": int(experiment_id)})
    baseline = run(BASELINE, {"experiment_id": int(experiment_id)})[1]
    table.insert(2, "is_baseline", table["candidate_id"] == (baseline[0][0] if baseline else None))
    # The candidates' latest analytical figures (latest_figures: one packed row a candidate,
    # unpacked a layout at a time), kept where they are those of the latest analytical run.
    if found is None:
        found = sql_reads.figure_columns(run, ["analytical"], names, int(experiment_id), with_runs=True)
    ids, columns, runs = found.get("analytical", (np.zeros(0, np.int64), {}, np.zeros(0, np.int64)))
    order = table["candidate_id"].to_numpy(dtype=np.int64)
    at = np.searchsorted(order, ids)  # both by candidate id ascending
    at_ok = at < len(order)
    at_ok[at_ok] &= order[at[at_ok]] == ids[at_ok]
    run_of = table["metric_run_id"].to_numpy(dtype=np.float64)
    same_run = at_ok.copy()
    same_run[at_ok] &= run_of[at[at_ok]] == runs[at_ok]
    for name in names:
        column = np.full(len(table), np.nan)
        if name in columns:
            column[at[same_run]] = columns[name][same_run]
        table[name] = column
    return table


def op_metric_table(run: Run, experiment_id: int, candidate_ids: Sequence[int] | None, name: str):
    """An analytical per-op metric (scope "op": "cycles", "energy_uj") of each candidate's
    latest analytical run that recorded it: rows candidate id, columns op name in graph order."""
    import pandas as pd

    if candidate_ids is not None and not len(candidate_ids):
        return pd.DataFrame(dtype=float)
    ops = _run_figures(run, experiment_id, candidate_ids, kinds=["analytical"], scope="op", names=[name])
    ops = ops[["candidate_id", "run_id", "scope_key", "value"]]
    if ops.empty:
        return pd.DataFrame(dtype=float)
    ops = ops[ops["run_id"] == ops.groupby("candidate_id")["run_id"].transform("max")]
    op_order = list(dict.fromkeys(ops["scope_key"]))
    table = ops.pivot_table(index="candidate_id", columns="scope_key", values="value", aggfunc="last")
    return table.reindex(columns=op_order).astype(float)


@dataclass
class ComponentFigures:
    """Area and energy by component of some candidates, one evidence kind, each candidate's
    figures from one run (its latest of that kind with by-component figures)."""

    kind: str
    parts: Any  # a DataFrame: candidate_id, run_id, component (COMPONENTS order), area_mm2, energy_uj
    totals: Any  # a DataFrame, index candidate_id: run_id, area_mm2, energy_uj, power_mw (that run's totals)

    @property
    def candidates(self) -> list[int]:
        return list(dict.fromkeys(int(i) for i in self.parts["candidate_id"]))

    def of(self, candidate_id: int):
        """One candidate's rows: component, area_mm2, energy_uj (COMPONENTS order)."""
        return self.parts[self.parts["candidate_id"] == candidate_id].reset_index(drop=True)

    def wide(self, metric: str):
        """Rows candidate id (as asked), columns component (COMPONENTS order): `metric`,
        0 where a candidate has no such component."""
        table = self.parts.pivot_table(index="candidate_id", columns="component", values=metric, aggfunc="last",
                                       sort=False)
        order = sorted(dict.fromkeys(self.parts["component"]), key=component_order)
        return table.reindex(index=self.candidates, columns=order).fillna(0.0).astype(float)


def component_order(name: str) -> tuple[int, str]:
    """Where a component sorts: `COMPONENTS` order, any other after them by name."""
    return (COMPONENTS.index(name), "") if name in COMPONENTS else (len(COMPONENTS), name)


def component_figures(run: Run, experiment_id: int, candidate_ids: Sequence[int], kind: str) -> ComponentFigures:
    """Area and energy by component (scope "component") of these candidates, evidence kind
    `kind`: each candidate's latest run of that kind with such figures, and that run's
    recorded totals (`COMPONENT_TOTALS`). Candidates in the order given (those without
    such figures left out), components in `COMPONENTS` order."""
    import pandas as pd

    ids = [int(i) for i in candidate_ids]
    names = list(COMPONENT_METRICS)
    empty = ComponentFigures(kind, pd.DataFrame(columns=["candidate_id", "run_id", "component", *names]),
                             pd.DataFrame(columns=["run_id", *COMPONENT_TOTALS],
                                          index=pd.Index([], name="candidate_id")))
    if not ids:
        return empty
    rows = _run_figures(run, experiment_id, ids, kinds=[kind], scopes=("component", "total"),
                        names=sorted({*names, *COMPONENT_TOTALS}))
    rows = rows[["candidate_id", "run_id", "scope", "scope_key", "name", "value"]]
    parts = rows[rows["scope"] == "component"]
    if parts.empty:
        return empty
    latest = parts.groupby("candidate_id")["run_id"].max()
    rows = rows[rows["run_id"] == rows["candidate_id"].map(latest)]
    parts = rows[rows["scope"] == "component"].astype({"value": float})
    wide = parts.pivot_table(index=["candidate_id", "run_id", "scope_key"], columns="name", values="value",
                             aggfunc="last").reindex(columns=names).reset_index()
    wide = wide.rename(columns={"scope_key": "component"})
    wide["order"] = wide["candidate_id"].map({c: i for i, c in enumerate(ids)})
    wide["rank"] = wide["component"].map(component_order)
    wide = wide.sort_values(["order", "rank"]).drop(columns=["order", "rank"]).reset_index(drop=True)
    wide.columns.name = None
    # That run's totals (NaN where it recorded none).
    totals = rows[rows["scope"] == "total"].astype({"value": float}).pivot_table(
        index="candidate_id", columns="name", values="value", aggfunc="last")
    present = [i for i in ids if i in latest.index]
    totals = totals.reindex(index=present, columns=list(COMPONENT_TOTALS))
    totals.insert(0, "run_id", latest.reindex(present).astype(int))
    totals.columns.name = None
    totals.index.name = "candidate_id"
    return ComponentFigures(kind, wide.astype({"candidate_id": int, "run_id": int}), totals)


class ReportReads:
    """The report's reads as methods (`dse.records.contract.ReportReader`), each over the
    reader's one way of running SQL (`_page_read`: `read(run)` in one read of its database)."""

    def _page_read(self, read: Callable[[Run], _T]) -> _T:
        raise NotImplementedError

    def candidate_metrics(self, experiment_id: int, names: Sequence[str], found: dict | None = None) -> Any:
        return self._page_read(lambda run: candidate_metrics(run, experiment_id, names, found))

    def op_metric_table(self, experiment_id: int, candidate_ids: Sequence[int] | None, name: str) -> Any:
        return self._page_read(lambda run: op_metric_table(run, experiment_id, candidate_ids, name))

    def component_figures(self, experiment_id: int, candidate_ids: Sequence[int], kind: str) -> ComponentFigures:
        return self._page_read(lambda run: component_figures(run, experiment_id, candidate_ids, kind))

    def last_run_id(self, experiment_id: int) -> int | None:
        return self._page_read(lambda run: last_run_id(run, experiment_id))
