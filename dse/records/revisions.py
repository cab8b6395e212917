"""The schema revisions this dse knows, read from its migration files' names (no SQLAlchemy:
the recorded-rerun shortcut asks before any heavy import)."""

from __future__ import annotations

from pathlib import Path

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def known_revisions(migrations_dir: Path = MIGRATIONS) -> set[str]:
    """The alembic revisions this dse knows: its migration files are named `<revision>_*.py`."""
    return {p.name.split("_", 1)[0] for p in (migrations_dir / "versions").glob("*_*.py")}


def head_revision() -> str:
    """The newest of them (revisions are zero-padded, so they sort as numbers)."""
    return max(known_revisions())
