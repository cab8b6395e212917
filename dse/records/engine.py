"""The record store's database: engine creation (SQLite or PostgreSQL connection setup),
alembic migrations, transactions, and retries of transactions that meet a busy database
or a lost connection to the database server.

SQLite and PostgreSQL differ only in the connection setup here: SQLite gets WAL, a busy
timeout, foreign keys, and writers that BEGIN IMMEDIATE (the `SQLITE_BEGIN` execution
option of `writer_engine`); PostgreSQL a connect timeout and no server-side prepared
statements.
"""

from __future__ import annotations

import functools
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from dse.errors import InputError, Stopped
from dse.identity import json_text
from dse.records.opening import bad, is_corrupt

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# The newest migration; a test checks it against the migrations folder. A store already
# at this revision opens without loading alembic at all (a faster `dse history`).
SCHEMA_HEAD = "0019"
SQLITE_BUSY_TIMEOUT_MS = 10_000
SQLITE_MMAP_BYTES = 256 * 1024 * 1024
# WAL pages before a commit checkpoints them into the database (SQLite's default: 1000,
# 4 MB). A sweep's batch of thousands of candidates writes about 2 kB a candidate; at the
# default, its commit stopped the driver for a checkpoint (page copies and two syncs) that
# closing the store does again: a grid sweep of 2,320 candidates spent 10-15 ms of CPU and
# 35 ms of a busy disk's time on it. 16 MB: such a batch goes in whole; the file stays bounded.
SQLITE_WAL_AUTOCHECKPOINT_PAGES = 4096
# How long a write keeps retrying a busy database before it gives up with StoreBusy.
RETRY_BUSY_FOR_S = 120.0
# Execution option read by the SQLite "begin" listener: which BEGIN to emit.
SQLITE_BEGIN = "dse_sqlite_begin"
# PostgreSQL advisory lock key taken while migrating ("dse-rec" in ASCII).
MIGRATION_LOCK = 0x6473652D726563

# A transaction that loses its connection to the database server (a PostgreSQL restart,
# a dropped network) is tried again this many times, the waits doubling and adding up to
# this many seconds; then the command stops (exit 75), and a rerun resumes. From the
# environment: $DSE_DB_RETRIES (0: no retries), $DSE_DB_RETRY_S.
DB_RETRIES = 5
DB_RETRY_S = 20.0
DB_RETRIES_ENV = "DSE_DB_RETRIES"
DB_RETRY_ENV = "DSE_DB_RETRY_S"

_T = TypeVar("_T")


class StoreBusy(RuntimeError):
    """The database stayed busy for RETRY_BUSY_FOR_S seconds."""


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
    # A file with no page yet holds nothing a power cut could take: its switch to WAL (a
    # rewrite of its first page) goes without the rollback journal's syncs, 15-20 ms of a
    # new store's open. A file with pages switches (once, WAL stays) with them.
    if cursor.execute("PRAGMA page_count").fetchone()[0] == 0:
        cursor.execute("PRAGMA synchronous=OFF")
    cursor.execute("PRAGMA journal_mode=WAL")
    # In WAL mode, NORMAL syncs at checkpoints rather than at every commit: a killed
    # process loses nothing committed and the file stays intact; only a power cut may
    # drop the last commits. About 3x the small-transaction rate of FULL.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA wal_autocheckpoint={SQLITE_WAL_AUTOCHECKPOINT_PAGES}")
    # A write transaction's pages stay in the page cache until its commit, as many as the WAL
    # takes before a checkpoint: at SQLite's default (2 MB) a sweep's batch spilled pages into
    # the WAL mid-transaction and wrote many of them again (a grid sweep of 2,320 candidates:
    # 5,047 page writes -> 3,383, strace). (Reads take their pages mostly from the mmap.)
    cursor.execute(f"PRAGMA cache_size={SQLITE_WAL_AUTOCHECKPOINT_PAGES}")
    cursor.execute("PRAGMA foreign_keys=ON")
    # Reads of a large store go through the OS page cache without a copy per page.
    cursor.execute(f"PRAGMA mmap_size={SQLITE_MMAP_BYTES}")
    cursor.close()


def _sqlite_on_begin(connection: Connection) -> None:
    # Writers BEGIN IMMEDIATE: a deferred transaction that reads and then writes fails
    # at once (SQLITE_BUSY) if another writer committed in between; busy_timeout only
    # helps transactions that ask for the write lock up front.
    mode = connection.get_execution_options().get(SQLITE_BEGIN, "DEFERRED")
    sql = f"BEGIN {mode}"
    dialect = connection.dialect
    error_type = dialect.loaded_dbapi.Error
    # On the driver's cursor: a BEGIN needs no statement machinery. A busy database's
    # error comes out as SQLAlchemy's, as from a statement, so that writes retry it.
    try:
        connection.connection.driver_connection.execute(sql)
    except error_type as error:
        raise DBAPIError.instance(sql, (), error, error_type, dialect=dialect) from None


