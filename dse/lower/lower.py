"""Lower a graph and a candidate to an emulator Program and its DRAM image.

Op by op, in graph order:

* an int8 x int8 -> int32 ``linear`` / ``matmul`` (and batched matmul) goes to the matrix
  Ball with the tile the shared legality/mapper code picks
  (`dse.plan.matmul.plan_matmul`: the framework's greedy tile under
  ``policy="framework"``, the mapper's best under ``"search"``); a candidate with no legal
  tile is :class:`Infeasible` with the very reason the analytical model gives. Weights are
  permuted and blocked offline (B as Bt tiles, bias replicated into accumulator tiles and
  preloaded with MVIN); an activation operand is packed by a charged core copy when its
  tile needs it (A when K is split, B always). Output tiles are split across workers by
  rows or columns (``mapping.split``). The accumulator stays blocked in DRAM (one
  contiguous MVOUT a tile). With ``mapping.weights = "shared"`` a weight's Bt tiles are
  loaded once per tile of cores into its shared memory (tile j in shared bank
  ``first_bank_id + base + j``, base the first bank of the region a pipeline's range or a
  phase's stage keeps its weights in, `dse.plan.placement.WeightRegions`; the loads dealt to the tile's workers by `shared_loads`, then the
  sync of a core op) and every matmul reads B there: no private B banks.
* an int8 channels-last ``conv1d`` / ``conv2d`` (NLC / NHWC, WIO / HWIO weights, as the
  permute step leaves them) is im2col on the core - one strided gather copy, after a copy
  into a zero-padded image when the conv pads - and the same GEMM on the matrix Ball; with
  ``mapping.fusion = "fuse"`` the first of those copies applies a ReLU the plan fused into
  it (a core "relu" op instead of "copy"; the ReLU's own tensor is never written);
* with ``mapping.fusion = "fuse"`` attention's score chain (dequantize of QK^T, scalar and
  mask stages, softmax, the quantize PV reads) is one ``graph_chain`` core op a worker over
  its heads, reading the accumulator's tiles and writing PV's A buffer (`dse.plan.chains`);
* with ``mapping.channels_last = true`` a layout conversion the plan makes a view emits
  nothing: its source (a graph input placed in DRAM in NHWC order, or a core op writing
  through strides) is already in its order, or its readers read strides (`dse.plan.layout`);
* a grouped or depthwise conv is the same, with its block-diagonal weight, or one core op,
  per candidate as `dse.plan.grouped.on_matrix` decides (the Ball path copies its
  accumulator out, so both leave the same row-major result);
* quantize (fp32 -> int8), requantize (int32 / int8 -> int8) and dequantize (int32 / int8
  -> fp32) go to the Fp2Int / Int2Fp Ball where the chip has it and one fp32 scale covers
  runs of whole 16-byte lines - a per-tensor scale, or one that varies only along the rows
  (per row, per 16-row strip, per batch entry) - streamed through two banks (MVIN, FP2INT /
  INT2FP, MVOUT; see `dse.plan.streams.scale_stream` for the layouts and `dse.cost.stream_cycles` for the
  cost), when the estimate says the Ball is cheaper than the core (``elementwise="auto"``;
  ``"ball"`` / ``"core"`` force one side). Otherwise, and always for a per-channel scale
  (it varies inside every line), one core op: over the padded tiles of a blocked
  accumulator (the padding multiplied by a zero scale), or over the row-major tensor;
* an int8 / int32 ReLU goes to the ReLU Ball where the chip has one (toy, pebble);
* transposes (``permute``) stay core ops: the Transpose Ball transposes E x E blocks of
  consecutive lines (E = 4 fp32 / 16 int8), so feeding it a matrix needs a strided MVIN of
  one 16-byte line a row (one DRAM burst, ``dma.latency_cycles``, every 16 bytes: 25 cycles
  an fp32 element against the core's 4) and a per-block MVOUT (a transfer starts at line 0
  of its bank), and the permutes left after the frontend are fp32 activations of odd shapes
  (3 channels, 17 tokens) that are not whole blocks;
* reshape of an unpadded contiguous tensor is a descriptor (no data moves);
* everything else is a core op (:mod:`dse.lower.coreop`), charged, never free.

Row-independent core ops (copies, elementwise arithmetic, quantization, last-axis norms)
and permutes (by output rows) are split across the workers (`dse.plan.split`); others run
on worker 0. Synchronisation: with one worker a
FENCE closes each matrix-Ball op before the core reads its MVOUTs (under ``framework`` a
FENCE also follows every MVOUT, as in the framework's toolchain); with several workers a
BARRIER on every worker closes every op. Banks are allocated (MSET) at the start of each
Ball op (matrix, ReLU, Fp2Int / Int2Fp stream) and freed at its end: no data stays resident
in a bank across ops, so an allocation lives exactly as long as its op. The private SRAM
figure is computed from those actual lifetimes (`sram_lifetimes` replays every worker's
MSETs over the whole program: ``Lowered.peak_sram_bytes`` / ``peak_sram_per_worker``),
equal to the emulator's ``peak_allocated_bytes`` counter.
:func:`lower_stages` places several graphs on disjoint core groups (poly: prefill and
decode cores); :func:`lower_layers` lays one graph out in ranges of ops on core groups and
runs its requests (`dse.plan.placement.schedule`); `dse.lower.spans.lower_spans` partitions a
temporal stack into spans.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from emulator import Barrier, CoreOp, DramTensor, Fence, Fp2Int, Int2Fp, Matmul, Mset, Mvin, Mvout, Program, Region, Relu

from ..mapping import Candidate, MatmulShape
from ..plan.moe import spreads
from ..mapping.matmul import check_tiles
from ..mapping.params import CandidateArrays
from ..plan.chains import CHAIN_KIND, chain_elements, chain_extent, chain_parts
from ..plan.graph_plan import OpPlan, copy_buffer, plan_for, stored_loc
from ..plan.grouped import block_diagonal, on_matrix
from ..plan.layout import permuted, stored_orders
from ..plan.matmul import plan_matmul
from ..plan.memory import Blocked, Dram, Loc, emu_dtype
from ..plan.placement import (Placed, boundary_note, boundary_tensors, cores_chip, handoff_banks, handoffs, place,
                              range_candidate, range_regions, schedule, spmd_chip, stage_reason, stage_regions)
from ..plan.split import shared_loads, split_core_op
from ..plan.streams import ELEMENTWISE, Stream, relu_stream, scale_core_op, scale_stream, stream_or_core
from ..plan.units import Infeasible, conv_pad, relu_ball, reshape_view, sync_after, too_many_workers
from ..cost.core import GRAPH_OP, charged_elements
from ..workload.graph import CONV_KINDS, Graph, Op, scale_array
from . import coreop
from .moe import lower_spread


@dataclass
class OpLowering:
    """How one graph op was lowered."""

    name: str
    kind: str
    how: str  # "matrix", "core", "epilogue" (core op over blocked tiles), "view", "relu", "fp2int", "int2fp" (Balls)
    tile: tuple[int, int, int] | None = None
    batch: int = 1
    banks: int = 0
    sram_bytes: int = 0  # private SRAM the op allocates (per worker; all of it is freed at the op's end)
    workers_used: int = 1
    instructions: int = 0
    shared_bytes: int = 0  # shared memory a tile of cores holds for the op's weight (weights = shared)


@dataclass
class Lowered:
    graph: Graph
    candidate: Candidate
    program: Program
    image: np.ndarray
    locs: dict[str, Loc]
    ops: list[OpLowering] = field(default_factory=list)
    fused: frozenset[str] = frozenset()  # tensors never materialized (fused into their reader's copy)
    # id of an instruction -> the graph op that emitted it (`dse.lower.listing`); kept as
    # long as the program (which holds the instructions) is
    labels: dict[int, str] = field(default_factory=dict, repr=False)
    # the DRAM buffers that are no graph tensor, (addr, bytes, what): packed operands, Bt
    # tiles, bias tiles, a conv's pad and im2col buffers (`Dram.named`)
    named: list = field(default_factory=list, repr=False)

    @property
    def workers(self) -> int:
        return len(self.program.cores)

    @property
    def peak_sram_per_worker(self) -> list[int]:
        """Peak private SRAM of each worker (core) from the actual allocation lifetimes: the
        program's MSETs replayed in order (`sram_lifetimes`)."""
        return sram_lifetimes(self.program.cores, self.candidate.chip)[0]

    @property
    def peak_sram_bytes(self) -> int:
        """Peak private SRAM any worker holds at once, from the MSET alloc/free intervals of
        the whole program (equal to the emulator's ``peak_allocated_bytes``, max over cores)."""
        return max(self.peak_sram_per_worker, default=0)

    def read(self, img: np.ndarray, name: str, copy: bool = True) -> np.ndarray:
        return self.locs[name].read(img, copy)


