"""The workbench's reads (`dse ui`: the candidate table, its counts, the live view's polls)
written once, as SQL text with named parameters (`:name`), run by every reader of the store's
contract (`dse.records.contract.PageReader`): the Store through SQLAlchemy's `text()`, the
light reader through its database's plain driver (`sql_reads.Run`).

`PageReads` gives a reader these reads as methods, each over the reader's one way of running
SQL (`_page_read`), so every reader has the same methods with the same signatures.

No SQLAlchemy here (the light reads import this module).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any, TypeVar

from dse.records import sql_reads
from dse.records.choices import RUN_STATUSES
from dse.records.sql_reads import Run

_T = TypeVar("_T")

# A run's final statuses but "crashed": what a sweep counts as done (`dse.runner.result.DONE`,
# which the records do not import; tests/test_store_contract.py checks that they agree).
DONE_STATUSES = ("failed", "infeasible", "ok", "pruned")

# The run whose figures name an experiment's metrics: the baseline's latest ok analytical
# run, else any ok analytical run (every ok run of a sweep records the same names).
BASELINE_METRIC_RUN = ("SELECT max(id) FROM run WHERE candidate_id = :candidate_id AND stage = 'analytical' "
                       "AND status = 'ok'")
ANY_METRIC_RUN = ("SELECT r.id FROM run r JOIN candidate c ON r.candidate_id = c.id WHERE c.experiment_id = "
                  ":experiment_id AND r.stage = 'analytical' AND r.status = 'ok' LIMIT 1")
# Each candidate of an experiment with its latest analytical run (candidate_run), by id.
LATEST_ANALYTICAL = ("SELECT c.id, c.origin, cr.run_id, cr.status FROM candidate c LEFT OUTER JOIN candidate_run cr "
                      "ON cr.candidate_id = c.id AND cr.role = 'analytical' WHERE c.experiment_id = :experiment_id "
                      "ORDER BY c.id")
# What the table shows of each candidate to match a text against: its changes and the
# reason of its latest analytical run.
SHOWN = ("SELECT c.id, CAST(c.diff AS TEXT), cr.reason FROM candidate c LEFT OUTER JOIN candidate_run cr "
         "ON cr.candidate_id = c.id AND cr.role = 'analytical' WHERE c.experiment_id = :experiment_id")
# The table's rows of some candidates: each with its latest analytical run.
ROWS = ("SELECT c.id, c.origin, CAST(c.diff AS TEXT) AS diff, r.id AS run_id, r.stage, r.status, r.reason "
        "FROM candidate c LEFT OUTER JOIN (SELECT candidate_id, max(id) AS run_id FROM run WHERE candidate_id IN "
        "({ids}) AND stage = 'analytical' GROUP BY candidate_id) latest ON latest.candidate_id = c.id "
        "LEFT OUTER JOIN run r ON r.id = latest.run_id WHERE c.id IN ({ids}){experiment}")
CANDIDATES_AFTER = ("SELECT id FROM candidate WHERE experiment_id = :experiment_id AND id > :after "
                    "ORDER BY id DESC LIMIT :limit")
LAST_CANDIDATE = "SELECT max(id) FROM candidate WHERE experiment_id = :experiment_id"
CANDIDATE_COUNT = "SELECT count(*) FROM candidate WHERE experiment_id = :experiment_id"
# The experiment's emulator runs by status (every run: a resumed sweep's too).
EMULATOR_RUNS = ("SELECT r.status, count(r.id) FROM run r JOIN candidate c ON r.candidate_id = c.id "
                 "WHERE c.experiment_id = :experiment_id AND r.stage = 'emulator' GROUP BY r.status")
# Candidates whose latest analytical run has ended.
ANALYSED = ("SELECT count(*) FROM candidate_run WHERE experiment_id = :experiment_id AND role = 'analytical' "
            f"AND status IN ({', '.join(repr(s) for s in DONE_STATUSES)})")
# Runs of a stage finished (not pruned: no work) since a moment, and the first start of one.
FINISHED_SINCE = ("SELECT count(r.id), min(r.started_at) FROM run r JOIN candidate c ON r.candidate_id = c.id "
                  "WHERE c.experiment_id = :experiment_id AND r.stage = :stage AND r.status != 'pruned' "
                  "AND r.status != 'running' AND r.started_at >= :since")
# How the store writes a timestamp (UTC, naive): a bound moment compares with it on SQLite as text.
_STORED_TIME = "%Y-%m-%d %H:%M:%S.%f"


def _one(run: Run, sql: str, params: dict[str, Any]) -> Any:
    rows = run(sql, params)[1]
    return rows[0][0] if rows else None


def _ids(values: Sequence[int]) -> str:
    """Candidate ids written into the SQL (ints only): a page's, or a text filter's thousands,
    beyond what a driver takes as parameters."""
    return ", ".join(str(int(v)) for v in values)


def metric_names(run: Run, experiment_id: int, baseline_id: int | None) -> list[str]:
    """The analytical total metrics the experiment records, read from one finished run (the
    baseline's, else any ok run)."""
    run_id = None if baseline_id is None else _one(run, BASELINE_METRIC_RUN, {"candidate_id": int(baseline_id)})
    if run_id is None:
        run_id = _one(run, ANY_METRIC_RUN, {"experiment_id": int(experiment_id)})
    if run_id is None:
        return []
    return sorted({m["name"] for m in sql_reads.run_metrics(run, run_id)
                   if m["kind"] == "analytical" and m["scope"] == "total"})


def analytical_runs(run: Run, experiment_id: int) -> list[tuple[int, str, int | None, str | None]]:
    """[(candidate id, origin, its latest analytical run's id and status, None and None without
    one)] of the experiment's candidates, by id."""
    return [tuple(r) for r in run(LATEST_ANALYTICAL, {"experiment_id": int(experiment_id)})[1]]


def changes_text(diff: dict) -> str:
    """A candidate's changes from the baseline, short: "banks.count=16, workers=2"."""
    return ", ".join(f"{k.removeprefix('config.').removeprefix('mapping.')}={json.dumps(v[1])}"
                     for k, v in diff.items()) or "(baseline)"


def matching(rows, text: str) -> list[int]:
    """The ids of `rows` (id, diff as its JSON text, reason) whose changes as the table shows
    them (`changes_text`) or reason contain `text`, case aside."""
    needle = text.lower()
    return [int(ident) for ident, diff, reason in rows
            if needle in changes_text(json.loads(diff) if diff else {}).lower() or needle in (reason or "").lower()]


def shown_matches(run: Run, experiment_id: int, text: str) -> list[int]:
    """The experiment's candidates whose changes or latest analytical reason, as the table
    shows them, contain `text` (`matching`)."""
    return matching(run(SHOWN, {"experiment_id": int(experiment_id)})[1], text)


def page_rows(run: Run, ids: Sequence[int], experiment_id: int | None = None) -> list[dict]:
    """The table's rows of these candidates, in the order of `ids` (of the experiment only,
    when given): id, origin, diff (a dict), run_id, stage, status and reason of the latest
    analytical run, and metrics {name: value}, that run's analytical totals."""
    ids = [int(i) for i in ids]
    if not ids:
        return []
    listed = _ids(sorted(set(ids)))
    params = {} if experiment_id is None else {"experiment_id": int(experiment_id)}
    columns, found = run(ROWS.format(ids=listed, experiment="" if experiment_id is None
                                     else " AND c.experiment_id = :experiment_id"), params)
    rows = {}
    for values in found:
        row = dict(zip(columns, values))
        row["diff"], row["metrics"] = json.loads(row["diff"]) if row["diff"] else {}, {}
        rows[row["id"]] = row
    # The latest analytical figures (latest_figures), if they are the latest analytical run's.
    figures = run(sql_reads.FIGURES.format(join="", which=f"lf.candidate_id IN ({listed})", kinds="'analytical'"),
                  {})[1]
    for candidate_id, _, layout, packed, run_id in figures:
        row = rows.get(candidate_id)
        if row is not None and row["run_id"] == run_id:
            names = json.loads(layout)[2]
            values = bytes(packed)
            row["metrics"] = dict(zip(names, struct.unpack(f"{sql_reads.FIGURES_BYTE_ORDER}{len(values) // 8}d",
                                                             values)))
    return [rows[i] for i in ids if i in rows]


def candidates_after(run: Run, experiment_id: int, after: int, limit: int = 20) -> list[dict]:
    """The newest candidates recorded with an id above `after` (at most `limit`, newest first),
    as `page_rows`."""
    ids = [r[0] for r in run(CANDIDATES_AFTER, {"experiment_id": int(experiment_id), "after": int(after),
                                                "limit": int(limit)})[1]]
    return page_rows(run, ids)


def last_candidate_id(run: Run, experiment_id: int) -> int | None:
    """The experiment's newest candidate id (where a live page starts polling from)."""
    return _one(run, LAST_CANDIDATE, {"experiment_id": int(experiment_id)})


def outcome_counts(run: Run, experiment_id: int) -> dict[str, int]:
    """The experiment's candidates by outcome, counted as `dse history` counts them
    (`sql_reads.outcome_counts`), every run status and "not run" (candidates without a run)."""
    counts = {status: n for (_, status), n in sql_reads.outcome_counts(run, int(experiment_id)).items()}
    counts["not run"] = int(_one(run, CANDIDATE_COUNT, {"experiment_id": int(experiment_id)})) - sum(counts.values())
    return {status: counts.get(status, 0) for status in (*RUN_STATUSES, "not run")}


def emulator_runs(run: Run, experiment_id: int) -> dict[str, int]:
    """The experiment's emulator runs by status (every run: a resumed sweep's too)."""
    return {status: int(n) for status, n in run(EMULATOR_RUNS, {"experiment_id": int(experiment_id)})[1]}


def analysed(run: Run, experiment_id: int) -> int:
    """Candidates whose latest analytical run has ended (not running: an emulator run in
    progress does not take a candidate's analytical evaluation back)."""
    return int(_one(run, ANALYSED, {"experiment_id": int(experiment_id)}) or 0)


def finished_since(run: Run, experiment_id: int, since: datetime, stage: str) -> tuple[int, datetime | None]:
    """Runs of `stage` finished since `since` (aware; not pruned: no work), and the first start
    of one of them (aware UTC): the rate an ETA extrapolates."""
    moment = since.astimezone(timezone.utc).replace(tzinfo=None).strftime(_STORED_TIME)
    rows = run(FINISHED_SINCE, {"experiment_id": int(experiment_id), "stage": stage, "since": moment})[1]
    count, first = rows[0]
    return int(count or 0), sql_reads.timestamp(first)


class PageReads:
    """The reads above as a reader's methods (`dse.records.contract.PageReader`); the class
    gives `_page_read(read)`: `read(run)` on its database."""

    def _page_read(self, read: Callable[[Run], _T]) -> _T:
        raise NotImplementedError

    def metric_names(self, experiment_id: int, baseline_id: int | None) -> list[str]:
        return self._page_read(lambda run: metric_names(run, experiment_id, baseline_id))

    def analytical_runs(self, experiment_id: int) -> list[tuple[int, str, int | None, str | None]]:
        return self._page_read(lambda run: analytical_runs(run, experiment_id))

    def shown_matches(self, experiment_id: int, text: str) -> list[int]:
        return self._page_read(lambda run: shown_matches(run, experiment_id, text))

    def page_rows(self, ids: Sequence[int], experiment_id: int | None = None) -> list[dict]:
        return self._page_read(lambda run: page_rows(run, ids, experiment_id))

    def candidates_after(self, experiment_id: int, after: int, limit: int = 20) -> list[dict]:
        return self._page_read(lambda run: candidates_after(run, experiment_id, after, limit))

    def last_candidate_id(self, experiment_id: int) -> int | None:
        return self._page_read(lambda run: last_candidate_id(run, experiment_id))

    def outcome_counts(self, experiment_id: int) -> dict[str, int]:
        return self._page_read(lambda run: outcome_counts(run, experiment_id))

    def emulator_runs(self, experiment_id: int) -> dict[str, int]:
        return self._page_read(lambda run: emulator_runs(run, experiment_id))

    def analysed(self, experiment_id: int) -> int:
        return self._page_read(lambda run: analysed(run, experiment_id))

    def finished_since(self, experiment_id: int, since: datetime, stage: str) -> tuple[int, datetime | None]:
        return self._page_read(lambda run: finished_since(run, experiment_id, since, stage))
