"""Calibrations of the model, per chip: which one the model uses, and what a run's figures say
of it. The store keeps them (`Store.add_calibration`; read with any reader of the store's
contract: `calibrations`, `latest_calibration`, `latest_ppa_records`, one SQL text,
`sql_reads.CALIBRATIONS`). The model uses the newest calibration of a chip by default: of its
cycles, the newest fit of its constants (`latest_calibration`); of its area and energy, the
newest synth_area fit's area factors with the newest power fit's energy factors
(`latest_ppa_calibration`)."""

from __future__ import annotations

import re
from typing import Any

# What a run's model_version says of the PPA calibration its figures carry:
# "<model>[+calibration-<id>]+ppa-calibration-<id>[-<id>]" (`ppa_version`).
PPA_VERSION = re.compile(r"\+ppa-calibration-(\d+(?:-\d+)*)")


def ppa_factors(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """{component: {"area": a, "energy": e}} of PPA calibration records (each source's
    factors from its record; 1 where none says otherwise)."""
    from dse.ppa.calibration import PPA_EVIDENCE

    out: dict[str, dict[str, float]] = {}
    for cal in records:
        for component, factor in cal["constants"].items():
            out.setdefault(component, {"area": 1.0, "energy": 1.0})[PPA_EVIDENCE[cal["source"]].factor] = float(factor)
    return out


def latest_ppa_calibration(reader, chip: str) -> dict[str, dict[str, float]] | None:
    """The newest synth_area calibration's area factors with the newest power calibration's
    energy factors, {component: {"area": a, "energy": e}}, for `chip` (by name), read through
    any reader of the store's contract; None when it has neither."""
    records = reader.latest_ppa_records(chip)
    return ppa_factors(records) if records else None


def ppa_version(records: list[dict[str, Any]]) -> str:
    """What a run's model_version appends for the PPA calibration records its figures carry."""
    return "+ppa-calibration-" + "-".join(str(r["id"]) for r in records) if records else ""


def ppa_version_ids(model_version: str | None) -> list[int]:
    """The PPA calibration ids a run's model_version names (`ppa_version`), [] when none."""
    found = PPA_VERSION.search(model_version or "")
    return [int(i) for i in found.group(1).split("-")] if found else []
