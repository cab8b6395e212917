"""Helpers shared by the command modules."""

from __future__ import annotations

import getpass
import math
import os
import tomllib
from pathlib import Path

from ..errors import InputError

DEFAULT_DB = "records.db"
# A team's shared store: `export DSE_DB=postgresql://user@host/dse` instead of --db each time.
DB_ENV = "DSE_DB"


def parse_value(text: str):
    """`--set banks.count=20`: the value is read as TOML (20 is an int), else kept as text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(pairs: list[str] | None, source: str = "--set", example: str = "cores.count=16") -> dict:
    """`KEY=VALUE` pairs (`parse_value` reads each value); `source` and `example` name the
    flag in the message of a pair without `=`."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise InputError(source, key, pair, f"KEY=VALUE, e.g. {example}")
        out[key.strip()] = parse_value(value.strip())
    return out


def evidence_verdict(check) -> int:
    """The exit code of a command that read evidence (`blobs.EvidenceCheck`): 0, or after
    its output one line on stderr and exit code 2 when a file is not what its row records
    (its lines name each one)."""
    import sys

    if not check.bad:
        return 0
    sys.stdout.flush()
    print(f"dse: error: {check.summary()}: {len(check.bad)} not what their rows record (named above; "
          "`dse evidence verify` checks the whole store)", file=sys.stderr)
    return InputError.exit_code


def default_db() -> str:
    return os.environ.get(DB_ENV) or DEFAULT_DB


def add_db_argument(parser) -> None:
    # The parser is built at every `dse` start, so $DSE_DB is read then.
    parser.add_argument(
        "--db", default=default_db(),
        help=f"record store: a SQLite path or a URL such as postgresql://user@host/dse "
             f"(default ${DB_ENV}, else {DEFAULT_DB})",
    )  # fmt: skip


def open_store(db: str | None):
    """An existing store (a missing SQLite file is bad input, not a new empty store).

    A URL that names no reachable database is bad input too (exit code 2)."""
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

    from ..records import Store

    db = db or default_db()
    if "://" not in db and not Path(db).exists():
        raise InputError(db, "--db", db, "an existing record store (run `dse sweep` first)")
    try:
        return Store(db)
    except (ArgumentError, NoSuchModuleError) as error:
        raise InputError(_shown(db), "--db", _shown(db),
                         f"a SQLite path or a database URL such as postgresql://user@host/dse ({error})") from None
    except OperationalError as error:
        reason = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
        raise InputError(_shown(db), "--db", _shown(db), f"a reachable record store ({reason})") from None


def _shown(db: str) -> str:
    """`db` with any password masked (`dse.records.opening.shown`, imported when needed:
    commands that never open a store do not load SQLAlchemy)."""
    from ..records.opening import shown

    return shown(db)


def _when(moment) -> str:
    """A timestamp (datetime, pandas Timestamp, or NaT/None) to the second."""
    if _missing(moment):
        return "—"
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _missing(value) -> bool:
    """None, NaN, or pandas' NA/NaT, told without importing pandas (a missing value from a
    DataFrame is of a type pandas defines; a plain row's is None)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    return type(value).__module__.startswith("pandas") and str(value) in ("NaT", "<NA>")


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container): still a decision
        return "unknown"
