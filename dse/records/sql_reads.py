"""Reads of the record store written once, as SQL text with named parameters (`:name`),
run by both ways of reading a store: the Store's (SQLAlchemy's `text()`, on SQLite and
PostgreSQL; see reads.py) and the light read's (the standard library's sqlite3 on a SQLite
file, see light.py), which answers `dse history` before SQLAlchemy, its ORM and pandas
are imported. Each function takes `run(sql, params) -> (column names, rows as tuples)` and
turns the rows into what the Store returns, so both ways give the same values.

The SQL is what both databases read alike: no dialect's functions, JSON columns read as
their text (CAST AS TEXT), timestamps as the driver hands them (SQLite's text, stored as
UTC; PostgreSQL's aware datetimes), made aware datetimes here (`timestamp`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from dse.records.choices import RUN_STATUSES

Run = Callable[[str, dict[str, Any]], tuple[Sequence[str], list[tuple]]]

EXPERIMENTS = "SELECT id, name, hypothesis, status, workload_recipe, created_at FROM experiment ORDER BY id"
CANDIDATES_PER_EXPERIMENT = "SELECT experiment_id, count(*) FROM candidate GROUP BY experiment_id"
# A candidate's outcome: candidate_run's "outcome" row (kept by triggers on run, 0011).
OUTCOMES = ("SELECT experiment_id, status, count(*) FROM candidate_run WHERE role = 'outcome'{also} "
            "GROUP BY experiment_id, status")
EMULATED_PER_EXPERIMENT = (
    "SELECT c.experiment_id, count(DISTINCT r.candidate_id) FROM run r JOIN candidate c ON r.candidate_id = c.id "
    "WHERE r.stage = 'emulator' AND r.status = 'ok' GROUP BY c.experiment_id")
DECISIONS_PER_EXPERIMENT = "SELECT experiment_id, count(*) FROM decision WHERE kind = 'decision' GROUP BY experiment_id"
NOTES_PER_EXPERIMENT = "SELECT experiment_id, count(*) FROM note GROUP BY experiment_id"
# Each experiment's latest decision of a kind (a person's decision, or a sweep's proposal).
LATEST_DECISIONS = (
    "SELECT d.experiment_id, d.verdict, d.candidate_id FROM decision d JOIN "
    "(SELECT max(id) AS decision_id FROM decision WHERE kind = :kind GROUP BY experiment_id) latest "
    "ON d.id = latest.decision_id")
DECISIONS = (
    "SELECT d.id, d.experiment_id, e.name AS experiment, d.kind, d.verdict, d.rationale, d.author, d.created_at, "
    "CAST(d.evidence AS TEXT) AS evidence, d.candidate_id, c.experiment_id AS candidate_experiment_id, "
    "CAST(d.evidence_kinds AS TEXT) AS evidence_kinds, d.override, CAST(d.checks AS TEXT) AS checks "
    "FROM decision d JOIN experiment e ON d.experiment_id = e.id LEFT OUTER JOIN candidate c ON d.candidate_id = c.id"
    "{where} ORDER BY d.id")
NOTES = ("SELECT n.id, n.experiment_id, e.name AS experiment, n.kind, n.text, n.author, n.created_at "
         "FROM note n JOIN experiment e ON n.experiment_id = e.id{where} ORDER BY n.id")
LINKS = ("SELECT l.id, l.experiment_id, e.name AS experiment, l.relation, l.other_id, o.name AS other, l.reason, "
         "l.created_at FROM experiment_link l JOIN experiment e ON l.experiment_id = e.id "
         "JOIN experiment o ON l.other_id = o.id{where} ORDER BY l.id")


def timestamp(value: Any) -> datetime | None:
    """A stored timestamp as an aware UTC datetime: SQLite's text (UTC, as SQLAlchemy writes
    it and reads it back, with `fromisoformat`), or PostgreSQL's aware datetime as it is."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=timezone.utc)


def _dicts(run: Run, sql: str, params: dict[str, Any] | None = None, *times: str) -> list[dict[str, Any]]:
    columns, rows = run(sql, params or {})
    out = [dict(zip(columns, row)) for row in rows]
    for row in out:
        for column in times:
            row[column] = timestamp(row[column])
    return out


