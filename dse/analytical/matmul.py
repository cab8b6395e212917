"""Closed-form cost of a matmul on the matrix Ball, vectorised over candidates x tiles.

Loop order per worker: output row blocks (m) outer, column blocks (n), reduction (k)
inner, partial sums kept in the accumulator. A tile of A stays resident across the n loop
when the reduction fits one tile; B stays resident only when the worker has one column
block. Each output tile is written back as int32 with MVOUT.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.formula import Formula
from emulator.chip import LATENCY_VARIABLES

from ..mapping import Candidate, MatmulShape, TileCheck, check_tiles, tile_grid
from ..mapping.matmul import INT8_BYTES, INT32_BYTES, framework_tiles
from ..mapping.params import CandidateArrays
from .dma import dma_cycles


@dataclass
class MatmulCost:
    check: TileCheck
    cycles: np.ndarray
    compute_cycles: np.ndarray
    dma_cycles: np.ndarray
    dma_bytes: np.ndarray
    sram_bytes: np.ndarray
    workers_used: np.ndarray


def ball_cycles(params: CandidateArrays, tm, tn, tk) -> np.ndarray:
    """Matrix Ball latency from each candidate's own formula (grouped by formula text)."""
    shape = np.broadcast(tm, tn, tk, params.column("bank_count")).shape
    out = np.zeros(shape, dtype=np.int64)
    texts = np.array([t or "" for t in params.matrix_formula], dtype=object)
    for text in set(texts) - {""}:
        rows = np.flatnonzero(texts == text)
        f = Formula(text, LATENCY_VARIABLES["matrix"])
        sub = [np.broadcast_to(x, shape)[rows] for x in (tm, tn, tk)]
        out[rows] = np.broadcast_to(f.cycles(M=sub[0], N=sub[1], K=sub[2],
                                             rows=params.matrix_rows[rows, None],
                                             cols=params.matrix_cols[rows, None]), out[rows].shape)
    return out


