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
from ..mapping.params import SYSTOLIC, CandidateArrays
from .dma import dma_cycles
from .systolic import systolic_gemm_cycles


@dataclass
class MatmulCost:
    check: TileCheck
    cycles: np.ndarray
    compute_cycles: np.ndarray  # the matrix Ball's busy cycles on the busiest worker
    dma_cycles: np.ndarray  # DMA transfer cycles on the busiest worker
    core_cycles: np.ndarray  # packing copies on the core (A when K is split, an activation B)
    busy_cycles: np.ndarray  # busy cycles summed over the workers (the busiest one is `cycles`)
    dma_bytes: np.ndarray
    sram_bytes: np.ndarray
    bank_rows: np.ndarray  # physical bank rows holding the tiles (buffers included)
    workers_used: np.ndarray


def ball_cycles(params: CandidateArrays, tm, tn, tk) -> np.ndarray:
    """Matrix Ball latency from each candidate's own formula (grouped by formula text), or,
    for a matrix Ball with `timing = "systolic"`, the systolic array's (`systolic_gemm_cycles`)."""
    shape = np.broadcast(tm, tn, tk, params.column("bank_count")).shape
    out = np.zeros(shape, dtype=np.int64)
    texts = np.array([t or "" for t in params.matrix_formula], dtype=object)
    for text in set(texts) - {""}:
        rows = np.flatnonzero(texts == text)
        sub = [np.broadcast_to(x, shape)[rows] for x in (tm, tn, tk)]
        r, c = params.matrix_rows[rows, None], params.matrix_cols[rows, None]
        if text.startswith(SYSTOLIC):
            v = systolic_gemm_cycles(sub[0], sub[1], sub[2], r, c, text.removeprefix(SYSTOLIC))
        else:
            v = Formula(text, LATENCY_VARIABLES["matrix"]).cycles(M=sub[0], N=sub[1], K=sub[2], rows=r, cols=c)
        out[rows] = np.broadcast_to(v, out[rows].shape)
    return out


