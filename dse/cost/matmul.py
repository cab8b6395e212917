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

from ..mapping import MatmulShape, TileCheck, check_tiles
from ..mapping.matmul import INT8_BYTES, INT32_BYTES
from ..mapping.params import SYSTOLIC, CandidateArrays
from .core import split_share
from .dma import bus_hold_cycles, dma_cycles
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
    shared_bytes: np.ndarray  # shared memory a tile of cores holds for B (its banks, whole), weights = shared
    # of `cycles`, the shared copy of B's loads before the BARRIER that opens the tiles (0: none)
    preload_cycles: np.ndarray


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


def lockstep_bus_wait(params: CandidateArrays, workers, a, b, c, bias: bool, tiles) -> np.ndarray:
    """Cycles the busiest worker waits for the system bus beside the other workers running
    the same tiles in lock step, where a transfer holds the bus from its first burst to its
    last (`bus_hold_cycles`: a burst longer than the gap between another transfer's bursts;
    0 elsewhere). `a`, `b`, `c`: (cycles, bytes) of one A, B, C transfer; `tiles`: how many
    output tiles load A and B, A only, B only (one k step each).

    A tile's DMA phase is the previous tile's MVOUT, the bias, then its loads. The bus takes
    the workers' transfers in dispatch order: every worker's first transfer of the phase,
    then every one's second, and so on; so the last worker's phase ends no earlier than the
    first worker's start plus one latency plus every worker's holds. Workers start a phase
    staggered by the hold of the previous phase's last transfer (the first tile: at once),
    so the last one waits ``others x (its holds - stagger) - (transfers - 1) x latency``
    beyond its own transfers, when positive. The last tile's MVOUT waits likewise. A
    one-burst transfer has no gaps: the others queue behind it whole (its hold: its beats).
    Else `others` is the other workers less those whose bursts the gaps between a transfer's
    bursts still take (an approximation where some fit; where none do, ``dma.latency_cycles``
    below a burst's beats, the emulator's bus gives exactly these waits). Where every burst
    fits, only the first ones collide: the last worker's waits for the others' once."""
    col = params.column
    L = col("dma_latency")
    dma = (col("beat_bytes"), col("burst_beats"), col("parallel_bursts"), L, col("system_bus_bytes"))
    occ = np.maximum(1, -(-(col("burst_beats") * col("beat_bytes")) // col("system_bus_bytes")))
    fit = np.maximum(L + col("burst_beats") - col("parallel_bursts") * occ, 0) // occ  # bursts a gap takes
    burst_bytes = col("burst_beats") * col("beat_bytes")
    # a one-burst transfer has no gap of its own: the others' queue behind it whole
    single = np.maximum(a[1], np.maximum(b[1], c[1])) <= burst_bytes
    others = np.where(single, np.maximum(workers - 1, 0), np.maximum(workers - 1 - fit, 0))
    hA, hB, hC = (np.where(single, np.where(nbytes > 0, -(-nbytes // col("system_bus_bytes")), 0),
                           bus_hold_cycles(d, nbytes, *dma, only_held=True, sharers=np.maximum(workers - 1, 0)))
                  for d, nbytes in (a, b, c))
    n_ab, n_a, n_b = tiles
    extra = int(bias)
    lead = hC * (1 + extra)  # the previous MVOUT and the bias preload

    def wait(holds, count, stagger):
        return np.maximum(others * (holds - stagger) - (count - 1) * L, 0)

    head = wait(hC * extra + hA + hB, extra + 2, 0)
    # Where the bursts interleave, the workers' first bursts still arrive at once: the last
    # worker's go after the others' (then the stagger stays).
    first = np.minimum(occ, -(-(c[1] if bias else a[1]) // col("system_bus_bytes")))
    head = np.where(head > 0, head, np.maximum(workers - 1, 0) * first)
    ab = wait(lead + hA + hB, 3 + extra, hB)
    only_a = wait(lead + hA, 2 + extra, hA)
    only_b = wait(lead + hB, 2 + extra, hB)
    last = np.where(n_a > 0, hA, hB)  # the stagger the last MVOUT starts with
    tail = np.maximum(others * (hC - last), 0)
    steady = np.maximum(n_ab - 1, 0) * ab + n_a * only_a + n_b * only_b
    return np.where(n_ab > 0, head + tail, 0) + steady


def _on_one_k_step(Kt, wait) -> np.ndarray:
    """``np.where(Kt == 1, wait(lambda x: x), 0)``; for a row of tiles, `wait` (elementwise)
    evaluated on the tiles of one k step alone (`take` picks their columns), the others 0."""
    one = Kt == 1
    if one.ndim != 2 or one.shape[0] != 1:
        return np.where(one, wait(lambda x: x), 0)
    T = one.shape[1]
    cols = np.flatnonzero(one[0])

    def take(x):
        x = np.asarray(x)
        return x[:, cols] if x.ndim == 2 and x.shape[1] == T else x

    part = np.asarray(wait(take))
    out = np.zeros((part.shape[0] if part.ndim == 2 else 1, T), dtype=np.result_type(part, 0))
    out[:, cols] = part
    return out


def matmul_cost(params: CandidateArrays, shape: MatmulShape, tm, tn, tk) -> MatmulCost:
    """Cycles of one matmul as the lowering emits it (`dse.lower`'s GEMM emission) and the
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

    A weight B in shared memory (``mapping.weights = "shared"``, `check_tiles`): first its
    T tiles are loaded once per tile of cores with workers that compute, dealt round-robin
    to those workers
    (the busiest worker, in the tile with fewest workers, makes ``ceil(T / workers)``
    transfers back to back, the last landing ``shared_memory.latency_cycles`` later), and a
    BARRIER follows (`dse.analytical.graph_cost` counts it); then the output tiles run as
    above with B always resident, every matmul ``shared_memory.latency_cycles`` longer.
    With ``shape.b_preloaded`` (spans: the stack's weights loaded before every span,
    `dse.analytical.spans`) B is there already: no loads of its own.
    """
    check = check_tiles(params, tm, tn, tk, shape)
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

    dma = (col("beat_bytes"), col("burst_beats"), col("parallel_bursts"), col("dma_latency"))
    bus = col("system_bus_bytes")
    # A transfer's cycles and bus hold read only its bytes and the DMA's figures: where every
    # candidate's DMA is alike (a sweep over other knobs), costed on one row and spread.
    alike = all(bool((x == x[:1]).all()) for x in (*dma, bus))
    one_dma, one_bus = (tuple(x[:1] for x in dma), bus[:1]) if alike else (dma, bus)

    def spread(x):  # the shape the figure has when costed per candidate
        return np.broadcast_to(x, np.broadcast_shapes(np.shape(x), (params.n, 1))) if alike else x

    bytes_a, bytes_b, bytes_c = tm * tk * INT8_BYTES, tk * tn * INT8_BYTES, tm * tn * INT32_BYTES
    d_one = [dma_cycles(x, *one_dma) for x in (bytes_a, bytes_b, bytes_c)]
    dA, dB, dC = (spread(d) for d in d_one)
    d_bias = dC if shape.bias else 0
    shared_b, shared_a = check.shared_b, check.shared_a
    sh_lat = np.where(shared_b | shared_a, col("shared_latency"), 0)
    c = ball_cycles(params, tm, tn, tk) + sh_lat  # a shared operand adds its access latency

    # Which output tiles load A and/or B (bank reuse), per worker.
    a_res = Kt <= nbuf
    # batch entries with a B of their own to load (none: B is in shared memory already)
    b_groups = np.where(shared_b, 0, b if shape.b_batched else 1)

    def tile_loads(mb, nb):
        """(output tiles, of them loading A and B, only A, only B) of a worker with mb x nb
        output blocks a batch entry."""
        P = b * mb * nb
        b_res = (nb * Kt <= nbuf) | shared_b
        n_ab = np.where(a_res, np.where(b_res, b_groups, b * mb), np.where(b_res, b_groups * nb, P))
        n_a = np.where(a_res, np.where(b_res, b * mb - b_groups, 0), np.where(b_res, P - b_groups * nb, 0))
        n_b = np.where(a_res, np.where(b_res, b_groups * nb - b_groups, P - b * mb), 0)
        # A handed off in shared memory (loaded there by the range before,
        # `dse.analytical.placed`): no tile loads A; B as when A stays resident
        n_b = np.where(shared_a, np.where(b_res, b_groups * nb, P), n_b)
        return P, np.where(shared_a, 0, n_ab), np.where(shared_a, 0, n_a), n_b

    P, n_ab, n_a, n_b = tile_loads(mb, nb)
    n_0 = P - n_ab - n_a - n_b

    fence = col("framework")

    def loaded(d):
        return d_bias + np.maximum(Kt * d + c, d + Kt * c) + dC

    # A tile with nothing to load: its matmuls overlap the previous MVOUT unless a FENCE
    # drains it, or a bias preload (queued behind that MVOUT) must land first.
    t_none = d_bias + np.where(fence | shape.bias, Kt * c + dC, np.maximum(Kt * c, dC))
    worker_cycles = n_ab * loaded(dA + dB) + n_a * loaded(dA) + n_b * loaded(dB) + n_0 * t_none
    # Tiles of one k step alternate a DMA phase and a matmul on every worker alike: the phases
    # meet on the bus. (With several k steps the Ball hides later loads and the workers drift
    # apart: not charged.)
    worker_cycles = worker_cycles + _on_one_k_step(Kt, lambda take: lockstep_bus_wait(
        params, take(workers), (take(dA), take(bytes_a)), (take(dB), take(bytes_b)), (take(dC), take(bytes_c)),
        shape.bias, (take(n_ab), take(n_a), take(n_b))))
    loads_a = (n_ab + n_a) * Kt
    loads_b = (n_ab + n_b) * Kt
    # The shared copy of B: one per tile of cores the computing workers span, its T tiles
    # dealt to those workers of each; the tile with the fewest has the busiest loaders.
    core_groups = -(-workers // col("tile_size"))
    loaders = workers - (core_groups - 1) * col("tile_size")
    # (none when the stack's weights were loaded before the op: `MatmulShape.b_preloaded`)
    own_copy = shared_b & (not shape.b_preloaded)
    pre_loads = np.where(own_copy, -(-check.shared_tiles // loaders), 0)
    pre_bytes = np.where(own_copy, check.shared_tiles * bytes_b * core_groups, 0)
    preload = np.where(pre_loads > 0, np.maximum(pre_loads * dB, -(-pre_bytes // bus)) + sh_lat, 0)
    dma_worker = loads_a * dA + loads_b * dB + P * (dC + d_bias) + pre_loads * dB
    compute_worker = P * Kt * c

    # Cores have their own DMA engines but share the system bus.
    def moved(P, n_ab, n_a, n_b):
        return ((n_ab + n_a) * Kt * bytes_a + (n_ab + n_b) * Kt * bytes_b
                + P * bytes_c * (2 if shape.bias else 1))

    # the last worker takes the blocks left over (44 column blocks on 3 workers: 15, 15, 14)
    rest = np.where(split_rows, Mt, Nt) - (workers - 1) * per
    last = tile_loads(np.where(split_rows, rest, Mt), np.where(split_rows, Nt, rest))
    total_bytes = moved(P, n_ab, n_a, n_b) * (workers - 1) + moved(*last)
    # the bus carries every worker's bytes, or, where a transfer holds it, their holds
    hold_a, hold_b, hold_c = (spread(bus_hold_cycles(d, nbytes, *one_dma, one_bus)) for d, nbytes in
                              zip(d_one, (bytes_a, bytes_b, bytes_c)))
    bus_cycles = np.maximum(-(-total_bytes // bus),
                            workers * (loads_a * hold_a + loads_b * hold_b + P * hold_c * (2 if shape.bias else 1)))
    total_bytes = total_bytes + pre_bytes
    # Serial timing (the framework's emulator): every transfer and matmul one after
    # another, the MSETs of the buffers (A, B unless shared, C) and their frees too, no
    # contention.
    msets = (6 - 2 * shared_b.astype(np.int64) - 2 * shared_a) * nbuf * col("mset_cycles")
    serial = dma_worker + compute_worker + msets + pre_loads * sh_lat
    gemm = np.where(col("serial"), serial, preload + np.maximum(worker_cycles, bus_cycles))
    worker_cycles = np.where(col("serial"), serial, worker_cycles + preload)

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
    sram = check.banks * col("usable_rows") * col("row_bytes")  # the rows an instruction can address
    # An accumulator line spans acc_col physical banks (one row of each).
    rows_used = nbuf * (np.where(shared_a, 0, check.lines_a) + np.where(shared_b, 0, check.lines_b)
                        + col("acc_col") * check.lines_c)
    # a shared weight's banks (the graph cost closes its loads with a sync); a handed-off A's
    # banks are the placement's (`dse.analytical.placed`), loaded by the range before
    shared_bytes = check.shared_tiles * col("shared_rows") * col("shared_row_bytes")
    preload_cycles = np.where(col("serial"), pre_loads * (dB + sh_lat), preload)
    return MatmulCost(check, cycles, compute_worker, dma_worker, core, busy, total_bytes, sram, rows_used, workers,
                      shared_bytes, preload_cycles)


@dataclass
class MatmulActivity:
    """What a matmul makes the chip do, summed over every worker: the matrix Ball's MACs
    (of the padded operands it is given), bank rows read and written (private banks and
    shared memory: a transfer's beats and a Ball operand's rows, as the emulator counts
    them: a row is one `row_bytes` line of one physical bank) and the packing copies'
    core cycles."""

    macs: np.ndarray
    bank_reads: np.ndarray
    bank_writes: np.ndarray
    shared_reads: np.ndarray
    shared_writes: np.ndarray
    core_cycles: np.ndarray
    # DRAM the lowering lays out for the op beyond the plan's tensors: the weight's blocked
    # copy, the packed A (when K is split) or activation B, the bias replicate
    workspace_bytes: np.ndarray
    # of it, the read-only constants (a weight's blocked copy, the bias replicate): placed
    # once for every op reading the same bytes (`dse.plan.memory.Dram.constant`)
    weight_blob_bytes: int = 0
    bias_blob_bytes: np.ndarray | int = 0


def _aligned(nbytes, align: int = 64):
    return -(-np.asarray(nbytes, dtype=np.int64) // align) * align


def matmul_activity(params: CandidateArrays, shape: MatmulShape, tm, tn, tk, dma_bytes) -> MatmulActivity:
    """The activity of the tiles `matmul_cost` costs and the lowering emits (one tile per
    candidate, arrays of length n; `dma_bytes`: the cost's DRAM bytes). Every output tile
    runs its Kt matmuls (each reading its A and B tiles and, but for the first without a
    bias, accumulating into C: its rows read then written) and is moved out once; every byte
    the DMA moves in is a bank row written (a shared weight's copy in shared memory)."""
    tm, tn, tk = (np.asarray(x, dtype=np.int64) for x in (tm, tn, tk))
    check = check_tiles(params, tm[:, None], tn[:, None], tk[:, None], shape)
    shared_b, shared_a = check.shared_b[:, 0], check.shared_a[:, 0]
    rb = params.row_bytes
    Mp, Np, Kp = shape.padded
    b = shape.batch
    Mt, Nt, Kt = Mp // tm, Np // tn, Kp // tk
    a_rows = b * Mp * Kp * Nt // rb  # every output tile reads its row block of A, every k step
    b_rows = b * Np * Kp * Mt // rb
    c_tile = tm * tn * INT32_BYTES // rb
    tiles = b * Mt * Nt
    c_reads = tiles * (Kt - 1 + int(shape.bias)) * c_tile
    c_writes = tiles * Kt * c_tile
    out = b * Mp * Np * INT32_BYTES // rb  # each C tile moved out once
    # the shared copy of B: every tile of cores the computing workers span loads its own
    W = params.workers
    per = np.where(params.split_rows, -(-Mt // W), -(-Nt // W))
    workers = np.where(params.split_rows, -(-Mt // per), -(-Nt // per))
    groups = -(-workers // params.tile_size)
    pre = np.where(shared_b & (not shape.b_preloaded), check.shared_tiles[:, 0] * tk * tn * groups // rb, 0)
    loads = np.asarray(dma_bytes, dtype=np.int64) // rb - out - pre  # into private banks
    ball_private = np.where(shared_a, 0, a_rows) + np.where(shared_b, 0, b_rows)
    ball_shared = np.where(shared_a, a_rows, 0) + np.where(shared_b, b_rows, 0)
    nbB = b if shape.b_batched else 1
    packs = (np.where(Kt > 1, b * Mp * Kp, 0) + (0 if shape.b_weight else nbB * Np * Kp)) * params.copy_cpe
    macs = np.full(params.n, b * Mp * Np * Kp, dtype=np.int64)
    b_bytes = 0 if (shape.b_weight and shape.b_preloaded) else int(_aligned(nbB * Np * Kp))
    bias_bytes = _aligned(Np * tm * INT32_BYTES) if shape.bias else 0
    workspace = b_bytes + np.where(Kt > 1, _aligned(b * Mp * Kp), 0) + bias_bytes
    return MatmulActivity(macs, ball_private + c_reads + out, loads + c_writes, ball_shared, pre,
                          np.ceil(packs).astype(np.int64), workspace, b_bytes if shape.b_weight else 0, bias_bytes)


__all__ = ["MatmulActivity", "MatmulCost", "ball_cycles", "matmul_activity", "matmul_cost", "split_share"]
