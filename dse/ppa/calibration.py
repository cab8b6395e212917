"""PPA calibration: one scale factor per component, fitted to measured figures.

A synthesis report gives each component's area (evidence kind ``synth_area``), a power
report each component's average power over a run (``power``); the model has both per
component and candidate (the analytical stage's ``area_mm2`` and ``energy_uj`` by
component, power being energy over the run's latency). The factor of a component is the
ratio measured / modelled fitted by least squares on the relative error over the
candidates that have both (so a small candidate weighs as much as a big one), as the
cycles' calibration fits its constants (`dse.analytical.calibration`). A factor scales the
component's area (area factors) or its energy, dynamic and leakage alike (energy factors:
its power scales with it, the latency being the cycles model's), in
`dse.ppa.components.component_table`. A component no point measures keeps factor 1. With
one factor a component, the fit cannot raise the root-mean-square relative error of its
points (factor 1 is among those it picks from); the records' errors are the mean and the
largest absolute percentage error, which scattered points may leave a little higher.

Modelled figures are always those of the uncalibrated model: a figure recorded under an
earlier PPA calibration is divided by that calibration's factor before it is fitted, so
a refit on a calibrated experiment gives factors relative to the uncalibrated model again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .names import COMPONENTS



@dataclass(frozen=True)
class PpaEvidence:
    """A PPA evidence kind: the factor it fits, the imported metric (by component) and its
    unit, and the analytical metric by component the model's figure is made from."""

    factor: str  # "area" or "energy"
    metric: str
    unit: str
    modelled: str


PPA_EVIDENCE = {"synth_area": PpaEvidence("area", "area_mm2", "mm2", "area_mm2"),
                "power": PpaEvidence("energy", "power_mw", "mW", "energy_uj")}


@dataclass(frozen=True)
class PpaPoint:
    """One candidate's measured and (uncalibrated) modelled figure of one component."""

    candidate_id: int
    component: str
    measured: float
    modelled: float

    @property
    def label(self) -> str:
        return f"candidate {self.candidate_id} {self.component}"


@dataclass
class PpaFit:
    constants: dict[str, float]  # component -> factor (every component of COMPONENTS)
    before: dict[str, float]
    after: dict[str, float]
    points: list[dict] = field(default_factory=list)


def modelled_power_mw(energy_uj: float, latency_cycles: float, clock_mhz: float) -> float:
    """A component's modelled average power: its energy over the run's latency (uJ/us = W)."""
    return energy_uj / (latency_cycles / clock_mhz) * 1e3


def errors(points: Sequence[PpaPoint], factors: dict[str, float] | None) -> dict[str, float]:
    """Mean and largest absolute percentage error of the model (times `factors`) on `points`."""
    if not points:
        return {"mape": float("nan"), "max": float("nan"), "points": 0}
    rel = np.array([abs(p.modelled * (factors or {}).get(p.component, 1.0) / p.measured - 1) for p in points]) * 100
    return {"mape": float(rel.mean()), "max": float(rel.max()), "points": len(points)}


def fit_factors(points: Sequence[PpaPoint]) -> PpaFit:
    """Per component, the factor k minimising sum((k x modelled / measured - 1)^2) over its
    points: k = sum(r) / sum(r^2), r = modelled / measured."""
    if not points:
        raise ValueError("no measured points to fit")
    factors = dict.fromkeys(COMPONENTS, 1.0)
    for component in COMPONENTS:
        mine = [p for p in points if p.component == component]
        if not mine:
            continue
        r = np.array([p.modelled / p.measured for p in mine])
        factors[component] = float(r.sum() / (r * r).sum())
    rows = [{"label": p.label, "candidate_id": p.candidate_id, "component": p.component, "measured": p.measured,
             "before": p.modelled, "after": p.modelled * factors[p.component]} for p in points]
    return PpaFit(factors, errors(points, None), errors(points, factors), rows)


__all__ = ["PPA_EVIDENCE", "PpaEvidence", "PpaFit", "PpaPoint", "errors", "fit_factors", "modelled_power_mw"]
