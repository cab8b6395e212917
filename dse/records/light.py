"""A SQLite store read with the standard library's sqlite3 alone: what a short read-only
command (`dse history`, `dse show` of an experiment, a candidate or a run) can answer
before SQLAlchemy, its ORM and pandas are imported (most of its start-up). It runs the
Store's own SQL (`sql_reads`), so it answers as the Store would; wherever opening a Store
would do or say something (a missing, damaged or read-only file, an older or newer schema
to upgrade or refuse, runs left "running" to reap, a URL), `open_light` gives None and the
command opens the Store as before.

It never writes, and opens no file that is not there.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from dse.records import sql_reads
from dse.records.blobs import EvidenceCheck, blob_path, check_evidence
from dse.records.revisions import head_revision
from dse.records.sqlite_file import QUICK_CHECK_MAX_BYTES, existing_store_problem, sqlite_evidence_dir


def connect(path: Path) -> sqlite3.Connection | None:
    """A connection to the SQLite store file at `path` for reads only, or None when the
    file is missing, empty, or is what the store's open would refuse (damage, no access)."""
    if not path.is_file() or path.stat().st_size == 0 or existing_store_problem(path.resolve()) is not None:
        return None
    try:
        # Not `mode=ro`: a read-only connection cannot remove the -wal and -shm files a WAL
        # store's open makes, and would leave them behind; this one only reads.
        return sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error:
        return None


class LightStore:
    """The reads of `dse history` and `dse show` on one read transaction of a SQLite store at
    the schema head (see `open_light`); the same values as the Store's methods of these
    names, except that a candidate or run the store lacks is None (the Store says what it has)."""

    def __init__(self, connection: sqlite3.Connection, path: Path):
        self._db = connection
        self.evidence_dir = sqlite_evidence_dir(path.resolve())  # where the Store would look

    def _run(self, sql: str, params: dict[str, Any]) -> tuple[list[str], list[tuple]]:
        cursor = self._db.execute(sql, params)
        return [c[0] for c in cursor.description], cursor.fetchall()

    def experiment_summaries(self) -> list[dict[str, Any]]:
        return sql_reads.experiment_summaries(self._run)

    def decision_rows(self, experiment_id: int | None = None) -> list[dict[str, Any]]:
        return sql_reads.decision_rows(self._run, experiment_id)

    def notes(self, experiment_id: int | None = None) -> list[dict[str, Any]]:
        return sql_reads.notes(self._run, experiment_id)

    def links(self, experiment_id: int | None = None) -> list[dict[str, Any]]:
        return sql_reads.links(self._run, experiment_id)

    # ---- one experiment (`dse show EXPERIMENT`), by id ----------------------------------

    def experiment_id(self, name_or_id: str | int) -> int | None:
        """The id of the experiment of this name or id, or None (the Store says what the store has)."""
        return sql_reads.experiment_id(self._run, name_or_id)

    def experiment(self, experiment_id: int) -> dict[str, Any]:
        return sql_reads.experiment(self._run, experiment_id)

    def candidate_rows(self, experiment_id: int, limit: int | None = None) -> list[dict[str, Any]]:
        columns, rows = sql_reads.candidates(self._run, experiment_id, "latest", True, limit)
        return [dict(zip(columns, row)) for row in rows]

    def latest_status_counts(self, experiment_id: int) -> list[tuple[str, int]]:
        return sql_reads.latest_status_counts(self._run, experiment_id)

    def reason_groups(self, experiment_id: int) -> list[tuple[str, str, int]]:
        return sql_reads.reason_groups(self._run, experiment_id)

    def artifact_rows(self, experiment_id: int | None = None, run: int | None = None,
                      candidate: int | None = None) -> list[dict[str, Any]]:
        return sql_reads.artifacts(self._run, experiment_id, run, candidate)

    def artifact_path(self, sha256: str) -> Path:
        """Where the Store keeps the evidence file of this content."""
        return blob_path(self.evidence_dir, sha256)

    def check_evidence(self, experiment_id: int | None = None, run: int | None = None,
                       candidate: int | None = None) -> EvidenceCheck:
        """`Store.check_evidence`: the files of these artifact rows, re-hashed."""
        return check_evidence(self.evidence_dir, self.artifact_rows(experiment_id, run, candidate))

    # ---- one candidate (`dse show c<ID>`), one run (`dse show r<ID>`) --------------------

    def candidate(self, candidate_id: int) -> dict[str, Any] | None:
        return sql_reads.candidate(self._run, candidate_id)

    def run_rows(self, candidate: int) -> list[dict[str, Any]]:
        return sql_reads.run_dicts(*sql_reads.runs(self._run, None, candidate))

    def total_metric_rows(self, candidate: int) -> list[dict[str, Any]]:
        return sql_reads.total_metrics(self._run, candidate)

    def run_row(self, run_id: int) -> dict[str, Any] | None:
        return sql_reads.run_row(self._run, run_id)

    def run_metric_rows(self, run_id: int) -> list[dict[str, Any]]:
        return sql_reads.run_metrics(self._run, run_id)

    # ---- what an acceptance judgement reads (`dse.runner.acceptance.judge_experiment`) ---

    def analytical_statuses(self, experiment_id: int | None = None,
                            candidate_ids=None) -> list[tuple[int, str | None]]:
        return sql_reads.analytical_statuses(self._run, experiment_id, candidate_ids)

    def figure_columns(self, kinds, names, experiment_id: int | None = None, candidate_ids=None) -> dict:
        return sql_reads.figure_columns(self._run, kinds, names, experiment_id, candidate_ids)

    def workload_points(self, experiment_id: int) -> list[tuple[int, str, dict]]:
        return sql_reads.workload_points(self._run, experiment_id)

    def __enter__(self) -> LightStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()


def open_light(db: str) -> LightStore | None:
    """The store `db` names for the light reads, or None when the Store must open it: not
    a plain SQLite path, not at this dse's schema head, damaged, locked, or with runs
    left "running" (a Store's open marks the dead ones crashed)."""
    if "://" in db or db == ":memory:" or "\x00" in db or not db.strip():
        return None
    path = Path(db).expanduser()
    try:
        connection = connect(path)
    except OSError:
        return None
    if connection is None:
        return None
    try:
        connection.execute("BEGIN")  # one snapshot for the check and every read after it
        if _usable(connection, path):
            return LightStore(connection, path)
    except sqlite3.Error:  # not a store, another program's tables, a locked file: the Store says
        pass
    connection.close()
    return None


def _usable(db: sqlite3.Connection, path: Path) -> bool:
    if os.path.getsize(path) <= QUICK_CHECK_MAX_BYTES and db.execute("PRAGMA quick_check(1)").fetchone()[0] != "ok":
        return False  # the Store's open reports the damage
    versions = [row[0] for row in db.execute("SELECT version_num FROM alembic_version")]
    if versions != [head_revision()]:
        return False
    return db.execute("SELECT count(*) FROM run WHERE status = 'running'").fetchone()[0] == 0