def _np(value) -> np.ndarray:
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


# The Ball instruction of one piece of a stream, by the stream's Ball.
STREAM_BALL_OPS = {
    "fp2int": lambda s, p: Fp2Int(0, 1, p.in_lines, p.scale, s.out_bits),
    "int2fp": lambda s, p: Int2Fp(0, 1, p.in_lines, p.scale, s.in_bits, s.out_bits),
    "relu": lambda s, p: Relu(0, 1, p.in_lines, s.in_bits),
}


class ProgramBuilder:
    """Emits one graph's program for one candidate, op by op, as the plan decides."""

    def __init__(self, graph: Graph, candidate: Candidate, inputs, dram: Dram | None = None,
                 elementwise: str = "auto", locs: dict[str, Loc] | None = None):
        if elementwise not in ELEMENTWISE:
            raise ValueError(f"elementwise must be one of {ELEMENTWISE}, got {elementwise!r}")
        self.elementwise = elementwise
        self.graph = graph
        self.cand = candidate
        self.chip = candidate.chip
        self.mapping = candidate.mapping
        self.workers = int(self.mapping.workers)
        if self.workers > self.chip.cores.count:
            raise Infeasible(too_many_workers(self.workers, self.chip.name, self.chip.cores.count))
        # Built with the parameters of the cores it runs on (their group's hardware).
        self.chip, reason = spmd_chip(self.chip, self.workers)
        if reason:
            raise Infeasible(reason)
        if self.chip is not candidate.chip:
            self.cand = Candidate(self.chip, self.mapping)
        self.params = CandidateArrays.from_candidates([self.cand])  # the plan's figures of this candidate
        self.cores: list[list] = [[] for _ in range(self.workers)]
        self.dram = dram or Dram()
        # `locs` given: a later range of one graph (`lower_layers`), whose tensors so far (and
        # weights placed so far) are where the ranges before left them
        self.locs: dict[str, Loc] = {} if locs is None else locs
        self.unblocked: dict[str, Loc] = {}
        self.handoff_ops: frozenset[str] = frozenset()  # matmuls whose A the range before hands off
        self.handoff_loaders: list[list] = []  # that range's cores, which load it into shared memory
        self.handoff_sets, self.handoff_set = 1, 0  # sets of shared banks a hand-off takes, and this request's
        self.handoff_bases: dict[str, int] = {}  # banks below the top other hand-offs hold (`handoff_banks`)
        self.handoffs: list[tuple[str, str, int, int]] = []  # (op, tensor, shared tiles, bytes) handed off
        # with weights = shared: the first shared bank of this part's region for its weights' B
        # tiles, beside the parts that run at once, and the base its tiles are picked with
        # (`dse.plan.placement.WeightRegions`: bases, picked)
        self.b_region, self.b_picked = 0, 0
        # spans with shared weights: the stack's shared copy, loaded before the span runs
        # (`dse.plan.spans.shared_stack`); each matmul's weight B is read there
        self.shared_stack = None
        self.records: list[OpLowering] = []
        self.fused: set[str] = set()
        self.labels: dict[int, str] = {}  # id of an instruction -> the op that emitted it
        self.label_prefix = ""  # a request's ("request 1: "), when several run one graph
        self.consumers = graph.consumers()
        coreop.ensure_registered()
        self.orders = stored_orders(graph, self.mapping.channels_last)  # tensors stored channels-last
        for name, value in zip(graph.inputs, inputs if locs is None else ()):
            self.locs[name] = stored_loc(self.dram, graph, name, self.orders, _np(value))

    # -------------------------------------------------------------- helpers
    def loc(self, name: str) -> Loc:
        """The tensor's location; a weight is placed (as a constant) on first use."""
        if name not in self.locs:
            spec = self.graph.tensors[name]
            self.locs[name] = self.dram.weight(spec.shape, spec.dtype, self.graph.weights[name])
        return self.locs[name]

    def logical(self, name: str) -> Loc:
        """A row-major (non-blocked) location: a blocked accumulator is copied out once
        (charged); the plan's ``unblock`` copy."""
        loc = self.loc(name)
        if loc.blocked is None:
            return loc
        if name not in self.unblocked:
            b = loc.blocked
            out = self.dram.matrix(loc.shape, "int32", b.batch, b.M, b.N)
            self.core(CoreOp("copy", out.padded_grid_view(b.tm, b.tn), (loc.padded_view(),)))
            self.sync(False)
            self.unblocked[name] = out
        return self.unblocked[name]

    def standardised(self, loc: Loc) -> Loc:
        """A padded row-major copy of a strided view (charged): the plan's ``standardise``."""
        out = self.dram.tensor(loc.shape, loc.dtype)
        self.core(CoreOp("copy", out.view(), (loc.view(),)))
        self.sync(False)
        return out

    def prepare(self, plan: OpPlan) -> dict[str, Loc]:
        """Emit the plan's copies that move an operand (unblock, standardise); the locations
        the op then reads. (A convolution's pad and gather copies are its own: `_conv`.)"""
        ready: dict[str, Loc] = {}
        for copy in plan.copies:
            if copy.kind == "unblock":
                ready[copy.tensor] = self.logical(copy.tensor)
            elif copy.kind == "standardise":
                ready[copy.tensor] = self.standardised(self.operand(copy.tensor, ready))
        return ready

    def operand(self, name: str, ready: dict[str, Loc]) -> Loc:
        """Where an op reads `name`: its copy made for this op, else a row-major copy made
        earlier, else the tensor itself."""
        return ready.get(name) or self.unblocked.get(name) or self.loc(name)

    def core(self, ins: CoreOp) -> None:
        """A core op: split across the workers along its first splittable axis when it is
        row-independent (elementwise, copies, last-axis norms), else on worker 0."""
        parts = split_core_op(ins, self.workers)
        if parts is None:
            self.cores[0].append(ins)
            return
        for w, part in enumerate(parts):
            if part is not None:
                self.cores[w].append(part)

    def sync(self, after_ball: bool) -> None:
        closing = sync_after(self.workers, after_ball)
        if closing == "barrier":
            for c in self.cores:
                c.append(Barrier())
        elif closing == "fence" and self.cores[0] and not isinstance(self.cores[0][-1], Fence):
            self.cores[0].append(Fence())

    # -------------------------------------------------------------- ops
    def lower_op(self, plan: OpPlan) -> None:
        """Emit one op as the plan says (`dse.plan.graph_plan`): its copies, then the op on
        its unit."""
        op = plan.op
        n0 = sum(len(c) for c in self.cores)
        emitting = self.cores + [c for c in self.handoff_loaders if all(c is not o for o in self.cores)]
        before = [len(c) for c in emitting]
        self.dram.label = op.name
        ready = self.prepare(plan)
        rec = None
        if plan.unit == "matrix":
            rec = self._matmul(op, ready)
        elif plan.unit == "conv":
            rec = self._conv(plan, ready)
        elif plan.unit == "grouped":
            rec = self._grouped(plan, ready)
        elif plan.unit == "scale":
            rec = self._scale_op(op)
        elif plan.unit == "relu":
            rec = self._relu_ball(op)
        elif plan.unit == "view" and op.kind == "permute":  # a layout conversion the layout removes
            self.locs[op.outputs[0]] = permuted(self.loc(op.inputs[0]), op.attrs["dims"])
            rec = OpLowering(op.name, op.kind, "view")
        elif plan.unit == "view":
            rec = self._reshape(op)
        elif plan.unit == "chain":
            rec = self._chain(plan)
        elif plan.unit == "fused":  # its reader's copy, or its chain's pass, applies it (`dse.plan.graph_plan`)
            self.fused.add(op.outputs[0])
            rec = OpLowering(op.name, op.kind, "fused", workers_used=0)
        if rec is None:
            rec = self._generic(op, ready, stored_loc(self.dram, self.graph, op.outputs[0], self.orders)
                                if op.outputs[0] in self.orders else None)
        rec.instructions = sum(len(c) for c in self.cores) - n0
        self.records.append(rec)
        for c, n in zip(emitting, before):  # the op's instructions, on its cores and a hand-off's loaders
            for ins in c[n:]:
                self.labels.setdefault(id(ins), self.label_prefix + op.name)

    def _chain(self, plan: OpPlan) -> OpLowering:
        """A fused score chain (`dse.plan.chains`): one core op a worker over its batch entries
        of the blocked scores, writing the int8 probabilities into the padded A buffer."""
        op, chain = plan.op, plan.chain
        scores = self.loc(chain[0].inputs[0])
        _, M, N = chain_extent(self.graph, chain)
        spec = self.graph.tensors[op.outputs[0]]
        out = self.locs[op.outputs[0]] = self.dram.tensor(spec.shape, spec.dtype)
        grid = scores.padded_view()
        Mp, Np = out.buffer_shape[-2:]
        weights = tuple(self.loc(n).view() for s in chain for n in s.inputs[1:])
        shapes = [self.graph.tensors[s.outputs[0]].shape for s in chain]
        parts = chain_parts(self.graph, chain, self.workers)
        for w, (lo, hi, r0, r1) in enumerate(parts):
            src = DramTensor(grid.addr + lo * grid.strides[0], (hi - lo, *grid.shape[1:]), grid.dtype, grid.strides)
            dst = DramTensor(out.addr + lo * Mp * Np + r0 * Np, (hi - lo, r1 - r0, N), "int8", (Mp * Np, Np, 1))
            params = {"ops": chain, "extent": (M, N), "rows": (r0, r1), "batch_rank": len(spec.shape) - 2,
                      "shapes": shapes}
            self.cores[w].append(CoreOp(CHAIN_KIND, dst, (src,) + weights, params,
                                        (hi - lo) * chain_elements(self.graph, chain, r1 - r0)))
        self.sync(False)
        return OpLowering(op.name, op.kind, "chain", workers_used=len(parts))

    def _grouped(self, plan: OpPlan, ready: dict[str, Loc]) -> OpLowering:
        """A grouped conv where `grouped.on_matrix` puts it: the block-diagonal GEMM, its
        accumulator then copied out (the plan's `after`), or one core op; either writes the
        plan's M-padded row-major matrix."""
        op = plan.op
        if on_matrix(self.graph, plan, self.params)[0]:
            w = np.asarray(self.graph.weights[op.inputs[1]]).astype(np.int8)
            rec = self._conv(plan, ready, block_diagonal(w, int(op.attrs["groups"])))
            self.locs[op.outputs[0]] = self.logical(op.outputs[0])
            return rec
        spec = self.graph.tensors[op.outputs[0]]
        return self._generic(op, ready, self.dram.matrix(spec.shape, spec.dtype, 1, plan.gemm.M, plan.gemm.N))

    def _conv(self, plan: OpPlan, ready: dict[str, Loc], weight: np.ndarray | None = None) -> OpLowering:
        """A channels-last int8 convolution as im2col on the core (one strided gather copy,
        charged, after a copy into a zero-padded image when the conv pads) and a GEMM on the
        matrix Ball: A[M = N*out positions, K = taps*C] @ W[K, O]; the blocked accumulator
        is the NHWC output (rows are output positions, columns channels)."""
        graph, op = self.graph, plan.op
        gather_copy = next(c for c in plan.copies if c.kind == "gather")
        x = self.operand(gather_copy.tensor, ready)  # a fused ReLU's input, or the conv's
        out_spec = graph.tensors[op.outputs[0]]
        w = np.asarray(graph.weights[op.inputs[1]]).astype(np.int8) if weight is None else weight  # (*kernel, C, O)
        nd = w.ndim - 2
        kernel, C, O = w.shape[:nd], w.shape[nd], w.shape[nd + 1]
        bt = weight_bt(graph, op) if weight is None else w.reshape(-1, O).T[None]  # (1, O, K)
        stride, dilation = op.attrs["stride"], op.attrs["dilation"]
        n = x.shape[0]
        spatial = x.shape[1:1 + nd]
        outs = out_spec.shape[1:1 + nd]
        pad_lr = conv_pad(op)
        if any(copy.kind == "pad" for copy in plan.copies):
            pad_copy = next(c for c in plan.copies if c.kind == "pad")
            xp = self.dram.tensor(*copy_buffer(graph, op, pad_copy), name=f"{op.name}: pad")  # (n, *padded, C)
            xs = xp.view().strides
            offset = sum(l * st for (l, _), st in zip(pad_lr, xs[1:1 + nd]))
            self.core(CoreOp(pad_copy.apply or "copy", DramTensor(xp.addr + offset, x.shape, "int8", xs),
                             (x.view(),)))
            self.sync(False)
            src_addr = xp.addr
        else:
            v = x.view()
            src_addr, xs = v.addr, v.strides
        M, K = n * math.prod(outs), math.prod(kernel) * C
        a = self.dram.tensor(*copy_buffer(graph, op, gather_copy), name=f"{op.name}: im2col")  # A: (M, K) int8
        Kp = a.buffer_shape[1]
        gshape = (n, *outs, *kernel, C)
        gstrides = (xs[0], *[s * st for s, st in zip(stride, xs[1:1 + nd])],
                    *[d * st for d, st in zip(dilation, xs[1:1 + nd])], xs[1 + nd])
        dst_m = tuple(v * Kp for v in contiguous((n, *outs)))
        dst_k = contiguous((*kernel, C))
        self.core(CoreOp(gather_copy.apply or "copy", DramTensor(a.addr, gshape, "int8", dst_m + dst_k),
                         (DramTensor(src_addr, gshape, "int8", gstrides),)))
        self.sync(False)
        bias = None
        if op.attrs.get("has_bias") and len(op.inputs) > 2:
            bias = np.asarray(graph.weights[op.inputs[2]]).astype(np.int32)
        c_loc, rec = self._gemm(op, a, ("weight", np.ascontiguousarray(bt)), bias, M, O, K, 1, out_spec.shape)
        self.locs[op.outputs[0]] = c_loc
        return rec

    def _relu_ball(self, op: Op) -> OpLowering | None:
        """An int8 / int32 ReLU on the chip's ReLU Ball (`relu_stream`)."""
        spec = self.graph.tensors[op.outputs[0]]
        src = self.loc(op.inputs[0])
        if not relu_ball(self.chip.ball("relu") is not None, spec.dtype, src):
            return None
        out = self.dram.tensor(spec.shape, spec.dtype)
        self.locs[op.outputs[0]] = out
        return self._stream_op(op, relu_stream(self.chip, src, out))

    def _stream_op(self, op: Op, plan: Stream) -> OpLowering:
        used = self._emit_stream(plan)
        self.sync(True)
        banks = plan.src_col + plan.dst_col
        return OpLowering(op.name, op.kind, plan.kind, None, 1, banks,
                          banks * self.chip.addressable_rows * self.chip.banks.row_bytes, used)

    def _generic(self, op: Op, ready: dict[str, Loc], out: Loc | None = None) -> OpLowering:
        srcs = [self.operand(n, ready) for n in op.inputs]
        spec = self.graph.tensors[op.outputs[0]]
        out = out or self.dram.tensor(spec.shape, spec.dtype)
        self.locs[op.outputs[0]] = out
        views = tuple(s.view() for s in srcs)
        elements = charged_elements(op, [v.size for v in views], math.prod(spec.shape))
        self.core(CoreOp(GRAPH_OP, out.view(), views, {"op": op}, elements))
        self.sync(False)
        return OpLowering(op.name, op.kind, "core")

    def _reshape(self, op: Op) -> OpLowering | None:
        src = self.loc(op.inputs[0])
        spec = self.graph.tensors[op.outputs[0]]
        view = reshape_view(src, spec.shape, spec.dtype)
        if view is None:
            return None
        self.locs[op.outputs[0]] = view
        return OpLowering(op.name, op.kind, "view")

    def _scale_op(self, op: Op) -> OpLowering | None:
        """quantize / requantize / dequantize: ``y = store(fp32(x) * scale)`` (round half to
        even, saturate into int8; fp32 for dequantize) - on the Fp2Int / Int2Fp Ball
        (`dse.plan.streams.scale_stream`) when the chip has it, the semantics match bit for
        bit and the plan's choice (`stream_or_core`) takes it. Else one charged core op
        (`scale_core_op`)."""
        src = self.loc(op.inputs[0])
        spec = self.graph.tensors[op.outputs[0]]
        shape = tuple(spec.shape)
        scale = scale_array(op.attrs, shape)
        if src.blocked is not None:
            b = src.blocked
            out = self.dram.matrix(shape, spec.dtype, b.batch, b.M, b.N)
        else:
            out = self.dram.tensor(spec.shape, spec.dtype)
        self.locs[op.outputs[0]] = out
        plan = None if self.elementwise == "core" else scale_stream(self.chip, op, src, out, scale, shape)
        if plan is not None and not stream_or_core(self.chip, self.workers, plan,
                                                   scale_core_op(self.dram, src, out, scale, shape, place=False),
                                                   self.elementwise):
            plan = None
        if plan is None:
            self.core(scale_core_op(self.dram, src, out, scale, shape))
            self.sync(False)
            return OpLowering(op.name, op.kind, "epilogue" if src.blocked is not None else "core")
        return self._stream_op(op, plan)

    def _emit_stream(self, plan: "Stream") -> int:
        """Emit a Ball stream; returns the workers used.

        Pieces are dealt to workers round-robin (worker w takes pieces w, w+W, ...). Each
        worker with at least one piece runs, with its cost in the emulator's terms::

            MSET(0, col 1)                                  front_end.mset_cycles
            MSET(1, col dst_col)                            front_end.mset_cycles
            per piece:
              MVIN(0, src, in_lines, stride 0)              dma_cycles(in_lines, 1, 0)
              FP2INT(0, 1, in_lines, scale, out_bits 8)     Ball latency formula (iter = in_lines)
                or INT2FP(0, 1, in_lines, scale, in_bits, out_bits), RELU(0, 1, in_lines, bits)
              MVOUT(1, dst, out_lines, dst_stride)          dma_cycles(out_lines, dst_col, dst_stride)
              FENCE                                         (policy "framework" only)
            MSET(0, free), MSET(1, free)                    front_end.mset_cycles each

        then the op's sync (FENCE with one worker, BARRIER on every worker otherwise).
        ``in_lines = elements * in_bytes / 16``, ``out_lines = elements * out_bytes / 16``
        (fp32 -> int8 and int32 -> int8 pack 4 lines into 1; int8 -> fp32 unpacks 1 into 4).
        The pieces of a ReLU (`dse.plan.streams.relu_stream`): the padded buffer in chunks of
        a bank's addressable rows, in and out alike. The pieces of a scale op
        (`dse.plan.streams.scale_stream`):

        * row-major source: the padded buffer as one flat stream (leading and trailing
          all-padding rows dropped, interior padding rows kept - they are zero and stay
          zero), cut where the row scale changes and into chunks of
          ``floor(L * 16 / max(in_bytes, out_bytes) / 16) * 16`` elements, ``L = min(banks.rows,
          2**isa.row_addr_bits)`` (1024 on toy / pebble / goban: 4096 fp32 -> int8 elements,
          1024 lines in, 256 out); destination bank col 1, contiguous MVOUT;
        * blocked accumulator with ``Nt == 1``: per batch entry the rows 0..M-1 (``M * Np``
          int32, contiguous in the blocked buffer and in the output), chunked as above;
        * blocked accumulator with ``Nt > 1``: per output tile (batch, mi, ni), its rows
          ``mi*tm .. min(M, (mi+1)*tm) - 1`` (k rows x tn int32, contiguous in the tile):
          ``in_lines = k*tn/4``, ``out_lines = k*tn*out_bytes/16``, destination bank of
          ``dst_col = tn*out_bytes/16`` banks (one tile row a bank row), MVOUT stride ``Np *
          out_bytes`` (k DRAM runs of ``tn*out_bytes`` bytes, each its own bursts); at most
          ``min(L, L*16/(tn*4))`` rows a piece.

        Banks: 1 + dst_col live for the op (``OpLowering.banks``), freed at its end.
        """
        used = 0
        for w in range(self.workers):
            mine = plan.pieces[w::self.workers]
            if not mine:
                continue
            used += 1
            prog = self.cores[w]
            prog += [Mset(0, plan.src_col), Mset(1, plan.dst_col)]
            for p in mine:
                prog.append(Mvin(0, p.src, p.in_lines, 0))
                prog.append(STREAM_BALL_OPS[plan.kind](plan, p))
                prog.append(Mvout(1, p.dst, p.out_lines, p.dst_stride))
                if self.mapping.policy == "framework":
                    prog.append(Fence())
            prog += [Mset(0, alloc=False), Mset(1, alloc=False)]
        return used

    def _matmul(self, op: Op, ready: dict[str, Loc]) -> OpLowering:
        graph = self.graph
        a_spec, b_spec = (graph.tensors[n] for n in op.inputs[:2])
        out_spec = graph.tensors[op.outputs[0]]
        b_name = op.inputs[1]
        nb = math.prod(out_spec.shape[:-2])
        nbB = 1 if len(b_spec.shape) == 2 else nb
        b_nk = op.kind == "linear"  # linear: w[N, K]; matmul: b[..., K, N]
        if b_name in graph.weights:
            b = ("weight", weight_bt(graph, op))
        else:
            b = ("act", self.operand(b_name, ready), b_nk, nbB)
        bias = None
        if op.attrs.get("has_bias") and len(op.inputs) > 2:
            bias = np.asarray(graph.weights[op.inputs[2]]).astype(np.int32)
        c_loc, rec = self._gemm(op, self.operand(op.inputs[0], ready), b, bias,
                                a_spec.shape[-2], out_spec.shape[-1], a_spec.shape[-1], nb, out_spec.shape)
        self.locs[op.outputs[0]] = c_loc
        return rec

    def _gemm(self, op: Op, a_loc: Loc, b, bias, M: int, N: int, K: int, nb: int, out_shape):
        """C (blocked, int32) = A @ Bt.T (+ bias) on the matrix Ball. `a_loc` is a row-major
        padded (nb, Mp, Kp) int8 buffer; `b` is ("weight", Bt (nbB, N, K) int8) or ("act",
        loc, b_is_nk, nbB)."""
        chip, mp = self.chip, self.mapping
        nbB = b[1].shape[0] if b[0] == "weight" else b[3]
        shape = MatmulShape(M, N, K, nb, b_weight=b[0] == "weight", b_batched=nbB > 1, bias=bias is not None,
                            a_shared=self.handoff_sets if op.name in self.handoff_ops else 0,
                            a_shared_base=self.handoff_bases.get(op.name, 0), b_shared_base=self.b_picked)
        if self.shared_stack is not None:
            shape = self.shared_stack.gemm(op.name, shape)
        plan = plan_matmul(chip, mp, shape)
        if not plan.feasible:
            raise Infeasible(f"op {op.name}: {plan.reason}")
        tm, tn, tk = plan.tm, plan.tn, plan.tk
        Mp, Np, Kp = shape.padded
        Mt, Nt, Kt = Mp // tm, Np // tn, Kp // tk
        check = check_tiles(self.params, [tm], [tn], [tk], shape)
        col_a, col_b, col_c = int(check.col_a[0, 0]), int(check.col_b[0, 0]), int(check.col_c[0, 0])
        nbuf = int(check.buffers[0, 0])

        # A: row-major padded (batch, Mp, Kp); blocked (batch, Mt, Kt, tm, tk) unless Kt == 1.
        packs = []
        if Kt == 1:
            a_tile = lambda bi, mi, ki: a_loc.addr + bi * Mp * Kp + mi * tm * Kp  # noqa: E731
        else:
            a_base = self.dram.alloc(nb * Mp * Kp, f"{op.name}: A packed")
            src = DramTensor(a_loc.addr, (nb, Mt, Kt, tm, tk), "int8", (Mp * Kp, tm * Kp, tk, Kp, 1))
            packs.append(CoreOp("copy", DramTensor(a_base, (nb, Mt, Kt, tm, tk), "int8"), (src,)))
            a_tile = lambda bi, mi, ki: a_base + ((bi * Mt + mi) * Kt + ki) * tm * tk  # noqa: E731
        # B as Bt blocked (nbB, Nt, Kt, tn, tk): offline for a weight, a packing core op otherwise.
        if b[0] == "weight":
            nbB = b[1].shape[0]
            # a preloaded B (spans' shared stack) was placed and loaded before the span
            # one copy a weight and layout (`Dram.constant`), keyed as the model counts it
            key = ("weight", op.inputs[1], op.kind, op.attrs.get("groups", 1), Np, Kp, tn, tk)
            b_base = None if shape.b_preloaded else self.dram.constant(key, blocked_bt(b[1], Np, Kp, tn, tk),
                                                                       f"{op.inputs[1]}: Bt tiles")
        else:
            _, b_loc, b_nk, nbB = b
            b_base = self.dram.alloc(nbB * Np * Kp, f"{op.name}: B packed")
            if b_nk:  # buffer (nbB, Np, Kp)
                strides = (Np * Kp, tn * Kp, tk, Kp, 1)
            else:  # buffer (nbB, Kp, Np)
                strides = (Kp * Np, tn, tk * Np, 1, Np)
            src = DramTensor(b_loc.addr, (nbB, Nt, Kt, tn, tk), "int8", strides)
            packs.append(CoreOp("copy", DramTensor(b_base, (nbB, Nt, Kt, tn, tk), "int8"), (src,)))

        def b_tile(bi, ni, ki):
            return b_base + (((bi if nbB > 1 else 0) * Nt + ni) * Kt + ki) * tn * tk

        # Bias: preloaded into the accumulator from a blocked replicate (Nt, tm, tn) int32.
        bias_base = None
        if bias is not None:
            padded_bias = np.zeros(Np, dtype=np.int32)
            padded_bias[:N] = bias
            rep = np.broadcast_to(padded_bias.reshape(Nt, 1, tn), (Nt, tm, tn))
            bias_base = self.dram.constant(("bias", op.inputs[2], op.kind, Np, tm, tn), rep, f"{op.name}: bias tiles")
        c_loc = self.dram.blocked(out_shape, Blocked(nb, Mt, Nt, tm, tn, M, N))

        if packs:
            for p in packs:
                self.core(p)
            self.sync(False)

        lines_a, lines_b, lines_c = tm * tk // 16, tn * tk // 16, tm * tn * 4 // 16
        fence = mp.policy == "framework"
        # Output tiles per worker: contiguous blocks of rows (or columns).
        if mp.split == "rows":
            per = -(-Mt // self.workers)
            share = [(range(w * per, min(Mt, (w + 1) * per)), range(Nt)) for w in range(self.workers)]
        else:
            per = -(-Nt // self.workers)
            share = [(range(Mt), range(w * per, min(Nt, (w + 1) * per))) for w in range(self.workers)]
        # A shared weight (the plan's `check_tiles`): B tile j in shared bank first_bank_id +
        # region + j (its part's region, `WeightRegions`; a spans stack's base) of every tile of
        # cores with workers that compute (a prefix: blocks go in order), loaded there once by
        # those workers (`shared_loads`), then a BARRIER.
        shared_b = bool(check.shared_b[0, 0])
        shared_tiles = int(check.shared_tiles[0, 0])
        sm = chip.shared_memory
        b_bank0 = sm.first_bank_id + (shape.b_shared_base if shape.b_preloaded else self.b_region)
        if shared_b and not shape.b_preloaded:
            computing = sum(1 for ms, ns in share if len(ms) and len(ns))
            for w, mine in enumerate(shared_loads(computing, chip.cores.tile_size, shared_tiles)):
                self.cores[w] += [Mvin(b_bank0 + j, b_base + j * tn * tk, lines_b, 0) for j in mine]
            self.sync(False)
        # A handed off through shared memory (`dse.plan.placement.handoffs`): A tile (bi, mi) in
        # shared bank first_bank_id + banks - 1 - (base + set * nb * Mt + bi * Mt + mi), loaded
        # there by the cores of the range before, dealt round-robin, after its last op
        # (`lower_layers` then BARRIERs); the request's set of banks (`Schedule.handoff_sets`),
        # below the banks the other hand-offs' A tiles hold (`handoff_banks`)
        shared_a = bool(check.shared_a[0, 0])
        top = sm.first_bank_id + sm.banks - 1 - shape.a_shared_base - self.handoff_set * nb * Mt
        if shared_a:
            loaders = self.handoff_loaders
            for j in range(nb * Mt):
                bi, mi = divmod(j, Mt)
                loaders[j % len(loaders)].append(Mvin(top - j, a_tile(bi, mi, 0), lines_a, 0))
            self.handoffs.append((op.name, op.inputs[0], nb * Mt, nb * Mt * lines_a * 16))
        used = 0
        for w, (ms, ns) in enumerate(share):
            if len(ms) == 0 or len(ns) == 0:
                continue
            used += 1
            prog = self.cores[w]
            ids_a = [] if shared_a else list(range(nbuf))
            ids_b = [] if shared_b else list(range(len(ids_a), len(ids_a) + nbuf))
            ids_c = list(range(len(ids_a) + len(ids_b), len(ids_a) + len(ids_b) + nbuf))
            prog += [Mset(i, col_a) for i in ids_a] + [Mset(i, col_b) for i in ids_b] + [Mset(i, col_c) for i in ids_c]
            held_a: dict[int, tuple] = {}
            held_b: dict[int, tuple] = {}
            nxt = {"a": 0, "b": 0}

            def load(kind, held, ids, key, addr, lines):
                for slot, k in held.items():
                    if k == key:
                        return ids[slot]
                slot = nxt[kind]
                nxt[kind] = (slot + 1) % len(ids)
                held[slot] = key
                prog.append(Mvin(ids[slot], addr, lines, 0))
                return ids[slot]

            ci = 0
            for bi in range(nb):
                for mi in ms:
                    for ni in ns:
                        c = ids_c[ci]
                        ci = (ci + 1) % nbuf
                        if bias_base is not None:
                            prog.append(Mvin(c, bias_base + ni * tm * tn * 4, lines_c, 0))
                        for ki in range(Kt):
                            if shared_a:
                                a = top - (bi * Mt + mi)
                            else:
                                a = load("a", held_a, ids_a, (bi, mi, ki), a_tile(bi, mi, ki), lines_a)
                            if shared_b:
                                b = b_bank0 + ((bi if nbB > 1 else 0) * Nt + ni) * Kt + ki
                            else:
                                b = load("b", held_b, ids_b, (bi if nbB > 1 else 0, ni, ki), b_tile(bi, ni, ki),
                                         lines_b)
                            prog.append(Matmul(a, b, c, tm, tn, tk, dataflow=mp.dataflow,
                                               accumulate=ki > 0 or bias_base is not None))
                        prog.append(Mvout(c, c_loc.addr + ((bi * Mt + mi) * Nt + ni) * tm * tn * 4, lines_c, 0))
                        if fence:
                            prog.append(Fence())
            prog += [Mset(i, alloc=False) for i in ids_a + ids_b + ids_c]
        self.sync(True)
        banks = int(check.banks[0, 0])
        return c_loc, OpLowering(op.name, op.kind, "matrix", (tm, tn, tk), nb, banks,
                                 banks * chip.addressable_rows * chip.banks.row_bytes, used,
                                 shared_bytes=shared_tiles * sm.rows * sm.row_bytes)

    def finish(self) -> Lowered:
        img = self.dram.image()
        program = Program(self.cores, {"dram": Region(0, (img.size,), "uint8")}, {},
                          dram_bytes=img.size, name=f"{self.graph.name} on {self.chip.name} ({self.mapping.policy}, "
                                                    f"{self.workers} workers)")
        # graph outputs as program outputs when they are plain row-major buffers (not blocked,
        # not stored in a permuted order: `mapping.channels_last`)
        for name in self.graph.outputs:
            loc = self.locs[name]
            in_order = loc.strides is None or list(loc.strides) == sorted(loc.strides, reverse=True)
            if loc.blocked is None and in_order:
                program.outputs[name] = Region(loc.addr, loc.buffer_shape, emu_dtype(loc.dtype))
        return Lowered(self.graph, self.cand, program, img, self.locs, self.records, frozenset(self.fused),
                       self.labels, list(self.dram.named))


def weight_bt(graph: Graph, op: Op) -> np.ndarray:
    """A matrix op's weight as the GEMM's Bt (nbB, N, K) int8: a linear's w[N, K], a
    matmul's b[..., K, N] transposed, a channels-last conv's (*kernel, C, O) as (O, taps x C)."""
    w = np.asarray(graph.weights[op.inputs[1]]).astype(np.int8, copy=False)  # read only: no copy
    if op.kind in CONV_KINDS:
        return w.reshape(-1, w.shape[-1]).T[None]
    nbB = 1 if w.ndim == 2 else math.prod(graph.tensors[op.outputs[0]].shape[:-2])
    w = w.reshape(nbB, *w.shape[-2:])
    return w if op.kind == "linear" else np.swapaxes(w, -1, -2)


def blocked_bt(bt: np.ndarray, Np: int, Kp: int, tn: int, tk: int) -> np.ndarray:
    """A weight's Bt (nbB, N, K) int8, zero-padded to (Np, Kp) and blocked offline into
    (nbB, Nt, Kt, tn, tk) tiles: one contiguous MVIN a tile."""
    nbB, N, K = bt.shape
    if (N, K) == (Np, Kp):  # no padding: blocked straight from Bt (a Llama projection is 58 MB)
        full = bt
    else:
        full = np.zeros((nbB, Np, Kp), dtype=np.int8)
        full[:, :N, :K] = bt
    return np.ascontiguousarray(full.reshape(nbB, Np // tn, tn, Kp // tk, tk).transpose(0, 1, 3, 2, 4))


def sram_lifetimes(cores, chip) -> tuple[list[int], list[list[tuple[int, int, int, int]]]]:
    """Private SRAM from the actual allocation lifetimes: per worker, replay its MSETs in
    program order (an allocation of `col` banks holds ``col x addressable rows x row_bytes`` bytes
    from its MSET to its free, or to the end of the program). Returns (peak bytes per
    worker, per worker the intervals ``(bank id, bytes, alloc index, free index)``).
    The peak equals the emulator's ``peak_allocated_bytes`` counter of that core."""
    per_bank = chip.addressable_rows * chip.banks.row_bytes  # rows past the row field hold nothing
    peaks, lives = [], []
    for prog in cores:
        live: dict[int, tuple[int, int]] = {}
        now = peak = 0
        intervals = []
        for pc, ins in enumerate(prog):
            if type(ins) is not Mset:
                continue
            if ins.alloc:
                nbytes = ins.col * per_bank
                live[ins.bank] = (nbytes, pc)
                now += nbytes
                peak = max(peak, now)
            elif ins.bank in live:
                nbytes, start = live.pop(ins.bank)
                now -= nbytes
                intervals.append((ins.bank, nbytes, start, pc))
        intervals += [(bank, nbytes, start, len(prog)) for bank, (nbytes, start) in live.items()]
        peaks.append(peak)
        lives.append(sorted(intervals, key=lambda x: x[2]))
    return peaks, lives


def contiguous(shape) -> tuple[int, ...]:
    """Element strides of a C-contiguous `shape`."""
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= int(n)
    return tuple(reversed(out))


def lower(graph: Graph, candidate: Candidate, inputs, elementwise: str = "auto") -> Lowered:
    """The program and DRAM image that compute `graph` on `candidate` for `inputs`.

    `elementwise` chooses where quantize / requantize / dequantize run when a Ball can do
    them bit for bit: ``"auto"`` (the Ball when `stream_cycles` < `core_cycles`), ``"ball"``
    (always the Ball), ``"core"`` (always the core)."""
    b = ProgramBuilder(graph, candidate, inputs, elementwise=elementwise)
    plans = plan_for(graph, candidate.mapping)
    if spreads(candidate.mapping):  # a mixture of experts' experts, one worker each (`dse.lower.moe`)
        lower_spread(b, plans)
        return b.finish()
    for plan in plans:
        b.lower_op(plan)
    return b.finish()


@dataclass
class StagedLowered:
    """Several graphs (stages) on disjoint core groups of one chip, in one program."""

    program: Program
    image: np.ndarray
    stages: list[Lowered]  # each with its own locs; their programs are views of the merged one
    core_ids: list[list[int]]


def lower_stages(stages, chip, mapping, roles=None, regions=None) -> StagedLowered:
    """Stage partitioning onto (heterogeneous) cores: `stages` is a list of
    ``(graph, inputs, core_ids)``; each graph is lowered for ``len(core_ids)`` workers with
    those cores' own parameters (`dse.plan.placement.cores_chip`: their group's banks, Balls
    and core-op costs) and placed on those cores; all share one DRAM image. The cores of a
    tile meet at every BARRIER, so the stage with fewer barriers is padded with BARRIERs at
    its end (the stages then advance op by op in lock step: the coupling cost shows in the
    cycles). `roles` names the stages in an infeasible reason; `regions`, where each stage
    keeps its shared weights (`dse.plan.placement.stage_regions`; default from bank 0 up)."""
    dram = Dram()
    dram.bind_content = True  # the stages' identical weights and constants: one copy
    builders = []
    used: set[int] = set()
    for i, (graph, inputs, core_ids) in enumerate(stages):
        if used & set(core_ids):
            raise Infeasible(f"stages share cores {sorted(used & set(core_ids))}")
        if max(core_ids) >= chip.cores.count:
            raise Infeasible(f"core {max(core_ids)} but chip {chip.name} has {chip.cores.count} cores")
        used |= set(core_ids)
        stage_chip, reason = cores_chip(chip, core_ids)
        if reason:
            raise Infeasible(reason)
        placed = Placed(roles[i] if roles else f"{i}", tuple(core_ids), stage_chip)
        builders.append(_build_stage(graph, mapping.model_copy(update={"workers": len(core_ids)}), inputs, dram,
                                     placed, (regions.bases[i], regions.picked[i]) if regions else (0, 0)))
    n = max(used) + 1
    cores: list[list] = [[] for _ in range(n)]
    for b, (_, _, core_ids) in zip(builders, stages):
        for w, c in enumerate(core_ids):
            cores[c] = list(b.cores[w])
    tile = chip.cores.tile_size
    for t0 in range(0, n, tile):
        group = [c for c in range(t0, min(n, t0 + tile))]
        counts = {c: sum(isinstance(i, Barrier) for i in cores[c]) for c in group}
        top = max(counts.values())
        for c in group:
            cores[c] += [Barrier()] * (top - counts[c])
    name = " + ".join(f"{b.graph.name} on cores {ids}" for b, (_, _, ids) in zip(builders, stages))
    return _staged(builders, cores, dram, name, [list(ids) for _, _, ids in stages])


def lower_placed(stages, candidate: Candidate) -> StagedLowered:
    """A workload of several stages (``(role, graph, inputs)`` each, e.g. an LLM's prefill and
    decode) placed as ``candidate.mapping.placement`` says (`dse.plan.placement.place`):
    None, every stage on workers ``0 .. W-1`` one after another in one program; ``"phase"``,
    each stage on its role's core group, all at once (`lower_stages`). An infeasible stage
    raises `Infeasible` naming the stage, its cores and its chip."""
    chip, mapping = candidate.chip, candidate.mapping
    places, reason = place(chip, mapping.placement, mapping.workers, [role for role, _, _ in stages], mapping.requests,
                            mapping.weights)
    if reason:
        raise Infeasible(reason)
    if mapping.placement == "phase":
        regions = None
        if mapping.weights == "shared":  # the stages' regions of the tile's shared banks
            plans = [plan_for(g, mapping) for _, g, _ in stages]
            params = [CandidateArrays.from_candidates([Candidate(p.chip, mapping.model_copy(
                update={"workers": len(p.cores)}))]) for p in places]
            (regions,) = stage_regions(plans, params, [places], mapping.placement, [chip])
            if regions.reason:
                raise Infeasible(regions.reason)
        return lower_stages([(g, x, list(p.cores)) for (_, g, x), p in zip(stages, places)], chip, mapping,
                            roles=[p.role for p in places], regions=regions)
    dram = Dram()
    dram.bind_content = True  # the stages' identical weights and constants: one copy
    builders = [_build_stage(graph, mapping, inputs, dram, p) for (_, graph, inputs), p in zip(stages, places)]
    cores = [sum((list(b.cores[w]) for b in builders), []) for w in range(mapping.workers)]
    name = " then ".join(f"{b.graph.name}" for b in builders) + f" on cores 0-{mapping.workers - 1}"
    return _staged(builders, cores, dram, name, [list(p.cores) for p in places])


@dataclass
class LayeredLowered(StagedLowered):
    """One graph on the chip as a `Schedule` says (`lower_layers`): per request its `Lowered`
    (every op's record, in order; ``stages``), and what went between the ranges."""

    # per tensor handed to a later range (request 0's; every request alike): (tensor,
    # reading range, how: "shared" or "dram", why)
    handoffs: list[tuple[str, int, str, str]] = field(default_factory=list)
    handoff_bytes: int = 0  # bytes the ranges' cores loaded into shared memory, every request


def lower_layers(graph: Graph, candidate: Candidate, requests) -> LayeredLowered:
    """One graph as `dse.plan.placement.schedule` schedules it: ``mapping.placement`` None (SPMD
    on ``mapping.workers``), ``"layers"`` or ``"pipeline"`` (the ops cut into ranges at
    ``mapping.cuts``, range r built for every core of core group r with that group's chip),
    for each of `requests` (the inputs of each request), one program over one DRAM image;
    each request has its own tensors (the weights are placed once), every tensor where the
    range that wrote it left it.

    Request k's range r runs in the schedule's slot (`Schedule.slots`): one after another, or,
    in a pipeline, request k's range r beside request k + 1's range r - 1. In a slot the
    cores of the tile meet every BARRIER of its ranges (those with fewer meet the rest with
    BARRIERs of their own), and one more BARRIER on every core closes the slot. A range's
    leading matmuls whose A an earlier range wrote (`handoffs`, unless ``mapping.handoff =
    "dram"``) read it from shared memory where its tiles fit (`MatmulShape.a_shared`): the
    cores of the range before load them there after their last op, a matmul's tiles in banks
    of its own (`handoff_banks`; request k into bank set ``k mod Schedule.handoff_sets``),
    before the BARRIER that closes their slot."""
    chip, mapping = candidate.chip, candidate.mapping
    plans = plan_for(graph, mapping)
    lay, reason = schedule(chip, mapping, len(plans))
    if reason:
        raise Infeasible(reason)
    places, ranges = lay.places, lay.ranges
    handed = handoffs(plans, ranges, mapping.weights != "shared") if mapping.handoff != "dram" else {}
    params = [CandidateArrays.from_candidates([range_candidate(p, mapping)]) for p in places]
    (held,) = handoff_banks(plans, ranges, handed, lay.handoff_sets, lay.overlap, params)
    (regions,) = range_regions(plans, ranges, [held], lay.handoff_sets, lay.overlap, params,
                               [[p.role for p in places]], [chip.name])
    if regions.reason:
        raise Infeasible(regions.reason)
    dram = Dram()
    weights: dict[str, Loc] = {}
    builders: list[list[ProgramBuilder]] = []
    for k, inputs in enumerate(requests):
        dram.scope = ("request", k)  # each request lays out its own constants, as the model counts them
        chain: list[ProgramBuilder] = []
        for r, (p, rg) in enumerate(zip(places, ranges)):
            try:
                b = ProgramBuilder(graph, range_candidate(p, mapping), inputs, dram, locs=chain[-1].locs if r else None)
                b.label_prefix = f"request {k}: " if len(requests) > 1 else ""
                b.b_region, b.b_picked = regions.bases[r], regions.picked[r]
                if r:
                    b.unblocked, b.fused = chain[-1].unblocked, chain[-1].fused  # this request's so far
                    b.handoff_ops = frozenset(plans[i].op.name for i in rg) & set(handed)
                    b.handoff_loaders = chain[-1].cores
                    b.handoff_sets, b.handoff_set = lay.handoff_sets, k % lay.handoff_sets
                    b.handoff_bases = held.bases
                else:
                    b.locs.update(weights)  # placed by the first request: one copy
                for i in rg:
                    b.lower_op(plans[i])
            except Infeasible as exc:
                raise Infeasible(stage_reason(p, str(exc)) if len(ranges) > 1 else str(exc)) from None
            chain.append(b)
        weights = {n: loc for n, loc in chain[-1].locs.items() if n in graph.weights}
        builders.append(chain)
    n = max(c for p in places for c in p.cores) + 1
    tile_cores = list(range(n))  # one tile (`place_layers`), or SPMD's workers
    cores: list[list] = [[] for _ in range(n)]
    met = [0] * n  # BARRIERs each core has passed
    slots = lay.slots()
    for s, running in enumerate(slots):
        for k, r in running:
            for w, c in enumerate(places[r].cores):
                cores[c] += builders[k][r].cores[w]
                met[c] += sum(isinstance(i, Barrier) for i in builders[k][r].cores[w])
        top = max(met)
        for c in tile_cores:  # the slot's BARRIERs met by every core, then one that closes it
            cores[c] += [Barrier()] * (top - met[c] + (s < len(slots) - 1))
            met[c] = top + (s < len(slots) - 1)
    img = dram.image()
    how = "in a pipeline of" if lay.overlap else "in"
    program = Program(cores, {"dram": Region(0, (img.size,), "uint8")}, {}, dram_bytes=img.size,
                      name=f"{graph.name} x{lay.requests} {how} {len(ranges)} ranges on "
                           + ", ".join(p.role for p in places))
    per_request = []
    for chain in builders:
        locs = chain[-1].locs
        per_request.append(Lowered(graph, candidate, program, img, locs, [rec for b in chain for rec in b.records],
                                   frozenset(chain[-1].fused), {k: v for b in chain for k, v in b.labels.items()},
                                   list(dram.named)))
    for name in graph.outputs:  # request 0's outputs, as a program's outputs
        loc = per_request[0].locs[name]
        if loc.blocked is None:
            program.outputs[name] = Region(loc.addr, loc.buffer_shape, emu_dtype(loc.dtype))
    shared = {(t, op): n_bytes for b in builders[0] for op, t, _, n_bytes in b.handoffs}
    notes = []
    for t, r, reader in boundary_tensors(plans, ranges):
        names = {plans[i].op.name for i in ranges[r]}
        to = [(op, nb) for (tt, op), nb in shared.items() if tt == t and op in names]
        offered = [plans[i].op.name for i in ranges[r] if handed.get(plans[i].op.name) == t]
        notes.append((t, r, "shared" if to else "dram", boundary_note(t, reader, offered, to, mapping.handoff, held)))
    return LayeredLowered(program, img, per_request, [list(p.cores) for p in places], notes,
                          sum(nb for chain in builders for b in chain for *_, nb in b.handoffs))


def _build_stage(graph: Graph, mapping, inputs, dram: Dram, placed: Placed, region=(0, 0)) -> "ProgramBuilder":
    """One stage's program, built with its cores' own chip (`placed.chip`) into the shared
    DRAM image, its shared weights in `region` (the bank they start at, the base their tiles
    are picked with: `WeightRegions`); an infeasible op's reason names the stage, its cores
    and its chip."""
    dram.scope = object()  # (constants are bound by their bytes across the stages: `Dram.bind_content`)
    try:
        b = ProgramBuilder(graph, Candidate(placed.chip, mapping), inputs, dram)
        b.b_region, b.b_picked = region
        for plan in plan_for(graph, mapping):
            b.lower_op(plan)
    except Infeasible as exc:
        raise Infeasible(stage_reason(placed, str(exc))) from None
    return b


def _staged(builders, cores, dram: Dram, name: str, core_ids) -> StagedLowered:
    """The stages' per-core instruction lists as one program over their one DRAM image."""
    img = dram.image()
    program = Program(cores, {"dram": Region(0, (img.size,), "uint8")}, {}, dram_bytes=img.size, name=name)
    lowered = [Lowered(b.graph, b.cand, program, img, b.locs, b.records, frozenset(b.fused), b.labels,
                       list(dram.named)) for b in builders]
    return StagedLowered(program, img, lowered, core_ids)


__all__ = ["ELEMENTWISE", "Infeasible", "LayeredLowered", "Lowered", "OpLowering", "StagedLowered", "blocked_bt", "lower",
           "lower_layers", "lower_placed", "lower_stages", "sram_lifetimes", "weight_bt"]
