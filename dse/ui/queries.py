"""The candidate table of an experiment page: its candidates paged, sorted and filtered.

The Store's DataFrame reads fetch every candidate; a page of 50 out of 100,000 must not.
What orders and filters them is read once per state of the records (`rankable`: each
candidate's latest analytical run and figures), ranked in memory (`ranked`), and only the
page's rows come back (`page_of`). Every read goes through the store's contract
(`dse.records.contract.PageReader`: the Store, or a light reader), whose SQL is
`dse.records.page_reads`.

`ranked_ids` and `reference_page` are the tests' and benches' references: the same ranking
worked out apart, by the database and plain Python from candidate_run and latest_figures,
or from the runs and their packed metrics as before 0011.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import Connection, String, bindparam, cast, func, select

from ..records import reads
from ..records.contract import PageReader
from ..records.page_reads import changes_text, matching
from ..records.reuse import metric_run
from ..records.schema import RUN_STATUSES, Candidate, CandidateRun, FiguresLayout, LatestFigures, Run, RunMetrics
from ..records.sql_reads import FIGURES_BYTE_ORDER

__all__ = ["PAGE_SIZES", "BadQuery", "CandidatePage", "CandidateQuery", "Rankable", "candidate_page", "changes_text",
           "page_of", "rankable", "ranked", "ranked_ids", "reference_page"]

PAGE_SIZES = (25, 50, 100, 200)
# Sortable columns that are not metrics.
FIXED_SORTS = ("id", "status", "origin")


class BadQuery(ValueError):
    """A query parameter outside what the page allows: (parameter, value, allowed)."""

    def __init__(self, parameter: str, value: Any, allowed: str):
        super().__init__(f"query parameter {parameter}={value!r}: allowed {allowed}")
        self.parameter, self.value, self.allowed = parameter, value, allowed


@dataclass
class CandidateQuery:
    """What the candidate table of an experiment page asks for (from the URL)."""

    sort: str = "id"
    descending: bool = False
    status: str = ""  # "" for every status, "not run" for candidates without a run
    text: str = ""  # substring of the changes or the reason, as shown ("workers=4")
    metric: str = ""  # a range filter on this metric ...
    low: float | None = None  # ... value >= low
    high: float | None = None  # ... value <= high
    page: int = 1
    per_page: int = 50

    def checked(self, metric_names: list[str]) -> CandidateQuery:
        if self.sort not in FIXED_SORTS and self.sort not in metric_names:
            raise BadQuery("sort", self.sort, "one of " + ", ".join([*FIXED_SORTS, *metric_names]))
        if self.status and self.status not in (*RUN_STATUSES, "not run"):
            raise BadQuery("status", self.status, "one of " + ", ".join([*RUN_STATUSES, "not run"]))
        if self.metric and self.metric not in metric_names:
            raise BadQuery("metric", self.metric, "one of " + ", ".join(metric_names))
        if (self.low is not None or self.high is not None) and not self.metric:
            raise BadQuery("metric", "", "a metric name when min or max is given")
        if self.page < 1:
            raise BadQuery("page", self.page, "a whole number >= 1")
        if self.per_page not in PAGE_SIZES:
            raise BadQuery("per_page", self.per_page, "one of " + ", ".join(map(str, PAGE_SIZES)))
        return self


@dataclass
class CandidatePage:
    rows: list[dict]  # id, origin, status, stage, reason, run_id, changes, metrics {name: value}
    total: int  # candidates matching the filters
    query: CandidateQuery
    metric_names: list[str] = field(default_factory=list)

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.query.per_page))


def _latest_analytical(experiment_id: int, through_runs: bool):
    """Each candidate's latest analytical run (the runs whose metrics the table shows):
    candidate_id, run_id, status, reason. From candidate_run (one key probe a candidate
    into its narrow rows); `through_runs`: from the runs, grouped (the way before 0011)."""
    if not through_runs:
        return (select(CandidateRun.candidate_id, CandidateRun.run_id, CandidateRun.status, CandidateRun.reason)
                .where(CandidateRun.experiment_id == experiment_id, CandidateRun.role == "analytical")
                .subquery("latest"))
    newest = (
        select(Run.candidate_id, func.max(Run.id).label("run_id"))
        .join(Candidate, Run.candidate_id == Candidate.id)
        .where(Candidate.experiment_id == experiment_id, Run.stage == "analytical")
        .group_by(Run.candidate_id)
        .subquery()
    )
    return (select(newest.c.candidate_id, Run.id.label("run_id"), Run.status, Run.reason)
            .join(Run, Run.id == newest.c.run_id).subquery("latest"))


def candidate_page(reader: PageReader, experiment_id: int, query: CandidateQuery, names: list[str]) -> CandidatePage:
    """One page of an experiment's candidates with their latest analytical run's status and
    total metrics (`names`, the reader's `metric_names`), sorted and filtered as the UI does
    (`ranked` from `rankable`; the UI keeps the ranking per state of the records)."""
    return page_of(reader, ranked(rankable(reader, experiment_id, names), query, names, reader, experiment_id),
                   query, names)


def reference_page(store, experiment_id: int, query: CandidateQuery, names: list[str],
                   through_runs: bool = False) -> CandidatePage:
    """`candidate_page` ranked by the database (`ranked_ids`) on a Store's connection: the
    tests' and benches' reference. `through_runs`: the latest runs and figures read from
    the runs and metric rows, as before 0011 (`_page_through_runs`)."""
    with store.engine.connect() as connection:
        if through_runs:
            return _page_through_runs(store, connection, experiment_id, query, names)
        return page_of(store, ranked_ids(connection, experiment_id, query, names), query, names)


def _page_through_runs(reader: PageReader, connection: Connection, experiment_id: int, query: CandidateQuery,
                       names: list[str]) -> CandidatePage:
    """`candidate_page` as before 0011 (the tests' and benches' reference): each candidate's
    latest analytical run found by grouping its runs, its figures unpacked from that run's
    own packed metrics (not latest_figures nor candidate_run), ranked by
    `ranked`."""
    query = query.checked(names)
    latest = _latest_analytical(experiment_id, True)
    rows = connection.execute(
        select(Candidate.id, Candidate.origin, latest.c.run_id, latest.c.status)
        .outerjoin(latest, latest.c.candidate_id == Candidate.id)
        .where(Candidate.experiment_id == experiment_id).order_by(Candidate.id)).all()
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    run_id = np.array([np.nan if r[2] is None else r[2] for r in rows], dtype=np.float64)
    values = {name: np.full(len(ids), np.nan) for name in names}
    runs = [int(r[2]) for r in rows if r[2] is not None]
    if runs:
        long = reads.unpacked_frame(connection, select(Run.id.label("run_id"), RunMetrics.layout_id,
                                                        RunMetrics.figures)
                                     .select_from(RunMetrics).join(Run, RunMetrics.run_id == metric_run(Run))
                                     .where(Run.id.in_(runs)), kinds=["analytical"], scope="total", names=names)
        at = {int(r): i for i, r in enumerate(run_id) if r == r}
        for run, name, value in zip(long["run_id"].tolist(), long["name"].tolist(), long["value"].tolist()):
            values[name][at[run]] = value
    table = Rankable(ids, np.array([r[1] for r in rows], dtype=object), run_id,
                     np.array([r[3] for r in rows], dtype=object), values)
    return page_of(reader, ranked(table, query, names, reader, experiment_id), query, names)


def page_of(reader: PageReader, ranked: Sequence[int], query: CandidateQuery, names: list[str]) -> CandidatePage:
    """The page `query.page` of candidates in the order `ranked` (`ranked`'s ids): their rows,
    read through the reader (`PageReader.page_rows`)."""
    start = (query.page - 1) * query.per_page
    ids = [int(i) for i in ranked[start:start + query.per_page]]
    return CandidatePage(reader.page_rows(ids), len(ranked), query, names)


def ranked_ids(connection: Connection, experiment_id: int, query: CandidateQuery, names: list[str]) -> np.ndarray:
    """`ranked`'s ids sorted and filtered apart from it (the tests' and benches' reference):
    by the database from candidate_run (status, text, and the order by id, status or
    origin), the figures unpacked here from latest_figures (struct, not numpy), filtered
    and, where the sort is a figure, sorted in Python."""
    query = query.checked(names)
    stmt, order = _ranked(connection, experiment_id, query, names)
    rows = connection.execute(stmt.order_by(*order)).all()
    if query.sort not in names and not query.metric:
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    held = _analytical_figures(connection, experiment_id)

    def figure(candidate_id: int, run_id: int | None, name: str) -> float | None:
        # Only where its latest analytical run recorded it (an infeasible rerun shows none).
        found = held.get(candidate_id)
        value = found[1].get(name) if found is not None and found[0] == run_id else None
        return None if value is None or value != value else value  # NaN: no figure

    kept = []
    for candidate_id, run_id in rows:
        if query.metric:
            value = figure(candidate_id, run_id, query.metric)
            if value is None and (query.metric != query.sort or query.low is not None or query.high is not None):
                continue  # the filter's figure is needed (the sort's own: only for a bound)
            if (query.low is not None and not value >= query.low) or (query.high is not None and not value <= query.high):
                continue
        kept.append((candidate_id, figure(candidate_id, run_id, query.sort) if query.sort in names else None))
    if query.sort in names:  # without the figure last either way, then by id
        sign = -1.0 if query.descending else 1.0
        kept.sort(key=lambda r: (r[1] is None, 0.0 if r[1] is None else sign * r[1], r[0]))
    return np.array([r[0] for r in kept], dtype=np.int64)


def _analytical_figures(connection: Connection, experiment_id: int) -> dict[int, tuple[int, dict[str, float]]]:
    """candidate id -> (run id, {name: value}) of its latest analytical figures, from
    latest_figures unpacked one row at a time."""
    out = {}
    for candidate_id, run_id, layout, figures in connection.execute(
            select(LatestFigures.candidate_id, LatestFigures.run_id, FiguresLayout.layout, LatestFigures.figures)
            .join(FiguresLayout, FiguresLayout.id == LatestFigures.layout_id)
            .join(Candidate, Candidate.id == LatestFigures.candidate_id)
            .where(Candidate.experiment_id == experiment_id, LatestFigures.kind == "analytical")):
        names = json.loads(layout)[2]
        out[candidate_id] = (run_id, dict(zip(names, struct.unpack(f"{FIGURES_BYTE_ORDER}{len(names)}d",
                                                                   bytes(figures)))))
    return out


@dataclass
class Rankable:
    """What orders and filters an experiment's candidates (`ranked`), read once per state of
    its records: each candidate (by id) with its origin, the id and status of its latest
    analytical run (NaN and None without one) and that run's analytical totals (NaN where it
    recorded none). `figures`: the figures read (the reader's `figure_columns`, with runs),
    for the judgement to read them from too."""

    ids: np.ndarray
    origin: np.ndarray
    run_id: np.ndarray
    status: np.ndarray
    values: dict[str, np.ndarray]
    figures: dict = field(default_factory=dict)


def rankable(reader: PageReader, experiment_id: int, names: Sequence[str],
             wanted: dict[str, set[str]] | None = None) -> Rankable:
    """The experiment's `Rankable` of the analytical totals `names`; `wanted`: more figures
    ({kind: names}) to read along for the judgement (`acceptance.figures_wanted`)."""
    kinds = {"analytical": set(names)}
    for kind, more in (wanted or {}).items():
        kinds.setdefault(kind, set()).update(more)
    rows = reader.analytical_runs(int(experiment_id))
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    origin = np.array([r[1] for r in rows], dtype=object)
    run_id = np.array([np.nan if r[2] is None else r[2] for r in rows], dtype=np.float64)
    status = np.array([r[3] for r in rows], dtype=object)
    found = reader.figure_columns(sorted(kinds), sorted(set().union(*kinds.values())), int(experiment_id),
                                  with_runs=True)
    values = {name: np.full(len(ids), np.nan) for name in names}
    if "analytical" in found:
        held, columns, runs = found["analytical"]
        at = np.minimum(np.searchsorted(ids, held), max(len(ids) - 1, 0))
        mine = (ids[at] == held) if len(ids) else np.zeros(len(held), dtype=bool)
        # Figures of the latest analytical run only (an infeasible rerun shows none).
        mine &= run_id[at] == runs
        for name in names:
            values[name][at[mine]] = columns[name][mine]
    return Rankable(ids, origin, run_id, status, values, found)


def ranked(table: Rankable, query: CandidateQuery, names: list[str], reader: PageReader | None = None,
           experiment_id: int | None = None) -> np.ndarray:
    """The ids of the experiment's candidates that match `query`'s filters, in its order
    (its page aside), from a `Rankable`: no database pass, but for a text filter (the shown
    changes and reasons, the reader's `shown_matches`). The same filter and order as
    `ranked_ids`, numbers compared as the database compares them."""
    query = query.checked(names)
    keep = np.ones(len(table.ids), dtype=bool)
    if query.status == "not run":
        keep &= np.isnan(table.run_id)
    elif query.status:
        keep &= table.status == query.status
    if query.text:
        keep &= np.isin(table.ids, reader.shown_matches(int(experiment_id), query.text))
    if query.metric:
        ranged = table.values[query.metric]
        if query.metric != query.sort:  # the database joins it (the sort's own figure: outer-joined)
            keep &= ~np.isnan(ranged)
        if query.low is not None:
            keep &= ranged >= query.low
        if query.high is not None:
            keep &= ranged <= query.high
    ids = table.ids[keep]
    if query.sort == "id":
        return ids[::-1].copy() if query.descending else ids
    if query.sort in names:
        key = table.values[query.sort][keep]
        missing = np.isnan(key)
    else:  # status or origin: text (the database's byte order: these are ASCII words)
        texts = (table.status if query.sort == "status" else table.origin)[keep]
        missing = np.array([t is None for t in texts], dtype=bool)
        key = np.unique(np.where(missing, "", texts).astype(str), return_inverse=True)[1].astype(np.float64)
    if query.descending:
        key = -key
    # Candidates without the value last either way, then by id (np.lexsort: last key first).
    order = np.lexsort((ids, np.where(missing, 0.0, key), missing))
    return ids[order]


def _ranked(connection: Connection, experiment_id: int, query: CandidateQuery, names: list[str]):
    """(the statement selecting the ids of the candidates `query` filters by status and
    text, with their latest analytical run's id where a figure sorts or filters; its ORDER
    BY terms, by id where a figure sorts)."""
    stmt = select(Candidate.id).where(Candidate.experiment_id == experiment_id)
    # The runs are joined only when a filter or the sort needs them: the
    # first page by id of 100,000 candidates reads 50 of them.
    needs_run = bool(query.status or query.text or query.metric) or query.sort not in ("id", "origin")
    latest = _latest_analytical(experiment_id, False)
    if needs_run:
        stmt = stmt.outerjoin(latest, latest.c.candidate_id == Candidate.id)
    if query.status == "not run":
        stmt = stmt.where(latest.c.run_id.is_(None))
    elif query.status:
        # Through a function, so that no planner drives the join from a status index
        # (SQLite did: every matching run of the store times every candidate of the experiment).
        stmt = stmt.where(func.coalesce(latest.c.status, "") == query.status)
    if query.text:
        # The text as the table shows it ("workers=4"), not as stored: matched here, in Python.
        ids = _shown_matches(connection, experiment_id, query.text, latest)
        stmt = stmt.where(Candidate.id.in_(bindparam("shown", ids, expanding=True, literal_execute=True)))
    if query.sort in names or query.metric:
        # The figures: unpacked and compared in `ranked_ids` (the database cannot read a pack).
        return stmt.add_columns(latest.c.run_id), [Candidate.id] if query.sort in names else _order(query, latest)
    return stmt, _order(query, latest)


def _order(query: CandidateQuery, latest) -> list:
    """ORDER BY terms of a sort by id, status or origin: candidates without the value (not
    run) last either way, then by id."""
    key = {"id": Candidate.id, "status": latest.c.status, "origin": Candidate.origin}[query.sort]
    ordered = key.desc() if query.descending else key.asc()
    return [ordered, Candidate.id] if query.sort == "id" else [key.is_(None), ordered, Candidate.id]


def _shown_matches(connection: Connection, experiment_id: int, text: str, latest) -> list[int]:
    """The reference's `shown_matches` (`page_reads.matching` of rows read here)."""
    found = connection.execute(
        select(Candidate.id, cast(Candidate.diff, String), latest.c.reason)
        .outerjoin(latest, latest.c.candidate_id == Candidate.id)
        .where(Candidate.experiment_id == experiment_id))
    return matching(found, text)
