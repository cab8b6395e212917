"""The cost of every op of a graph as the lowering emits it, for arrays of candidates.

The walk follows `dse.lower.lower` op by op and takes the same decisions with the same
code: which products go to the matrix Ball (`_Builder._int8_product` / `_int8_conv`),
where each tensor lives (real `dse.lower.memory` locations: padded row-major, strided, or
a blocked accumulator), when a blocked accumulator or a strided view is copied out on the
core first, how a row-independent core op is split across workers, which ReLU goes to the
ReLU Ball. Costs are the emulator's: a core op ``ceil(elements x cycles per element)`` on
the busiest worker, a matmul `matmul_cost`, a Ball stream its transfers and Ball latency
back to back, and a FENCE or BARRIER per synchronisation the lowering inserts.

Candidates differ in tiles (per candidate, vectorised), worker count, Ball set and core
speeds; everything else about an op is the graph's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from types import SimpleNamespace

import numpy as np

from emulator.chip import LATENCY_VARIABLES
from emulator.formula import Formula

from ..lower import coreop
from ..lower.memory import Blocked, Dram, Loc, padded_shape, pad
from ..mapping import CandidateArrays, MatmulShape
from ..workload.graph import Graph, Op, scale_tensor
from .dma import dma_cycles
from .mapper import gemm_shape
from .matmul import MatmulPlans, matmul_cost, plan_matmuls, split_share


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
class _Blocked:
    """A blocked accumulator: (batch, M, N) and the producing tile per candidate."""

    batch: int
    M: int
    N: int
    tm: np.ndarray
    tn: np.ndarray


@dataclass
class _Tensor:
    loc: Loc | None  # None for a blocked accumulator
    blocked: _Blocked | None = None
    unblocked: Loc | None = None  # the row-major copy, once made


@dataclass
class _Acc:
    """Accumulates one op's costs."""

    n: int
    core: np.ndarray = field(init=False)  # on the busiest worker
    ball: np.ndarray = field(init=False)
    dma: np.ndarray = field(init=False)
    syncs: np.ndarray = field(init=False)
    busy: np.ndarray = field(init=False)  # summed over workers
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.core, self.ball, self.dma, self.busy = (np.zeros(self.n) for _ in range(4))
        self.syncs = np.zeros(self.n, dtype=np.int64)


def _lowering():
    # dse.lower imports the mapper from this package: import it when first needed
    import importlib
    return importlib.import_module("dse.lower.lower")


