"""The cost of every op of a graph as the plan decides it, for arrays of candidates.

The walk reads the plan's decisions (`dse.plan`), the very functions the lowering emits
from: which products go to the matrix Ball (`matrix_product`, `matrix_conv`) with which
tile (`plan_matmuls`), where each tensor lives (`dse.plan.memory` locations: padded
row-major, strided, or a blocked accumulator) and when a blocked accumulator or a strided
view is copied out on the core first, how a core op is split across workers
(`busiest_elements`), which ReLU goes to the ReLU Ball (`relu_ball`), which scale op
streams through a Ball (`scale_stream`, `stream_or_core`), what closes each op
(`sync_after`). It sums the emulator's charges (`dse.cost`): a core op ``ceil(elements x
cycles per element)`` on the busiest worker, a matmul `matmul_cost`, a Ball stream its
transfers and Ball latency back to back, and a FENCE or BARRIER per synchronisation.

Candidates differ in tiles (per candidate, vectorised), worker count, Ball set, chip
figures and core speeds; everything else about an op is the graph's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from emulator.chip import LATENCY_VARIABLES
from emulator.formula import Formula

from ..cost.core import GRAPH_OP, charged_elements, split_share
from ..cost.dma import candidate_dma_cycles
from ..cost.matmul import matmul_cost
from ..mapping import CandidateArrays, MatmulShape
from ..plan.mapper import gemm_shape
from ..plan.matmul import MatmulPlans, plan_matmuls
from ..plan.memory import Blocked, Dram, Loc, pad
from ..plan.split import busiest_elements
from ..plan.units import (SCALE_KINDS, conv_pad, matrix_conv, matrix_product, relu_ball, reshape_view, sync_after,
                          too_many_workers)
from ..workload.graph import Graph, Op, scale_tensor
from .stream_cost import StreamCosts


@dataclass
class OpCost:
    """One op's figures for every candidate (arrays of length n)."""

    unit: np.ndarray
    feasible: np.ndarray
    reason: np.ndarray
    cycles: np.ndarray
    compute_cycles: np.ndarray  # Ball busy (matrix or stream Ball) on the busiest worker
    dma_cycles: np.ndarray
    core_cycles: np.ndarray  # core ops on the busiest worker
    ball_cycles: np.ndarray  # Ball work with its transfers (matrix tiles, Ball streams)
    busy_cycles: np.ndarray  # core + Ball work summed over all workers (per-core busy time)
    syncs: np.ndarray  # FENCEs / BARRIERs that close the op's parts
    dma_bytes: np.ndarray
    sram_bytes: np.ndarray  # private SRAM the op allocates (per worker)
    bank_rows: np.ndarray  # of it, the bank rows that hold data
    banks: np.ndarray
    tile_m: np.ndarray
    tile_n: np.ndarray
    tile_k: np.ndarray
    workers_used: np.ndarray


@dataclass
class BlockedOutput:
    """A blocked accumulator: (batch, M, N) and the producing tile per candidate."""

    batch: int
    M: int
    N: int
    tm: np.ndarray
    tn: np.ndarray


@dataclass
class PlacedTensor:
    loc: Loc | None  # None for a blocked accumulator
    blocked: BlockedOutput | None = None
    unblocked: Loc | None = None  # the row-major copy, once made


@dataclass
class Charges:
    """One op's charges, accumulated as the walk meets its parts (arrays of length n).
    The Ball-side figures are None until a Ball path sets them."""

    n: int
    core: np.ndarray = field(init=False)  # on the busiest worker
    ball: np.ndarray = field(init=False)
    dma: np.ndarray = field(init=False)
    syncs: np.ndarray = field(init=False)
    busy: np.ndarray = field(init=False)  # summed over workers
    ball_busy: np.ndarray | None = None  # the Ball's own busy cycles on the busiest worker
    banks: np.ndarray | None = None
    bank_rows: np.ndarray | None = None
    sram: np.ndarray | None = None
    dma_bytes: np.ndarray | None = None

    BALL_FIGURES = ("ball_busy", "banks", "bank_rows", "sram", "dma_bytes")
    TIMES = ("core", "ball", "dma", "syncs", "busy")

    def __post_init__(self):
        self.core, self.ball, self.dma, self.busy = (np.zeros(self.n) for _ in range(4))
        self.syncs = np.zeros(self.n, dtype=np.int64)

    def add(self, other: "Charges") -> None:
        for f in self.TIMES:
            setattr(self, f, getattr(self, f) + getattr(other, f))

    def select(self, on_ball: np.ndarray, ball: "Charges", core: "Charges") -> None:
        """Per candidate, the Ball path's charges where `on_ball`, else the core path's."""
        for f in self.TIMES:
            setattr(self, f, getattr(self, f) + np.where(on_ball, getattr(ball, f), getattr(core, f)))
        for f in self.BALL_FIGURES:
            value = getattr(ball, f)
            if value is not None:
                setattr(self, f, np.where(on_ball, value, 0))