def _counts(run: Run, sql: str, params: dict[str, Any] | None = None) -> dict:
    """{key: count} of rows (key..., count): the key one column, or a tuple of several."""
    return {(row[0] if len(row) == 2 else tuple(row[:-1])): int(row[-1]) for row in run(sql, params or {})[1]}


def experiment_summaries(run: Run) -> list[dict[str, Any]]:
    """One dict per experiment, by id: its row's id, name, hypothesis, status,
    workload_recipe, created_at; n_candidates; n_<status> for every run status (candidates
    by outcome); n_emulated (candidates with an ok emulator run); n_decisions (people's);
    n_notes; proposed_verdict (the sweep's latest); latest_verdict and latest_candidate_id
    (the latest person's decision)."""
    rows = _dicts(run, EXPERIMENTS, None, "created_at")
    n_candidates = _counts(run, CANDIDATES_PER_EXPERIMENT)
    run_counts: dict[int, dict[str, int]] = {}
    for (experiment_id, status), n in outcome_counts(run).items():
        run_counts.setdefault(experiment_id, {})[status] = n
    emulated = _counts(run, EMULATED_PER_EXPERIMENT)
    n_decisions = _counts(run, DECISIONS_PER_EXPERIMENT)
    n_notes = _counts(run, NOTES_PER_EXPERIMENT)
    proposals = {e: verdict for e, verdict, _ in run(LATEST_DECISIONS, {"kind": "proposal"})[1]}
    verdicts = {e: (verdict, candidate) for e, verdict, candidate in run(LATEST_DECISIONS, {"kind": "decision"})[1]}
    for row in rows:
        row["n_candidates"] = n_candidates.get(row["id"], 0)
        counts = run_counts.get(row["id"], {})
        for status in RUN_STATUSES:
            row[f"n_{status}"] = counts.get(status, 0)
        row["n_emulated"] = emulated.get(row["id"], 0)
        row["n_decisions"] = n_decisions.get(row["id"], 0)
        row["n_notes"] = n_notes.get(row["id"], 0)
        row["proposed_verdict"] = proposals.get(row["id"])
        row["latest_verdict"], row["latest_candidate_id"] = verdicts.get(row["id"], (None, None))
    return rows


def outcome_counts(run: Run, experiment_id: int | None = None) -> dict[tuple[int, str], int]:
    """{(experiment id, status): candidates}: candidates (not runs) by outcome, of every
    experiment or of one. A candidate's outcome is the status of its latest run, except
    that a "pruned" run (not taken further) leaves the earlier outcome standing; a
    candidate without runs is not counted. Counted from candidate_run's index alone."""
    if experiment_id is None:
        return _counts(run, OUTCOMES.format(also=""))
    return _counts(run, OUTCOMES.format(also=" AND experiment_id = :experiment_id"), {"experiment_id": experiment_id})


def decision_rows(run: Run, experiment_id: int | None = None) -> list[dict[str, Any]]:
    """Decisions (people's) and proposals (a sweep's) in the order made, of every
    experiment or of one: JSON columns as their text, created_at an aware UTC datetime, a
    missing candidate None; `candidate_experiment_id` is the experiment of the candidate
    named, which may be another than the one decided."""
    return _dicts(run, *_of(DECISIONS, "d.experiment_id = :experiment_id", experiment_id), "created_at")


def notes(run: Run, experiment_id: int | None = None) -> list[dict[str, Any]]:
    """Notes added to experiments after the fact, oldest first: id, experiment_id,
    experiment, kind, text, author, created_at."""
    return _dicts(run, *_of(NOTES, "n.experiment_id = :experiment_id", experiment_id), "created_at")


def links(run: Run, experiment_id: int | None = None) -> list[dict[str, Any]]:
    """How experiments build on each other, oldest first: id, experiment_id, experiment,
    relation (follows / reopens), other_id, other, reason, created_at. With an experiment,
    the links from it and to it."""
    where = "l.experiment_id = :experiment_id OR l.other_id = :experiment_id"
    return _dicts(run, *_of(LINKS, where, experiment_id), "created_at")


def _of(sql: str, condition: str, experiment_id: int | None) -> tuple[str, dict[str, Any]]:
    """`sql` for every experiment, or with `condition` on one."""
    if experiment_id is None:
        return sql.format(where=""), {}
    return sql.format(where=f" WHERE {condition}"), {"experiment_id": int(experiment_id)}
