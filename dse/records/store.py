"""The record store: every experiment, candidate, run, metric, artifact and decision in one
database.

SQLite (`records.db`, the default) and PostgreSQL (a URL) are one code path; only the
SQLite connection setup below differs. Each write is one transaction, so a crash or a
bad argument leaves nothing half-written; a write that meets a busy database (another
writer holds SQLite's lock, a PostgreSQL serialization failure) is retried, so "database
is locked" does not reach the user. Reads return pandas DataFrames, with JSON columns as
canonical JSON strings and timestamps as UTC.

A run is written as "running" before its work starts; while it runs, a daemon thread
refreshes its heartbeat. Opening a store marks "crashed" the runs whose process is gone:
on the same host, a process that no longer exists (pid and start time, so a reused pid
does not fool it); from another host, a heartbeat older than `stale_after` seconds.

Large raw evidence lives in content-addressed files beside the database
(`<db>.evidence/ab/<sha256>`), written temp -> fsync -> rename before the row naming it.

Open one Store per process: an engine's pooled connections must not cross a fork.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import mimetypes
import numbers
import operator
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, TypeVar

from sqlalchemy import (
    JSON,
    bindparam,
    Connection,
    DateTime,
    Engine,
    String,
    Text,
    cast,
    create_engine,
    event,
    func,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from dse.errors import InputError
from dse.identity import Encoded, candidate_hash, candidate_hash_of_texts, canonical_json, content_hash, json_text
from dse.records import provenance
from dse.records.schema import (
    ARTIFACT_ROLES,
    CANDIDATE_ORIGINS,
    IMPORTED_METRIC_KINDS,
    METRIC_KINDS,
    METRIC_SCOPES,
    RUN_STAGES,
    RUN_STATUSES,
    Artifact,
    Candidate,
    Decision,
    Experiment,
    Metric,
    Run,
    check_choice,
    utcnow,
)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# The newest migration; a test checks it against the migrations folder. A store already
# at this revision opens without loading alembic at all (a faster `dse history`).
SCHEMA_HEAD = "0005"
SQLITE_BUSY_TIMEOUT_MS = 10_000
SQLITE_MMAP_BYTES = 256 * 1024 * 1024
# How long a write keeps retrying a busy database before it gives up with StoreBusy.
RETRY_BUSY_FOR_S = 120.0
HEARTBEAT_INTERVAL_S = 30.0
STALE_AFTER_S = 600.0
FINAL_RUN_STATUSES = tuple(s for s in RUN_STATUSES if s != "running")
# The error text of a run marked crashed because its process was gone. finish_run
# accepts such a run after all (the process was alive, only unseen), so a late finish
# is never lost.
ABANDONED = "abandoned: "



class _LazyPandas:
    """pandas, imported on first use: `dse history` and a sweep's writes never pay its
    import time (most of a short command's run)."""

    def __getattr__(self, name: str) -> Any:
        import pandas

        return getattr(pandas, name)


pd = _LazyPandas()

# PostgreSQL advisory lock key taken while migrating ("dse-rec" in ASCII).
_MIGRATION_LOCK = 0x6473652D726563
# The stage whose runs produce each kind of evidence (metric_table reports that stage's status).
STAGE_OF_KIND = {"source_counts": "analytical", "analytical": "analytical", "emulator_cycles": "emulator",
                 "emulator_host_time": "emulator", "numerics": "emulator", "rtl_cycles": "imported",
                 "fpga_cycles": "imported"}

# Execution option read by the SQLite "begin" listener: which BEGIN to emit.
_SQLITE_BEGIN = "dse_sqlite_begin"
_T = TypeVar("_T")


class RecordNotFound(InputError, KeyError):
    """No experiment, candidate or run of that name or id: bad user input (exit code 2),
    and a KeyError for Python callers."""

    __str__ = Exception.__str__  # not KeyError's repr() of the message


class StoreBusy(RuntimeError):
    """The database stayed busy for RETRY_BUSY_FOR_S seconds."""


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


class _Unfinishable(Exception):
    """Some run of a batch to finish is missing or finished already: raised inside the
    transaction, so that it rolls back, and explained after (`_explain_unfinishable`)."""

    def __init__(self, ids: list[int]):
        super().__init__(ids)
        self.ids = ids


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


@dataclass(frozen=True)
class ArtifactRef:
    """An evidence file stored beside the database, and its row."""

    id: int
    sha256: str
    size: int
    path: Path


@dataclass(frozen=True)
class ImportedEvidence:
    """What `Store.import_evidence` recorded."""

    run_id: int
    candidate_id: int
    experiment_id: int
    kind: str
    format: str
    n_metrics: int
    artifact: ArtifactRef
    summary: dict[str, Any]


def database_url(url_or_path: str | os.PathLike[str]) -> str:
    """A SQLAlchemy URL as given, or a filesystem path turned into a SQLite URL.

    A PostgreSQL URL without a driver (`postgresql://`, `postgres://`) gets psycopg 3,
    the driver dse installs.
    """
    text = os.fspath(url_or_path)
    if "://" in text:
        url = make_url(text)
        if url.drivername in ("postgresql", "postgres"):
            url = url.set(drivername="postgresql+psycopg")
        return url.render_as_string(hide_password=False)
    if text == ":memory:":
        return "sqlite://"
    path = Path(text).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def alembic_config(url: str):
    """An alembic Config for the store's migrations, built in code (no alembic.ini)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    # Config values go through configparser interpolation, where "%" is special.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # The driver's own implicit BEGIN is off so that _sqlite_on_begin decides the kind
    # of transaction (and DDL in migrations is transactional too).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")  # first: WAL may wait
    cursor.execute("PRAGMA journal_mode=WAL")
    # In WAL mode, NORMAL syncs at checkpoints rather than at every commit: a killed
    # process loses nothing committed and the file stays intact; only a power cut may
    # drop the last commits. About 3x the small-transaction rate of FULL.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    # Reads of a large store go through the OS page cache without a copy per page.
    cursor.execute(f"PRAGMA mmap_size={SQLITE_MMAP_BYTES}")
    cursor.close()


def _sqlite_on_begin(connection: Connection) -> None:
    # Writers BEGIN IMMEDIATE: a deferred transaction that reads and then writes fails
    # at once (SQLITE_BUSY) if another writer committed in between; busy_timeout only
    # helps transactions that ask for the write lock up front.
    mode = connection.get_execution_options().get(_SQLITE_BEGIN, "DEFERRED")
    _DriverCursor(connection).execute(f"BEGIN {mode}")  # on the driver: a BEGIN needs no statement machinery


def _make_engine(url: str) -> Engine:
    # JSON is stored as canonical text (sorted keys, no spaces; 0002 rewrote older rows),
    # so reads hand it out as stored instead of parsing and re-serialising every row.
    sa_url = make_url(url)
    if sa_url.get_backend_name() != "sqlite":
        connect_args = {}
        if sa_url.get_backend_name() == "postgresql":
            # An unreachable server is an error in seconds, not a hang.
            # No server-side prepared statements: a generic plan, made blind to how
            # many candidates an experiment has, can be ruinous for these reads.
            connect_args = {"connect_timeout": 10, "application_name": "dse",
                            "prepare_threshold": None}  # fmt: skip
        return create_engine(
            sa_url, pool_pre_ping=True, connect_args=connect_args, json_serializer=json_text
        )
    if sa_url.database in (None, "", ":memory:"):
        # An in-memory database lives in one connection; share it.
        engine = create_engine(
            sa_url,
            poolclass=StaticPool,
            connect_args={"check_same_thread": False},
            json_serializer=json_text,
        )
    else:
        engine = create_engine(sa_url, json_serializer=json_text)
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _transient(error: DBAPIError) -> bool:
    """A failure that the same transaction, tried again, can get past."""
    orig = error.orig
    if getattr(orig, "sqlstate", None) in ("40001", "40P01"):  # serialization, deadlock
        return True
    if type(orig).__module__.startswith("sqlite3"):
        message = str(orig).lower()
        return "locked" in message or "busy" in message
    return False


def _retrying(method: Callable[..., _T]) -> Callable[..., _T]:
    """Run a Store method again (whole transactions) while the database is busy."""

    @functools.wraps(method)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> _T:
        deadline = time.monotonic() + RETRY_BUSY_FOR_S
        delay = 0.005
        while True:
            try:
                return method(self, *args, **kwargs)
            except DBAPIError as error:
                if not _transient(error):
                    raise
                if time.monotonic() > deadline:
                    raise StoreBusy(
                        f"the record store {self.url} stayed busy for {RETRY_BUSY_FOR_S:.0f} s "
                        f"({type(error.orig).__name__}: {error.orig})"
                    ) from error
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)

    return wrapper


class Store:
    """Experiments, candidates, runs, metrics, artifacts and decisions; see the module
    docstring.

    `evidence_dir` holds the artifact files; by default `<db>.evidence` beside a SQLite
    file, else $DSE_EVIDENCE_DIR, else a folder per database under
    ~/.local/share/dse/evidence. `heartbeat_interval` (seconds, 0 for none) is how often
    this store's running runs say they are alive; `stale_after` is how old a heartbeat
    from another host may be before its run is marked crashed on open.
    """

    def __init__(
        self,
        url_or_path: str | os.PathLike[str] = "records.db",
        *,
        evidence_dir: str | os.PathLike[str] | None = None,
        heartbeat_interval: float = HEARTBEAT_INTERVAL_S,
        stale_after: float = STALE_AFTER_S,
    ):
        self.engine = _make_engine(database_url(url_or_path))
        self._writer = self.engine.execution_options(**{_SQLITE_BEGIN: "IMMEDIATE"})
        self._sqlite = self.engine.url.get_backend_name() == "sqlite"
        self._memory = self._sqlite and self.engine.url.database in (None, "", ":memory:")
        self.evidence_dir = self._evidence_dir(evidence_dir)
        self.heartbeat_interval = heartbeat_interval
        self.stale_after = stale_after
        self._active: set[int] = set()  # runs this store started and has not finished
        self._active_lock = threading.Lock()
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None
        self._owner_pid = os.getpid()
        try:
            if not self._schema_is_current():
                self._upgrade_schema()
            self.reap_crashed()
        except BaseException:
            self.engine.dispose()
            raise

    @property
    def url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._beater is not None:
            self._beater.join(timeout=5)
            self._beater = None
        self.engine.dispose()

    # ---- schema -------------------------------------------------------------------

    @_retrying
    def _schema_is_current(self) -> bool:
        with self._read() as connection:
            if not inspect(connection).has_table("alembic_version"):
                return False
            versions = connection.exec_driver_sql(
                "SELECT version_num FROM alembic_version"
            ).scalars().all()
        return versions == [SCHEMA_HEAD]

    @_retrying
    def _upgrade_schema(self) -> None:
        from alembic import command
        from alembic.util.exc import CommandError

        # Inside one write transaction: two processes opening a new store at once
        # migrate one after the other instead of both creating tables. SQLite's BEGIN
        # IMMEDIATE serialises them; PostgreSQL needs a lock of its own (held to commit),
        # after which alembic reads the version the first process left.
        config = alembic_config(self.engine.url.render_as_string(hide_password=False))
        try:
            with self._writer.begin() as connection:
                if connection.dialect.name == "postgresql":
                    connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        except CommandError as error:
            raise RuntimeError(
                f"cannot bring the record store {self.url} to this dse's schema "
                f"(was it written by a newer dse?): {error}"
            ) from error

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with Session(self._writer, expire_on_commit=False) as session, session.begin():
            yield session

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as connection:
            yield connection

    # ---- runs whose process died --------------------------------------------------

    @_retrying
    def reap_crashed(self) -> list[int]:
        """Mark "crashed" the running runs whose process is gone; return their ids.

        Called on every open. Same host: the recorded process (pid and start time) no
        longer exists. Another host, or no process recorded: no heartbeat for
        `stale_after` seconds.
        """
        host = provenance.hostname()
        now = utcnow()
        with self._read() as connection:
            running = connection.execute(
                select(Run.id, Run.host, Run.pid, Run.pid_start, Run.started_at, Run.heartbeat_at)
                .where(Run.status == "running")
            ).all()
        lost: list[tuple[int, datetime, str]] = []
        for run in running:
            last = _as_utc(run.heartbeat_at or run.started_at)
            if run.host == host and run.pid is not None:
                if provenance.process_alive(run.pid, run.pid_start):
                    continue
                why = f"process {run.pid} on {host} ended without finishing the run"
            else:
                age = (now - last).total_seconds()
                if age < self.stale_after:
                    continue
                why = (
                    f"no heartbeat from process {run.pid} on {run.host} for {age:.0f} s "
                    f"(more than {self.stale_after:.0f} s)"
                )
            lost.append((run.id, last, why))
        if not lost:
            return []
        reaped = []
        with self._write() as session:
            for run_id, last, why in lost:
                done = session.execute(
                    update(Run)
                    .where(Run.id == run_id, Run.status == "running")
                    .values(
                        status="crashed",
                        finished_at=last,
                        error=f"{ABANDONED}{why}; found at {now.isoformat(timespec='seconds')} "
                        f"by process {os.getpid()} on {host}",
                    )
                    .execution_options(synchronize_session=False)
                )
                if done.rowcount:
                    reaped.append(run_id)
        return reaped

    def _track(self, run_id: int) -> None:
        self._track_many([run_id])

    def _track_many(self, run_ids: Iterable[int]) -> None:
        run_ids = list(run_ids)
        if not run_ids:
            return
        with self._active_lock:
            if self._owner_pid != os.getpid():  # used across a fork: the thread stayed behind
                self._owner_pid, self._beater, self._active = os.getpid(), None, set()
                self._stop = threading.Event()
            self._active.update(run_ids)
            if self._beater is None and self.heartbeat_interval > 0 and not self._memory:
                self._beater = threading.Thread(
                    target=self._beat, name=f"dse-heartbeat-{id(self):x}", daemon=True
                )
                self._beater.start()

    def _untrack(self, run_id: int) -> None:
        with self._active_lock:
            self._active.discard(run_id)

    def _untrack_many(self, run_ids: Iterable[int]) -> None:
        with self._active_lock:
            self._active.difference_update(run_ids)

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_interval):
            with self._active_lock:
                run_ids = sorted(self._active)
            if not run_ids:
                continue
            try:
                with self._writer.begin() as connection:
                    connection.execute(
                        update(Run)
                        .where(Run.id.in_(run_ids), Run.status == "running")
                        .values(heartbeat_at=utcnow())
                    )
            except Exception:  # noqa: BLE001 - a missed beat is retried at the next one
                pass

    # ---- writes -------------------------------------------------------------------

    @_retrying
    def create_experiment(
        self,
        name: str,
        hypothesis: str,
        acceptance: list[dict[str, str]],
        workload_recipe: str,
        workload_hash: str,
        spec_text: str,
        spec_hash: str,
        limitations: str = "",
        open_questions: str = "",
    ) -> int:
        """Record a new experiment, or resume the one of that name and spec; return its id."""
        acceptance = _checked_acceptance(acceptance)

        def create() -> int:
            with self._write() as session:
                existing = session.scalars(
                    select(Experiment).where(Experiment.name == name)
                ).one_or_none()
                if existing is not None:
                    if existing.spec_hash != spec_hash:
                        raise ValueError(
                            f"experiment name {name!r} is taken by a different spec "
                            f"(recorded spec_hash {existing.spec_hash}, this spec {spec_hash}); "
                            "rename the experiment to record the changed spec"
                        )
                    return existing.id
                experiment = Experiment(
                    name=name,
                    hypothesis=hypothesis,
                    status="proposed",
                    acceptance=acceptance,
                    workload_recipe=workload_recipe,
                    workload_hash=workload_hash,
                    spec_text=spec_text,
                    spec_hash=spec_hash,
                    limitations=limitations,
                    open_questions=open_questions,
                )
                session.add(experiment)
                session.flush()
                return experiment.id

        return _retry_once_on_conflict(create)

    @_retrying
    def add_candidate(
        self,
        experiment_id: int,
        config: dict[str, Any],
        mapping: dict[str, Any],
        origin: str,
        diff: dict[str, Any] | None = None,
    ) -> tuple[int, bool]:
        """Record a candidate; return (id, created). A known hash returns the existing id.

        Without `diff`, the difference from the experiment's baseline is computed here
        ({} when there is no baseline yet).
        """
        check_choice("candidate.origin", origin, CANDIDATE_ORIGINS)
        # Stored as the canonical JSON reads back, so the stored row rehashes to `hash`.
        config, mapping = json.loads(canonical_json([config, mapping]))
        key = candidate_hash(config, mapping)

        def add() -> tuple[int, bool]:
            with self._write() as session:
                experiment = self._get(session, Experiment, experiment_id)
                existing = session.scalar(
                    select(Candidate.id).where(
                        Candidate.experiment_id == experiment_id, Candidate.hash == key
                    )
                )
                if existing is not None:
                    return existing, False
                stored_diff = diff
                if stored_diff is None:
                    stored_diff = _diff_from_baseline(session, experiment, config, mapping)
                candidate = Candidate(
                    experiment_id=experiment_id,
                    hash=key,
                    config=config,
                    mapping=mapping,
                    origin=origin,
                    diff=stored_diff,
                )
                session.add(candidate)
                session.flush()
                return candidate.id, True

        return _retry_once_on_conflict(add)

    @_retrying
    def set_baseline(self, experiment_id: int, candidate_id: int) -> None:
        with self._write() as session:
            experiment = self._get(session, Experiment, experiment_id)
            candidate = self._get(session, Candidate, candidate_id)
            if candidate.experiment_id != experiment_id:
                raise ValueError(
                    f"candidate {candidate_id} belongs to experiment {candidate.experiment_id}, "
                    f"not {experiment_id}"
                )
            experiment.baseline_candidate_id = candidate_id

    @_retrying
    def set_status(self, experiment_id: int, status: str) -> None:
        with self._write() as session:
            self._get(session, Experiment, experiment_id).status = status

    @_retrying
    def start_run(
        self,
        candidate_id: int,
        stage: str,
        *,
        seed: int | None = None,
        command: str | None = None,
        model_version: str = "",
        emulator_version: str | None = None,
    ) -> int:
        """Record a run as "running", with its provenance, before its work starts.

        Until `finish_run`, a daemon thread refreshes the run's heartbeat."""
        environment = provenance.collect(command)  # outside the transaction: it may run git
        with self._write() as session:
            self._get(session, Candidate, candidate_id)
            now = utcnow()
            run = Run(
                candidate_id=candidate_id,
                stage=stage,
                status="running",
                started_at=now,
                heartbeat_at=now,
                host=environment.host,
                git_commit=environment.git_commit,
                git_dirty=environment.git_dirty,
                versions=environment.versions,
                command=environment.command,
                seed=seed,
                model_version=model_version,
                emulator_version=emulator_version,
                pid=environment.pid,
                pid_start=environment.pid_start,
            )
            session.add(run)
            session.flush()
            run_id = run.id
        self._track(run_id)
        return run_id

    @_retrying
    def heartbeat(self, run_id: int) -> None:
        """Say a running run is still alive, so a stale "running" row can be told apart."""
        with self._write() as session:
            self._get(session, Run, run_id).heartbeat_at = utcnow()

    @_retrying
    def finish_run(
        self,
        run_id: int,
        status: str,
        metrics: Iterable[MetricIn | Mapping[str, Any]] = (),
        *,
        reason: str | None = None,
        error: str | None = None,
        traceback: str | None = None,
    ) -> None:
        """Write a run's metrics and final status together, or neither.

        The metrics go in as one batched insert. A run that an open marked crashed
        because it saw no sign of its process may still be finished by that process."""
        check_choice("finish_run status", status, FINAL_RUN_STATUSES)
        rows = _metric_rows(metrics, f"run {run_id}")
        with self._write() as session:
            run = self._get(session, Run, run_id)
            abandoned = run.status == "crashed" and (run.error or "").startswith(ABANDONED)
            if run.status != "running" and not abandoned:
                raise ValueError(f"run {run_id} is already finished (status {run.status!r})")
            now = utcnow()
            run.status = status
            run.reason = reason
            run.error = error
            run.traceback = traceback
            run.finished_at = now
            run.heartbeat_at = now
            session.flush()
            if rows:
                session.execute(insert(Metric.__table__), [{"run_id": run_id, **r} for r in rows])
        self._untrack(run_id)

    # ---- batched writes: one transaction for many rows (the sweep driver's path) ----------

    def add_candidates(self, experiment_id: int, rows: Iterable[Mapping[str, Any]]) -> list[tuple[int, bool]]:
        """Record many candidates at once; each row has config, mapping, origin and diff.
        Returns (id, created) per row, in order; known hashes (also repeats within `rows`)
        return the existing id.

        A row may also carry `config_json` / `mapping_json`: its config / mapping already
        as canonical JSON (`dse.identity.canonical_json`), written as is. The rows go in
        as one multi-row INSERT of pre-encoded JSON text, in one transaction."""
        return [(cid, created) for cid, created, _ in self._add_candidates(experiment_id, rows, None)]

    def add_candidates_and_start_runs(
        self,
        experiment_id: int,
        rows: Iterable[Mapping[str, Any]],
        stage: str,
        *,
        seed: int | None = None,
        command: str | None = None,
        model_version: str = "",
        emulator_version: str | None = None,
        finish: Iterable[Mapping[str, Any]] = (),
        baseline: bool = False,
    ) -> list[tuple[int, bool, int]]:
        """`add_candidates`, then `start_runs` for each row's candidate, in one transaction:
        (candidate id, created, run id) per row (the sweep driver's batch).

        In the same transaction, first: `finish`, results of earlier runs as `finish_runs`
        takes them (the driver's previous batch: one transaction per batch, not two); and
        last, with `baseline`, the first row's candidate becomes the experiment's baseline."""
        base = self._run_base(stage, seed, command, model_version, emulator_version)
        finished = self._checked_results(finish)
        out = self._add_candidates(experiment_id, rows, base, finished, baseline)
        self._untrack_many(r["run_id"] for r in finished[0])
        self._track_many(run_id for _, _, run_id in out)
        return out

    @_retrying
    def _add_candidates(self, experiment_id: int, rows: Iterable[Mapping[str, Any]], run_base: dict[str, Any] | None,
                        finished: tuple[list, list] = ([], []), baseline: bool = False
                        ) -> list[tuple[int, bool, int | None]]:
        prepared = []
        canonical: dict[int, tuple[Any, str]] = {}  # id(value) -> (value kept alive, canonical text)

        def canon(value: Any) -> str:
            # Candidates of a batch often share one config object: encode it once.
            hit = canonical.get(id(value))
            if hit is None:
                hit = canonical[id(value)] = (value, canonical_json(value))
            return hit[1]

        for row in rows:
            check_choice("candidate.origin", row["origin"], CANDIDATE_ORIGINS)
            config_text = row.get("config_json") or canon(row["config"])
            mapping_text = row.get("mapping_json") or canon(row["mapping"])
            key = candidate_hash_of_texts(config_text, mapping_text)
            prepared.append((key, config_text, mapping_text, row["origin"], row.get("diff") or {}))

        def add() -> list[tuple[int, bool, int | None]]:
            # Core on one connection (no ORM session): this is the sweep's hot path.
            with self._writer.begin() as connection:
                if finished[0]:
                    self._finish_in(connection, *finished)
                sqlite = connection.dialect.name == "sqlite"
                if sqlite:  # the experiment, and the largest ids before this batch's rows
                    cur = _DriverCursor(connection)
                    exists, last_candidate, last_run = cur.execute(
                        "SELECT (SELECT count(*) FROM experiment WHERE id = ?), (SELECT coalesce(max(id), 0) FROM "
                        "candidate), (SELECT coalesce(max(id), 0) FROM run)", (_as_id(experiment_id),)).fetchone()
                else:
                    exists = connection.execute(select(Experiment.id).where(Experiment.id == _as_id(experiment_id))).first()
                if not exists:
                    raise self._not_found(connection, "experiment", experiment_id)
                now = utcnow()
                distinct = list({p[0]: p for p in prepared}.values())  # the first row of each hash
                if sqlite:
                    known, created = _sqlite_insert_candidates(cur, experiment_id, distinct, now, last_candidate)
                else:
                    known = _candidate_ids(connection, experiment_id, [p[0] for p in distinct])
                    new = [dict(experiment_id=experiment_id, hash=key, config=Encoded(config_text),
                                mapping=Encoded(mapping_text), origin=origin, diff=diff, created_at=now)
                           for key, config_text, mapping_text, origin, diff in distinct if key not in known]
                    created = {}
                    if new:
                        table = Candidate.__table__
                        ids = connection.execute(insert(table).returning(table.c.id, sort_by_parameter_order=True),
                                                 new).scalars().all()
                        created = {row["hash"]: cid for row, cid in zip(new, ids)}
                seen: set[str] = set()
                out = []
                for key, *_ in prepared:
                    if key in created and key not in seen:
                        out.append((created[key], True))
                    else:
                        out.append((known[key] if key in known else created[key], False))
                    seen.add(key)
                runs: list[int | None] = [None] * len(out)
                if run_base is not None and out and sqlite:
                    runs = _sqlite_insert_runs(cur, [cid for cid, _ in out], run_base, last_run)
                elif run_base is not None and out:
                    runs = self._insert_runs(connection, [cid for cid, _ in out], run_base)
                if baseline and out:  # a candidate of this very experiment, just looked up or added
                    connection.execute(update(Experiment).where(Experiment.id == _as_id(experiment_id))
                                       .values(baseline_candidate_id=out[0][0]))
                return [(cid, made, run) for (cid, made), run in zip(out, runs)]

        try:
            return _retry_once_on_conflict(add)
        except _Unfinishable as short:
            unfinishable = short.ids
        self._explain_unfinishable(unfinishable)

    def _run_base(self, stage: str, seed: int | None, command: str | None, model_version: str,
                  emulator_version: str | None) -> dict[str, Any]:
        """The columns every run of a batch shares: status, times and provenance."""
        check_choice("run.stage", stage, RUN_STAGES)
        environment = provenance.collect(command)
        now = utcnow()
        # The same provenance for every row: its JSON encoded once.
        return dict(stage=stage, status="running", started_at=now, heartbeat_at=now, host=environment.host,
                    git_commit=environment.git_commit, git_dirty=environment.git_dirty,
                    versions=Encoded(canonical_json(environment.versions)), command=environment.command, seed=seed,
                    model_version=model_version, emulator_version=emulator_version, pid=environment.pid,
                    pid_start=environment.pid_start)

    @staticmethod
    def _insert_runs(connection: Connection, candidate_ids: list[int], base: dict[str, Any]) -> list[int]:
        if connection.dialect.name == "sqlite":
            return _sqlite_insert_runs(_DriverCursor(connection), candidate_ids, base)
        # One INSERT .. RETURNING for the batch, ids in the order of the rows.
        table = Run.__table__
        return list(connection.execute(insert(table).returning(table.c.id, sort_by_parameter_order=True),
                                       [{**base, "candidate_id": cid} for cid in candidate_ids]).scalars().all())

    @_retrying
    def start_runs(
        self,
        candidate_ids: Iterable[int],
        stage: str,
        *,
        seed: int | None = None,
        command: str | None = None,
        model_version: str = "",
        emulator_version: str | None = None,
    ) -> list[int]:
        """`start_run` for many candidates in one transaction; run ids in order."""
        candidate_ids = list(candidate_ids)
        base = self._run_base(stage, seed, command, model_version, emulator_version)
        with self._writer.begin() as connection:
            run_ids = self._insert_runs(connection, candidate_ids, base) if candidate_ids else []
        self._track_many(run_ids)
        return run_ids

    @_retrying
    def finish_runs(self, results: Iterable[Mapping[str, Any]]) -> None:
        """`finish_run` for many runs in one transaction: each result has run_id, status and
        optionally metrics, reason, error, traceback. All are written, or none."""
        checked = self._checked_results(results)
        try:
            with self._writer.begin() as connection:
                self._finish_in(connection, *checked)
        except _Unfinishable as short:
            unfinishable = short.ids
        else:
            self._untrack_many(r["run_id"] for r in checked[0])
            return
        self._explain_unfinishable(unfinishable)

    @staticmethod
    def _checked_results(results: Iterable[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[tuple]]:
        """finish_runs' input checked before any transaction: (results, their metric rows)."""
        results = list(results)
        for r in results:
            check_choice("finish_run status", r["status"], FINAL_RUN_STATUSES)
        return results, _batch_metric_values(results)

    def _finish_in(self, connection: Connection, results: list[Mapping[str, Any]], metric_rows: list[tuple]) -> None:
        ids = [r["run_id"] for r in results]
        now = utcnow()
        table = Run.__table__
        # Only a running run (or one an open wrongly marked abandoned) may be finished:
        # the condition is part of the UPDATE, and a count short of the batch means some
        # run was not; then the whole transaction is rolled back with the reason.
        if connection.dialect.name == "sqlite":
            done = _sqlite_finish_runs(_DriverCursor(connection), results, now)
        else:
            finishable = (table.c.status == "running") | (
                (table.c.status == "crashed") & table.c.error.startswith(ABANDONED, autoescape=True))
            done = connection.execute(
                update(table).where((table.c.id == bindparam("rid")) & finishable).values(
                    status=bindparam("new_status"), reason=bindparam("new_reason"), error=bindparam("new_error"),
                    traceback=bindparam("new_traceback"), finished_at=now, heartbeat_at=now),
                [dict(rid=r["run_id"], new_status=r["status"], new_reason=r.get("reason"),
                      new_error=r.get("error"), new_traceback=r.get("traceback")) for r in results]).rowcount
        if done != len(set(ids)):
            raise _Unfinishable(ids)  # rolls the transaction back; explained once it has
        if metric_rows:
            _insert_metrics(connection, metric_rows)

    def _explain_unfinishable(self, ids: list[int]) -> NoReturn:
        """Raise for the first run of `ids` that is missing or already finished (read after
        the batch was rolled back: its own UPDATE would show runs it finished as finished)."""
        with self._read() as connection:
            state: dict[int, tuple] = {}
            for i in range(0, len(ids), 500):
                state.update((row.id, (row.status, row.error)) for row in connection.execute(
                    select(Run.id, Run.status, Run.error).where(Run.id.in_(ids[i:i + 500]))))
            for run_id in ids:
                if run_id not in state:
                    raise self._not_found(connection, "run", run_id)
                status, error = state[run_id]
                if status != "running" and not (status == "crashed" and (error or "").startswith(ABANDONED)):
                    raise ValueError(f"run {run_id} is already finished (status {status!r})")
        raise ValueError(f"runs {ids} were not all finished")  # a run id given twice

    @_retrying
    def add_decision(
        self,
        experiment_id: int,
        verdict: str,
        rationale: str,
        author: str,
        evidence: Iterable[int] = (),
        candidate_id: int | None = None,
    ) -> int:
        """Record a decision; `evidence` are ids of this experiment's runs that support it,
        `candidate_id` the candidate it accepts or rejects (None: the hypothesis)."""
        run_ids = [operator.index(r) for r in evidence]
        with self._write() as session:
            self._get(session, Experiment, experiment_id)
            if candidate_id is not None:
                candidate = self._get(session, Candidate, candidate_id)
                if candidate.experiment_id != experiment_id:
                    raise ValueError(
                        f"candidate {candidate_id} belongs to experiment "
                        f"{candidate.experiment_id}, not {experiment_id}"
                    )
            if run_ids:
                found = set(
                    session.scalars(
                        select(Run.id)
                        .join(Candidate, Run.candidate_id == Candidate.id)
                        .where(Run.id.in_(run_ids), Candidate.experiment_id == experiment_id)
                    )
                )
                missing = sorted(set(run_ids) - found)
                if missing:
                    raise ValueError(
                        f"evidence: runs {missing} are not runs of experiment {experiment_id}"
                    )
            decision = Decision(
                experiment_id=experiment_id,
                verdict=verdict,
                rationale=rationale,
                author=author,
                evidence=run_ids,
                candidate_id=candidate_id,
            )
            session.add(decision)
            session.flush()
            return decision.id

    def decide(
        self,
        experiment: str | int,
        candidate_id: int,
        accept: bool,
        why: str,
        author: str,
    ) -> int:
        """Accept or reject a candidate of an experiment (`dse decide`); return the decision id.

        The evidence is every finished run of the candidate and of the baseline."""
        if not why.strip():
            raise InputError("dse decide", "--why", why, "a non-empty reason for the decision")
        with self._read() as connection:
            experiment_id = self._experiment_id(connection, experiment)
            owner = connection.scalar(
                select(Candidate.experiment_id).where(Candidate.id == candidate_id)
            )
            if owner != experiment_id:
                raise self._candidate_not_found(connection, candidate_id, experiment_id)
            baseline = connection.scalar(
                select(Experiment.baseline_candidate_id).where(Experiment.id == experiment_id)
            )
            evidence = connection.scalars(
                select(Run.id)
                .where(
                    Run.candidate_id.in_({candidate_id, baseline} - {None}),
                    Run.status != "running",
                )
                .order_by(Run.id)
            ).all()
        verdict = "accepted" if accept else "rejected"
        return self.add_decision(experiment_id, verdict, why, author, evidence, candidate_id)

    # ---- artifacts ----------------------------------------------------------------

    def _evidence_dir(self, given: str | os.PathLike[str] | None) -> Path | None:
        if given is not None:
            return Path(given).expanduser().resolve()
        if self._sqlite:
            if self._memory:
                return None
            return Path(f"{self.engine.url.database}.evidence")
        if os.environ.get("DSE_EVIDENCE_DIR"):
            return Path(os.environ["DSE_EVIDENCE_DIR"]).expanduser().resolve()
        url = self.engine.url
        folder = f"{url.get_backend_name()}-{url.host or 'local'}-{url.port or ''}-{url.database}"
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
        return base / "dse" / "evidence" / folder

    def artifact_path(self, sha256: str) -> Path:
        """Where the evidence file of this content lives."""
        if self.evidence_dir is None:
            raise RuntimeError(f"{self.url} has no evidence folder (pass evidence_dir=)")
        return self.evidence_dir / sha256[:2] / sha256

    def _store_blob(self, source: str | os.PathLike[str] | bytes) -> tuple[str, int, Path]:
        """Copy `source` into the evidence folder: temp -> fsync -> rename; (sha256, size, path)."""
        if self.evidence_dir is None:
            raise RuntimeError(f"{self.url} has no evidence folder (pass evidence_dir=)")
        root = self.evidence_dir
        root.mkdir(parents=True, exist_ok=True)
        digest, size = hashlib.sha256(), 0
        fd, temp = tempfile.mkstemp(dir=root, prefix=".incoming-")
        try:
            with os.fdopen(fd, "wb") as out:
                if isinstance(source, bytes):
                    chunks: Iterable[bytes] = (source,)
                else:
                    chunks = _read_chunks(Path(source))
                for chunk in chunks:
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            sha = digest.hexdigest()
            final = root / sha[:2] / sha
            final.parent.mkdir(exist_ok=True)
            if final.exists() and final.stat().st_size == size:
                os.unlink(temp)  # the same content is already stored
            else:
                os.chmod(temp, 0o444)
                os.replace(temp, final)
                _fsync_dir(final.parent)
                _fsync_dir(root)
        except BaseException:
            if os.path.exists(temp):
                os.unlink(temp)
            raise
        return sha, size, final

    @_retrying
    def put_artifact(
        self,
        source: str | os.PathLike[str] | bytes,
        *,
        role: str,
        media_type: str | None = None,
        run_id: int | None = None,
        experiment_id: int | None = None,
        name: str | None = None,
    ) -> ArtifactRef:
        """Store a file (or bytes) as content-addressed evidence of a run or experiment.

        The file is in place (fsynced, renamed) before the row that names it is written."""
        check_choice("artifact.role", role, ARTIFACT_ROLES)
        if run_id is None and experiment_id is None:
            raise ValueError("an artifact belongs to a run or an experiment: give run_id or experiment_id")
        if name is None and not isinstance(source, bytes):
            name = os.fspath(source)
        if media_type is None:
            media_type = _media_type(name)
        with self._read() as connection:  # check before the file is written
            if run_id is not None:
                owner = connection.scalar(
                    select(Candidate.experiment_id)
                    .join(Run, Run.candidate_id == Candidate.id)
                    .where(Run.id == run_id)
                )
                if owner is None:
                    raise self._not_found(connection, "run", run_id)
                if experiment_id not in (None, owner):
                    raise ValueError(f"run {run_id} belongs to experiment {owner}, not {experiment_id}")
                experiment_id = owner
            elif connection.scalar(
                select(Experiment.id).where(Experiment.id == _as_id(experiment_id))
            ) is None:
                raise self._not_found(connection, "experiment", experiment_id)
        sha, size, path = self._store_blob(source)
        with self._write() as session:
            artifact = Artifact(
                run_id=run_id,
                experiment_id=experiment_id,
                sha256=sha,
                size=size,
                media_type=media_type,
                role=role,
                name=name,
            )
            session.add(artifact)
            session.flush()
            return ArtifactRef(artifact.id, sha, size, path)

    # ---- outside evidence ---------------------------------------------------------

    @_retrying
    def import_evidence(
        self,
        candidate_id: int,
        kind: str,
        path: str | os.PathLike[str],
        *,
        fmt: str = "auto",
        note: str | None = None,
        command: str | None = None,
    ) -> ImportedEvidence:
        """Record measurements made outside dse (RTL simulation, FPGA) for a candidate.

        `path` is the framework's pmctrace NDJSON or a CSV of measurements (see
        dse.records.evidence). The figures keep `kind` (rtl_cycles or fpga_cycles), never
        merged with emulator cycles; they become one run of stage "imported", status
        "ok", with the raw file as its artifact. A bad file, kind or candidate raises
        InputError and writes nothing."""
        from dse.records.evidence import parse_evidence

        if kind not in IMPORTED_METRIC_KINDS:
            raise InputError(
                path, "--kind", kind,
                f"{', '.join(IMPORTED_METRIC_KINDS)} (evidence from outside dse; "
                "analytical and emulator figures are recorded by dse itself)",
            )  # fmt: skip
        with self._read() as connection:
            experiment_id = connection.scalar(
                select(Candidate.experiment_id).where(Candidate.id == candidate_id)
            )
            if experiment_id is None:
                raise self._candidate_not_found(connection, candidate_id)
        parsed = parse_evidence(path, kind, fmt)
        environment = provenance.collect(command)
        sha, size, stored = self._store_blob(path)  # the file before the rows naming it
        versions = dict(environment.versions)
        if note:
            versions["evidence_source"] = note
        with self._write() as session:
            now = utcnow()
            run = Run(
                candidate_id=candidate_id,
                stage="imported",
                status="ok",
                started_at=now,
                finished_at=now,
                heartbeat_at=now,
                host=environment.host,
                git_commit=environment.git_commit,
                git_dirty=environment.git_dirty,
                versions=versions,
                command=environment.command,
                model_version="",
                pid=environment.pid,
                pid_start=environment.pid_start,
            )
            session.add(run)
            session.flush()
            rows = _metric_rows(parsed.metrics, f"{path}")
            session.execute(insert(Metric.__table__), [{"run_id": run.id, **r} for r in rows])
            artifact = Artifact(
                run_id=run.id,
                experiment_id=experiment_id,
                sha256=sha,
                size=size,
                media_type=parsed.media_type,
                role=parsed.role,
                name=os.fspath(path),
            )
            session.add(artifact)
            session.flush()
            return ImportedEvidence(
                run_id=run.id,
                candidate_id=candidate_id,
                experiment_id=experiment_id,
                kind=kind,
                format=parsed.format,
                n_metrics=len(rows),
                artifact=ArtifactRef(artifact.id, sha, size, stored),
                summary=parsed.summary,
            )

    # ---- reads --------------------------------------------------------------------

    @_retrying
    def experiment_summaries(self) -> list[dict[str, Any]]:
        """What `experiments()` holds, as plain dicts: no pandas (a quick `dse history`)."""
        with self._read() as connection:
            rows = connection.execute(
                select(
                    Experiment.id,
                    Experiment.name,
                    Experiment.hypothesis,
                    Experiment.status,
                    Experiment.workload_recipe,
                    Experiment.created_at,
                ).order_by(Experiment.id)
            ).mappings().all()
            n_candidates = dict(
                connection.execute(
                    select(Candidate.experiment_id, func.count()).group_by(Candidate.experiment_id)
                ).all()
            )
            run_counts: dict[int, dict[str, int]] = {}
            for experiment_id, status, n in connection.execute(
                select(Candidate.experiment_id, Run.status, func.count())
                .join(Candidate, Run.candidate_id == Candidate.id)
                .group_by(Candidate.experiment_id, Run.status)
            ):
                run_counts.setdefault(experiment_id, {})[status] = n
            latest = (
                select(func.max(Decision.id).label("decision_id"))
                .group_by(Decision.experiment_id)
                .subquery()
            )
            verdicts = {
                experiment_id: (verdict, candidate_id)
                for experiment_id, verdict, candidate_id in connection.execute(
                    select(Decision.experiment_id, Decision.verdict, Decision.candidate_id)
                    .join(latest, Decision.id == latest.c.decision_id)
                )
            }
        summaries = []
        for row in rows:
            summary = dict(row)
            summary["created_at"] = _as_utc(summary["created_at"])
            summary["n_candidates"] = n_candidates.get(row["id"], 0)
            counts = run_counts.get(row["id"], {})
            for status in RUN_STATUSES:
                summary[f"n_{status}"] = counts.get(status, 0)
            summary["latest_verdict"], summary["latest_candidate_id"] = verdicts.get(
                row["id"], (None, None)
            )
            summaries.append(summary)
        return summaries

    def experiments(self) -> pd.DataFrame:
        """One row per experiment with candidate and run counts (n_<status>) and the latest
        decision (its verdict, and the candidate it names, if any)."""
        columns = [
            "id", "name", "hypothesis", "status", "workload_recipe", "created_at", "n_candidates",
            *(f"n_{s}" for s in RUN_STATUSES), "latest_verdict", "latest_candidate_id",
        ]  # fmt: skip
        frame = pd.DataFrame(self.experiment_summaries(), columns=columns)
        counts = ["n_candidates", *(f"n_{s}" for s in RUN_STATUSES)]
        frame[counts] = frame[counts].astype("int64")
        frame["id"] = frame["id"].astype("int64")
        frame["latest_verdict"] = frame["latest_verdict"].astype(object)
        frame["latest_candidate_id"] = frame["latest_candidate_id"].astype("Int64")
        return _utc(frame, "created_at")

    @_retrying
    def experiment(self, name_or_id: str | int) -> dict[str, Any]:
        """One experiment's row as a dict (JSON columns as Python values)."""
        with self._read() as connection:
            experiment_id = self._experiment_id(connection, name_or_id)
            row = connection.execute(
                select(Experiment.__table__).where(Experiment.id == experiment_id)
            ).mappings().one()
        record = dict(row)
        record["created_at"] = _as_utc(record["created_at"])
        return record

    @_retrying
    def candidate(self, candidate_id: int) -> dict[str, Any]:
        """One candidate as a dict: its row (JSON as Python values), experiment name, and
        whether it is the baseline."""
        with self._read() as connection:
            row = connection.execute(
                select(
                    Candidate.__table__,
                    Experiment.name.label("experiment"),
                    Experiment.baseline_candidate_id,
                )
                .join(Experiment, Candidate.experiment_id == Experiment.id)
                .where(Candidate.id == _as_id(candidate_id))
            ).mappings().one_or_none()
            if row is None:
                raise self._candidate_not_found(connection, candidate_id)
        record = dict(row)
        record["is_baseline"] = record.pop("baseline_candidate_id") == record["id"]
        record["created_at"] = _as_utc(record["created_at"])
        return record

    @_retrying
    def run(self, run_id: int) -> dict[str, Any]:
        """One run as a dict, with its experiment id and its metrics (long form)."""
        with self._read() as connection:
            row = connection.execute(
                select(Run.__table__, Candidate.experiment_id)
                .join(Candidate, Run.candidate_id == Candidate.id)
                .where(Run.id == _as_id(run_id))
            ).mappings().one_or_none()
            if row is None:
                raise self._not_found(connection, "run", run_id)
            metrics = _frame(
                connection,
                select(
                    Metric.kind, Metric.name, Metric.value, Metric.unit, Metric.scope,
                    Metric.scope_key,
                ).where(Metric.run_id == row["id"]).order_by(Metric.id),
            )  # fmt: skip
        record = dict(row)
        for column in ("started_at", "finished_at", "heartbeat_at"):
            record[column] = _as_utc(record[column])
        metrics["value"] = metrics["value"].astype("float64")
        record["metrics"] = metrics
        return record

    @_retrying
    def candidates(self, experiment: str | int, stage: str | None = None) -> pd.DataFrame:
        """One row per candidate, with the stage, status and reason of its latest run (of
        `stage`, when given)."""
        if stage is not None:
            check_choice("run.stage", stage, RUN_STAGES)
        with self._read() as connection:
            return self._candidates(connection, self._experiment_id(connection, experiment), stage)

    @_retrying
    def runs(
        self, experiment: str | int | None = None, candidate: int | None = None
    ) -> pd.DataFrame:
        """Runs with their provenance, filtered by experiment (name or id) and/or candidate id."""
        stmt = (
            select(
                Run.id,
                Candidate.experiment_id,
                *(_raw(column) for column in Run.__table__.c if column.name != "id"),
            )
            .join(Candidate, Run.candidate_id == Candidate.id)
            .order_by(Run.id)
        )
        with self._read() as connection:
            if experiment is not None:
                stmt = stmt.where(
                    Candidate.experiment_id == self._experiment_id(connection, experiment)
                )
            if candidate is not None:
                stmt = stmt.where(Run.candidate_id == candidate)
            frame = _frame(connection, stmt)
        frame["seed"] = frame["seed"].astype("Int64")
        frame["pid"] = frame["pid"].astype("Int64")
        frame["git_dirty"] = frame["git_dirty"].astype("boolean")
        return _utc(frame, "started_at", "finished_at", "heartbeat_at")

    @_retrying
    def metrics(self, experiment: str | int, kind: str | None = None) -> pd.DataFrame:
        """Long form: one row per metric, with the run's stage and model/emulator versions."""
        with self._read() as connection:
            return self._metrics(connection, self._experiment_id(connection, experiment), kind)

    @_retrying
    def metric_table(self, experiment: str | int, kind: str, scope: str = "total") -> pd.DataFrame:
        """Wide form: one row per candidate (and scope_key unless scope is "total"), one
        column per metric name, beside the candidate's status and reason in the stage that
        produces that kind of evidence (an emulator run pruned later does not hide an
        analytical "ok").

        A candidate's numbers come from its latest run that recorded `kind` at `scope`;
        `metric_run_id`, `model_version` and `emulator_version` name that run. Candidates
        without such metrics (infeasible, failed) keep their row, with NaN numbers.
        """
        check_choice("metric.kind", kind, METRIC_KINDS)
        check_choice("metric.scope", scope, METRIC_SCOPES)
        with self._read() as connection:
            experiment_id = self._experiment_id(connection, experiment)
            candidates = self._candidates(connection, experiment_id, STAGE_OF_KIND.get(kind))
            long = self._metrics(connection, experiment_id, kind, scope)
        latest_run = long.groupby("candidate_id")["run_id"].transform("max")
        long = long[long["run_id"] == latest_run]
        keys = ["candidate_id"] if scope == "total" else ["candidate_id", "scope_key"]
        wide = long.pivot(index=keys, columns="name", values="value")
        wide.columns.name = None
        source = (
            long.groupby("candidate_id")[["run_id", "model_version", "emulator_version"]]
            .first()
            .rename(columns={"run_id": "metric_run_id"})
            .reset_index()
        )
        fixed = [
            "candidate_id", "hash", "origin", "is_baseline", "stage", "status", "reason",
            "metric_run_id", "model_version", "emulator_version", *keys[1:],
        ]  # fmt: skip
        clash = sorted(set(wide.columns) & set(fixed))
        if clash:
            raise ValueError(f"metric names {clash} clash with metric_table's own columns")
        table = (
            candidates[["id", "hash", "origin", "is_baseline", "stage", "status", "reason"]]
            .rename(columns={"id": "candidate_id"})
            .merge(source, on="candidate_id", how="left")
            .merge(wide.reset_index(), on="candidate_id", how="left")
        )
        table["metric_run_id"] = table["metric_run_id"].astype("Int64")
        return table[fixed + sorted(wide.columns)]

    @_retrying
    def decisions(self, experiment: str | int | None = None) -> pd.DataFrame:
        stmt = (
            select(
                Decision.id,
                Decision.experiment_id,
                Experiment.name.label("experiment"),
                Decision.verdict,
                Decision.rationale,
                Decision.author,
                _raw(Decision.created_at),
                _raw(Decision.evidence),
                Decision.candidate_id,
            )
            .join(Experiment, Decision.experiment_id == Experiment.id)
            .order_by(Decision.id)
        )
        with self._read() as connection:
            if experiment is not None:
                stmt = stmt.where(
                    Decision.experiment_id == self._experiment_id(connection, experiment)
                )
            frame = _frame(connection, stmt)
        frame["candidate_id"] = frame["candidate_id"].astype("Int64")
        return _utc(frame, "created_at")

    @_retrying
    def artifacts(
        self, experiment: str | int | None = None, run: int | None = None
    ) -> pd.DataFrame:
        """Evidence files, with the candidate of their run and their path on disk."""
        stmt = (
            select(
                Artifact.id,
                Artifact.experiment_id,
                Run.candidate_id,
                Artifact.run_id,
                Artifact.role,
                Artifact.media_type,
                Artifact.name,
                Artifact.sha256,
                Artifact.size,
                _raw(Artifact.created_at),
            )
            .outerjoin(Run, Artifact.run_id == Run.id)
            .order_by(Artifact.id)
        )
        with self._read() as connection:
            if experiment is not None:
                stmt = stmt.where(
                    Artifact.experiment_id == self._experiment_id(connection, experiment)
                )
            if run is not None:
                stmt = stmt.where(Artifact.run_id == run)
            frame = _frame(connection, stmt)
        for column in ("experiment_id", "candidate_id", "run_id"):
            frame[column] = frame[column].astype("Int64")
        frame["path"] = [
            str(self.artifact_path(sha)) if self.evidence_dir is not None else None
            for sha in frame["sha256"]
        ]
        return _utc(frame, "created_at")

    @_retrying
    def compare(self, a: int, b: int) -> pd.DataFrame:
        """The fields that differ between candidates a and b: config and mapping as dotted
        paths ("config.banks.count"), then total metrics as "kind:name"."""
        with self._read() as connection:
            fields_a, fields_b = (self._comparable_fields(connection, c) for c in (a, b))
        names = sorted(set(fields_a) | set(fields_b), key=_field_order)
        rows = [
            (name, fields_a.get(name), fields_b.get(name))
            for name in names
            if canonical_json(fields_a.get(name)) != canonical_json(fields_b.get(name))
        ]
        return pd.DataFrame(rows, columns=["field", "a", "b"], dtype=object)

    @_retrying
    def compare_metrics(self, a: int, b: int, scope: str = "total") -> pd.DataFrame:
        """Metric by metric, candidates a and b side by side, each kind kept apart.

        For each evidence kind, a candidate's figures come from its latest run that
        recorded that kind. Columns: kind, name, unit, scope, scope_key, a, b,
        delta (b - a), ratio (b / a), then the run id and model/emulator versions each
        side's figure came from. A metric only one side has keeps a NaN on the other."""
        check_choice("metric.scope", scope, METRIC_SCOPES)
        with self._read() as connection:
            sides = [self._latest_metrics(connection, c, scope) for c in (a, b)]
        keys = ["kind", "name", "unit", "scope", "scope_key"]
        table = sides[0].merge(sides[1], on=keys, how="outer", suffixes=("_a", "_b"))
        table = table.rename(columns={"value_a": "a", "value_b": "b"})
        table["delta"] = table["b"] - table["a"]
        table["ratio"] = table["b"] / table["a"].where(table["a"] != 0)
        kind_order = {k: i for i, k in enumerate(METRIC_KINDS)}
        table = table.sort_values(
            ["kind", "scope", "scope_key", "name"],
            key=lambda col: col.map(kind_order) if col.name == "kind" else col,
        ).reset_index(drop=True)
        side_columns = [
            f"{c}_{s}" for s in ("a", "b") for c in ("run_id", "model_version", "emulator_version")
        ]
        for column in ("run_id_a", "run_id_b"):
            table[column] = table[column].astype("Int64")
        return table[[*keys, "a", "b", "delta", "ratio", *side_columns]]

    # ---- read helpers -------------------------------------------------------------

    def _get(self, session: Session, model: type[_T], key: int) -> _T:
        found = session.get(model, _as_id(key))
        if found is None:
            table = model.__tablename__  # type: ignore[attr-defined]
            raise self._not_found(session.connection(), table, key)
        return found

    def _not_found(self, connection: Connection, what: str, value: Any) -> RecordNotFound:
        if what == "experiment":
            names = connection.scalars(select(Experiment.name).order_by(Experiment.id)).all()
            if not names:
                allowed = "an experiment of this store, which has none yet"
            elif len(names) <= 12:
                allowed = "an experiment name or id: " + ", ".join(names)
            else:
                allowed = f"one of this store's {len(names)} experiments (`dse history` lists them)"
            return RecordNotFound(self.url, "experiment", value, allowed)
        if what == "candidate":
            return self._candidate_not_found(connection, value)
        model = {"run": Run, "decision": Decision, "artifact": Artifact}[what]
        low, high, count = connection.execute(
            select(func.min(model.id), func.max(model.id), func.count(model.id))
        ).one()
        allowed = f"a {what} id of this store ({count} {what}s" + (
            f", ids {low} to {high})" if count else ")"
        )
        return RecordNotFound(self.url, what, value, allowed)

    def _candidate_not_found(
        self, connection: Connection, value: Any, experiment_id: int | None = None
    ) -> RecordNotFound:
        stmt = select(func.min(Candidate.id), func.max(Candidate.id), func.count(Candidate.id))
        where = "this store"
        if experiment_id is not None:
            stmt = stmt.where(Candidate.experiment_id == experiment_id)
            name = connection.scalar(select(Experiment.name).where(Experiment.id == experiment_id))
            where = f"experiment {name!r}"
        low, high, count = connection.execute(stmt).one()
        ids = f", ids {low} to {high}" if count else ""
        return RecordNotFound(
            self.url, "candidate", value, f"a candidate id of {where} ({count} candidates{ids})"
        )

    def _experiment_id(self, connection: Connection, name_or_id: str | int) -> int:
        if isinstance(name_or_id, numbers.Integral) and not isinstance(name_or_id, bool):
            found = connection.scalar(select(Experiment.id).where(Experiment.id == int(name_or_id)))
        elif isinstance(name_or_id, str):
            found = connection.scalar(select(Experiment.id).where(Experiment.name == name_or_id))
            if found is None and name_or_id.strip().isdigit():  # an id typed on a command line
                found = connection.scalar(
                    select(Experiment.id).where(Experiment.id == int(name_or_id))
                )
        else:
            raise TypeError(f"an experiment is named by a str or an int id, not {name_or_id!r}")
        if found is None:
            raise self._not_found(connection, "experiment", name_or_id)
        return found

    def _candidates(self, connection: Connection, experiment_id: int, stage: str | None = None) -> pd.DataFrame:
        # Each candidate's latest run (of `stage`, when given), as a grouped derived table
        # joined once. (A correlated subquery reads faster on SQLite, but PostgreSQL may
        # plan it as a join filter evaluated for every candidate-run pair.)
        runs = select(Run.candidate_id, func.max(Run.id).label("run_id")).join(
            Candidate, Run.candidate_id == Candidate.id).where(Candidate.experiment_id == experiment_id)
        if stage is not None:
            runs = runs.where(Run.stage == stage)
        latest = runs.group_by(Run.candidate_id).subquery()
        frame = _frame(
            connection,
            select(
                Candidate.id,
                Candidate.hash,
                Candidate.origin,
                _raw(Candidate.config),
                _raw(Candidate.mapping),
                _raw(Candidate.diff),
                _raw(Candidate.created_at),
                latest.c.run_id,
                Run.stage,
                Run.status,
                Run.reason,
            )
            .outerjoin(latest, latest.c.candidate_id == Candidate.id)
            .outerjoin(Run, Run.id == latest.c.run_id)
            .where(Candidate.experiment_id == experiment_id)
            .order_by(Candidate.id),
        )
        baseline = connection.scalar(
            select(Experiment.baseline_candidate_id).where(Experiment.id == experiment_id)
        )
        frame.insert(3, "is_baseline", frame["id"] == baseline)
        frame["run_id"] = frame["run_id"].astype("Int64")
        return _utc(frame, "created_at")

    def _metrics(
        self,
        connection: Connection,
        experiment_id: int,
        kind: str | None,
        scope: str | None = None,
    ) -> pd.DataFrame:
        stmt = (
            select(
                Metric.id,
                Run.candidate_id,
                Metric.run_id,
                Run.stage,
                Metric.kind,
                Metric.name,
                Metric.value,
                Metric.unit,
                Metric.scope,
                Metric.scope_key,
                Run.model_version,
                Run.emulator_version,
            )
            .join(Run, Metric.run_id == Run.id)
            .join(Candidate, Run.candidate_id == Candidate.id)
            .where(Candidate.experiment_id == experiment_id)
        )
        if kind is not None:
            stmt = stmt.where(Metric.kind == check_choice("metric.kind", kind, METRIC_KINDS))
        if scope is not None:
            stmt = stmt.where(Metric.scope == scope)
        # Sorted here, not in SQL: a sort of the fetched rows is cheaper than the
        # database's temporary B-tree over the joined rows.
        frame = _frame(connection, stmt).sort_values(["run_id", "id"], kind="stable")
        frame = frame.drop(columns="id").reset_index(drop=True)
        frame["value"] = frame["value"].astype("float64")
        return frame

    def _latest_metrics(self, connection: Connection, candidate_id: int, scope: str) -> pd.DataFrame:
        if connection.scalar(select(Candidate.id).where(Candidate.id == _as_id(candidate_id))) is None:
            raise self._candidate_not_found(connection, candidate_id)
        latest = (
            select(Metric.kind, func.max(Metric.run_id).label("run_id"))
            .join(Run, Metric.run_id == Run.id)
            .where(Run.candidate_id == candidate_id, Metric.scope == scope)
            .group_by(Metric.kind)
            .subquery()
        )
        frame = _frame(
            connection,
            select(
                Metric.kind, Metric.name, Metric.unit, Metric.scope, Metric.scope_key,
                Metric.value, Metric.run_id, Run.model_version, Run.emulator_version,
            )
            .join(latest, (Metric.kind == latest.c.kind) & (Metric.run_id == latest.c.run_id))
            .join(Run, Metric.run_id == Run.id)
            .where(Metric.scope == scope),
        )  # fmt: skip
        frame["value"] = frame["value"].astype("float64")
        return frame

    def _comparable_fields(self, connection: Connection, candidate_id: int) -> dict[str, Any]:
        row = connection.execute(
            select(Candidate.config, Candidate.mapping).where(Candidate.id == _as_id(candidate_id))
        ).one_or_none()
        if row is None:
            raise self._candidate_not_found(connection, candidate_id)
        fields = flatten({"config": row.config, "mapping": row.mapping})
        # Latest run first, so for each kind:name the newest value wins.
        metrics = connection.execute(
            select(Metric.kind, Metric.name, Metric.value)
            .join(Run, Metric.run_id == Run.id)
            .where(Run.candidate_id == candidate_id, Metric.scope == "total")
            .order_by(Run.id.desc())
        )
        for kind, name, value in metrics:
            fields.setdefault(f"{kind}:{name}", value)
        return fields


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as {"dotted.path": leaf}; lists and empty dicts are leaves."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def diff_fields(baseline: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, list[Any]]:
    """{"dotted.path": [baseline_value, other_value]} for the leaves that differ."""
    flat_a, flat_b = flatten(baseline), flatten(other)
    return {
        path: [flat_a.get(path), flat_b.get(path)]
        for path in sorted(set(flat_a) | set(flat_b), key=_field_order)
        if canonical_json(flat_a.get(path)) != canonical_json(flat_b.get(path))
    }


def _field_order(field: str) -> tuple[int, str]:
    section = field.split(".", 1)[0]
    return ({"config": 0, "mapping": 1}.get(section, 2), field)


def _diff_from_baseline(
    session: Session, experiment: Experiment, config: dict[str, Any], mapping: dict[str, Any]
) -> dict[str, list[Any]]:
    if experiment.baseline_candidate_id is None:
        return {}
    baseline = session.get(Candidate, experiment.baseline_candidate_id)
    assert baseline is not None  # a foreign key guarantees it
    return diff_fields(
        {"config": baseline.config, "mapping": baseline.mapping},
        {"config": config, "mapping": mapping},
    )


def _checked_acceptance(acceptance: Any) -> list[dict[str, str]]:
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


def _retry_once_on_conflict(write: Callable[[], _T]) -> _T:
    # SQLite serialises writers (BEGIN IMMEDIATE), but on PostgreSQL two processes can
    # both miss an existing row and insert; the loser's retry then finds the winner's.
    try:
        return write()
    except IntegrityError:
        return write()


def _frame(connection: Connection, stmt: Any) -> pd.DataFrame:
    result = connection.execute(stmt)
    return pd.DataFrame(result.fetchall(), columns=list(result.keys()))


def _raw(column: Any) -> Any:
    """A column as text, for DataFrames: JSON as its stored canonical text, timestamps as
    UTC text that pandas parses in one go (see _utc) instead of one object per value."""
    if isinstance(column.type, JSON):
        return cast(column, Text).label(column.name)
    if isinstance(column.type, DateTime):
        return _UtcText(column).label(column.name)
    return column


class _UtcText(FunctionElement):
    """A timestamp column as UTC text "YYYY-MM-DD HH:MM:SS[.ffffff]"."""

    type = String()
    inherit_cache = True
    name = "utc_text"


@compiles(_UtcText)
def _utc_text_as_stored(element: _UtcText, compiler: Any, **kw: Any) -> str:
    # SQLite keeps timestamps as UTC text already.
    return compiler.process(element.clauses, **kw)


@compiles(_UtcText, "postgresql")
def _utc_text_postgresql(element: _UtcText, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"


def _utc(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    # SQLite hands back text or naive datetimes (stored as UTC), PostgreSQL aware ones.
    for column in columns:
        values = frame[column]
        present = values.dropna()
        as_text = len(present) > 0 and isinstance(present.iloc[0], str)
        frame[column] = pd.to_datetime(values, utc=True, format="ISO8601" if as_text else None)
    return frame


def _as_utc(moment: datetime | None) -> datetime | None:
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=timezone.utc)


def _as_id(value: Any) -> int:
    """An id as an int; a non-integer (a typo on a command line) matches no row."""
    try:
        return operator.index(value)
    except TypeError:
        text = str(value).strip()
        return int(text) if text.isdigit() else -1


_METRIC_KEYS = frozenset(("kind", "name", "value", "unit", "scope", "scope_key"))
_METRIC_KIND_SET = frozenset(METRIC_KINDS)
_METRIC_SCOPE_SET = frozenset(METRIC_SCOPES)
METRIC_COLUMNS = MetricRow._fields  # ("kind", "name", "value", "unit", "scope", "scope_key")


def _metric_values(metrics: Iterable[MetricIn | Mapping[str, Any]], owner: str, *prefix: Any) -> list[tuple]:
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
        if out and not _columns_pass(*list(zip(*out))[len(prefix):]):
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


def _batch_metric_values(results: list[Mapping[str, Any]]) -> list[tuple]:
    """`_metric_values` of every result's metrics, as (run_id, kind, ...) rows: at once for
    a batch of MetricRows, else run by run (MetricIn's checks, the error naming the run)."""
    rows = _checked_metric_rows(results)
    if rows is not None:
        return rows
    out: list[tuple] = []
    for r in results:
        owner = f"run {r['run_id']}"
        try:
            out += _metric_values(r.get("metrics", ()), owner, r["run_id"])
        except (TypeError, ValueError) as exc:
            message = str(exc)
            raise type(exc)(message if message.startswith(owner) else f"{owner}: {message}") from None
    return out


def _checked_metric_rows(results: list[Mapping[str, Any]]) -> list[tuple] | None:
    """MetricIn's checks column by column over a whole batch of MetricRows (what a sweep's
    stages hand over, thousands of rows); None if a metric is of another form or a check
    fails (then `_metric_values` finds which, run by run)."""
    run_ids: list[int] = []
    rows: list[MetricRow] = []
    for r in results:
        metrics = r.get("metrics") or ()
        if metrics:
            if not all(type(m) is MetricRow for m in metrics):
                return None
            run_ids += [r["run_id"]] * len(metrics)
            rows += metrics
    if not rows:
        return []
    kinds, names, values, units, scopes, keys = zip(*rows)
    if not all(type(v) is float for v in values):
        return None
    passes = (_columns_pass(kinds, names, values, units, scopes, keys)
              and len(set(zip(run_ids, kinds, names, scopes, keys))) == len(rows))
    return list(zip(run_ids, kinds, names, values, units, scopes, keys)) if passes else None


def _columns_pass(kinds: Sequence, names: Sequence, values: Sequence[float], units: Sequence, scopes: Sequence,
                  keys: Sequence) -> bool:
    """MetricIn's checks (but for duplicates) over metric columns at once, `values` floats
    already. False sends the caller to MetricIn itself, for the error."""
    return (set(kinds) <= _METRIC_KIND_SET and set(scopes) <= _METRIC_SCOPE_SET and all(names)
            and None not in set(units) and not math.isnan(sum(values))  # NaN anywhere shows in the sum
            and all(map(operator.eq, map("total".__eq__, scopes), map("".__eq__, keys))))


def _metric_rows(metrics: Iterable[MetricIn | Mapping[str, Any]], owner: str) -> list[dict[str, Any]]:
    return [dict(zip(METRIC_COLUMNS, v)) for v in _metric_values(metrics, owner)]


# SQLite: SQLAlchemy can only keep RETURNING ids in parameter order there by inserting one
# row per statement. Under the write lock every transaction of this store takes (BEGIN
# IMMEDIATE) no other writer can add rows, so a plain executemany followed by reading the
# ids back gives the same ids at a fraction of the cost.

class _DriverCursor:
    """The SQLite driver's own cursor, in a transaction SQLAlchemy began: the sweep's hot
    path without SQLAlchemy's work per statement (on a small statement, as much as the
    statement's own). Errors come out as SQLAlchemy's, as from `exec_driver_sql`, so the
    retries on a busy database and the callers see one kind."""

    def __init__(self, connection: Connection):
        self.dialect = connection.dialect
        self._cursor = connection.connection.driver_connection.cursor()
        self._error = self.dialect.loaded_dbapi.Error

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        try:
            return self._cursor.execute(sql, params)
        except self._error as error:
            raise DBAPIError.instance(sql, params, error, self._error, dialect=self.dialect) from None

    def executemany(self, sql: str, rows: list[Sequence[Any]]) -> Any:
        try:
            return self._cursor.executemany(sql, rows)
        except self._error as error:
            raise DBAPIError.instance(sql, rows, error, self._error, dialect=self.dialect, ismulti=True) from None


def _db_values(dialect: Any, table: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """Column values as the driver takes them (the columns' own bind processing)."""
    out = {}
    for name, value in values.items():
        process = table.c[name].type._cached_bind_processor(dialect)
        out[name] = process(value) if process is not None and value is not None else value
    return out


def _sqlite_insert_candidates(cur: _DriverCursor, experiment_id: int, rows: list[tuple], now: datetime,
                              before: int) -> tuple[dict[str, int], dict[str, int]]:
    """(hash, config text, mapping text, origin, diff) rows of distinct hashes inserted
    unless the experiment holds them already: (known, created), each hash -> id. `before`:
    the largest candidate id before the INSERT; under the write lock the rows it inserts
    are exactly those with ids above it, in order when it inserted them all."""
    columns = ("experiment_id", "hash", "config", "mapping", "origin", "diff", "created_at")
    stamp = _db_values(cur.dialect, Candidate.__table__, {"created_at": now})["created_at"]
    inserted = cur.executemany(
        f"INSERT INTO candidate ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
        "ON CONFLICT (experiment_id, hash) DO NOTHING",
        [(experiment_id, key, config, mapping, origin, json_text(diff), stamp)
         for key, config, mapping, origin, diff in rows]).rowcount
    if inserted == len(rows) and cur.execute("SELECT max(id) FROM candidate").fetchone()[0] == before + inserted:
        return {}, {row[0]: before + 1 + i for i, row in enumerate(rows)}
    known: dict[str, int] = {}
    created: dict[str, int] = {}
    keys = [row[0] for row in rows]
    for i in range(0, len(keys), 500):  # stay under the bound-parameter limit
        part = keys[i:i + 500]
        for key, cid in cur.execute(f"SELECT hash, id FROM candidate WHERE experiment_id = ? AND hash IN "
                                    f"({', '.join('?' * len(part))})", (experiment_id, *part)):
            (created if cid > before else known)[key] = cid
    return known, created


def _candidate_ids(connection: Connection, experiment_id: int, keys: list[str]) -> dict[str, int]:
    """hash -> id of this experiment's candidates among `keys`."""
    table = Candidate.__table__
    ids: dict[str, int] = {}
    for i in range(0, len(keys), 500):  # stay under the bound-parameter limit
        ids.update(connection.execute(select(table.c.hash, table.c.id).where(
            table.c.experiment_id == experiment_id, table.c.hash.in_(keys[i:i + 500]))).all())
    return ids


def _sqlite_finish_runs(cur: _DriverCursor, results: list[Mapping[str, Any]], now: datetime) -> int:
    """finish_runs' UPDATE in plain SQL: how many runs it finished. Only a running run, or
    one an open wrongly marked abandoned, may be finished. Runs with the same outcome (a
    batch's ok runs, say) are finished by one statement each; the rest by one executemany."""
    stamp = _db_values(cur.dialect, Run.__table__, {"finished_at": now})["finished_at"]
    pattern = ABANDONED.replace("/", "//").replace("%", "/%").replace("_", "/_") + "%"
    # `+status`: not a reference SQLite may serve from the status index, which this very
    # UPDATE changes; with it the UPDATE runs in one pass, about 3x faster.
    head = "UPDATE run SET status = ?, reason = ?, error = ?, traceback = ?, finished_at = ?, heartbeat_at = ? WHERE "
    finishable = " AND (+status = 'running' OR (+status = 'crashed' AND error LIKE ? ESCAPE '/'))"
    groups: dict[tuple, list[int]] = {}
    for r in results:
        groups.setdefault((r["status"], r.get("reason"), r.get("error"), r.get("traceback")), []).append(r["run_id"])
    done, single = 0, []
    for outcome, ids in groups.items():
        if len(ids) == 1:
            single.append((*outcome, stamp, stamp, ids[0], pattern))
            continue
        for i in range(0, len(ids), 500):  # stay under the bound-parameter limit
            part = ids[i:i + 500]
            done += cur.execute(f"{head}id IN ({', '.join('?' * len(part))}){finishable}",
                                (*outcome, stamp, stamp, *part, pattern)).rowcount
    if single:
        done += cur.executemany(f"{head}id = ?{finishable}", single).rowcount
    return done


def _sqlite_insert_runs(cur: _DriverCursor, candidate_ids: list[int], base: dict[str, Any],
                        before: int | None = None) -> list[int]:
    """Runs inserted, ids in order. `before`: the largest run id before (read if not given)."""
    shared = _db_values(cur.dialect, Run.__table__, base)
    columns = list(shared) + ["candidate_id"]
    if before is None:
        before = cur.execute("SELECT coalesce(max(id), 0) FROM run").fetchone()[0]
    cur.executemany(f"INSERT INTO run ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                    [(*shared.values(), cid) for cid in candidate_ids])
    # Each row took the next id (rowid = max + 1, in insertion order), so n rows above
    # `before` ending at before + n are exactly before + 1 .. before + n.
    after, count = cur.execute("SELECT max(id), count(*) FROM run WHERE id > ?", (before,)).fetchone()
    if count != len(candidate_ids) or after != before + count:
        raise RuntimeError(f"run ids after id {before}: expected {len(candidate_ids)} new rows in a row, "
                           f"found {count} up to id {after}")
    return list(range(before + 1, after + 1))


_METRIC_ROWS_PER_INSERT = 100  # 700 parameters, far below SQLite's limit of 32,766


def _insert_metrics(connection: Connection, rows: list[tuple]) -> None:
    """(run_id, kind, name, value, unit, scope, scope_key) rows as one executemany of the
    driver (no per-row parameter processing: these are plain strings and floats)."""
    style = connection.dialect.paramstyle
    mark = {"qmark": "?", "format": "%s", "pyformat": "%s"}.get(style)
    if mark is None:
        connection.execute(insert(Metric.__table__), [dict(zip(("run_id",) + METRIC_COLUMNS, r)) for r in rows])
        return
    columns = ("run_id",) + METRIC_COLUMNS
    head = f"INSERT INTO metric ({', '.join(columns)}) VALUES "
    one = f"({', '.join([mark] * len(columns))})"
    if connection.dialect.name != "sqlite":
        connection.exec_driver_sql(head + one, rows)
        return
    # SQLite: rows by the hundred per statement, ~20% cheaper than one row per step (the
    # statement for a full chunk is prepared once and cached by the driver).
    cur = _DriverCursor(connection)
    for i in range(0, len(rows), _METRIC_ROWS_PER_INSERT):
        part = rows[i:i + _METRIC_ROWS_PER_INSERT]
        cur.execute(head + ", ".join([one] * len(part)), tuple(itertools.chain.from_iterable(part)))


def _read_chunks(path: Path, size: int = 1 << 20) -> Iterator[bytes]:
    with open(path, "rb") as source:
        while chunk := source.read(size):
            yield chunk


def _fsync_dir(path: Path) -> None:
    # A rename is durable once the folder holding the new name is synced (POSIX).
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _media_type(name: str | None) -> str:
    if name:
        lower = name.lower()
        if lower.endswith((".ndjson", ".jsonl")):
            return "application/x-ndjson"
        guessed, _ = mimetypes.guess_type(lower)
        if guessed:
            return guessed
    return "application/octet-stream"
