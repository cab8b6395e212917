"""A new store's schema in one go: the DDL that a store migrated to SCHEMA_HEAD holds,
frozen per dialect (migrations/snapshot/<dialect>.sql), run in the opening transaction and
stamped at the head, instead of alembic's eighteen migrations (0.2-0.4 s a database: a
tenth of a small sweep). Only an empty database is made so; any other is migrated.

The snapshots are made from a migrated store (`python -m dse.records.snapshot`, after a
new migration), never written by hand: tests/test_schema_snapshot.py holds a store made
from them identical to a migrated one on SQLite (sqlite_master) and PostgreSQL (its
catalogs and pg_dump), and a snapshot of another revision than SCHEMA_HEAD is not used.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from sqlalchemy import Connection, create_engine
from sqlalchemy.engine import make_url

from dse.records.engine import MIGRATIONS_DIR, SCHEMA_HEAD, alembic_config

SNAPSHOT_DIR = MIGRATIONS_DIR / "snapshot"
DIALECTS = ("sqlite", "postgresql")
_HEADER = "-- dse record store schema at revision {revision}: made by `python -m dse.records.snapshot`, not by hand\n"
_NEXT = "\n-- next statement\n"  # between statements (a trigger's body holds semicolons)


def path(dialect: str) -> Path:
    return SNAPSHOT_DIR / f"{dialect}.sql"


@functools.lru_cache(maxsize=None)
def statements(dialect: str) -> tuple[str, ...] | None:
    """The frozen DDL of `dialect` at SCHEMA_HEAD, statement by statement; None without a
    snapshot of that revision (then a new store is migrated)."""
    try:
        text = path(dialect).read_text()
    except OSError:
        return None
    header, _, body = text.partition("\n")
    if header + "\n" != _HEADER.format(revision=SCHEMA_HEAD):
        return None
    return tuple(s for s in body.removesuffix("\n").split(_NEXT) if s.strip())


def create(connection: Connection) -> bool:
    """The schema at SCHEMA_HEAD made from the snapshot, stamped, in the caller's transaction,
    if the database has no table yet and a snapshot of the head exists: whether it did."""
    dialect = connection.dialect.name
    frozen = statements(dialect) if dialect in DIALECTS else None
    if frozen is None or not _empty(connection):
        return False
    for statement in frozen:
        connection.exec_driver_sql(statement)
    connection.exec_driver_sql(f"INSERT INTO alembic_version (version_num) VALUES ('{SCHEMA_HEAD}')")
    return True


def _empty(connection: Connection) -> bool:
    if connection.dialect.name == "sqlite":
        return not connection.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar()
    return not connection.exec_driver_sql(
        "SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'm', 'S', 'p')").scalar()


def sqlite_schema(connection: Connection) -> list[tuple]:
    """A SQLite store's schema as sqlite_master holds it: (type, name, table, sql) in the
    order of creation (rootpages aside)."""
    return [tuple(r) for r in connection.exec_driver_sql(
        "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid")]


def dump_sqlite(connection: Connection) -> list[str]:
    """The DDL statements that make `connection`'s schema again, in order (a table's own
    indexes, sqlite_autoindex_*, come with it)."""
    return [sql for _, _, _, sql in sqlite_schema(connection) if sql is not None]


# pg_dump's session settings (SET ..., set_config) would outlive the transaction on a pooled
# connection, and psql's \restrict lines are not SQL: neither belongs to the schema.
_PG_SESSION = re.compile(r"^(SET |SELECT pg_catalog\.set_config\(|\\)")


def dump_postgresql(url: str, pg_dump: str = "pg_dump") -> list[str]:
    """The DDL statements that make the schema of the database at `url` again (pg_dump
    --schema-only, without owners, grants, session settings, comments and the schema
    name, so that it makes the same in the connection's current schema)."""
    parts = make_url(url)
    env = {"PGPASSWORD": parts.password} if parts.password else {}
    done = subprocess.run(
        [pg_dump, "--schema-only", "--no-owner", "--no-privileges", "--no-comments",
         "-h", parts.host or "localhost", "-p", str(parts.port or 5432), "-U", parts.username or "", parts.database],
        capture_output=True, text=True, check=True, env={**os.environ, **env})  # fmt: skip
    text = "\n".join(line for line in done.stdout.splitlines()
                     if not line.startswith("--") and not _PG_SESSION.match(line))
    text = text.replace("public.", "")
    # pg_dump ends every statement with ";" at a line's end; a function's body ($$ ... $$)
    # holds more of them, kept whole.
    out, current, quoted = [], [], False
    for line in text.splitlines():
        if not line.strip() and not current:
            continue
        current.append(line)
        quoted ^= line.count("$$") % 2 == 1
        if not quoted and line.rstrip().endswith(";"):
            out.append("\n".join(current).strip())
            current = []
    if current and "\n".join(current).strip():
        out.append("\n".join(current).strip())
    return out


def render(statements_: list[str]) -> str:
    return _HEADER.format(revision=SCHEMA_HEAD) + _NEXT.join(statements_) + "\n"


def migrated_sqlite() -> list[str]:
    """The statements of a new SQLite store migrated to the head by alembic."""
    from alembic import command

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/migrated.db"
        command.upgrade(alembic_config(url), "head")
        engine = create_engine(url)
        try:
            with engine.connect() as connection:
                return dump_sqlite(connection)
        finally:
            engine.dispose()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m dse.records.snapshot",
        description="write the schema snapshots (migrations/snapshot/*.sql) from migrated stores")
    ap.add_argument("--postgresql", metavar="URL",
                    help="an empty PostgreSQL database to migrate and dump (without it only SQLite's is written)")
    ap.add_argument("--pg-dump", default="pg_dump", help="the pg_dump binary (no older than the server)")
    args = ap.parse_args(argv)
    SNAPSHOT_DIR.mkdir(exist_ok=True)
    path("sqlite").write_text(render(migrated_sqlite()))
    print(f"wrote {path('sqlite')}")
    if args.postgresql:
        from alembic import command

        command.upgrade(alembic_config(args.postgresql), "head")
        path("postgresql").write_text(render(dump_postgresql(args.postgresql, args.pg_dump)))
        print(f"wrote {path('postgresql')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
