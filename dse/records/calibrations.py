"""Calibrations in the record store: one row per fit of the analytical model's constants
for a chip, newest first. The model uses the newest calibration of a chip by default."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from . import provenance
from .engine import write_session, writer_engine
from .schema import Calibration
from .store import Store

COLUMNS = ("id", "chip", "chip_hash", "source", "model_version", "emulator_version", "constants",
           "error_before", "error_after", "points", "command", "git_commit", "created_at")


def add_calibration(store: Store, *, chip: str, chip_hash: str, source: str, model_version: str,
                    emulator_version: str | None, constants: dict[str, float], error_before: dict[str, Any],
                    error_after: dict[str, Any], points: list[dict[str, Any]],
                    command: str | None = None) -> int:
    """Record a calibration (all of it in one transaction) and return its id."""
    env = provenance.collect(command)
    with write_session(writer_engine(store.engine)) as session:
        row = Calibration(chip=chip, chip_hash=chip_hash, source=source, model_version=model_version,
                          emulator_version=emulator_version, constants=constants, error_before=error_before,
                          error_after=error_after, points=points, command=env.command,
                          git_commit=env.git_commit)
        session.add(row)
        session.flush()
        return row.id


def _as_dict(row: Calibration) -> dict[str, Any]:
    return {name: getattr(row, name) for name in COLUMNS}


def calibrations(store: Store, chip: str | None = None) -> list[dict[str, Any]]:
    """Every calibration (of one chip, when given), newest first."""
    from sqlalchemy.orm import Session

    query = select(Calibration).order_by(Calibration.created_at.desc(), Calibration.id.desc())
    if chip is not None:
        query = query.where(Calibration.chip == chip)
    with Session(store.engine) as session:
        return [_as_dict(r) for r in session.scalars(query)]


def latest_calibration(store: Store, chip: str) -> dict[str, Any] | None:
    """The newest calibration of `chip` (by name), or None."""
    found = calibrations(store, chip)
    return found[0] if found else None
