"""What a record store holds of one experiment, read in one read-only snapshot before
SQLAlchemy, its ORM and pandas (most of a short command's start-up) are imported: the light
read of a rerun's shortcut (`dse.runner.rerun`). A SQLite file is read with the standard
library's sqlite3 (`dse.records.light.connect`), a PostgreSQL URL with psycopg
(`dse.records.light_pg.connect`); the same queries, written in SQL both speak. It never
writes, and opens no file that is not there; anything it cannot read (a server it cannot
reach included) is the full sweep's to report (None).

The tables and columns it reads are `dse.records.schema`'s at the head revision;
`schema_current` says whether the store is at it. (`dse.records` loads its names lazily, so
importing this module brings in neither SQLAlchemy nor the schema.)
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import sql_reads
from .light import connect
from .light_pg import connect as connect_pg
from .revisions import head_revision
from .sql_reads import latest_status_counts

@dataclass
class RecordedExperiment:
    id: int
    spec_hash: str
    workload_hash: str
    status: str
    acceptance: list
    schema_current: bool  # the store is at this dse's head revision (no upgrade due on open)
    runs_in_flight: int  # runs of any experiment left "running" (a Store's open reaps the dead ones)
    locked: bool  # a sweep lock row for the experiment (live or stale)
    has_frontend_dumps: bool
    # per candidate, by hash: the status of its latest analytical run (None: no such run)
    analytical: dict[str, str | None] = field(default_factory=dict)
    why: dict[str, str | None] = field(default_factory=dict)  # per candidate, by hash: why a hand-picked one is in
    # hashes of candidates with a finished emulator-stage run (neither emulated nor pruned again)
    emulator_done: set[str] = field(default_factory=set)
    reasons: list[tuple[str, str, int]] = field(default_factory=list)  # `sql_reads.reason_groups`
    # the experiment's latest proposal (verdict, rationale, created_at) and the newest
    # start or finish time of its candidates' runs, both as the store hands them out (SQLite:
    # its timestamp text; PostgreSQL: aware datetimes), so they compare
    proposal: tuple[str, str, Any] | None = None
    newest_run_time: Any = None
    # the newest run id of its candidates, and the newest its sweep's last judgement covered
    # (experiment.judged_run_id, 0013: the latest proposal is that judgement)
    newest_run_id: int | None = None
    judged_run_id: int | None = None
    # its candidates by outcome, as `dse show` counts them (`sql_reads.latest_status_counts`)
    outcomes: list[tuple[str, int]] = field(default_factory=list)


def read_experiment(store: str | Path, name: str, final_statuses: set[str]) -> RecordedExperiment | None:
    """The experiment `name` of the store `store` (a SQLite file's path, or a PostgreSQL
    URL as a str), or None when the store, the experiment or a table cannot be read."""
    if isinstance(store, str) and "://" in store:
        return _read_postgresql(store, name, final_statuses)
    connection = connect(Path(store))
    if connection is None:
        return None  # what the store's open would refuse (or create) is the full sweep's to say
    try:
        connection.execute("BEGIN")  # one snapshot for every read below
        return _read(connection, name, final_statuses)
    except (sqlite3.Error, ValueError):  # not a store, another schema, a locked file: the full sweep says
        return None
    finally:
        connection.close()


def _read_postgresql(url: str, name: str, final_statuses: set[str]) -> RecordedExperiment | None:
    import psycopg

    try:
        connection = connect_pg(url)
    except (psycopg.Error, ValueError, OSError):  # an unreachable server, a bad name: the full sweep says
        return None
    if connection is None:
        return None
    try:
        with connection.transaction():  # one snapshot (REPEATABLE READ) for every read below
            return _read(_QmarkConnection(connection), name, final_statuses)
    except (psycopg.Error, ValueError):  # not a store, another schema: the full sweep says
        return None
    finally:
        connection.close()


class _QmarkConnection:
    """A psycopg connection taking the sqlite3 queries' `?` placeholders (no query here
    holds a `?` or `%` of its own)."""

    def __init__(self, connection):
        self._connection = connection

    def execute(self, sql: str, params: tuple = ()):
        return self._connection.execute(sql.replace("?", "%s"), params or None)


def _read(db: sqlite3.Connection | _QmarkConnection, name: str, final_statuses: set[str]) -> RecordedExperiment | None:
    versions = [row[0] for row in db.execute("SELECT version_num FROM alembic_version")]
    row = db.execute("SELECT id, spec_hash, workload_hash, status, acceptance, judged_run_id FROM experiment "
                     "WHERE name = ?", (name,)).fetchone()
    if row is None:
        return None
    exp_id = row[0]
    out = RecordedExperiment(
        id=exp_id, spec_hash=row[1], workload_hash=row[2], status=row[3], acceptance=_json(row[4]),
        schema_current=versions == [head_revision()],
        runs_in_flight=db.execute("SELECT count(*) FROM run WHERE status = 'running'").fetchone()[0],
        locked=db.execute("SELECT count(*) FROM sweep_lock WHERE experiment_id = ?", (exp_id,)).fetchone()[0] > 0,
        has_frontend_dumps=db.execute("SELECT count(*) FROM artifact WHERE experiment_id = ? AND role = 'graph_dump'",
                                      (exp_id,)).fetchone()[0] > 0,
        judged_run_id=row[5])
    # Each candidate's latest analytical run (as `Store.candidates(..., stage="analytical")`).
    for cand_hash, why, status in db.execute(
            "SELECT c.hash, c.why, r.status FROM candidate c LEFT JOIN "
            "(SELECT candidate_id, max(id) AS run_id FROM run WHERE stage = 'analytical' GROUP BY candidate_id) l "
            "ON l.candidate_id = c.id LEFT JOIN run r ON r.id = l.run_id WHERE c.experiment_id = ?", (exp_id,)):
        out.analytical[cand_hash], out.why[cand_hash] = status, why
    marks = ",".join("?" * len(final_statuses))
    out.emulator_done = {h for (h,) in db.execute(
        f"SELECT DISTINCT c.hash FROM candidate c JOIN run r ON r.candidate_id = c.id WHERE c.experiment_id = ? "
        f"AND r.stage = 'emulator' AND r.status IN ({marks})", (exp_id, *sorted(final_statuses)))}
    proposal = db.execute("SELECT verdict, rationale, created_at FROM decision WHERE experiment_id = ? "
                          "AND kind = 'proposal' ORDER BY id DESC LIMIT 1", (exp_id,)).fetchone()
    out.proposal = tuple(proposal) if proposal is not None else None
    # The newest start or finish: the larger of the newest start and the newest finish (SQLite's
    # two-argument max is PostgreSQL's greatest; this is both's).
    started, finished, out.newest_run_id = db.execute(
        "SELECT max(r.started_at), max(coalesce(r.finished_at, r.started_at)), max(r.id) FROM run r "
        "JOIN candidate c ON c.id = r.candidate_id WHERE c.experiment_id = ?", (exp_id,)).fetchone()
    out.newest_run_time = None if started is None else max(started, finished)
    out.reasons = sql_reads.reason_groups(lambda sql, params: _named(db, sql, params), exp_id)
    out.outcomes = latest_status_counts(lambda sql, params: _named(db, sql, params), exp_id)
    return out


def _named(db, sql: str, params: dict[str, Any]) -> tuple[list[str], list[tuple]]:
    """`sql_reads`' query (`:name` placeholders) run on this module's `?` connection."""
    names = re.findall(r":(\w+)", sql)
    cursor = db.execute(re.sub(r":\w+", "?", sql), tuple(params[n] for n in names))
    return [c[0] for c in cursor.description], cursor.fetchall()


def _json(value) -> list:
    """A JSON column's value: SQLite hands back its text, psycopg the parsed value."""
    if not value:
        return []
    return json.loads(value) if isinstance(value, str) else value
