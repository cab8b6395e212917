"""Calibrations in the record store: one row per fit for a chip, newest first. The model
uses the newest calibration of a chip by default: of its cycles, the newest fit of its
constants (`latest_calibration`); of its area and energy, the newest synth_area fit's
area factors with the newest power fit's energy factors (`latest_ppa_calibration`)."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from . import provenance
from .engine import write_session, writer_engine
from .schema import CYCLE_CALIBRATION_SOURCES, PPA_CALIBRATION_SOURCES, Calibration
from .store import Store

# What a run's model_version says of the PPA calibration its figures carry:
# "<model>[+calibration-<id>]+ppa-calibration-<id>[-<id>]" (`ppa_version`).
PPA_VERSION = re.compile(r"\+ppa-calibration-(\d+(?:-\d+)*)")

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


def calibrations(store: Store, chip: str | None = None, sources: tuple[str, ...] | None = None,
                 ids: list[int] | None = None) -> list[dict[str, Any]]:
    """Every calibration (of one chip, of these sources, with these ids, when given), newest first."""
    query = select(Calibration).order_by(Calibration.created_at.desc(), Calibration.id.desc())
    if chip is not None:
        query = query.where(Calibration.chip == chip)
    if sources is not None:
        query = query.where(Calibration.source.in_(sources))
    if ids is not None:
        query = query.where(Calibration.id.in_(ids))
    with Session(store.engine) as session:
        return [_as_dict(r) for r in session.scalars(query)]


def latest_calibration(store: Store, chip: str) -> dict[str, Any] | None:
    """The newest cycles calibration of `chip` (by name: fitted to emulator, RTL or FPGA
    cycles), or None."""
    found = calibrations(store, chip, CYCLE_CALIBRATION_SOURCES)
    return found[0] if found else None


def latest_ppa_records(store: Store, chip: str) -> list[dict[str, Any]]:
    """The newest calibration of `chip` of each PPA source (synth_area, power) it has."""
    newest: dict[str, dict[str, Any]] = {}
    for cal in calibrations(store, chip, PPA_CALIBRATION_SOURCES):
        newest.setdefault(cal["source"], cal)
    return [newest[s] for s in PPA_CALIBRATION_SOURCES if s in newest]


def ppa_factors(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """{component: {"area": a, "energy": e}} of PPA calibration records (each source's
    factors from its record; 1 where none says otherwise)."""
    from dse.ppa.calibration import PPA_EVIDENCE

    out: dict[str, dict[str, float]] = {}
    for cal in records:
        for component, factor in cal["constants"].items():
            out.setdefault(component, {"area": 1.0, "energy": 1.0})[PPA_EVIDENCE[cal["source"]].factor] = float(factor)
    return out


def latest_ppa_calibration(store: Store, chip: str) -> dict[str, dict[str, float]] | None:
    """The newest synth_area calibration's area factors with the newest power calibration's
    energy factors, {component: {"area": a, "energy": e}}, for `chip` (by name); None when
    it has neither."""
    records = latest_ppa_records(store, chip)
    return ppa_factors(records) if records else None


def ppa_version(records: list[dict[str, Any]]) -> str:
    """What a run's model_version appends for the PPA calibration records its figures carry."""
    return "+ppa-calibration-" + "-".join(str(r["id"]) for r in records) if records else ""


def ppa_version_ids(model_version: str | None) -> list[int]:
    """The PPA calibration ids a run's model_version names (`ppa_version`), [] when none."""
    found = PPA_VERSION.search(model_version or "")
    return [int(i) for i in found.group(1).split("-")] if found else []
