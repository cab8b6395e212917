"""A bad `--db` is the user's mistake: one line (InputError), exit 2, nothing created.

`checked_url` looks at what `--db` names before any connection is made (the URL's form and
scheme; for SQLite the path: a folder, a file that is not SQLite or is truncated, a file or
folder dse cannot write); `checked_open` turns what the first statements meet (a corrupt
file, an unreachable server, a store from a newer dse, another program's database) into
the same kind of error. Nothing is created on disk for a bad store: the SQLite file (and
its folders) only once the checks passed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from sqlalchemy import Engine, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError

from dse.errors import InputError
from dse.records.sqlite_file import QUICK_CHECK_MAX_BYTES, existing_store_problem

FIELD = "--db"
SUPPORTED = "a SQLite path, sqlite:///PATH, or a URL such as postgresql://user@host/dse"
# Words of SQLite's errors that mean the file is damaged or not a database at all.
CORRUPT_WORDS = ("malformed", "not a database", "file is encrypted", "disk image")


class BadStore(InputError):
    """The record store named by --db (or $DSE_DB) cannot be used; nothing was written."""


def shown(text: str) -> str:
    """`text` with any password masked."""
    if "://" not in text:
        return text
    try:
        return make_url(text).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparseable URL is shown as typed
        return text


def bad(where: Any, allowed: str, value: Any = None) -> BadStore:
    where = shown(os.fspath(where)) if isinstance(where, (str, os.PathLike)) else str(where)
    allowed = " ".join(allowed.split())  # one line, whatever the database said
    return BadStore(where, FIELD, where if value is None else value, allowed)


EVIDENCE_PARAM = "evidence_dir"  # the URL's query parameter naming the store's evidence folder


def split_evidence_dir(url: str) -> tuple[str, Path | None]:
    """The URL without its `?evidence_dir=` parameter (SQLAlchemy and the driver never see
    it), and the folder it names (None: not named); BadStore if that is not a folder dse
    can write (checked without creating anything)."""
    if "://" not in url:
        return url, None
    parsed = make_url(url)
    if EVIDENCE_PARAM not in parsed.query:
        # SQLAlchemy drops a parameter with no value: an empty folder name is still a mistake.

        if "?" in url and any(k == EVIDENCE_PARAM for k, _ in parse_qsl(url.split("?", 1)[1], keep_blank_values=True)):
            raise BadStore(shown(url.split("?", 1)[0]), f"{FIELD} ?{EVIDENCE_PARAM}", "",
                           "a folder dse can write (an existing writable folder, or a new one inside one)")
        return url, None
    value = parsed.query[EVIDENCE_PARAM]
    rest = parsed.difference_update_query([EVIDENCE_PARAM]).render_as_string(hide_password=False)
    where = shown(rest)
    field = f"{FIELD} ?{EVIDENCE_PARAM}"
    if isinstance(value, tuple):
        raise BadStore(where, field, list(value), "one folder")
    allowed = "a folder dse can write (an existing writable folder, or a new one inside one)"
    if not value.strip() or "\x00" in value:
        raise BadStore(where, field, value, allowed)
    folder = Path(value).expanduser().resolve()
    probe = folder
    while not probe.exists():  # the nearest existing folder must take the new ones
        probe = probe.parent
    if not probe.is_dir():
        raise BadStore(where, field, value, f"{allowed}; {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise BadStore(where, field, value, f"{allowed}; {probe} is not writable")
    return rest, folder


def checked_url(url_or_path: str | os.PathLike[str]) -> str:
    """The SQLAlchemy URL of the store `url_or_path` names (a filesystem path becomes a
    SQLite URL), after the checks that need no connection; BadStore if they fail."""
    text = os.fspath(url_or_path)
    if not text.strip():
        raise bad(text, SUPPORTED + " (got an empty name)")
    if "\x00" in text:
        raise bad(text, SUPPORTED + " (the name holds a NUL character)", text.replace("\x00", "\\0"))
    if text == ":memory:":
        return "sqlite://"
    if "://" not in text:
        return f"sqlite:///{_checked_sqlite_path(text, text)}"
    try:
        url = make_url(text)
        url.port  # noqa: B018 - parsed here, so that a bad port is this error
    except Exception as error:  # noqa: BLE001 - ArgumentError, ValueError of a bad port
        raise bad(text, f"{SUPPORTED} (cannot parse it: {error})") from None
    split_evidence_dir(text)  # a bad ?evidence_dir= says so here, before anything is opened
    backend = url.get_backend_name()
    if backend in ("postgresql", "postgres"):
        if url.drivername in ("postgresql", "postgres"):
            url = url.set(drivername="postgresql+psycopg")
        elif url.drivername != "postgresql+psycopg":
            raise bad(text, f"{SUPPORTED} (driver '{url.drivername}' is not the one dse installs: "
                            "use postgresql:// or postgresql+psycopg://)")
        return url.render_as_string(hide_password=False)
    if backend == "sqlite":
        if url.drivername != "sqlite":
            raise bad(text, f"{SUPPORTED} (driver '{url.drivername}': use sqlite:///PATH)")
        memory = url.database in (None, "", ":memory:")
        checked = "sqlite://" if memory else f"sqlite:///{_checked_sqlite_path(url.database, text)}"
        if EVIDENCE_PARAM in url.query:  # kept for the Store, which strips it
            checked = make_url(checked).update_query_dict({EVIDENCE_PARAM: url.query[EVIDENCE_PARAM]})
            return checked.render_as_string(hide_password=False)
        return checked
    raise bad(text, f"{SUPPORTED} (scheme '{url.drivername}' is not a record store dse can use)")


def _checked_sqlite_path(name: str, text: str) -> Path:
    try:
        path = Path(name).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as error:
        raise bad(text, f"a SQLite file path ({error})") from None
    try:
        exists = path.exists()
        if exists and path.is_dir():
            raise bad(text, "a SQLite file, not a folder")
    except OSError as error:
        raise bad(text, f"a SQLite file path ({error.strerror or error})") from None
    if exists:
        problem = existing_store_problem(path)
        if problem is not None:
            raise bad(text, problem)
        return path
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise bad(text, f"a path through folders ({folder} is a file)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise bad(text, f"a new record store in a folder dse can write ({folder} is read-only)")
    return path


class Leftovers:
    """What opening a SQLite store may create (the file, its -wal, -shm and -journal, its
    folders), noted before the open, so that a store found bad leaves none of it behind."""

    def __init__(self, database: str | None):
        self.paths: list[Path] = []
        self.folders: list[Path] = []
        if not database:
            return
        path = Path(database)
        self.paths = [p for p in (path, *(Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal")))
                      if not p.exists()]
        folder = path.parent
        while not folder.exists():
            self.folders.append(folder)
            folder = folder.parent

    def remove(self) -> None:
        for path in self.paths:
            with contextlib.suppress(OSError):
                path.unlink()
        for folder in self.folders:
            with contextlib.suppress(OSError):
                folder.rmdir()


def check_revision(engine: Engine, known: set[str], head: str) -> None:
    """BadStore for a store at a revision this dse does not know (a newer dse wrote it),
    or for another program's database (tables, but no dse schema version)."""
    with engine.connect() as connection:
        inspector = inspect(connection)
        if not inspector.has_table("alembic_version"):
            tables = inspector.get_table_names()
            if tables:
                raise bad(_url_text(engine), f"a dse record store (this database holds other tables, e.g. "
                                              f"{', '.join(sorted(tables)[:3])}, and no dse schema version)")
            return
        versions = connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalars().all()
    unknown = [v for v in versions if v not in known]
    if unknown:
        raise bad(_url_text(engine), f"a store of this dse's schema (revisions up to {head}); schema revision "
                                      f"{unknown[0]} is from a newer dse: upgrade dse to open it",
                  value=f"schema revision {unknown[0]}")