def _busiest_elements(kind, op, dst_shape, src_shapes, elements, W: int) -> int:
    """Elements the busiest worker runs of a core op (the whole op when it is not split):
    the first slice of the lowering's own split (`split_plan`)."""
    if W <= 1:
        return elements
    plan = _lowering().split_plan(kind, op, dst_shape, src_shapes)
    if plan is None:
        return elements
    axis, cuts = plan
    per = -(-dst_shape[axis] // W)
    part_dst = list(dst_shape)
    part_dst[axis] = per
    sizes = [math.prod(part_dst)]
    for shape, cut in zip(src_shapes, cuts):
        part = list(shape)
        if cut is not None:
            part[cut] = per
        sizes.append(math.prod(part))
    return max(sizes)


class GraphCost:
    """Walks a graph for a batch of candidates, op by op, as the lowering does."""

    def __init__(self, graph: Graph, params: CandidateArrays, chips=None):
        self.g, self.p, self.n = graph, params, params.n
        # The chip configs, for decisions the lowering makes from a whole chip (Ball streams);
        # without them those ops are costed on the core.
        self.chips = chips
        self.chip_keys = [_chip_key(c) for c in chips] if chips is not None else None
        self.W = np.asarray(params.workers, dtype=np.int64)
        self.Ws = sorted(set(int(w) for w in self.W))
        self.dram = Dram()  # placement only: no data
        self.t: dict[str, _Tensor] = {}
        self.plans: dict[MatmulShape, MatmulPlans] = {}
        self.shim = SimpleNamespace(g=graph)
        self.too_many_reason = np.array([f"{w} workers but chip {name} has {c} cores" for w, name, c
                                         in zip(params.workers, params.chip_names, params.cores)], dtype=object)
        for name in graph.inputs:
            spec = graph.tensors[name]
            self.t[name] = _Tensor(self.dram.tensor(spec.shape, spec.dtype))

    # ------------------------------------------------------------ placement
    def _get(self, name: str) -> _Tensor:
        if name not in self.t:  # a weight, placed on first use
            spec = self.g.tensors[name]
            self.t[name] = _Tensor(self.dram.tensor(spec.shape, spec.dtype))
        return self.t[name]

    def _core(self, acc: _Acc, kind: str, op, dst_shape, src_shapes, elements: int, cpe: np.ndarray):
        """A core op (split across workers where the lowering splits it)."""
        busiest = {w: _busiest_elements(kind, op, dst_shape, src_shapes, elements, w) for w in self.Ws}
        share = np.array([busiest[int(w)] for w in self.W], dtype=np.float64)
        acc.core += np.ceil(share * cpe)
        acc.busy += np.ceil(elements * cpe)

    def _core_tiled(self, acc: _Acc, blk: _Blocked, cpe: np.ndarray):
        """A core op over a blocked accumulator's padded grid (batch, Mt, tm, Nt, tn): split
        as `split_plan` splits it (the first axis of at least 2), vectorised over the
        candidates' tiles."""
        Mp, Np = pad(blk.M), pad(blk.N)
        total = blk.batch * Mp * Np
        share = split_share(total, (blk.batch, Mp // blk.tm, blk.tm), self.W)
        acc.core += np.ceil(share * cpe)
        acc.busy += np.ceil(total * cpe)

    def _sync(self, acc: _Acc, after_ball: bool):
        # W > 1: a BARRIER on every worker; one worker: a FENCE after Ball work only.
        acc.syncs += np.where(self.W > 1, 1, 1 if after_ball else 0)

    def logical(self, acc: _Acc, name: str) -> Loc:
        t = self._get(name)
        if t.blocked is None:
            return t.loc
        if t.unblocked is None:
            b = t.blocked
            t.unblocked = self.dram.matrix(self.g.tensors[name].shape, "int32", b.batch, b.M, b.N)
            self._core_tiled(acc, b, self.p.copy_cpe)
            self._sync(acc, False)
        return t.unblocked

    def standard(self, acc: _Acc, name: str) -> Loc:
        loc = self.logical(acc, name)
        if loc.standard:
            return loc
        out = self.dram.tensor(loc.shape, loc.dtype)
        self._core(acc, "copy", None, loc.shape, [loc.shape], math.prod(loc.shape), self.p.copy_cpe)
        self._sync(acc, False)
        return out

    # ------------------------------------------------------------ ops
    def op_cost(self, op: Op) -> OpCost:
        n = self.n
        acc = _Acc(n)
        unit = "core"
        gemm = None
        builder = _lowering()._Builder
        if op.kind in ("linear", "matmul") and builder._int8_product(self.shim, op):
            gemm, unit = self._matmul(acc, op), "matrix"
        elif op.kind in ("conv1d", "conv2d") and builder._int8_conv(self.shim, op):
            gemm, unit = self._conv(acc, op), "matrix"
        elif op.kind in ("requantize", "dequantize", "quantize"):
            unit = self._scale_op(acc, op)
        elif op.kind == "relu" and (relu := self._relu_ball(acc, op)) is not None:
            unit = relu
        elif op.kind == "reshape" and self._reshape(op):
            unit = "none"
        else:
            self._generic(acc, op)
        zeros = np.zeros(n, dtype=np.int64)
        feasible = np.ones(n, dtype=bool)
        reason = np.full(n, "", dtype=object)
        banks, sram, rows_used, tiles, dma_bytes = zeros, zeros, zeros, (zeros, zeros, zeros), zeros
        workers_used = np.minimum(self.W, self.p.cores)
        units = np.full(n, unit, dtype=object) if isinstance(unit, str) else unit.astype(object)
        if gemm is not None:
            plans = gemm
            feasible = plans.feasible.copy()
            # the very words the lowering raises (`Infeasible`)
            reason = np.array([f"op {op.name}: {r}" if r else "" for r in plans.reason], dtype=object)
            acc.core += np.where(feasible, plans.core_cycles, 0)
            acc.busy += np.where(feasible, plans.busy_cycles, 0)
            acc.ball += np.where(feasible, plans.cycles - plans.core_cycles, 0)
            acc.extra["compute"] = plans.compute_cycles
            acc.dma += plans.dma_cycles
            banks, sram, rows_used, dma_bytes = plans.banks, plans.sram_bytes, plans.bank_rows, plans.dma_bytes
            tiles = (plans.tm, plans.tn, plans.tk)
            workers_used = np.where(feasible, plans.workers_used, workers_used)
        if "sram" in acc.extra:
            sram, banks, rows_used = acc.extra["sram"], acc.extra["banks"], acc.extra["bank_rows"]
        if "dma_bytes" in acc.extra:
            dma_bytes = acc.extra["dma_bytes"]
        # More workers than cores: the lowering refuses the whole graph, before any op.
        too_many = self.W > self.p.cores
        if too_many.any():
            feasible = feasible & ~too_many
            reason = np.where(too_many, self.too_many_reason, reason)
        sync_cycles = acc.syncs * np.where(self.W > 1, self.p.barrier_cycles, self.p.fence_cycles)
        cycles = np.round(acc.core + acc.ball + sync_cycles).astype(np.int64)
        compute = acc.extra.get("compute", acc.extra.get("ball_busy", zeros))

        def own(x, dtype=np.int64):  # every field its own array (callers write into them)
            return np.array(np.broadcast_to(x, (n,)), dtype=dtype)

        return OpCost(own(units, object), own(feasible, bool), own(reason, object), own(np.where(feasible, cycles, 0)),
                      own(compute), own(np.round(acc.dma)), own(np.round(acc.core)),
                      own(np.where(feasible, np.round(acc.ball), 0)), own(np.where(feasible, np.round(acc.busy), 0)),
                      own(acc.syncs), own(dma_bytes), own(sram), own(rows_used), own(banks), *[own(t) for t in tiles],
                      own(workers_used))

    def _plans(self, shape: MatmulShape) -> MatmulPlans:
        if shape not in self.plans:  # repeated layers share one evaluation
            serial = self.p.serial
            if not serial.any():
                self.plans[shape] = plan_matmuls(self.p, shape)
            else:
                # The lowering picks tiles by the overlapped cost whatever the emulator's mode:
                # pick them so, then cost those tiles in serial timing.
                picked = plan_matmuls(replace(self.p, serial=np.zeros(self.n, dtype=bool)), shape)
                ok = picked.feasible
                col = lambda a: np.where(ok, a, 16)[:, None]  # noqa: E731  (any tile where none fits)
                cost = matmul_cost(self.p, shape, col(picked.tm), col(picked.tn), col(picked.tk))
                for name in ("cycles", "compute_cycles", "dma_cycles", "core_cycles", "busy_cycles"):
                    picked.values[name] = np.where(ok, getattr(cost, name)[:, 0], 0)
                self.plans[shape] = picked
        return self.plans[shape]

    def _blocked_out(self, name: str, batch: int, M: int, N: int, plans: MatmulPlans):
        self.t[name] = _Tensor(None, _Blocked(batch, M, N, np.maximum(plans.tm, 16), np.maximum(plans.tn, 16)))

    def _matmul(self, acc: _Acc, op: Op) -> MatmulPlans:
        shape = gemm_shape(self.g, op)
        self.standard(acc, op.inputs[0])
        if not shape.b_weight:
            self.logical(acc, op.inputs[1])
        plans = self._plans(shape)
        acc.syncs += np.where(self.W > 1, (plans.core_cycles > 0).astype(np.int64), 0)  # after the packs
        self._sync(acc, True)
        self._blocked_out(op.outputs[0], shape.batch, shape.M, shape.N, plans)
        return plans

    def _conv(self, acc: _Acc, op: Op) -> MatmulPlans:
        g = self.g
        x = self.logical(acc, op.inputs[0])
        out = g.tensors[op.outputs[0]]
        w_shape = g.tensors[op.inputs[1]].shape
        nd = len(w_shape) - 2
        kernel, C = tuple(w_shape[:nd]), w_shape[nd]
        padding = op.attrs["padding"]
        pad_lr = [tuple(v) for v in op.attrs.get("pad_lr", [(p, p) for p in padding])]
        n_img = x.shape[0]
        outs = tuple(out.shape[1:1 + nd])
        if any(lo or hi for lo, hi in pad_lr):
            self._core(acc, "copy", None, x.shape, [x.shape], math.prod(x.shape), self.p.copy_cpe)
            self._sync(acc, False)
        gshape = (n_img, *outs, *kernel, C)
        self._core(acc, "copy", None, gshape, [gshape], math.prod(gshape), self.p.copy_cpe)
        self._sync(acc, False)
        shape = gemm_shape(self.g, op)  # the im2col GEMM: M = images x positions, K = taps x C
        plans = self._plans(shape)
        acc.syncs += np.where(self.W > 1, (plans.core_cycles > 0).astype(np.int64), 0)
        self._sync(acc, True)
        self._blocked_out(op.outputs[0], 1, shape.M, shape.N, plans)
        return plans

    def _scale_op(self, acc: _Acc, op: Op) -> str | np.ndarray:
        """quantize / requantize / dequantize: the lowering's own plan and choice
        (`_Builder._scale_plan`, Ball stream when it beats the core op on the slowest
        worker) per group of candidates that share the figures the choice reads, costed
        as the emulator runs the stream (`stream_cycles`: per piece MVIN, Ball, MVOUT back
        to back) or as the core op."""
        spec = self.g.tensors[op.outputs[0]]
        shape = tuple(spec.shape)
        t = self._get(op.inputs[0])
        b = t.blocked
        out = self.dram.matrix(shape, spec.dtype, b.batch, b.M, b.N) if b is not None \
            else self.dram.tensor(shape, spec.dtype)
        self.t[op.outputs[0]] = _Tensor(out)
        core = _Acc(self.n)
        if b is not None:
            self._core_tiled(core, b, self.p.mul_cpe)
        else:
            scale_t = scale_tensor(op.attrs, shape)
            if scale_t.dim() == 0 or scale_t.numel() == 1:
                self._core(core, "scale", None, shape, [t.loc.shape], max(math.prod(shape), math.prod(t.loc.shape)),
                           self.p.scale_cpe)
            else:
                sshape = tuple(scale_t.shape)
                self._core(core, "mul", None, shape, [t.loc.shape, sshape],
                           max(math.prod(shape), math.prod(t.loc.shape), math.prod(sshape)), self.p.mul_cpe)
        self._sync(core, False)
        if self.chips is None:
            self._add(acc, core)
            return "epilogue" if b is not None else "core"

        stream = np.zeros(self.n, dtype=bool)
        ball_acc = _Acc(self.n)
        kind = ""
        groups: dict[tuple, list[int]] = {}
        for i in range(self.n):
            tile = (int(b.tm[i]), int(b.tn[i])) if b is not None else ()
            groups.setdefault((self.chip_keys[i], int(self.W[i]), tile), []).append(i)
        # The choice depends on nothing but the group's key: remembered on the graph, so a
        # sweep's later batches (the same graph) reuse it.
        memo = self.g.__dict__.setdefault("_stream_choices", {})
        for (key, W, tile), idx in groups.items():
            if key == ():
                continue
            if (op.name, key, W, tile) not in memo:
                memo[(op.name, key, W, tile)] = self._stream_choice(op, t.loc, b, out, shape, self.chips[idx[0]], W,
                                                                    tile)
            choice = memo[(op.name, key, W, tile)]
            if choice is None:
                continue
            ids = np.array(idx)
            stream[ids] = True
            ball_acc.ball[ids] = choice["cycles"]
            ball_acc.busy[ids] = choice["busy"]
            ball_acc.dma[ids] = choice["dma"]
            for name in ("ball_busy", "banks", "bank_rows", "dma_bytes"):
                ball_acc.extra.setdefault(name, np.zeros(self.n, dtype=np.int64))[ids] = choice[name]
            ball_acc.extra.setdefault("sram", np.zeros(self.n, dtype=np.int64))[ids] = \
                choice["banks"] * self.p.bank_rows[ids] * self.p.row_bytes[ids]  # each candidate's own banks
            kind = choice["kind"]
        self._sync(ball_acc, True)
        self._select(acc, stream, ball_acc, core)
        on_core = "epilogue" if b is not None else "core"
        return np.where(stream, kind, on_core) if stream.any() else on_core

    def _stream_choice(self, op: Op, loc: Loc, b: "_Blocked | None", out: Loc, shape, chip, W: int, tile) -> dict | None:
        """The lowering's plan for one group, and its cost when the lowering takes it."""
        low = _lowering()
        builder = low._Builder.__new__(low._Builder)
        builder.chip, builder.W, builder.dram, builder.g = chip, W, Dram(), self.g
        src = loc
        if b is not None:
            tm, tn = tile
            Mp, Np = pad(b.M), pad(b.N)
            src = Loc(0, tuple(self.g.tensors[op.inputs[0]].shape), "int32", (),
                      Blocked(b.batch, Mp // tm, Np // tn, tm, tn, b.M, b.N))
        scale = scale_tensor(op.attrs, shape).numpy().astype(np.float32)
        plan = builder._scale_plan(op, src, out, scale, shape)
        if plan is None:
            return None
        core_op = builder._scale_core(src, out, scale, shape, place=False)
        parts = [q for q in (builder._split(core_op) or [core_op]) if q is not None] if W > 1 else [core_op]
        cycles = low.stream_cycles(chip, plan, W)
        if cycles >= max(low.core_cycles(chip, q) for q in parts):
            return None
        ball = chip.ball(plan.kind).latency_formula("default")
        mset = chip.front_end.mset_cycles
        ball_busy = sum(int(ball.cycles(iter=q.in_lines)) for q in plan.pieces[::W])
        return {"kind": plan.kind, "cycles": cycles, "ball_busy": ball_busy, "dma": cycles - ball_busy - 4 * mset,
                "busy": low.stream_cycles(chip, plan, 1) + 4 * mset * (min(W, len(plan.pieces)) - 1),
                "banks": 1 + plan.dst_col, "dma_bytes": 16 * sum(q.in_lines + q.out_lines for q in plan.pieces),
                "bank_rows": max(q.in_lines for q in plan.pieces) + max(q.out_lines for q in plan.pieces)}

    @staticmethod
    def _select(acc: _Acc, on_ball: np.ndarray, ball: _Acc, core: _Acc) -> None:
        """Per candidate, the Ball path's costs where `on_ball`, else the core path's."""
        for f in ("core", "ball", "dma", "syncs", "busy"):
            setattr(acc, f, getattr(acc, f) + np.where(on_ball, getattr(ball, f), getattr(core, f)))
        acc.extra.update({k: np.where(on_ball, v, 0) for k, v in ball.extra.items()})

    @staticmethod
    def _add(acc: _Acc, other: _Acc) -> None:
        for f in ("core", "ball", "dma", "syncs", "busy"):
            setattr(acc, f, getattr(acc, f) + getattr(other, f))

    def _relu_ball(self, acc: _Acc, op: Op) -> str | np.ndarray | None:
        """The ReLU Ball streams the padded buffer through one bank: per chunk of a bank's
        rows, MVIN, RELU, MVOUT back to back (the in-order DMA engine holds the next MVIN
        behind the MVOUT), chunks dealt to workers. Candidates without the Ball run the
        op on the core. Returns the unit (per candidate when they differ), or None when no
        candidate can use the Ball."""
        spec = self.g.tensors[op.outputs[0]]
        t = self._get(op.inputs[0])
        p = self.p
        has = np.array([f is not None for f in p.relu_formula])
        if spec.dtype not in ("int8", "int32") or t.blocked is not None or not t.loc.standard or not has.any():
            return None
        if not has.all():  # some candidates run it on the core: cost both, pick per candidate
            core_acc = _Acc(self.n)
            self._generic(core_acc, op)
            ball_acc = _Acc(self.n)
            self._relu_stream(ball_acc, t.loc)
            self._select(acc, has, ball_acc, core_acc)
        else:
            self._relu_stream(acc, t.loc)
        self.t[op.outputs[0]] = _Tensor(self.dram.tensor(spec.shape, spec.dtype))
        return "relu" if has.all() else np.where(has, "relu", "core")

    def _relu_stream(self, acc: _Acc, src: Loc):
        p = self.p
        lines = src.nbytes // 16
        rows = p.usable_rows
        chunks = -(-lines // rows)
        mine = -(-chunks // self.W)  # worker 0's chunks
        full = np.minimum(lines, rows)
        last = lines - (chunks - 1) * rows
        dma = (p.beat_bytes, p.burst_max_bytes, p.bursts_in_flight, p.dma_latency)
        texts = np.array([t or "" for t in p.relu_formula], dtype=object)
        r_full, r_last = np.zeros(self.n), np.zeros(self.n)
        for text in set(texts) - {""}:
            idx = np.flatnonzero(texts == text)
            f = Formula(text, LATENCY_VARIABLES["relu"])
            r_full[idx] = np.broadcast_to(f.cycles(iter=full[idx]), idx.shape)
            r_last[idx] = np.broadcast_to(f.cycles(iter=last[idx]), idx.shape)
        d_full = 2 * dma_cycles(full * 16, *dma)
        d_last = 2 * dma_cycles(last * 16, *dma)
        # worker 0 holds chunk 0, W, 2W, ...: the short last chunk only when it lands there
        last_on_0 = (chunks - 1) % self.W == 0
        n_full = np.where(last_on_0, mine - 1, mine)
        stream = n_full * (d_full + r_full) + np.where(last_on_0, d_last + r_last, 0)
        acc.ball += stream + 4 * p.mset_cycles
        used = np.minimum(self.W, chunks)
        acc.busy += (chunks - 1) * (d_full + r_full) + (d_last + r_last) + 4 * p.mset_cycles * used
        acc.dma += n_full * d_full + np.where(last_on_0, d_last, 0)
        acc.extra["ball_busy"] = (n_full * r_full + np.where(last_on_0, r_last, 0)).astype(np.int64)
        banks = 2 * -(-np.minimum(lines, rows) // rows)
        acc.extra["banks"] = banks
        acc.extra["sram"] = banks * p.bank_rows * p.row_bytes
        acc.extra["bank_rows"] = 2 * np.minimum(lines, rows)  # a chunk in, its result out
        acc.extra["dma_bytes"] = np.full(self.n, 2 * lines * 16, dtype=np.int64)
        self._sync(acc, True)

    def _reshape(self, op: Op) -> bool:
        t = self._get(op.inputs[0])
        spec = self.g.tensors[op.outputs[0]]
        src = t.loc
        if t.blocked is None and src.standard and src.buffer_shape == src.shape \
                and padded_shape(tuple(spec.shape)) == tuple(spec.shape):
            self.t[op.outputs[0]] = _Tensor(Loc(src.addr, tuple(spec.shape), spec.dtype, tuple(spec.shape)))
            return True
        return False

    def _generic(self, acc: _Acc, op: Op):
        srcs = [self.logical(acc, name) for name in op.inputs]
        spec = self.g.tensors[op.outputs[0]]
        self.t[op.outputs[0]] = _Tensor(self.dram.tensor(spec.shape, spec.dtype))
        shapes = [s.shape for s in srcs]
        elements = coreop.charged_elements(op, [math.prod(s) for s in shapes], math.prod(spec.shape))
        self._core(acc, coreop.KIND, op, tuple(spec.shape), shapes, elements, self.p.graph_op_cpe)
        self._sync(acc, False)


def _chip_key(chip) -> tuple:
    """The figures a Ball-stream decision reads (chips equal in these decide alike)."""
    b, d, f, c = chip.banks, chip.dma, chip.front_end, chip.cores
    balls = tuple((x.kind, tuple(sorted(x.latency.items()))) for x in chip.balls if x.kind in ("fp2int", "int2fp"))
    if not balls:
        return ()  # no stream Ball: always the core op
    # The plan reads the addressable rows, and the bank count only against 1 + a
    # destination bank's col (at most max_col).
    rows = min(b.rows, 1 << chip.isa.row_addr_bits)
    return (balls, rows, b.row_bytes, min(b.count, b.max_col + 1), b.max_col, chip.isa.max_value("stride"),
            d.beat_bytes, d.burst_max_bytes, d.bursts_in_flight, d.inflight_requests, d.latency_cycles,
            f.mset_cycles, c.op_cycles_per_element, tuple(sorted(c.op_cycles.items())))


def graph_costs(graph: Graph, params: CandidateArrays, chips=None) -> list[OpCost]:
    walker = GraphCost(graph, params, chips)
    return [walker.op_cost(op) for op in graph.ops]
