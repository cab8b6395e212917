"""The analytical model over a whole graph: one row per candidate x op, then totals.

Ops run one after another (each op's workers finish before the next op starts); matmuls
take the matrix Ball, ReLU its Ball when the chip has one, and everything else runs on the
core (charged per element, never free). Views (reshape) only change descriptors.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from ..mapping import Candidate, MatmulShape
from .matmul import plan_matmul

MODEL_VERSION = "analytical-0.1"

VIEW_KINDS = {"reshape"}
MATMUL_KINDS = {"linear", "matmul"}

OP_COLUMNS = [
    "candidate", "candidate_hash", "op", "kind", "unit", "feasible", "reason", "cycles",
    "compute_cycles", "dma_cycles", "core_cycles", "dma_bytes", "sram_bytes", "banks",
    "tile_m", "tile_n", "tile_k", "workers_used", "macs",
]


def _elements(graph, tensor: str) -> int:
    return math.prod(graph.tensors[tensor].shape)


def _core_cycles(cand: Candidate, elements: int, workers: int) -> int:
    return math.ceil(elements * cand.chip.cores.op_cycles_per_element / workers)


def _op_row(graph, op, cand: Candidate) -> dict:
    chip, mapping = cand.chip, cand.mapping
    workers = min(mapping.workers, chip.cores.count)
    row = dict(op=op.name, kind=op.kind, unit="core", feasible=True, reason="", cycles=0,
               compute_cycles=0, dma_cycles=0, core_cycles=0, dma_bytes=0, sram_bytes=0, banks=0,
               tile_m=0, tile_n=0, tile_k=0, workers_used=workers, macs=op.counts.macs)
    out_elements = _elements(graph, op.outputs[0])
    if op.kind in MATMUL_KINDS:
        a = op.attrs
        plan = plan_matmul(chip, mapping, MatmulShape(a["M"], a["N"], a["K"], a.get("batch", 1)))
        row.update(unit="matrix", feasible=plan.feasible, reason=plan.reason and f"{op.name}: {plan.reason}")
        if plan.feasible:
            # The bias is added on the core: there is no Ball for it.
            core = _core_cycles(cand, out_elements, plan.workers_used) if a.get("has_bias") else 0
            row.update(cycles=plan.cycles + core, compute_cycles=plan.compute_cycles,
                       dma_cycles=plan.dma_cycles, core_cycles=core, dma_bytes=plan.dma_bytes,
                       sram_bytes=plan.sram_bytes, banks=plan.banks, tile_m=plan.tm, tile_n=plan.tn,
                       tile_k=plan.tk, workers_used=plan.workers_used)
    elif op.kind in VIEW_KINDS:
        row.update(unit="none")
    elif op.kind == "relu" and chip.ball("relu") is not None:
        # int32 accumulator rows of row_bytes each, split across workers.
        iters = math.ceil(out_elements * 4 / chip.banks.row_bytes / workers)
        cycles = chip.ball("relu").latency_formula().cycles(iter=iters)
        row.update(unit="relu", cycles=cycles, compute_cycles=cycles)
    else:
        cycles = _core_cycles(cand, out_elements, workers)
        row.update(cycles=cycles, core_cycles=cycles)
    return row


def estimate(graph, candidates: Sequence[Candidate]) -> pd.DataFrame:
    """One row per candidate x op: cycles, DMA, SRAM, tile and feasibility with its reason."""
    rows = []
    for i, cand in enumerate(candidates):
        for op in graph.ops:
            rows.append({"candidate": i, "candidate_hash": cand.hash, **_op_row(graph, op, cand)})
    return pd.DataFrame(rows, columns=OP_COLUMNS)


def summarize(per_op: pd.DataFrame, candidates: Sequence[Candidate]) -> pd.DataFrame:
    """Totals per candidate. Latency is the sum over ops (they run in sequence); a candidate
    is infeasible if any op is, with the first such op's reason."""
    out = []
    for i, cand in enumerate(candidates):
        ops = per_op[per_op["candidate"] == i]
        bad = ops[~ops["feasible"]]
        per_core = cand.chip.private_sram_bytes
        row = {
            "candidate": i, "candidate_hash": cand.hash, "feasible": bad.empty,
            "reason": "" if bad.empty else str(bad["reason"].iloc[0]),
            "latency_cycles": float(ops["cycles"].sum()) if bad.empty else np.nan,
            "compute_cycles": float(ops["compute_cycles"].sum()),
            "dma_cycles": float(ops["dma_cycles"].sum()),
            "core_cycles": float(ops["core_cycles"].sum()),
            "dma_bytes": float(ops["dma_bytes"].sum()),
            "peak_sram_bytes": float(ops["sram_bytes"].max()) if len(ops) else 0.0,
            "private_sram_per_core_bytes": float(per_core),
            # The SRAM a candidate asks for: the private banks of every worker it uses.
            "private_sram_bytes": float(per_core * cand.mapping.workers),
            "workers": cand.mapping.workers,
        }
        out.append(row)
    return pd.DataFrame(out)
