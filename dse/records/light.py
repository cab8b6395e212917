"""A store read with its database's plain driver alone (the standard library's sqlite3 for
a SQLite file, psycopg for PostgreSQL): what a short read-only command (`dse history`,
`dse show` of an experiment, a candidate or a run) can answer before SQLAlchemy, its ORM
and pandas are imported (most of its start-up). It runs the Store's own SQL (`sql_reads`)
and keeps the store's contract (`dse.records.contract.RecordReader`), so it answers as the
Store would, its errors included; wherever opening a Store would do or say something (a
missing, damaged or read-only file, an older or newer schema to upgrade or refuse, runs
left "running" to reap, a URL it does not read as the Store does, a server it cannot
reach), `open_light` gives None and the command opens the Store as before.

It never writes, and opens no file that is not there.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, Callable, TypeVar

from dse.records import light_pg, sql_reads
from dse.records.blobs import EvidenceCheck, blob_path, check_evidence
from dse.records.not_found import RecordNotFound, as_id, not_found
from dse.records.page_reads import PageReads
from dse.records.revisions import head_revision
from dse.records.sql_reads import Run
from dse.records.sqlite_file import QUICK_CHECK_MAX_BYTES, existing_store_problem, sqlite_evidence_dir

_T = TypeVar("_T")


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


class LightStore(PageReads):
    """A `RecordReader` and `PageReader` (`dse.records.contract`) on one read-only snapshot of
    a store at the schema head (see `open_light`): the Store's own SQL, run by the database's
    plain driver (`run`), so it answers what the Store answers, its errors (`RecordNotFound`)
    included."""

    def __init__(self, run: Run, where: str, evidence_dir: Path | None, close: Callable[[], None]):
        self._run = run
        self.url = where  # the store as the Store shows it (its errors name it)
        self.evidence_dir = evidence_dir  # where the Store would look
        self._close = close

    def _missing(self, what: str, value: Any, experiment_id: int | None = None) -> RecordNotFound:
        return not_found(self._run, self.url, what, value, experiment_id)

    def _experiment_or_all(self, experiment: str | int | None) -> int | None:
        return None if experiment is None else self.experiment_id(experiment)

    def experiment_summaries(self) -> list[dict[str, Any]]:
        return sql_reads.experiment_summaries(self._run)

    def decision_rows(self, experiment: str | int | None = None) -> list[dict[str, Any]]:
        return sql_reads.decision_rows(self._run, self._experiment_or_all(experiment))

    def notes(self, experiment: str | int | None = None) -> list[dict[str, Any]]:
        return sql_reads.notes(self._run, self._experiment_or_all(experiment))

    def links(self, experiment: str | int | None = None) -> list[dict[str, Any]]:
        return sql_reads.links(self._run, self._experiment_or_all(experiment))

    # ---- one experiment ------------------------------------------------------------------

    def experiment_id(self, name_or_id: str | int) -> int:
        """The id of the experiment of this name or id."""
        found = sql_reads.experiment_id(self._run, name_or_id)
        if found is None:
            raise self._missing("experiment", name_or_id)
        return found

    def experiment(self, name_or_id: str | int) -> dict[str, Any]:
        return sql_reads.experiment(self._run, self.experiment_id(name_or_id))

    def candidate_rows(self, experiment: str | int, limit: int | None = None) -> list[dict[str, Any]]:
        columns, rows = sql_reads.candidates(self._run, self.experiment_id(experiment), "latest", True, limit)
        return [dict(zip(columns, row)) for row in rows]

    def latest_status_counts(self, experiment: str | int) -> list[tuple[str, int]]:
        return sql_reads.latest_status_counts(self._run, self.experiment_id(experiment))

    def reason_groups(self, experiment: str | int) -> list[tuple[str, str, int]]:
        return sql_reads.reason_groups(self._run, self.experiment_id(experiment))

    def artifact_rows(self, experiment: str | int | None = None, run: int | None = None,
                      candidate: int | None = None) -> list[dict[str, Any]]:
        return sql_reads.artifacts(self._run, self._experiment_or_all(experiment), run, candidate)

    def artifact_path(self, sha256: str) -> Path:
        """Where the Store keeps the evidence file of this content."""
        if self.evidence_dir is None:
            raise RuntimeError(f"{self.url} has no evidence folder (pass evidence_dir=)")
        return blob_path(self.evidence_dir, sha256)

    def check_evidence(self, experiment: str | int | None = None, run: int | None = None,
                       candidate: int | None = None) -> EvidenceCheck:
        """`Store.check_evidence`: the files of these artifact rows, re-hashed."""
        return check_evidence(self.evidence_dir, self.artifact_rows(experiment, run, candidate))

    # ---- one candidate, one run ------------------------------------------------------------

    def candidate(self, candidate_id: int) -> dict[str, Any]:
        found = sql_reads.candidate(self._run, as_id(candidate_id))
        if found is None:
            raise self._missing("candidate", candidate_id)
        return found

    def run_rows(self, candidate: int) -> list[dict[str, Any]]:
        return sql_reads.run_dicts(*sql_reads.runs(self._run, None, candidate))

    def reused_run_rows(self, experiment_id: int) -> list[dict[str, Any]]:
        return sql_reads.reused_runs(self._run, int(experiment_id))

    def total_metric_rows(self, candidate: int) -> list[dict[str, Any]]:
        return sql_reads.total_metrics(self._run, candidate)

    def run_row(self, run_id: int) -> dict[str, Any]:
        found = sql_reads.run_row(self._run, as_id(run_id))
        if found is None:
            raise self._missing("run", run_id)
        return found

    def run_metric_rows(self, run_id: int) -> list[dict[str, Any]]:
        return sql_reads.run_metrics(self._run, run_id)

    # ---- what an acceptance judgement reads (`dse.runner.acceptance.judge_experiment`) ---

    def analytical_statuses(self, experiment_id: int | None = None,
                            candidate_ids=None) -> list[tuple[int, str | None]]:
        return sql_reads.analytical_statuses(self._run, experiment_id, candidate_ids)

    def figure_columns(self, kinds, names, experiment_id: int | None = None, candidate_ids=None,
                       with_runs: bool = False) -> dict:
        return sql_reads.figure_columns(self._run, kinds, names, experiment_id, candidate_ids, with_runs)

    # ---- calibrations ----------------------------------------------------------------------

    def calibrations(self, chip: str | None = None, sources=None, ids=None) -> list[dict[str, Any]]:
        return sql_reads.calibrations(self._run, chip, sources, ids)

    def latest_calibration(self, chip: str) -> dict[str, Any] | None:
        return sql_reads.latest_calibration(self._run, chip)

    def latest_ppa_records(self, chip: str) -> list[dict[str, Any]]:
        return sql_reads.latest_ppa_records(self._run, chip)

    def _page_read(self, read: Callable[[Run], _T]) -> _T:
        return read(self._run)

    def workload_points(self, experiment_id: int) -> list[tuple[int, str, dict]]:
        return sql_reads.workload_points(self._run, experiment_id)

    def __enter__(self) -> LightStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._close()


def sqlite_runner(connection: sqlite3.Connection) -> Run:
    """`sql_reads`' way to run its SQL (`:name` placeholders) on a sqlite3 connection."""

    def run(sql: str, params: dict[str, Any]) -> tuple[list[str], list[tuple]]:
        cursor = connection.execute(sql, params)
        return [c[0] for c in cursor.description], cursor.fetchall()

    return run


