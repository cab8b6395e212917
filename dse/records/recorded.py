"""What a record store holds of one experiment, read in one read-only snapshot before
SQLAlchemy, its ORM and pandas (most of a short command's start-up) are imported: the light
read of a rerun's shortcut (`dse.runner.rerun`). A SQLite file is read with the standard
library's sqlite3 (`dse.records.light.connect`), a PostgreSQL URL with psycopg
(`dse.records.light_pg.connect`); each read is one of `dse.records.sql_reads`' texts,
run by the light readers' runners (`light.sqlite_runner`, `light_pg.runner`). It never
writes, and opens no file that is not there; anything it cannot read (a server it cannot
reach included) is the full sweep's to report (None).

The tables and columns it reads are `dse.records.schema`'s at the head revision;
`schema_current` says whether the store is at it. (`dse.records` loads its names lazily, so
importing this module brings in neither SQLAlchemy nor the schema.)
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import light_pg, sql_reads
from .light import connect, sqlite_runner
from .light_pg import connect as connect_pg
from .revisions import head_revision
from .sql_reads import Run

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
        return _read(sqlite_runner(connection), name, final_statuses)
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
            return _read(light_pg.runner(connection), name, final_statuses)
    except (psycopg.Error, ValueError):  # not a store, another schema: the full sweep says
        return None
    finally:
        connection.close()


def _read(run: Run, name: str, final_statuses: set[str]) -> RecordedExperiment | None:
    """What the shortcut reads, each read one of `sql_reads`' texts (those of the light readers
    where they read the same)."""
    row = sql_reads.rerun_experiment(run, name)
    if row is None:
        return None
    exp_id = row["id"]
    out = RecordedExperiment(
        id=exp_id, spec_hash=row["spec_hash"], workload_hash=row["workload_hash"], status=row["status"],
        acceptance=row["acceptance"], schema_current=sql_reads.schema_versions(run) == [head_revision()],
        runs_in_flight=sql_reads.runs_in_flight(run), locked=sql_reads.count(run, sql_reads.SWEEP_LOCKS, exp_id) > 0,
        has_frontend_dumps=sql_reads.count(run, sql_reads.GRAPH_DUMPS, exp_id) > 0, judged_run_id=row["judged_run_id"])
    for cand_hash, why, status in sql_reads.analytical_by_hash(run, exp_id):
        out.analytical[cand_hash], out.why[cand_hash] = status, why
    out.emulator_done = sql_reads.emulator_done(run, exp_id, final_statuses)
    out.proposal = sql_reads.latest_proposal(run, exp_id)
    out.newest_run_time, out.newest_run_id = sql_reads.newest_run(run, exp_id)
    out.reasons = sql_reads.reason_groups(run, exp_id)
    out.outcomes = sql_reads.latest_status_counts(run, exp_id)
    return out
