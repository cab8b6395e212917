"""Stages a candidate goes through. Each is a plain function: typed inputs, results out,
no knowledge of samplers or storage."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..analytical import estimate, summarize
from ..mapping import Candidate
from .spec import METRICS

UNITS = {
    "latency_cycles": "cycles", "compute_cycles": "cycles", "dma_cycles": "cycles",
    "core_cycles": "cycles", "dma_bytes": "bytes", "peak_sram_bytes": "bytes",
    "private_sram_bytes": "bytes", "private_sram_per_core_bytes": "bytes",
}


@dataclass
class AnalyticalResult:
    feasible: bool
    reason: str
    totals: dict[str, float]
    per_op: pd.DataFrame = field(repr=False)

    def metrics(self) -> list[dict]:
        """Metric rows: totals, then per-op cycles (scope op), all of kind 'analytical'."""
        rows = [dict(kind="analytical", name=name, value=float(value), unit=UNITS[name])
                for name, value in self.totals.items() if pd.notna(value)]
        if self.feasible:
            for op in self.per_op.itertuples():
                rows.append(dict(kind="analytical", name="cycles", value=float(op.cycles), unit="cycles",
                                 scope="op", scope_key=op.op))
                if op.unit == "matrix":
                    for dim, tile in (("tile_m", op.tile_m), ("tile_n", op.tile_n), ("tile_k", op.tile_k)):
                        rows.append(dict(kind="analytical", name=dim, value=float(tile), unit="elements",
                                         scope="op", scope_key=op.op))
        return rows


def total_metrics(row) -> dict[str, float]:
    return {m: float(row[m]) for m in METRICS}


def analytical_stage(graph, candidate: Candidate) -> AnalyticalResult:
    per_op = estimate(graph, [candidate])
    total = summarize(per_op, [candidate]).iloc[0]
    return AnalyticalResult(bool(total["feasible"]), str(total["reason"]), total_metrics(total), per_op)


def source_count_metrics(graph) -> list[dict]:
    """Counts derived from the source graph: the same for every candidate."""
    t = graph.totals()
    return [
        dict(kind="source_counts", name="macs", value=float(t.macs), unit="ops"),
        dict(kind="source_counts", name="other_ops", value=float(t.other_ops), unit="ops"),
        dict(kind="source_counts", name="bytes_read", value=float(t.bytes_read), unit="bytes"),
        dict(kind="source_counts", name="bytes_written", value=float(t.bytes_written), unit="bytes"),
        dict(kind="source_counts", name="weight_bytes", value=float(t.weight_bytes), unit="bytes"),
    ]