class GraphCost:
    """Walks a graph for a batch of candidates, op by op, reading the plan."""

    def __init__(self, graph: Graph, params: CandidateArrays, chips=None):
        self.graph, self.params, self.n = graph, params, params.n
        # The chip configs, for the plan's whole-chip decisions (Ball streams); without them
        # those ops are costed on the core.
        self.chips = chips
        self.workers = np.asarray(params.workers, dtype=np.int64)
        self.worker_counts = sorted(set(int(w) for w in self.workers))
        self.dram = Dram()  # placement only: no data
        self.tensors: dict[str, PlacedTensor] = {}
        self.plans: dict[MatmulShape, MatmulPlans] = {}
        self.streams = StreamCosts(graph, params, chips) if chips is not None else None
        self.too_many_reason = np.array([too_many_workers(w, name, c) for w, name, c
                                         in zip(params.workers, params.chip_names, params.cores)], dtype=object)
        # What closes an op's part, per candidate: any sync at all, and whether it is a BARRIER.
        closing = {(w, ball): sync_after(w, ball) for w in self.worker_counts for ball in (False, True)}
        self.closes_after_ball = np.array([closing[int(w), True] is not None for w in self.workers], dtype=np.int64)
        self.closes_after_core = np.array([closing[int(w), False] is not None for w in self.workers], dtype=np.int64)
        self.sync_cycles = np.where([closing[int(w), True] == "barrier" for w in self.workers],
                                    params.barrier_cycles, params.fence_cycles)
        for name in graph.inputs:
            spec = graph.tensors[name]
            self.tensors[name] = PlacedTensor(self.dram.tensor(spec.shape, spec.dtype))

    # ------------------------------------------------------------ placement
    def placed(self, name: str) -> PlacedTensor:
        if name not in self.tensors:  # a weight, placed on first use
            spec = self.graph.tensors[name]
            self.tensors[name] = PlacedTensor(self.dram.tensor(spec.shape, spec.dtype))
        return self.tensors[name]

    def core_op(self, charges: Charges, kind: str, op, dst_shape, src_shapes, elements: int, cpe: np.ndarray):
        """A core op, split across workers where the plan splits it."""
        busiest = {w: busiest_elements(kind, op, dst_shape, src_shapes, elements, w) for w in self.worker_counts}
        share = np.array([busiest[int(w)] for w in self.workers], dtype=np.float64)
        charges.core += np.ceil(share * cpe)
        charges.busy += np.ceil(elements * cpe)

    def core_op_tiled(self, charges: Charges, blk: BlockedOutput, cpe: np.ndarray):
        """A core op over a blocked accumulator's padded grid (batch, Mt, tm, Nt, tn): split
        along the first axis of at least 2, vectorised over the candidates' tiles."""
        Mp, Np = pad(blk.M), pad(blk.N)
        total = blk.batch * Mp * Np
        share = split_share(total, (blk.batch, Mp // blk.tm, blk.tm), self.workers)
        charges.core += np.ceil(share * cpe)
        charges.busy += np.ceil(total * cpe)

    def close(self, charges: Charges, after_ball: bool):
        charges.syncs += self.closes_after_ball if after_ball else self.closes_after_core

    def logical(self, charges: Charges, name: str) -> Loc:
        """A row-major location: a blocked accumulator is copied out once (charged)."""
        t = self.placed(name)
        if t.blocked is None:
            return t.loc
        if t.unblocked is None:
            b = t.blocked
            t.unblocked = self.dram.matrix(self.graph.tensors[name].shape, "int32", b.batch, b.M, b.N)
            self.core_op_tiled(charges, b, self.params.copy_cpe)
            self.close(charges, False)
        return t.unblocked

    def standard(self, charges: Charges, name: str) -> Loc:
        """A padded row-major location: anything else is copied (charged)."""
        loc = self.logical(charges, name)
        if loc.standard:
            return loc
        out = self.dram.tensor(loc.shape, loc.dtype)
        self.core_op(charges, "copy", None, loc.shape, [loc.shape], math.prod(loc.shape), self.params.copy_cpe)
        self.close(charges, False)
        return out

    # ------------------------------------------------------------ ops
    def op_cost(self, op: Op) -> OpCost:
        n, p = self.n, self.params
        charges = Charges(n)
        unit = "core"
        gemm = None
        if matrix_product(self.graph, op):
            gemm, unit = self._matmul(charges, op), "matrix"
        elif matrix_conv(self.graph, op):
            gemm, unit = self._conv(charges, op), "matrix"
        elif op.kind in SCALE_KINDS:
            unit = self._scale_op(charges, op)
        elif op.kind == "relu" and (relu := self._relu_ball(charges, op)) is not None:
            unit = relu
        elif op.kind == "reshape" and self._reshape(op):
            unit = "none"
        else:
            self._generic(charges, op)
        zeros = np.zeros(n, dtype=np.int64)
        feasible = np.ones(n, dtype=bool)
        reason = np.full(n, "", dtype=object)
        banks, sram, rows_used, tiles, dma_bytes = zeros, zeros, zeros, (zeros, zeros, zeros), zeros
        compute = zeros
        workers_used = np.minimum(self.workers, p.cores)
        units = np.full(n, unit, dtype=object) if isinstance(unit, str) else unit.astype(object)
        if gemm is not None:
            plans = gemm
            feasible = plans.feasible.copy()
            # the very words the lowering raises (`Infeasible`)
            reason = np.array([f"op {op.name}: {r}" if r else "" for r in plans.reason], dtype=object)
            charges.core += np.where(feasible, plans.core_cycles, 0)
            charges.busy += np.where(feasible, plans.busy_cycles, 0)
            charges.ball += np.where(feasible, plans.cycles - plans.core_cycles, 0)
            compute = plans.compute_cycles
            charges.dma += plans.dma_cycles
            banks, sram, rows_used, dma_bytes = plans.banks, plans.sram_bytes, plans.bank_rows, plans.dma_bytes
            tiles = (plans.tm, plans.tn, plans.tk)
            workers_used = np.where(feasible, plans.workers_used, workers_used)
        if charges.sram is not None:
            sram, banks, rows_used = charges.sram, charges.banks, charges.bank_rows
        if charges.dma_bytes is not None:
            dma_bytes = charges.dma_bytes
        if charges.ball_busy is not None:
            compute = charges.ball_busy
        # More workers than cores: the lowering refuses the whole graph, before any op.
        too_many = self.workers > p.cores
        if too_many.any():
            feasible = feasible & ~too_many
            reason = np.where(too_many, self.too_many_reason, reason)
        cycles = np.round(charges.core + charges.ball + charges.syncs * self.sync_cycles).astype(np.int64)

        def own(x, dtype=np.int64):  # every field its own array (callers write into them)
            return np.array(np.broadcast_to(x, (n,)), dtype=dtype)

        return OpCost(own(units, object), own(feasible, bool), own(reason, object), own(np.where(feasible, cycles, 0)),
                      own(compute), own(np.round(charges.dma)), own(np.round(charges.core)),
                      own(np.where(feasible, np.round(charges.ball), 0)),
                      own(np.where(feasible, np.round(charges.busy), 0)),
                      own(charges.syncs), own(dma_bytes), own(sram), own(rows_used), own(banks),
                      *[own(t) for t in tiles], own(workers_used))

    def _plans(self, shape: MatmulShape) -> MatmulPlans:
        if shape not in self.plans:  # repeated layers share one evaluation
            serial = self.params.serial
            if not serial.any():
                self.plans[shape] = plan_matmuls(self.params, shape)
            else:
                # The plan picks tiles by the overlapped cost whatever the emulator's mode:
                # pick them so, then cost those tiles in serial timing.
                picked = plan_matmuls(replace(self.params, serial=np.zeros(self.n, dtype=bool)), shape)
                ok = picked.feasible
                col = lambda a: np.where(ok, a, 16)[:, None]  # noqa: E731  (any tile where none fits)
                cost = matmul_cost(self.params, shape, col(picked.tm), col(picked.tn), col(picked.tk))
                for name in ("cycles", "compute_cycles", "dma_cycles", "core_cycles", "busy_cycles"):
                    picked.values[name] = np.where(ok, getattr(cost, name)[:, 0], 0)
                self.plans[shape] = picked
        return self.plans[shape]

    def _blocked_out(self, name: str, batch: int, M: int, N: int, plans: MatmulPlans):
        self.tensors[name] = PlacedTensor(None, BlockedOutput(batch, M, N, np.maximum(plans.tm, 16),
                                                              np.maximum(plans.tn, 16)))

    def _matmul(self, charges: Charges, op: Op) -> MatmulPlans:
        shape = gemm_shape(self.graph, op)
        self.standard(charges, op.inputs[0])
        if not shape.b_weight:
            self.logical(charges, op.inputs[1])
        plans = self._plans(shape)
        # the packing copies, closed before the Ball reads them
        charges.syncs += np.where(self.workers > 1, (plans.core_cycles > 0).astype(np.int64), 0)
        self.close(charges, True)
        self._blocked_out(op.outputs[0], shape.batch, shape.M, shape.N, plans)
        return plans

    def _conv(self, charges: Charges, op: Op) -> MatmulPlans:
        graph, copy_cpe = self.graph, self.params.copy_cpe
        x = self.logical(charges, op.inputs[0])
        out = graph.tensors[op.outputs[0]]
        w_shape = graph.tensors[op.inputs[1]].shape
        nd = len(w_shape) - 2
        kernel, C = tuple(w_shape[:nd]), w_shape[nd]
        n_img = x.shape[0]
        outs = tuple(out.shape[1:1 + nd])
        if any(lo or hi for lo, hi in conv_pad(op)):  # the copy into a zero-padded image
            self.core_op(charges, "copy", None, x.shape, [x.shape], math.prod(x.shape), copy_cpe)
            self.close(charges, False)
        gather = (n_img, *outs, *kernel, C)  # the im2col gather
        self.core_op(charges, "copy", None, gather, [gather], math.prod(gather), copy_cpe)
        self.close(charges, False)
        shape = gemm_shape(graph, op)  # the im2col GEMM: M = images x positions, K = taps x C
        plans = self._plans(shape)
        charges.syncs += np.where(self.workers > 1, (plans.core_cycles > 0).astype(np.int64), 0)
        self.close(charges, True)
        self._blocked_out(op.outputs[0], 1, shape.M, shape.N, plans)
        return plans

    def _scale_op(self, charges: Charges, op: Op) -> str | np.ndarray:
        """quantize / requantize / dequantize: the plan's Ball stream where the plan takes it
        (`StreamCosts`, per candidate), else the core op."""
        spec = self.graph.tensors[op.outputs[0]]
        shape = tuple(spec.shape)
        t = self.placed(op.inputs[0])
        b = t.blocked
        out = self.dram.matrix(shape, spec.dtype, b.batch, b.M, b.N) if b is not None \
            else self.dram.tensor(shape, spec.dtype)
        self.tensors[op.outputs[0]] = PlacedTensor(out)
        core = Charges(self.n)
        if b is not None:
            self.core_op_tiled(core, b, self.params.mul_cpe)
        else:
            scale_t = scale_tensor(op.attrs, shape)
            if scale_t.dim() == 0 or scale_t.numel() == 1:
                self.core_op(core, "scale", None, shape, [t.loc.shape],
                             max(math.prod(shape), math.prod(t.loc.shape)), self.params.scale_cpe)
            else:
                sshape = tuple(scale_t.shape)
                self.core_op(core, "mul", None, shape, [t.loc.shape, sshape],
                             max(math.prod(shape), math.prod(t.loc.shape), math.prod(sshape)), self.params.mul_cpe)
        self.close(core, False)
        on_core = "epilogue" if b is not None else "core"
        if self.streams is None:
            charges.add(core)
            return on_core
        src = t.loc
        tiles = None
        if b is not None:
            src = Loc(0, tuple(self.graph.tensors[op.inputs[0]].shape), "int32", (),
                      Blocked(b.batch, 0, 0, 0, 0, b.M, b.N))  # the tile is each candidate's (`tiles`)
            tiles = (b.tm, b.tn)
        stream = self.streams.charges(op, src, out, shape, tiles)
        if stream is None:
            charges.add(core)
            return on_core
        on_ball, ball, kinds = stream
        self.close(ball, True)
        charges.select(on_ball, ball, core)
        return np.where(on_ball, kinds, on_core) if on_ball.any() else on_core

    def _relu_ball(self, charges: Charges, op: Op) -> str | np.ndarray | None:
        """The ReLU Ball streams the padded buffer through one bank: per chunk of a bank's
        rows, MVIN, RELU, MVOUT back to back (the in-order DMA engine holds the next MVIN
        behind the MVOUT), chunks dealt to workers. Candidates without the Ball run the
        op on the core. Returns the unit (per candidate when they differ), or None when no
        candidate can use the Ball."""
        spec = self.graph.tensors[op.outputs[0]]
        t = self.placed(op.inputs[0])
        has = np.array([f is not None for f in self.params.relu_formula])
        if not relu_ball(bool(has.any()), spec.dtype, t.loc if t.blocked is None else None):
            return None
        if not has.all():  # some candidates run it on the core: cost both, pick per candidate
            core = Charges(self.n)
            self._generic(core, op)
            ball = Charges(self.n)
            self._relu_stream(ball, t.loc)
            charges.select(has, ball, core)
        else:
            self._relu_stream(charges, t.loc)
        self.tensors[op.outputs[0]] = PlacedTensor(self.dram.tensor(spec.shape, spec.dtype))
        return "relu" if has.all() else np.where(has, "relu", "core")

    def _relu_stream(self, charges: Charges, src: Loc):
        """The chunks of `relu_chunks` (a bank's addressable rows each), costed per candidate."""
        p = self.params
        lines = src.nbytes // 16
        rows = p.usable_rows
        chunks = -(-lines // rows)
        mine = -(-chunks // self.workers)  # worker 0's chunks
        full = np.minimum(lines, rows)
        last = lines - (chunks - 1) * rows
        texts = np.array([t or "" for t in p.relu_formula], dtype=object)
        r_full, r_last = np.zeros(self.n), np.zeros(self.n)
        for text in set(texts) - {""}:
            idx = np.flatnonzero(texts == text)
            f = Formula(text, LATENCY_VARIABLES["relu"])
            r_full[idx] = np.broadcast_to(f.cycles(iter=full[idx]), idx.shape)
            r_last[idx] = np.broadcast_to(f.cycles(iter=last[idx]), idx.shape)
        d_full = 2 * candidate_dma_cycles(p, full * 16)
        d_last = 2 * candidate_dma_cycles(p, last * 16)
        # worker 0 holds chunk 0, W, 2W, ...: the short last chunk only when it lands there
        last_on_0 = (chunks - 1) % self.workers == 0
        n_full = np.where(last_on_0, mine - 1, mine)
        stream = n_full * (d_full + r_full) + np.where(last_on_0, d_last + r_last, 0)
        charges.ball += stream + 4 * p.mset_cycles
        used = np.minimum(self.workers, chunks)
        charges.busy += (chunks - 1) * (d_full + r_full) + (d_last + r_last) + 4 * p.mset_cycles * used
        charges.dma += n_full * d_full + np.where(last_on_0, d_last, 0)
        charges.ball_busy = (n_full * r_full + np.where(last_on_0, r_last, 0)).astype(np.int64)
        charges.banks = 2 * -(-np.minimum(lines, rows) // rows)
        charges.sram = charges.banks * p.bank_rows * p.row_bytes
        charges.bank_rows = 2 * np.minimum(lines, rows)  # a chunk in, its result out
        charges.dma_bytes = np.full(self.n, 2 * lines * 16, dtype=np.int64)
        self.close(charges, True)

    def _reshape(self, op: Op) -> bool:
        t = self.placed(op.inputs[0])
        spec = self.graph.tensors[op.outputs[0]]
        view = reshape_view(t.loc, spec.shape, spec.dtype) if t.blocked is None else None
        if view is None:
            return False
        self.tensors[op.outputs[0]] = PlacedTensor(view)
        return True

    def _generic(self, charges: Charges, op: Op):
        srcs = [self.logical(charges, name) for name in op.inputs]
        spec = self.graph.tensors[op.outputs[0]]
        self.tensors[op.outputs[0]] = PlacedTensor(self.dram.tensor(spec.shape, spec.dtype))
        shapes = [s.shape for s in srcs]
        elements = charged_elements(op, [math.prod(s) for s in shapes], math.prod(spec.shape))
        self.core_op(charges, GRAPH_OP, op, tuple(spec.shape), shapes, elements, self.params.graph_op_cpe)
        self.close(charges, False)


def graph_costs(graph: Graph, params: CandidateArrays, chips=None) -> list[OpCost]:
    walker = GraphCost(graph, params, chips)
    return [walker.op_cost(op) for op in graph.ops]


__all__ = ["OpCost", "graph_costs"]
