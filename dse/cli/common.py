"""Helpers shared by the command modules."""

from __future__ import annotations

import tomllib
from pathlib import Path

from ..errors import InputError

DEFAULT_DB = "records.db"


def parse_value(text: str):
    """`--set banks.count=20`: the value is read as TOML (20 is an int), else kept as text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(pairs: list[str] | None) -> dict:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise InputError("--set", key, pair, "KEY=VALUE, e.g. cores.count=16")
        out[key.strip()] = parse_value(value.strip())
    return out


def add_db_argument(parser) -> None:
    parser.add_argument("--db", default=DEFAULT_DB, help="record store path or SQLAlchemy URL (default records.db)")


def open_store(db: str):
    """An existing store (a missing SQLite file is bad input, not a new empty store)."""
    from ..records import Store

    if "://" not in db and not Path(db).exists():
        raise InputError(db, "--db", db, "an existing record store (run `dse sweep` first)")
    return Store(db)
