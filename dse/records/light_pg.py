"""A PostgreSQL store read with psycopg alone: the connection of the recorded-rerun
shortcut's light read (`dse.records.recorded`), made before SQLAlchemy is imported.

It connects as the Store's engine would: the URL is parsed as SQLAlchemy parses it and its
parts become the same libpq keywords its psycopg dialect passes (host, port, user,
password, dbname, then the URL's query but the Store's own `?evidence_dir=`). A URL it
cannot read that way (a multi-host one, a driver other than psycopg 3, a bad port), or
whose `?evidence_dir=` the Store would refuse, is None: the Store opens it, and says
whatever it says.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import parse_qsl, unquote

from dse.records.blobs import server_evidence_dir

# The drivers `dse.records.opening.checked_url` lets through for PostgreSQL.
DRIVERS = ("postgresql", "postgres", "postgresql+psycopg")
# libpq's floor (seconds): an unreachable server costs the full sweep's own wait only 2 s more.
CONNECT_TIMEOUT_S = 2
EVIDENCE_PARAM = "evidence_dir"  # the Store's own query parameter (dse.records.opening)
# SQLAlchemy's URL pattern (sqlalchemy.engine.url._parse_url), so both read a URL alike.
_URL = re.compile(
    r"""
        (?P<name>[\w\+]+)://
        (?:
            (?P<username>[^:/]*)
            (?::(?P<password>[^@]*))?
        @)?
        (?:
            (?:
                \[(?P<ipv6host>[^/\?]+)\] |
                (?P<ipv4host>[^/:\?]+)
            )?
            (?::(?P<port>[^/\?]*))?
        )?
        (?:/(?P<database>[^\?]*))?
        (?:\?(?P<query>.*))?
    """,
    re.X,
)


def connect_args(url: str) -> dict[str, str | int] | None:
    """The libpq keywords the Store's engine connects to `url` with, or None when this
    module does not read the URL as SQLAlchemy would."""
    m = _URL.match(url)
    if m is None or m["name"] not in DRIVERS:
        return None
    args: dict[str, str | int] = {}
    for key, value in (("host", m["ipv4host"] or m["ipv6host"]), ("port", m["port"]),
                       ("user", m["username"] and unquote(m["username"])),
                       ("password", m["password"] and unquote(m["password"])), ("dbname", m["database"])):
        if value:  # SQLAlchemy's translate_connect_args drops empty parts too
            args[key] = value
    if "port" in args:
        if not str(args["port"]).isdigit():
            return None  # the Store's error to give
        args["port"] = int(args["port"])
    query = parse_qsl(m["query"] or "")
    keys = [k for k, _ in query]
    if len(keys) != len(set(keys)) or {"host", "port"} & set(keys):
        return None  # multi-host forms: SQLAlchemy rewrites them
    named = [v for k, v in parse_qsl(m["query"] or "", keep_blank_values=True) if k == EVIDENCE_PARAM]
    if named and not (len(named) == 1 and _writable_folder(named[0])):
        return None  # the Store's error to give (dse.records.opening.split_evidence_dir)
    args.update((k, v) for k, v in query if k != EVIDENCE_PARAM)  # the Store strips it before the driver
    return args


def _writable_folder(value: str) -> bool:
    """Whether the Store takes `value` as its evidence folder: an existing writable folder,
    or a new one inside one (as `split_evidence_dir` checks, creating nothing)."""
    if not value.strip() or "\x00" in value:
        return False
    try:
        probe = Path(value).expanduser().resolve()
        while not probe.exists():
            probe = probe.parent
        return probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)
    except (OSError, RuntimeError, ValueError):
        return False


def connect(url: str):
    """A psycopg connection to the store at `url` that reads one snapshot and may not
    write (REPEATABLE READ, READ ONLY), or None when `connect_args` gives none. A server
    that cannot be reached raises psycopg's error."""
    args = connect_args(url)
    if args is None:
        return None
    import psycopg  # only for a URL: the SQLite path never loads it

    # As the engine's connect_args, these override the URL's own (dse.records.engine.make_engine).
    connection = psycopg.connect(**{**args, "connect_timeout": CONNECT_TIMEOUT_S, "application_name": "dse"},
                                 prepare_threshold=None)
    connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    connection.read_only = True
    return connection


def runner(connection):
    """`sql_reads`' way to run its SQL (`:name` placeholders) on a psycopg connection (no
    query of `sql_reads` holds a `%` of its own)."""

    def run(sql: str, params: dict) -> tuple[list[str], list[tuple]]:
        cursor = connection.execute(re.sub(r":(\w+)", r"%(\1)s", sql), params or None)
        return [c.name for c in cursor.description], cursor.fetchall()

    return run


def shown(url: str) -> str:
    """`url` as the Store shows it (SQLAlchemy's rendering of its checked URL: the psycopg
    driver named, the password masked, the evidence folder's parameter gone)."""
    m = _URL.match(url)
    user = m["username"] or ""
    if m["password"] is not None:
        user += ":***"
    host = f"[{m['ipv6host']}]" if m["ipv6host"] else (m["ipv4host"] or "")
    where = (f"{user}@" if m["username"] is not None else "") + host + (f":{m['port']}" if m["port"] else "")
    query = "&".join(f"{k}={v}" for k, v in parse_qsl(m["query"] or "") if k != EVIDENCE_PARAM)
    return f"postgresql+psycopg://{where}" + (f"/{m['database']}" if m["database"] else "") + (
        f"?{query}" if query else "")


def evidence_dir(url: str) -> Path:
    """The Store's evidence folder for `url` (`dse.records.blobs.default_evidence_dir`): the
    one `?evidence_dir=` names, else the server's default (`server_evidence_dir`)."""
    named = [v for k, v in parse_qsl(_URL.match(url)["query"] or "", keep_blank_values=True) if k == EVIDENCE_PARAM]
    if named:
        return Path(named[0]).expanduser().resolve()

    args = connect_args(url) or {}
    return server_evidence_dir("postgresql", args.get("host"), args.get("port"), args.get("dbname"))
