"""Lower a graph and a candidate to an emulator Program and its DRAM image.

Op by op, in graph order:

* an int8 x int8 -> int32 ``linear`` / ``matmul`` (and batched matmul) goes to the matrix
  Ball with the tile the shared legality/mapper code picks
  (`dse.analytical.matmul.plan_matmul`: the framework's greedy tile under
  ``policy="framework"``, the mapper's best under ``"search"``); a candidate with no legal
  tile is :class:`Infeasible` with the very reason the analytical model gives. Weights are
  permuted and blocked offline (B as Bt tiles, bias replicated into accumulator tiles and
  preloaded with MVIN); an activation operand is packed by a charged core copy when its
  tile needs it (A when K is split, B always). Output tiles are split across workers by
  rows or columns (``mapping.split``). The accumulator stays blocked in DRAM (one
  contiguous MVOUT a tile).
* an int8 channels-last ``conv1d`` / ``conv2d`` (NLC / NHWC, WIO / HWIO weights, as the
  permute step leaves them) is im2col on the core - one strided gather copy, after a copy
  into a zero-padded image when the conv pads - and the same GEMM on the matrix Ball;
* requantize / dequantize of an accumulator read its blocked tiles directly (one core op
  over the padded tiles, the padding multiplied by a zero scale);
* an int8 / int32 ReLU goes to the ReLU Ball where the chip has one (toy, pebble);
* reshape of an unpadded contiguous tensor is a descriptor (no data moves);
* everything else is a core op (:mod:`dse.lower.coreop`), charged, never free.

Row-independent core ops (copies, elementwise arithmetic, quantization, last-axis norms)
are split across the workers; others run on worker 0. Synchronisation: with one worker a
FENCE closes each matrix-Ball op before the core reads its MVOUTs (under ``framework`` a
FENCE also follows every MVOUT, as in the framework's toolchain); with several workers a
BARRIER on every worker closes every op. Banks are allocated (MSET) at the start of each
matrix-Ball op and freed at its end: an op's allocation lives exactly as long as the op,
and the emulator's ``peak_allocated_bytes`` counter reports the peak per worker.
:func:`lower_stages` places several graphs on disjoint core groups (poly: prefill and
decode cores); `dse.lower.spans.lower_spans` partitions a temporal stack into spans.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from emulator import Barrier, CoreOp, Fence, Matmul, Mset, Mvin, Mvout, Program, Region, Relu

from ..analytical.matmul import plan_matmul
from ..mapping import Candidate, MatmulShape
from ..mapping.params import CandidateArrays
from ..mapping.matmul import check_tiles
from ..workload.graph import Graph, Op, scale_tensor
from . import coreop
from .memory import Blocked, Dram, Loc


# Graph ops whose rows (all axes before the normalised ones) are independent: a core op of
# these kinds is split across workers.
# Transcendental kinds (exp, silu, gelu, ...) are not split: torch's vectorised kernels may
# round a slice's tail differently from the whole tensor, and the contract is bit-identity
# with the unsplit reference.
SPLITTABLE = ("add", "sub", "mul", "div", "relu", "neg", "abs", "softmax", "layer_norm", "quantize", "requantize",
              "dequantize")


class Infeasible(Exception):
    """The candidate cannot run this graph; the message names the constraint and numbers."""


@dataclass
class OpLowering:
    """How one graph op was lowered."""

    name: str
    kind: str
    how: str  # "matrix", "core", "epilogue", "view"
    tile: tuple[int, int, int] | None = None
    batch: int = 1
    banks: int = 0
    sram_bytes: int = 0  # private SRAM allocated by the op (per worker)
    workers_used: int = 1
    instructions: int = 0


@dataclass
class Lowered:
    graph: Graph
    candidate: Candidate
    program: Program
    image: np.ndarray
    locs: dict[str, Loc]
    ops: list[OpLowering] = field(default_factory=list)

    @property
    def workers(self) -> int:
        return len(self.program.cores)

    @property
    def peak_sram_bytes(self) -> int:
        """Peak private SRAM a worker allocates (banks are allocated per op and freed after it)."""
        return max((o.sram_bytes for o in self.ops), default=0)

    def read(self, img: np.ndarray, name: str) -> np.ndarray:
        return self.locs[name].read(img)


def _np(value) -> np.ndarray:
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


class _Builder:
    def __init__(self, graph: Graph, candidate: Candidate, inputs, dram: Dram | None = None):
        self.g = graph
        self.cand = candidate
        self.chip = candidate.chip
        self.mapping = candidate.mapping
        self.W = int(self.mapping.workers)
        if self.W > self.chip.cores.count:
            raise Infeasible(f"{self.W} workers but chip {self.chip.name} has {self.chip.cores.count} cores")
        self.cores: list[list] = [[] for _ in range(self.W)]
        self.dram = dram or Dram()
        self.locs: dict[str, Loc] = {}
        self.unblocked: dict[str, Loc] = {}
        self.records: list[OpLowering] = []
        self.consumers = graph.consumers()
        coreop.ensure_registered()
        for name, value in zip(graph.inputs, inputs):
            spec = graph.tensors[name]
            self.locs[name] = self.dram.tensor(spec.shape, spec.dtype, _np(value))

    # -------------------------------------------------------------- helpers
    def loc(self, name: str) -> Loc:
        """The tensor's location; a weight is placed (as a constant) on first use."""
        if name not in self.locs:
            spec = self.g.tensors[name]
            self.locs[name] = self.dram.tensor(spec.shape, spec.dtype, self.g.weights[name])
        return self.locs[name]

    def logical(self, name: str) -> Loc:
        """A row-major (non-blocked) location: a blocked accumulator is copied out once (charged)."""
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

    def standard(self, name: str) -> Loc:
        """A padded row-major copy of the tensor unless it already is one (charged copy)."""
        loc = self.logical(name)
        if loc.standard:
            return loc
        out = self.dram.tensor(loc.shape, loc.dtype)
        self.core(CoreOp("copy", out.view(), (loc.view(),)))
        self.sync(False)
        return out

    def core(self, ins: CoreOp) -> None:
        """A core op: split across the workers along its first splittable axis when it is
        row-independent (elementwise, copies, last-axis norms), else on worker 0."""
        parts = self._split(ins) if self.W > 1 else None
        if parts is None:
            self.cores[0].append(ins)
            return
        for w, part in enumerate(parts):
            if part is not None:
                self.cores[w].append(part)

    def _split(self, ins: CoreOp):
        from emulator import DramTensor
        if ins.kind == coreop.KIND:
            op = ins.params["op"]
            if op.kind not in SPLITTABLE or op.counts.macs:
                return None
            if op.kind == "softmax":
                keep_from = len(ins.dst.shape) - 1 if op.attrs.get("dim", -1) in (-1, len(ins.dst.shape) - 1) \
                    else -1
            elif op.kind == "layer_norm":
                keep_from = len(ins.dst.shape) - len(op.attrs.get("normalized_shape", [1]))
            else:
                keep_from = len(ins.dst.shape)
        elif ins.kind in ("copy", "mul", "scale", "add", "sub", "relu", "cast"):
            keep_from = len(ins.dst.shape)
        else:
            return None
        dst = ins.dst
        if dst is None or keep_from <= 0:
            return None
        axis = next((a for a in range(keep_from) if dst.shape[a] >= 2), None)
        if axis is None:
            return None
        n = dst.shape[axis]
        plans = []
        for src in ins.srcs:
            sa = axis - (len(dst.shape) - len(src.shape))
            if ins.kind == "copy":
                if src.shape != dst.shape:
                    return None
                sa = axis
            if sa < 0 or src.shape[sa] == 1:
                plans.append(None)
            elif src.shape[sa] == n:
                plans.append(sa)
            else:
                return None

        def cut(t: DramTensor, a: int, lo: int, hi: int) -> DramTensor:
            strides = t.strides
            if strides is None:
                from .memory import contiguous_strides, itemsize
                strides = contiguous_strides(t.shape, itemsize({"fp32": "float32"}.get(t.dtype, t.dtype)))
            shape = list(t.shape)
            shape[a] = hi - lo
            return DramTensor(t.addr + lo * strides[a], tuple(shape), t.dtype, tuple(strides))

        per = -(-n // self.W)
        parts = []
        for w in range(self.W):
            lo, hi = w * per, min(n, (w + 1) * per)
            if lo >= hi:
                parts.append(None)
                continue
            srcs = tuple(src if a is None else cut(src, a, lo, hi) for src, a in zip(ins.srcs, plans))
            d = cut(dst, axis, lo, hi)
            elements = None
            if ins.elements is not None:
                elements = max([d.size] + [x.size for x in srcs])
            parts.append(CoreOp(ins.kind, d, srcs, ins.params, elements))
        return parts

    def sync(self, after_ball: bool) -> None:
        if self.W > 1:
            for c in self.cores:
                c.append(Barrier())
        elif after_ball and self.cores[0] and not isinstance(self.cores[0][-1], Fence):
            self.cores[0].append(Fence())

    # -------------------------------------------------------------- ops
    def lower_op(self, op: Op) -> None:
        n0 = sum(len(c) for c in self.cores)
        rec = None
        if op.kind in ("linear", "matmul") and self._int8_product(op):
            rec = self._matmul(op)
        if op.kind in ("conv1d", "conv2d") and self._int8_conv(op):
            rec = self._conv(op)
        if rec is None and op.kind in ("requantize", "dequantize", "quantize"):
            rec = self._scale_op(op)
        if rec is None and op.kind == "relu":
            rec = self._relu_ball(op)
        if rec is None and op.kind == "reshape":
            rec = self._reshape(op)
        if rec is None:
            rec = self._generic(op)
        rec.instructions = sum(len(c) for c in self.cores) - n0
        self.records.append(rec)

    def _int8_product(self, op: Op) -> bool:
        a, b = (self.g.tensors[n] for n in op.inputs[:2])
        if a.dtype != "int8" or b.dtype != "int8" or len(a.shape) < 2 or len(b.shape) < 2:
            return False
        out = self.g.tensors[op.outputs[0]]
        nb = math.prod(out.shape[:-2])
        if math.prod(a.shape[:-2]) != nb:
            return False
        if len(b.shape) > 2 and math.prod(b.shape[:-2]) != nb:
            return False
        if op.kind == "linear" and len(b.shape) != 2:
            return False
        if op.attrs.get("alpha", 1) != 1 or op.attrs.get("beta", 1) != 1:
            return False
        if op.attrs.get("has_bias") and (len(op.inputs) < 3 or op.inputs[2] not in self.g.weights
                                         or len(self.g.tensors[op.inputs[2]].shape) != 1):
            return False
        return True

    def _int8_conv(self, op: Op) -> bool:
        g = self.g
        x, w = (g.tensors[n] for n in op.inputs[:2])
        return (x.dtype == "int8" and w.dtype == "int8" and op.inputs[1] in g.weights
                and op.attrs.get("groups", 1) == 1 and op.attrs.get("layout") in ("NHWC", "NLC")
                and op.attrs.get("weight_layout") in ("HWIO", "WIO")
                and (not op.attrs.get("has_bias") or (len(op.inputs) > 2 and op.inputs[2] in g.weights)))

    def _conv(self, op: Op) -> OpLowering:
        """A channels-last int8 convolution as im2col on the core (one strided gather copy,
        charged, after a copy into a zero-padded image when the conv pads) and a GEMM on the
        matrix Ball: A[M = N*out positions, K = taps*C] @ W[K, O]; the blocked accumulator
        is the NHWC output (rows are output positions, columns channels)."""
        from emulator import DramTensor
        g = self.g
        x = self.logical(op.inputs[0])
        out_spec = g.tensors[op.outputs[0]]
        w = np.asarray(g.weights[op.inputs[1]]).astype(np.int8)  # (*kernel, C, O)
        nd = w.ndim - 2
        kernel, C, O = w.shape[:nd], w.shape[nd], w.shape[nd + 1]
        stride, padding, dilation = op.attrs["stride"], op.attrs["padding"], op.attrs["dilation"]
        n = x.shape[0]
        spatial = x.shape[1:1 + nd]
        outs = out_spec.shape[1:1 + nd]
        # (before, after) zero padding per spatial dim: symmetric, or a span's own edges
        pad_lr = [tuple(x) for x in op.attrs.get("pad_lr", [(p, p) for p in padding])]
        if any(l or r for l, r in pad_lr):
            xp = self.dram.tensor((n, *[s + l + r for s, (l, r) in zip(spatial, pad_lr)], C), "int8")
            xs = xp.view().strides
            offset = sum(l * st for (l, _), st in zip(pad_lr, xs[1:1 + nd]))
            self.core(CoreOp("copy", DramTensor(xp.addr + offset, x.shape, "int8", xs), (x.view(),)))
            self.sync(False)
            src_addr = xp.addr
        else:
            v = x.view()
            src_addr, xs = v.addr, v.strides
        M, K = n * math.prod(outs), math.prod(kernel) * C
        a = self.dram.tensor((M, K), "int8")
        Kp = a.buffer_shape[1]
        gshape = (n, *outs, *kernel, C)
        gstrides = (xs[0], *[s * st for s, st in zip(stride, xs[1:1 + nd])],
                    *[d * st for d, st in zip(dilation, xs[1:1 + nd])], xs[1 + nd])
        dst_m = tuple(v * Kp for v in contiguous((n, *outs)))
        dst_k = contiguous((*kernel, C))
        self.core(CoreOp("copy", DramTensor(a.addr, gshape, "int8", dst_m + dst_k),
                         (DramTensor(src_addr, gshape, "int8", gstrides),)))
        self.sync(False)
        bt = w.reshape(K, O).T[None]  # (1, O, K)
        bias = None
        if op.attrs.get("has_bias") and len(op.inputs) > 2:
            bias = np.asarray(g.weights[op.inputs[2]]).astype(np.int32)
        c_loc, rec = self._gemm(op, a, ("weight", np.ascontiguousarray(bt)), bias, M, O, K, 1, out_spec.shape)
        self.locs[op.outputs[0]] = c_loc
        return rec

    def _relu_ball(self, op: Op) -> OpLowering | None:
        """An int8 / int32 ReLU on the chip's ReLU Ball: the whole padded buffer (padding
        stays zero) streamed through one bank in chunks of a bank's rows (MVIN, RELU, MVOUT),
        chunks dealt to workers."""
        spec = self.g.tensors[op.outputs[0]]
        if self.chip.ball("relu") is None or spec.dtype not in ("int8", "int32"):
            return None
        src = self.loc(op.inputs[0])
        if not src.standard:
            return None
        out = self.dram.tensor(spec.shape, spec.dtype)
        self.locs[op.outputs[0]] = out
        bits = 8 if spec.dtype == "int8" else 32
        lines = src.nbytes // 16
        rows = min(self.chip.banks.rows, 1 << self.chip.isa.row_addr_bits)
        chunks = [(lo, min(lines, lo + rows)) for lo in range(0, lines, rows)]
        used = 0
        for w in range(self.W):
            mine = chunks[w::self.W]
            if not mine:
                continue
            used += 1
            prog = self.cores[w]
            prog += [Mset(0, 1), Mset(1, 1)]
            for lo, hi in mine:
                prog.append(Mvin(0, src.addr + lo * 16, hi - lo, 0))
                prog.append(Relu(0, 1, hi - lo, bits))
                prog.append(Mvout(1, out.addr + lo * 16, hi - lo, 0))
                if self.mapping.policy == "framework":
                    prog.append(Fence())
            prog += [Mset(0, alloc=False), Mset(1, alloc=False)]
        self.sync(True)
        return OpLowering(op.name, op.kind, "relu", None, 1, 2, 2 * rows * self.chip.banks.row_bytes, used)

    def _generic(self, op: Op) -> OpLowering:
        srcs = [self.logical(n) for n in op.inputs]
        spec = self.g.tensors[op.outputs[0]]
        out = self.dram.tensor(spec.shape, spec.dtype)
        self.locs[op.outputs[0]] = out
        views = tuple(s.view() for s in srcs)
        elements = coreop.charged_elements(op, [v.size for v in views], math.prod(spec.shape))
        self.core(CoreOp(coreop.KIND, out.view(), views, {"op": op}, elements))
        self.sync(False)
        return OpLowering(op.name, op.kind, "core")

    def _reshape(self, op: Op) -> OpLowering | None:
        src = self.loc(op.inputs[0])
        spec = self.g.tensors[op.outputs[0]]
        if src.standard and src.buffer_shape == src.shape and _padded(spec.shape) == tuple(spec.shape):
            self.locs[op.outputs[0]] = Loc(src.addr, tuple(spec.shape), spec.dtype, tuple(spec.shape))
            return OpLowering(op.name, op.kind, "view")
        return None

    def _scale_op(self, op: Op) -> OpLowering | None:
        """quantize / requantize / dequantize as one core op: x (as fp32) * scale, stored
        into the output dtype (round half to even, saturate) - the contract's formula."""
        src = self.loc(op.inputs[0])
        spec = self.g.tensors[op.outputs[0]]
        shape = tuple(spec.shape)
        scale = scale_tensor(op.attrs, shape).numpy().astype(np.float32)
        if src.blocked is not None:
            b = src.blocked
            out = self.dram.matrix(shape, spec.dtype, b.batch, b.M, b.N)
            self.locs[op.outputs[0]] = out
            full = np.zeros((b.batch, b.Mt * b.tm, b.Nt * b.tn), dtype=np.float32)
            full[:, :b.M, :b.N] = np.broadcast_to(scale, shape).reshape(b.batch, b.M, b.N)
            saddr = self.dram.blob(full)
            sloc = Loc(saddr, full.shape, "float32", full.shape)
            self.core(CoreOp("mul", out.padded_grid_view(b.tm, b.tn),
                             (src.padded_view(), sloc.padded_grid_view(b.tm, b.tn))))
            self.sync(False)
            return OpLowering(op.name, op.kind, "epilogue")
        out = self.dram.tensor(spec.shape, spec.dtype)
        self.locs[op.outputs[0]] = out
        if scale.ndim == 0 or scale.size == 1:
            self.core(CoreOp("scale", out.view(), (src.view(),), {"scale": float(scale.reshape(-1)[0])}))
        else:
            saddr = self.dram.blob(np.ascontiguousarray(scale))
            from emulator import DramTensor
            self.core(CoreOp("mul", out.view(), (src.view(), DramTensor(saddr, scale.shape, "fp32"))))
        self.sync(False)
        return OpLowering(op.name, op.kind, "core")

    def _matmul(self, op: Op) -> OpLowering:
        g = self.g
        a_spec, b_spec = (g.tensors[n] for n in op.inputs[:2])
        out_spec = g.tensors[op.outputs[0]]
        b_name = op.inputs[1]
        nb = math.prod(out_spec.shape[:-2])
        nbB = 1 if len(b_spec.shape) == 2 else nb
        b_nk = op.kind == "linear"  # linear: w[N, K]; matmul: b[..., K, N]
        if b_name in g.weights:
            w = np.asarray(g.weights[b_name]).astype(np.int8)
            w = w.reshape(nbB, *w.shape[-2:])
            b = ("weight", w if b_nk else np.swapaxes(w, -1, -2))  # (nbB, N, K)
        else:
            b = ("act", self.logical(b_name), b_nk, nbB)
        bias = None
        if op.attrs.get("has_bias") and len(op.inputs) > 2:
            bias = np.asarray(g.weights[op.inputs[2]]).astype(np.int32)
        c_loc, rec = self._gemm(op, self.standard(op.inputs[0]), b, bias,
                                a_spec.shape[-2], out_spec.shape[-1], a_spec.shape[-1], nb, out_spec.shape)
        self.locs[op.outputs[0]] = c_loc
        return rec

    def _gemm(self, op: Op, a_loc: Loc, b, bias, M: int, N: int, K: int, nb: int, out_shape):
        """C (blocked, int32) = A @ Bt.T (+ bias) on the matrix Ball. `a_loc` is a row-major
        padded (nb, Mp, Kp) int8 buffer; `b` is ("weight", Bt (nbB, N, K) int8) or ("act",
        loc, b_is_nk, nbB)."""
        chip, mp = self.chip, self.mapping
        shape = MatmulShape(M, N, K, nb)
        plan = plan_matmul(chip, mp, shape)
        if not plan.feasible:
            raise Infeasible(f"op {op.name}: {plan.reason}")
        tm, tn, tk = plan.tm, plan.tn, plan.tk
        Mp, Np, Kp = shape.padded
        Mt, Nt, Kt = Mp // tm, Np // tn, Kp // tk
        check = check_tiles(CandidateArrays.from_candidates([self.cand]), [tm], [tn], [tk])
        col_a, col_b, col_c = int(check.col_a[0, 0]), int(check.col_b[0, 0]), int(check.col_c[0, 0])
        nbuf = int(check.buffers[0, 0])
        from emulator import DramTensor

        # A: row-major padded (batch, Mp, Kp); blocked (batch, Mt, Kt, tm, tk) unless Kt == 1.
        packs = []
        if Kt == 1:
            a_tile = lambda bi, mi, ki: a_loc.addr + bi * Mp * Kp + mi * tm * Kp  # noqa: E731
        else:
            a_base = self.dram.alloc(nb * Mp * Kp)
            src = DramTensor(a_loc.addr, (nb, Mt, Kt, tm, tk), "int8", (Mp * Kp, tm * Kp, tk, Kp, 1))
            packs.append(CoreOp("copy", DramTensor(a_base, (nb, Mt, Kt, tm, tk), "int8"), (src,)))
            a_tile = lambda bi, mi, ki: a_base + ((bi * Mt + mi) * Kt + ki) * tm * tk  # noqa: E731
        # B as Bt blocked (nbB, Nt, Kt, tn, tk): offline for a weight, a packing core op otherwise.
        if b[0] == "weight":
            bt = b[1]
            nbB = bt.shape[0]
            full = np.zeros((nbB, Np, Kp), dtype=np.int8)
            full[:, :N, :K] = bt
            blk = full.reshape(nbB, Nt, tn, Kt, tk).transpose(0, 1, 3, 2, 4)
            b_base = self.dram.blob(blk)
        else:
            _, b_loc, b_nk, nbB = b
            b_base = self.dram.alloc(nbB * Np * Kp)
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
            bias_base = self.dram.blob(np.ascontiguousarray(rep))
        c_loc = self.dram.blocked(out_shape, Blocked(nb, Mt, Nt, tm, tn, M, N))

        if packs:
            for p in packs:
                self.core(p)
            self.sync(False)

        lines_a, lines_b, lines_c = tm * tk // 16, tn * tk // 16, tm * tn * 4 // 16
        fence = mp.policy == "framework"
        # Output tiles per worker: contiguous blocks of rows (or columns).
        if mp.split == "rows":
            per = -(-Mt // self.W)
            share = [(range(w * per, min(Mt, (w + 1) * per)), range(Nt)) for w in range(self.W)]
        else:
            per = -(-Nt // self.W)
            share = [(range(Mt), range(w * per, min(Nt, (w + 1) * per))) for w in range(self.W)]
        used = 0
        for w, (ms, ns) in enumerate(share):
            if len(ms) == 0 or len(ns) == 0:
                continue
            used += 1
            prog = self.cores[w]
            ids_a = list(range(nbuf))
            ids_b = list(range(nbuf, 2 * nbuf))
            ids_c = list(range(2 * nbuf, 3 * nbuf))
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
                            a = load("a", held_a, ids_a, (bi, mi, ki), a_tile(bi, mi, ki), lines_a)
                            b = load("b", held_b, ids_b, (bi if nbB > 1 else 0, ni, ki), b_tile(bi, ni, ki), lines_b)
                            prog.append(Matmul(a, b, c, tm, tn, tk, dataflow=mp.dataflow,
                                               accumulate=ki > 0 or bias_base is not None))
                        prog.append(Mvout(c, c_loc.addr + ((bi * Mt + mi) * Nt + ni) * tm * tn * 4, lines_c, 0))
                        if fence:
                            prog.append(Fence())
            prog += [Mset(i, alloc=False) for i in ids_a + ids_b + ids_c]
        self.sync(True)
        banks = int(check.banks[0, 0])
        return c_loc, OpLowering(op.name, op.kind, "matrix", (tm, tn, tk), nb, banks,
                                 banks * chip.banks.rows * chip.banks.row_bytes, used)

    def finish(self) -> Lowered:
        img = self.dram.image()
        program = Program(self.cores, {"dram": Region(0, (img.size,), "uint8")}, {},
                          dram_bytes=img.size, name=f"{self.g.name} on {self.chip.name} ({self.mapping.policy}, "
                                                    f"{self.W} workers)")
        # graph outputs as program outputs when they are plain row-major buffers
        for name in self.g.outputs:
            loc = self.locs[name]
            if loc.blocked is None:
                program.outputs[name] = Region(loc.addr, loc.buffer_shape, _emu(loc.dtype))
        return Lowered(self.g, self.cand, program, img, self.locs, self.records)


def contiguous(shape) -> tuple[int, ...]:
    """Element strides of a C-contiguous `shape`."""
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= int(n)
    return tuple(reversed(out))


def _emu(dtype: str) -> str:
    return {"float32": "fp32"}.get(dtype, dtype)


def _padded(shape) -> tuple[int, ...]:
    from .memory import padded_shape
    return padded_shape(tuple(shape))


def lower(graph: Graph, candidate: Candidate, inputs) -> Lowered:
    """The program and DRAM image that compute `graph` on `candidate` for `inputs`."""
    b = _Builder(graph, candidate, inputs)
    for op in graph.ops:
        b.lower_op(op)
    return b.finish()


@dataclass
class StagedLowered:
    """Several graphs (stages) on disjoint core groups of one chip, in one program."""

    program: Program
    image: np.ndarray
    stages: list[Lowered]  # each with its own locs; their programs are views of the merged one
    core_ids: list[list[int]]


def lower_stages(stages, chip, mapping) -> StagedLowered:
    """Stage partitioning onto (heterogeneous) cores: `stages` is a list of
    ``(graph, inputs, core_ids)``; each graph is lowered for ``len(core_ids)`` workers and
    placed on those cores; all share one DRAM image. The cores of a tile meet at every
    BARRIER, so the stage with fewer barriers is padded with BARRIERs at its end (the
    stages then advance op by op in lock step: the coupling cost shows in the cycles)."""
    dram = Dram()
    builders = []
    used: set[int] = set()
    for graph, inputs, core_ids in stages:
        if used & set(core_ids):
            raise Infeasible(f"stages share cores {sorted(used & set(core_ids))}")
        if max(core_ids) >= chip.cores.count:
            raise Infeasible(f"core {max(core_ids)} but chip {chip.name} has {chip.cores.count} cores")
        used |= set(core_ids)
        b = _Builder(graph, Candidate(chip, mapping.model_copy(update={"workers": len(core_ids)})), inputs, dram)
        for op in graph.ops:
            b.lower_op(op)
        builders.append(b)
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
    img = dram.image()
    program = Program(cores, {"dram": Region(0, (img.size,), "uint8")}, {}, dram_bytes=img.size,
                      name=" + ".join(f"{b.g.name} on cores {ids}" for b, (_, _, ids) in zip(builders, stages)))
    lowered = [Lowered(b.g, b.cand, program, img, b.locs, b.records) for b in builders]
    return StagedLowered(program, img, lowered, [list(ids) for _, _, ids in stages])


__all__ = ["Infeasible", "Lowered", "OpLowering", "StagedLowered", "lower", "lower_stages"]