def split_share(total, first_axes, workers):
    """Elements of a core op the busiest worker gets when the lowering splits it along the
    first of `first_axes` (sizes, broadcasting) that is at least 2: ceil(n / W) of n slices."""
    n = np.ones(np.broadcast(*first_axes, workers).shape, dtype=np.int64)
    chosen = np.zeros(n.shape, dtype=bool)
    for axis in first_axes:
        take = ~chosen & (np.asarray(axis) >= 2)
        n = np.where(take, axis, n)
        chosen |= take
    per = -(-n // workers)
    return np.where(workers > 1, total * per // n, total)


def matmul_cost(params: CandidateArrays, shape: MatmulShape, tm, tn, tk) -> MatmulCost:
    """Cycles of one matmul as the lowering emits it (`dse.lower.lower._gemm`) and the
    emulator's overlapped timing runs it.

    Per worker, output tiles in order (m, n, k inner). The DMA engine takes transfers in
    program order, so the MVOUT of a tile (which waits for its last matmul) holds back the
    loads of the next: tiles do not overlap one another, except that a tile needing no
    load runs its matmuls on the Ball while the previous tile's MVOUT drains (not under
    the framework policy, whose FENCE after every MVOUT drains everything, or with a bias
    preload, which waits behind the MVOUT like a load). Within a tile
    the Kt loads stream back to back and the Ball follows: ``max(Kt*d + c, d + Kt*c)`` for
    a load time d and a matmul latency c per k step. A tile of A stays in its bank while
    the worker's A working set (Kt tiles) fits the buffers; B likewise (nb x Kt tiles).
    Packing copies (A when K is split, B when it is an activation) run on the core first.
    """
    check = check_tiles(params, tm, tn, tk)
    tm, tn, tk = check.tm, check.tn, check.tk
    col = params.column
    Mp, Np, Kp = shape.padded
    Mt, Nt, Kt = Mp // tm, Np // tn, Kp // tk
    W = col("workers")

    # Output blocks: contiguous runs of ceil(blocks / W) rows (or columns) per worker.
    split_rows = col("split_rows")
    per = np.where(split_rows, -(-Mt // W), -(-Nt // W))
    workers = np.where(split_rows, -(-Mt // per), -(-Nt // per))
    mb = np.where(split_rows, per, Mt)
    nb = np.where(split_rows, Nt, per)
    b = shape.batch
    nbuf = check.buffers

    dma = (col("beat_bytes"), col("burst_max_bytes"), col("bursts_in_flight"), col("dma_latency"))
    bytes_a, bytes_b, bytes_c = tm * tk * INT8_BYTES, tk * tn * INT8_BYTES, tm * tn * INT32_BYTES
    dA, dB, dC = (dma_cycles(x, *dma) for x in (bytes_a, bytes_b, bytes_c))
    d_bias = dC if shape.bias else 0
    c = ball_cycles(params, tm, tn, tk)

    # Which output tiles load A and/or B (bank reuse), per worker.
    a_res = Kt <= nbuf
    b_res = nb * Kt <= nbuf
    P = b * mb * nb
    b_groups = b if shape.b_batched else 1  # batch entries with a B of their own
    n_ab = np.where(a_res, np.where(b_res, b_groups, b * mb), np.where(b_res, b_groups * nb, P))
    n_a = np.where(a_res, np.where(b_res, b * mb - b_groups, 0), np.where(b_res, P - b_groups * nb, 0))
    n_b = np.where(a_res, np.where(b_res, b_groups * nb - b_groups, P - b * mb), 0)
    n_0 = P - n_ab - n_a - n_b

    fence = col("framework")

    def loaded(d):
        return d_bias + np.maximum(Kt * d + c, d + Kt * c) + dC

    # A tile with nothing to load: its matmuls overlap the previous MVOUT unless a FENCE
    # drains it, or a bias preload (queued behind that MVOUT) must land first.
    t_none = d_bias + np.where(fence | shape.bias, Kt * c + dC, np.maximum(Kt * c, dC))
    worker_cycles = n_ab * loaded(dA + dB) + n_a * loaded(dA) + n_b * loaded(dB) + n_0 * t_none
    loads_a = (n_ab + n_a) * Kt
    loads_b = (n_ab + n_b) * Kt
    dma_worker = loads_a * dA + loads_b * dB + P * (dC + d_bias)
    compute_worker = P * Kt * c

    # Cores have their own DMA engines but share the system bus.
    total_bytes = (loads_a * bytes_a + loads_b * bytes_b + P * bytes_c * (2 if shape.bias else 1)) * workers
    bus_cycles = -(-total_bytes // col("system_bus_bytes"))
    # Serial timing (the framework's emulator): every transfer and matmul one after
    # another, the 3 x buffers MSETs and their frees too, no contention.
    serial = dma_worker + compute_worker + 6 * nbuf * col("mset_cycles")
    gemm = np.where(col("serial"), serial, np.maximum(worker_cycles, bus_cycles))
    worker_cycles = np.where(col("serial"), serial, worker_cycles)

    # Packing copies on the core, split across workers like any row-independent copy.
    nbB = b if shape.b_batched else 1
    pack_a = np.where(Kt > 1, np.ceil(split_share(b * Mp * Kp, (b, Mt, Kt), W) * col("copy_cpe")), 0)
    pack_b = 0 if shape.b_weight else np.ceil(split_share(nbB * Np * Kp, (nbB, Nt, Kt), W) * col("copy_cpe"))
    core = (pack_a + pack_b).astype(np.int64)
    cycles = gemm + core
    # Every worker's tiles at the busiest worker's rate, and the packing copies in full.
    blocks = np.where(split_rows, Mt, Nt)
    packs_all = (np.where(Kt > 1, b * Mp * Kp, 0) + (0 if shape.b_weight else nbB * Np * Kp)) * col("copy_cpe")
    busy = (worker_cycles * blocks // per + np.ceil(packs_all)).astype(np.int64)
    sram = check.banks * col("bank_rows") * col("row_bytes")
    # An accumulator line spans acc_col physical banks (one row of each).
    rows_used = nbuf * (check.lines_a + check.lines_b + col("acc_col") * check.lines_c)
    return MatmulCost(check, cycles, compute_worker, dma_worker, core, busy, total_bytes, sram, rows_used, workers)


PLAN_FIELDS = ("tm", "tn", "tk", "cycles", "compute_cycles", "dma_cycles", "core_cycles", "busy_cycles", "dma_bytes",
               "sram_bytes", "bank_rows",
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


def blocked_reasons(params: CandidateArrays, shape: MatmulShape | None = None) -> dict[int, str]:
    """Why candidates cannot run a matmul at all (no matrix Ball for the mapping's dataflow,
    more workers than cores), by candidate index; the others are left out."""
    out = {}
    for c in np.flatnonzero(params.no_matrix | (params.workers > params.cores)):
        if params.no_matrix[c]:
            what = f" for matmul {shape}" if shape is not None else ""
            out[int(c)] = params.matrix_missing[c] or f"chip {params.chip_names[c]} has no matrix Ball{what}"
        else:
            out[int(c)] = f"{params.workers[c]} workers but chip {params.chip_names[c]} has {params.cores[c]} cores"
    return out


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
                      compute_cycles=cost.compute_cycles, dma_cycles=cost.dma_cycles, core_cycles=cost.core_cycles,
                      busy_cycles=cost.busy_cycles,
                      dma_bytes=cost.dma_bytes, bank_rows=cost.bank_rows,
                      sram_bytes=cost.sram_bytes, banks=cost.check.banks, workers_used=cost.workers_used)
        any_ok = ok.any(axis=1)
        for name, arr in fields.items():
            values[name][idx] = np.where(any_ok, np.broadcast_to(arr, shape2)[rows, pick], 0)
        values["legal_tiles"][idx] = ok.sum(axis=1)
        feasible[idx] = any_ok
        # Explain a failure with the smallest tile: if even that fails, its reason binds.
        smallest = np.broadcast_to(cost.check.tm * cost.check.tn * cost.check.tk, shape2).argmin(axis=1)
        failed = np.flatnonzero(~any_ok)
        for r, why in zip(failed, cost.check.reasons(failed, smallest[failed])):
            c = idx[r]
            what = "the framework's greedy tile does not fit" if params.framework[c] else "no legal tile"
            reason[c] = f"matmul {label}: {what}; {why}"

    label = str(shape)
    usable = ~params.no_matrix & (params.workers <= params.cores)
    for c, why in blocked_reasons(params, shape).items():
        reason[c] = why

    fw = np.flatnonzero(usable & params.framework)
    if fw.size:
        sub = params if fw.size == n else params.take(fw)
        fill(fw, matmul_cost(sub, shape, *framework_tiles(sub, shape)))
    search = np.flatnonzero(usable & ~params.framework)
    if search.size:
        # Every tile for every candidate, through the mapper's evaluation (candidates that
        # differ only in bank count share one costed row): one implementation of the pick.
        from .mapper import search_shape

        found = search_shape(params.take(search), shape)
        picked = found.plan_values("search")
        ok = found.best >= 0
        for name in PLAN_FIELDS:
            values[name][search] = picked[name]
        feasible[search] = ok
        bad = np.flatnonzero(~ok)
        if bad.size:  # the smallest tile's reason binds; formatted for all at once
            tm, tn, tk = tile_grid(shape)
            t = int(np.argmin(tm * tn * tk))
            check = check_tiles(params.take(search[bad]), tm[t:t + 1], tn[t:t + 1], tk[t:t + 1])
            whys = check.reasons(np.arange(bad.size), np.zeros(bad.size, dtype=np.int64))
            for j, why in zip(bad, whys):
                reason[search[j]] = f"matmul {shape}: no legal tile among {len(tm)}; smallest {why}"
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
    core_cycles: int = 0
    busy_cycles: int = 0
    dma_bytes: int = 0
    sram_bytes: int = 0
    bank_rows: int = 0
    banks: int = 0
    workers_used: int = 0
    legal_tiles: int = 0


def plan_matmul(chip, mapping, shape: MatmulShape) -> MatmulPlan:
    plans = plan_matmuls(CandidateArrays.from_candidates([Candidate(chip, mapping)]), shape)
    return MatmulPlan(bool(plans.feasible[0]), plans.reason[0], **{f: int(plans.values[f][0]) for f in PLAN_FIELDS})


__all__ = ["MatmulCost", "MatmulPlan", "MatmulPlans", "ball_cycles", "blocked_reasons", "matmul_cost", "plan_matmul",
           "plan_matmuls"]