# The least time a PostgreSQL session may sit idle inside a transaction (see make_engine).
IDLE_IN_TRANSACTION_MIN_S = 10.0


def make_engine(url: str, idle_in_transaction_s: float | None = None) -> Engine:
    """An engine for the store at `url` (see the module docstring for the setup).

    `idle_in_transaction_s`: on PostgreSQL, the server ends a session of this engine that
    sits that long inside a transaction waiting for its client (at least
    IDLE_IN_TRANSACTION_MIN_S). A process paused or cut off mid-transaction would
    otherwise hold its row locks for ever, and a sweep taking over its lease wait on them."""
    # JSON is stored as canonical text (sorted keys, no spaces; 0002 rewrote older rows),
    # so reads hand it out as stored instead of parsing and re-serialising every row.
    sa_url = make_url(url)
    if sa_url.get_backend_name() != "sqlite":
        connect_args = {}
        if sa_url.get_backend_name() == "postgresql":
            # An unreachable server is an error in seconds, not a hang.
            # No server-side prepared statements: a generic plan, made blind to how
            # many candidates an experiment has, can be ruinous for these reads.
            connect_args = {"connect_timeout": 5, "application_name": "dse",
                            "prepare_threshold": None}  # fmt: skip
            if idle_in_transaction_s is not None:
                idle_ms = int(max(idle_in_transaction_s, IDLE_IN_TRANSACTION_MIN_S) * 1000)
                connect_args["options"] = f"-c idle_in_transaction_session_timeout={idle_ms}"
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


def writer_engine(engine: Engine) -> Engine:
    """`engine` for write transactions: on SQLite they take the write lock as they begin."""
    return engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"})


@contextmanager
def write_session(writer: Engine) -> Iterator[Session]:
    """An ORM session in one write transaction of `writer` (a `writer_engine`)."""
    with Session(writer, expire_on_commit=False) as session, session.begin():
        yield session


def is_transient(error: DBAPIError) -> bool:
    """A failure that the same transaction, tried again, can get past."""
    orig = error.orig
    if getattr(orig, "sqlstate", None) in ("40001", "40P01"):  # serialization, deadlock
        return True
    if type(orig).__module__.startswith("sqlite3"):
        message = str(orig).lower()
        return "locked" in message or "busy" in message
    return False


def is_lost_connection(error: DBAPIError) -> bool:
    """A failure because the connection to the database server went away (or the server
    cannot be reached, or is starting up): a new connection may get past it. Never SQLite's."""
    orig = error.orig
    if type(orig).__module__.startswith("sqlite3"):
        return False
    if error.connection_invalidated:  # SQLAlchemy's own judgement: the dialect saw a disconnect
        return True
    state = getattr(orig, "sqlstate", None) or ""
    # 08: connection exception; 57P01-03: the server shut down or is not accepting yet.
    if state.startswith("08") or state in ("57P01", "57P02", "57P03"):
        return True
    return isinstance(error, OperationalError) and not state  # psycopg's own: connect refused, closed


def lost_connection_settings() -> tuple[int, float]:
    """(retries, seconds they wait in all): $DSE_DB_RETRIES and $DSE_DB_RETRY_S when set,
    else DB_RETRIES and DB_RETRY_S."""
    out: list[float] = []
    for name, default, allowed in ((DB_RETRIES_ENV, DB_RETRIES, "a whole number of retries, 0 or more"),
                                   (DB_RETRY_ENV, DB_RETRY_S, "a positive number of seconds")):
        text = os.environ.get(name, "").strip()
        if not text:
            out.append(default)
            continue
        try:
            value = int(text) if name == DB_RETRIES_ENV else float(text)
        except ValueError:
            value = -1
        if not (0 <= value < 1000 if name == DB_RETRIES_ENV else 0 < value <= 86400):
            raise InputError("(environment)", name, text, allowed)
        out.append(value)
    return int(out[0]), float(out[1])


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _retry_lost_connection(store: Any, error: DBAPIError, tried: int) -> None:
    """Wait before retry `tried + 1` of a transaction that lost its connection, saying so on
    one line; `Stopped` when the retries are spent (and, for DB_RETRY_S after that, at the
    first lost connection of the same store: the cleanup of a sweep stopping for want of
    its database fails fast rather than waiting once per write)."""
    retries, total = lost_connection_settings()
    gave_up = store.__dict__.get("_dse_gave_up_at")
    if tried >= retries or (gave_up is not None and time.monotonic() - gave_up < total):
        store.__dict__["_dse_gave_up_at"] = time.monotonic()
        raise Stopped(f"lost the connection to the record store {store.url} and could not get it back "
                      f"({retries} retries over {total:g} s; {_first_line(error.orig)}); what was recorded "
                      "stays: rerun the same command once the database is back to resume") from None
    wait = total * 2 ** tried / (2 ** retries - 1)
    print(f"dse: lost the connection to the record store {store.url} ({_first_line(error.orig)}); "
          f"retry {tried + 1} of {retries} in {wait:.1f} s", file=sys.stderr, flush=True)
    time.sleep(wait)