def matmul_cost(params: CandidateArrays, shape: MatmulShape, tm, tn, tk) -> MatmulCost:
    check = check_tiles(params, tm, tn, tk)
    tm, tn, tk = check.tm, check.tn, check.tk
    col = params.column
    Mp, Np, Kp = shape.padded
    Mt, Nt, Kt = Mp // tm, Np // tn, Kp // tk

    # Output blocks are split along rows or columns; a worker with no block idles.
    workers_req = np.minimum(col("workers"), col("cores"))
    workers = np.where(col("split_rows"), np.minimum(workers_req, Mt), np.minimum(workers_req, Nt))
    mb = np.where(col("split_rows"), -(-Mt // workers), Mt)
    nb = np.where(col("split_rows"), Nt, -(-Nt // workers))
    b = shape.batch

    a_resident = Kt == 1
    b_resident = (Kt == 1) & (nb == 1)
    loads_a = b * mb * Kt * np.where(a_resident, 1, nb)
    loads_b = b * nb * Kt * np.where(b_resident, 1, mb)
    stores_c = b * mb * nb
    bytes_a, bytes_b, bytes_c = tm * tk * INT8_BYTES, tk * tn * INT8_BYTES, tm * tn * INT32_BYTES
    dma = (col("beat_bytes"), col("burst_max_bytes"), col("bursts_in_flight"), col("dma_latency"))
    dma_a, dma_b, dma_c = (dma_cycles(x, *dma) for x in (bytes_a, bytes_b, bytes_c))
    dma_worker = loads_a * dma_a + loads_b * dma_b + stores_c * dma_c
    compute_worker = b * mb * nb * Kt * ball_cycles(params, tm, tn, tk)

    # Double buffered, DMA of the next tile overlaps compute of this one; the first load
    # and the last store stay exposed.
    worker_cycles = np.where(col("double_buffer"),
                             np.maximum(dma_worker, compute_worker) + dma_a + dma_b + dma_c,
                             dma_worker + compute_worker)
    total_bytes = (loads_a * bytes_a + loads_b * bytes_b + stores_c * bytes_c) * workers
    # Cores have their own DMA engines but share one DRAM bus: one beat per cycle in all.
    bus_cycles = -(-total_bytes // col("beat_bytes"))
    cycles = np.maximum(worker_cycles, bus_cycles)
    sram = check.banks * col("bank_rows") * col("row_bytes")
    return MatmulCost(check, cycles, compute_worker, dma_worker, total_bytes, sram, workers)


PLAN_FIELDS = ("tm", "tn", "tk", "cycles", "compute_cycles", "dma_cycles", "dma_bytes", "sram_bytes",
               "banks", "workers_used", "legal_tiles")


@dataclass
class MatmulPlans:
    """The chosen tile per candidate (arrays of length n), or why none is legal."""

    feasible: np.ndarray
    reason: list[str]
    values: dict[str, np.ndarray]

    def __getattr__(self, name: str):
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None


def plan_matmuls(params: CandidateArrays, shape: MatmulShape) -> MatmulPlans:
    """Per candidate: the framework's greedy tile, or the fastest legal one (ties: less SRAM)."""
    n = params.n
    values = {f: np.zeros(n, dtype=np.int64) for f in PLAN_FIELDS}
    feasible = np.zeros(n, dtype=bool)
    reason = [""] * n

    def fill(idx: np.ndarray, cost: MatmulCost) -> None:
        ok = cost.check.ok
        shape2 = ok.shape
        cycles = np.where(ok, np.broadcast_to(cost.cycles, shape2), np.iinfo(np.int64).max)
        best_cycles = cycles.min(axis=1, keepdims=True)
        sram = np.broadcast_to(cost.sram_bytes, shape2)
        pick = np.where(ok & (cycles == best_cycles), sram, np.iinfo(np.int64).max).argmin(axis=1)
        rows = np.arange(len(idx))
        fields = dict(tm=cost.check.tm, tn=cost.check.tn, tk=cost.check.tk, cycles=cost.cycles,
                      compute_cycles=cost.compute_cycles, dma_cycles=cost.dma_cycles, dma_bytes=cost.dma_bytes,
                      sram_bytes=cost.sram_bytes, banks=cost.check.banks, workers_used=cost.workers_used)
        any_ok = ok.any(axis=1)
        for name, arr in fields.items():
            values[name][idx] = np.where(any_ok, np.broadcast_to(arr, shape2)[rows, pick], 0)
        values["legal_tiles"][idx] = ok.sum(axis=1)
        feasible[idx] = any_ok
        # Explain a failure with the smallest tile: if even that fails, its reason binds.
        smallest = np.broadcast_to(cost.check.tm * cost.check.tn * cost.check.tk, shape2).argmin(axis=1)
        for r in np.flatnonzero(~any_ok):
            c = idx[r]
            what = "the framework's greedy tile does not fit" if params.framework[c] else "no legal tile"
            reason[c] = f"matmul {shape}: {what}; {cost.check.reason(r, smallest[r])}"

    usable = np.ones(n, dtype=bool)
    for c in range(n):
        if params.matrix_formula[c] is None:
            usable[c] = False
            reason[c] = f"chip {params.chip_names[c]} has no matrix Ball for matmul {shape}"
        elif params.workers[c] > params.cores[c]:
            usable[c] = False
            reason[c] = f"{params.workers[c]} workers but chip {params.chip_names[c]} has {params.cores[c]} cores"

    fw = np.flatnonzero(usable & params.framework)
    if fw.size:
        sub = params.take(fw)
        fill(fw, matmul_cost(sub, shape, *framework_tiles(sub, shape)))
    search = np.flatnonzero(usable & ~params.framework)
    if search.size:
        fill(search, matmul_cost(params.take(search), shape, *tile_grid(shape)))
    return MatmulPlans(feasible, reason, values)


@dataclass(frozen=True)
class MatmulPlan:
    """One candidate's plan (a row of `MatmulPlans`)."""

    feasible: bool
    reason: str
    tm: int = 0
    tn: int = 0
    tk: int = 0
    cycles: int = 0
    compute_cycles: int = 0
    dma_cycles: int = 0
    dma_bytes: int = 0
    sram_bytes: int = 0
    banks: int = 0
    workers_used: int = 0
    legal_tiles: int = 0


def plan_matmul(chip, mapping, shape: MatmulShape) -> MatmulPlan:
    plans = plan_matmuls(CandidateArrays.from_candidates([Candidate(chip, mapping)]), shape)
    return MatmulPlan(bool(plans.feasible[0]), plans.reason[0], **{f: int(plans.values[f][0]) for f in PLAN_FIELDS})


__all__ = ["MatmulCost", "MatmulPlan", "MatmulPlans", "ball_cycles", "matmul_cost", "plan_matmul", "plan_matmuls"]
