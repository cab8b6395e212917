"""The analytical model over a whole graph: one row per candidate x op, then totals.

Ops run one after another (each op's workers finish before the next op starts); matmuls
take the matrix Ball, ReLU its Ball when the chip has one, and everything else runs on the
core (charged per element, never free). Views (reshape) only change descriptors.
Every op is evaluated for all candidates at once (numpy over the candidate axis).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from emulator.chip import LATENCY_VARIABLES
from emulator.formula import Formula

from ..mapping import Candidate, CandidateArrays, MatmulShape
from .matmul import plan_matmuls

MODEL_VERSION = "analytical-0.2"

VIEW_KINDS = {"reshape"}
MATMUL_KINDS = {"linear", "matmul"}

OP_COLUMNS = [
    "candidate", "candidate_hash", "op", "kind", "unit", "feasible", "reason", "cycles",
    "compute_cycles", "dma_cycles", "core_cycles", "dma_bytes", "sram_bytes", "banks",
    "tile_m", "tile_n", "tile_k", "workers_used", "macs",
]
_INT_COLUMNS = ["cycles", "compute_cycles", "dma_cycles", "core_cycles", "dma_bytes", "sram_bytes", "banks",
                "tile_m", "tile_n", "tile_k", "workers_used", "macs"]


def _core_cycles(params: CandidateArrays, elements: int, workers: np.ndarray) -> np.ndarray:
    return np.ceil(elements * params.op_cycles_per_element / workers).astype(np.int64)


def _relu_cycles(params: CandidateArrays, elements: int, workers: np.ndarray) -> np.ndarray:
    """ReLU Ball over int32 accumulator rows, split across workers (-1 where no ReLU Ball)."""
    out = np.full(params.n, -1, dtype=np.int64)
    texts = np.array([t or "" for t in params.relu_formula], dtype=object)
    iters = np.ceil(elements * 4 / params.row_bytes / workers).astype(np.int64)
    for text in set(texts) - {""}:
        rows = np.flatnonzero(texts == text)
        out[rows] = Formula(text, LATENCY_VARIABLES["relu"]).cycles(iter=iters[rows])
    return out


def _op_columns(graph, op, params: CandidateArrays, plan_cache: dict) -> dict:
    n = params.n
    workers = np.minimum(params.workers, params.cores)
    zeros = lambda: np.zeros(n, dtype=np.int64)  # noqa: E731
    cols = {name: zeros() for name in _INT_COLUMNS}
    cols.update(unit=np.full(n, "core", dtype=object), feasible=np.ones(n, dtype=bool),
                reason=np.full(n, "", dtype=object), workers_used=workers.copy())
    cols["macs"][:] = op.counts.macs
    out_elements = math.prod(graph.tensors[op.outputs[0]].shape)
    if op.kind in MATMUL_KINDS:
        a = op.attrs
        shape = MatmulShape(a["M"], a["N"], a["K"], a.get("batch", 1))
        if shape not in plan_cache:  # repeated layers share one evaluation
            plan_cache[shape] = plan_matmuls(params, shape)
        plans = plan_cache[shape]
        ok = plans.feasible
        # The bias is added on the core: there is no Ball for it.
        bias = _core_cycles(params, out_elements, np.maximum(plans.workers_used, 1)) if a.get("has_bias") else zeros()
        bias = np.where(ok, bias, 0)
        cols.update(unit=np.full(n, "matrix", dtype=object), feasible=ok.copy(),
                    reason=np.array([f"{op.name}: {r}" if r else "" for r in plans.reason], dtype=object),
                    cycles=plans.cycles + bias, compute_cycles=plans.compute_cycles.copy(),
                    dma_cycles=plans.dma_cycles.copy(), core_cycles=bias, dma_bytes=plans.dma_bytes.copy(),
                    sram_bytes=plans.sram_bytes.copy(), banks=plans.banks.copy(), tile_m=plans.tm.copy(),
                    tile_n=plans.tn.copy(), tile_k=plans.tk.copy(),
                    workers_used=np.where(ok, plans.workers_used, workers))
    elif op.kind in VIEW_KINDS:
        cols["unit"][:] = "none"
    else:
        core = _core_cycles(params, out_elements, workers)
        relu = _relu_cycles(params, out_elements, workers) if op.kind == "relu" else np.full(n, -1)
        on_ball = relu >= 0
        cols.update(unit=np.where(on_ball, "relu", "core").astype(object),
                    cycles=np.where(on_ball, relu, core), compute_cycles=np.where(on_ball, relu, 0),
                    core_cycles=np.where(on_ball, 0, core))
    return cols


def estimate(graph, candidates: Sequence[Candidate]) -> pd.DataFrame:
    """One row per candidate x op: cycles, DMA, SRAM, tile and feasibility with its reason."""
    params = CandidateArrays.from_candidates(candidates)
    n, ops = params.n, graph.ops
    per_op = [_op_columns(graph, op, params, {}) for op in ops]
    frame = {
        "candidate": np.repeat(np.arange(n), len(ops)),
        "candidate_hash": np.repeat(np.array([c.hash for c in candidates], dtype=object), len(ops)),
        "op": np.tile(np.array([op.name for op in ops], dtype=object), n),
        "kind": np.tile(np.array([op.kind for op in ops], dtype=object), n),
    }
    for name in OP_COLUMNS[4:]:
        # (ops, n) -> candidate-major rows
        frame[name] = np.stack([cols[name] for cols in per_op], axis=1).ravel() if ops else np.array([])
    return pd.DataFrame(frame, columns=OP_COLUMNS)


TOTAL_COLUMNS = ["candidate", "candidate_hash", "feasible", "reason", "latency_cycles", "compute_cycles",
                 "dma_cycles", "core_cycles", "dma_bytes", "peak_sram_bytes", "private_sram_per_core_bytes",
                 "private_sram_bytes", "workers"]


def summarize(per_op: pd.DataFrame, candidates: Sequence[Candidate]) -> pd.DataFrame:
    """Totals per candidate. Latency is the sum over ops (they run in sequence); a candidate
    is infeasible if any op is, with the first such op's reason."""
    n = len(candidates)
    g = per_op.groupby("candidate", sort=True)
    sums = g[["cycles", "compute_cycles", "dma_cycles", "core_cycles", "dma_bytes"]].sum().reindex(range(n), fill_value=0)
    feasible = g["feasible"].all().reindex(range(n), fill_value=True).to_numpy()
    peak = g["sram_bytes"].max().reindex(range(n), fill_value=0).to_numpy()
    bad = per_op[~per_op["feasible"]].groupby("candidate")["reason"].first()
    reason = np.array([bad.get(i, "") for i in range(n)], dtype=object)
    per_core = np.array([c.chip.private_sram_bytes for c in candidates], dtype=np.float64)
    workers = np.array([c.mapping.workers for c in candidates], dtype=np.int64)
    return pd.DataFrame({
        "candidate": np.arange(n), "candidate_hash": [c.hash for c in candidates], "feasible": feasible,
        "reason": reason,
        "latency_cycles": np.where(feasible, sums["cycles"].to_numpy(dtype=np.float64), np.nan),
        "compute_cycles": sums["compute_cycles"].to_numpy(dtype=np.float64),
        "dma_cycles": sums["dma_cycles"].to_numpy(dtype=np.float64),
        "core_cycles": sums["core_cycles"].to_numpy(dtype=np.float64),
        "dma_bytes": sums["dma_bytes"].to_numpy(dtype=np.float64),
        "peak_sram_bytes": peak.astype(np.float64),
        "private_sram_per_core_bytes": per_core,
        # The SRAM a candidate asks for: the private banks of every worker it uses.
        "private_sram_bytes": per_core * workers,
        "workers": workers,
    }, columns=TOTAL_COLUMNS)