def open_light(db: str) -> LightStore | None:
    """The store `db` names for the light reads, or None when the Store must open it: not
    a SQLite path or a PostgreSQL URL this module reads as the Store does, not at this dse's
    schema head, damaged, locked, unreachable, or with runs left "running" (a Store's open
    marks the dead ones crashed)."""
    if "://" in db:
        return _open_postgresql(db)
    if db == ":memory:" or "\x00" in db or not db.strip():
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
            return LightStore(sqlite_runner(connection), f"sqlite:///{path.resolve()}",
                              sqlite_evidence_dir(path.resolve()), connection.close)
    except sqlite3.Error:  # not a store, another program's tables, a locked file: the Store says
        pass
    connection.close()
    return None


def _open_postgresql(url: str) -> LightStore | None:
    if url.split("://", 1)[0] not in light_pg.DRIVERS:
        return None
    import psycopg  # a PostgreSQL URL only: the SQLite path never loads it

    try:
        connection = light_pg.connect(url)
    except (psycopg.Error, ValueError, OSError):  # an unreachable server, a bad name: the Store says
        return None
    if connection is None:
        return None
    run = light_pg.runner(connection)
    try:  # one snapshot (REPEATABLE READ, READ ONLY) from the first query to `close`
        versions, running = sql_reads.schema_versions(run), sql_reads.runs_in_flight(run)
    except psycopg.Error:  # not a store, another schema: the Store says
        connection.close()
        return None
    if versions != [head_revision()] or running:
        connection.close()
        return None
    return LightStore(run, light_pg.shown(url), light_pg.evidence_dir(url), connection.close)


def _usable(db: sqlite3.Connection, path: Path) -> bool:
    if os.path.getsize(path) <= QUICK_CHECK_MAX_BYTES and db.execute("PRAGMA quick_check(1)").fetchone()[0] != "ok":
        return False  # the Store's open reports the damage
    run = sqlite_runner(db)
    return sql_reads.schema_versions(run) == [head_revision()] and sql_reads.runs_in_flight(run) == 0