def retrying(method: Callable[..., _T]) -> Callable[..., _T]:
    """Run a method of an object with a `url` (a Store) again, whole transactions, while
    the database is busy (StoreBusy after RETRY_BUSY_FOR_S seconds) or its connection is
    lost (`Stopped` after DB_RETRIES retries over DB_RETRY_S seconds, a line per retry)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> _T:
        deadline = time.monotonic() + RETRY_BUSY_FOR_S
        delay = 0.005
        lost = 0  # retries after a lost connection
        while True:
            try:
                return method(self, *args, **kwargs)
            except DBAPIError as error:
                # (lost: a store reached once, `Store.reached`; at its open, the URL's error)
                if is_lost_connection(error) and getattr(self, "reached", False):
                    _retry_lost_connection(self, error, lost)
                    lost += 1
                    continue
                if not is_transient(error):
                    if is_corrupt(error):  # found by a read after the open: the user's file, damaged
                        raise bad(self.url, f"an intact SQLite record store (SQLite says: {error.orig})") from None
                    raise
                if time.monotonic() > deadline:
                    raise StoreBusy(
                        f"the record store {self.url} stayed busy for {RETRY_BUSY_FOR_S:.0f} s "
                        f"({type(error.orig).__name__}: {error.orig})"
                    ) from error
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)

    return wrapper


def retry_once_on_conflict(write: Callable[[], _T]) -> _T:
    """`write()`, and once more if it broke a unique constraint."""
    # SQLite serialises writers (BEGIN IMMEDIATE), but on PostgreSQL two processes can
    # both miss an existing row and insert; the loser's retry then finds the winner's.
    try:
        return write()
    except IntegrityError:
        return write()


def schema_is_current(engine: Engine) -> bool:
    """Whether the store is at SCHEMA_HEAD (found without loading alembic)."""
    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return False
        versions = connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalars().all()
    return versions == [SCHEMA_HEAD]


def upgrade_schema(writer: Engine, create_new: Callable[[Connection], bool] | None = None) -> None:
    """Bring the store to alembic's head, in one write transaction; `create_new(connection)`
    first, which may make a new store's schema at the head in one go (`snapshot.create`:
    whether it did; if not, the migrations run)."""
    if create_new is not None and writer.dialect.name == "sqlite" and _new_sqlite_schema(writer, create_new):
        return
    # Inside one write transaction: two processes opening a new store at once
    # migrate one after the other instead of both creating tables. SQLite's BEGIN
    # IMMEDIATE serialises them; PostgreSQL needs a lock of its own (held to commit),
    # after which alembic reads the version the first process left.
    with writer.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        if create_new is not None and create_new(connection):
            return
        _migrate(writer, connection)


def _new_sqlite_schema(writer: Engine, create_new: Callable[[Connection], bool]) -> bool:
    """`create_new` on a SQLite file with no table yet, its commit without syncs (a file
    that holds nothing has nothing a power cut could take: the WAL's first commit syncs its
    header and folder, 5-10 ms of a new store's open): whether it made the schema. Not made
    (another process's tables came first): rolled back, for the synced transaction."""
    with writer.connect() as connection:
        if connection.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar():
            return False
        connection.rollback()  # (the read's transaction: SQLite sets the safety level outside one)
        driver = connection.connection.driver_connection
        driver.execute("PRAGMA synchronous=OFF")
        try:
            with connection.begin() as transaction:
                if create_new(connection):
                    return True
                transaction.rollback()
                return False
        finally:
            driver.execute("PRAGMA synchronous=NORMAL")


def _migrate(writer: Engine, connection: Connection) -> None:
    """alembic's upgrade to the head on `connection` (alembic loaded only here: a store at
    the head, or a new one made from its snapshot, needs none of it)."""
    from alembic import command
    from alembic.util.exc import CommandError

    config = alembic_config(writer.url.render_as_string(hide_password=False))
    config.attributes["connection"] = connection
    try:
        command.upgrade(config, "head")
    except CommandError as error:
        raise RuntimeError(
            f"cannot bring the record store {writer.url.render_as_string(hide_password=True)} "
            f"to this dse's schema (was it written by a newer dse?): {error}"
        ) from error
