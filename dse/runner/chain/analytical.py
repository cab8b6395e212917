"""The analytical stage: a batch of candidates costed in one vectorised call."""

from __future__ import annotations

from ...mapping import Candidate
from ..stages import AnalyticalResult, analytical_batch, placed_batch
from .stage import Stage


def analytical(graph, cands: list[Candidate], calibration: dict | None = None,
               ppa_calibration: dict | None = None) -> list[AnalyticalResult]:
    """The plan's per-candidate choices (tiles, Ball stream or core op, splits) and their
    costs, for a batch in one vectorised call. `graph` is a Graph, or a staged workload's
    (role, graph) list: each stage costed on its place (`placed_batch`)."""
    if isinstance(graph, list):
        return placed_batch(graph, cands, calibration, ppa_calibration)
    return analytical_batch(graph, cands, calibration, ppa_calibration)


ANALYTICAL = Stage(
    "analytical", analytical,
    "a batch of candidates: the plan's per-candidate choices (tiles, Ball stream or core op, splits) and their "
    "costs in one vectorised call: feasibility, cycles, DMA bytes, SRAM")
