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


OP_FIELDS = ("op", "unit", "cycles", "tile_m", "tile_n", "tile_k")


@dataclass
class AnalyticalResult:
    feasible: bool
    reason: str
    totals: dict[str, float]
    ops: list[tuple] = field(repr=False)  # per op: OP_FIELDS

    def metrics(self) -> list[dict]:
        """Metric rows: totals, then per-op cycles and tiles (scope op), all of kind 'analytical'."""
        rows = [dict(kind="analytical", name=name, value=float(value), unit=UNITS[name])
                for name, value in self.totals.items() if pd.notna(value)]
        if self.feasible:
            for op, unit, cycles, tm, tn, tk in self.ops:
                rows.append(dict(kind="analytical", name="cycles", value=float(cycles), unit="cycles",
                                 scope="op", scope_key=op))
                if unit == "matrix":
                    for dim, tile in (("tile_m", tm), ("tile_n", tn), ("tile_k", tk)):
                        rows.append(dict(kind="analytical", name=dim, value=float(tile), unit="elements",
                                         scope="op", scope_key=op))
        return rows


def total_metrics(row) -> dict[str, float]:
    return {m: float(row[m]) for m in METRICS}


def analytical_batch(graph, cands: list[Candidate]) -> list[AnalyticalResult]:
    """The analytical stage for many candidates at once (one vectorised estimate)."""
    if not cands:
        return []
    per_op = estimate(graph, cands)
    totals = summarize(per_op, cands)
    columns = [per_op[c].tolist() for c in OP_FIELDS]
    n_ops = len(graph.ops)
    out = []
    for i, t in enumerate(totals.to_dict("records")):
        ops = list(zip(*(col[i * n_ops:(i + 1) * n_ops] for col in columns)))
        out.append(AnalyticalResult(bool(t["feasible"]), str(t["reason"]), total_metrics(t), ops))
    return out


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
