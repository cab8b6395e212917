"""Closed-form cost of a matmul on the matrix Ball, vectorised over arrays of tiles.

Loop order per worker: output row blocks (m) outer, column blocks (n), reduction (k)
inner, partial sums kept in the accumulator. A tile of A stays resident across the n loop
when the reduction fits one tile; B stays resident only when the worker has one column
block. Each output tile is written back as int32 with MVOUT.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.chip import ChipConfig

from ..mapping import Mapping, MatmulShape, TileCheck, check_tiles, framework_tile, tile_grid
from ..mapping.matmul import INT8_BYTES, INT32_BYTES, PAD
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


def ball_cycles(chip: ChipConfig, dataflow: str, tm, tn, tk):
    ball = chip.ball("matrix")
    formula = ball.latency_formula(dataflow)
    return formula.cycles(M=tm, N=tn, K=tk, rows=ball.array_rows, cols=ball.array_cols)


def matmul_cost(chip: ChipConfig, mapping: Mapping, shape: MatmulShape, tm, tn, tk) -> MatmulCost:
    check = check_tiles(chip, mapping, tm, tn, tk)
    tm, tn, tk = check.tm, check.tn, check.tk
    Mp, Np, Kp = shape.padded
    Mt, Nt, Kt = Mp // tm, Np // tn, Kp // tk

    # Output blocks are split along rows or columns; a worker with no block idles.
    if mapping.split == "rows":
        workers = np.minimum(mapping.workers, Mt)
        mb, nb = -(-Mt // workers), Nt
    else:
        workers = np.minimum(mapping.workers, Nt)
        mb, nb = Mt, -(-Nt // workers)
    b = shape.batch

    a_resident = Kt == 1
    b_resident = (Kt == 1) & (nb == 1)
    loads_a = b * mb * Kt * np.where(a_resident, 1, nb)
    loads_b = b * nb * Kt * np.where(b_resident, 1, mb)
    stores_c = b * mb * nb
    bytes_a, bytes_b, bytes_c = tm * tk * INT8_BYTES, tk * tn * INT8_BYTES, tm * tn * INT32_BYTES
    dma_a, dma_b, dma_c = (dma_cycles(x, chip.dma) for x in (bytes_a, bytes_b, bytes_c))
    dma_worker = loads_a * dma_a + loads_b * dma_b + stores_c * dma_c
    compute_worker = b * mb * nb * Kt * ball_cycles(chip, mapping.dataflow, tm, tn, tk)

    if mapping.double_buffer:
        # DMA of the next tile overlaps compute of this one; the first load and the last
        # store are exposed.
        worker_cycles = np.maximum(dma_worker, compute_worker) + dma_a + dma_b + dma_c
    else:
        worker_cycles = dma_worker + compute_worker

    bytes_worker = loads_a * bytes_a + loads_b * bytes_b + stores_c * bytes_c
    total_bytes = bytes_worker * workers
    # Cores have their own DMA engines but share one DRAM bus: one beat per cycle in all.
    bus_cycles = -(-total_bytes // chip.dma.beat_bytes)
    cycles = np.maximum(worker_cycles, bus_cycles)
    sram = check.banks * chip.banks.bytes_per_bank
    return MatmulCost(check, cycles, compute_worker, dma_worker, total_bytes, sram, workers)


@dataclass(frozen=True)
class MatmulPlan:
    """The chosen tile for one matmul op, or why none is legal."""

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


def plan_matmul(chip: ChipConfig, mapping: Mapping, shape: MatmulShape) -> MatmulPlan:
    """Pick the tile: the framework's greedy choice, or the fastest legal one (ties: less SRAM)."""
    if chip.ball("matrix") is None:
        return MatmulPlan(False, f"chip {chip.name} has no matrix Ball for matmul {shape}")
    if mapping.workers > chip.cores.count:
        return MatmulPlan(False, f"{mapping.workers} workers but chip {chip.name} has {chip.cores.count} cores")
    if mapping.policy == "framework":
        tiles = tuple(np.array([t]) for t in framework_tile(chip, shape))
    else:
        tiles = tile_grid(shape)
    cost = matmul_cost(chip, mapping, shape, *tiles)
    ok = cost.check.ok
    if not ok.any():
        # Explain with the smallest tile: if even that fails, the reason is the binding one.
        i = int(np.argmin(cost.check.tm * cost.check.tn * cost.check.tk))
        what = "the framework's greedy tile does not fit" if mapping.policy == "framework" else "no legal tile"
        return MatmulPlan(False, f"matmul {shape}: {what}; {cost.check.reason(i)}")
    idx = np.flatnonzero(ok)
    best = idx[np.lexsort((cost.sram_bytes[idx], cost.cycles[idx]))[0]]
    return MatmulPlan(
        True, "", int(cost.check.tm[best]), int(cost.check.tn[best]), int(cost.check.tk[best]),
        int(cost.cycles[best]), int(cost.compute_cycles[best]), int(cost.dma_cycles[best]),
        int(cost.dma_bytes[best]), int(cost.sram_bytes[best]), int(cost.check.banks[best]),
        int(cost.workers_used[best]), int(ok.sum()),
    )


__all__ = ["MatmulCost", "MatmulPlan", "ball_cycles", "matmul_cost", "plan_matmul", "PAD"]