def _url_text(engine: Engine | URL) -> str:
    url = engine.url if isinstance(engine, Engine) else engine
    if url.get_backend_name() == "sqlite" and url.database:
        return url.database
    return url.render_as_string(hide_password=True)


def is_corrupt(error: BaseException) -> bool:
    """A SQLite error that says the file is damaged or not a database."""
    orig = getattr(error, "orig", error)
    if not type(orig).__module__.startswith("sqlite3"):
        return False
    message = str(orig).lower()
    return any(word in message for word in CORRUPT_WORDS)


def as_bad_store(error: BaseException, url: URL, where: str | None = None) -> BadStore | None:
    """The BadStore a database error on open means, or None (not the user's mistake)."""
    if isinstance(error, BadStore):
        return error
    if not isinstance(error, DBAPIError):
        return None
    where = where or _url_text(url)
    orig = error.orig
    reason = (str(orig).strip().splitlines() or [type(orig).__name__])[0] if orig is not None else str(error)
    if is_corrupt(error):
        return bad(where, f"an intact SQLite record store (SQLite says: {reason})")
    if url.get_backend_name() == "sqlite":
        if "readonly" in reason.lower() or "read-only" in reason.lower():
            return bad(where, f"a record store dse can write (SQLite says: {reason})")
        if "unable to open" in reason.lower():
            return bad(where, f"a SQLite file dse can open (SQLite says: {reason})")
        return None
    if type(error).__name__ in ("OperationalError", "InterfaceError"):
        return bad(where, f"a reachable record store (PostgreSQL: {reason})")
    return None


def quick_check(engine: Engine, url: URL) -> None:
    """SQLite's quick_check of a small store file; BadStore if it finds damage."""
    path = Path(url.database or "")
    try:
        size = path.stat().st_size
    except OSError:
        return
    if not size or size > QUICK_CHECK_MAX_BYTES:
        return
    with engine.connect() as connection:
        found = connection.exec_driver_sql("PRAGMA quick_check(1)").scalar()
    if found != "ok":
        raise bad(_url_text(url), f"an intact SQLite record store (SQLite's quick_check: {found})")
