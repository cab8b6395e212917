"""The matrix units: products on the matrix Ball. "matrix": an int8 x int8 -> int32
``linear`` / ``matmul`` (batched too); "conv": a channels-last int8 conv as im2col on the
core and the same GEMM; "grouped": a grouped or depthwise conv as the block-diagonal GEMM or
one core op, per candidate (`dse.plan.grouped.on_matrix`).

The emitter (`emit_gemm`) writes the tiles the shared legality / mapper code picks
(`dse.plan.matmul.plan_matmul`), with weights blocked offline, packing copies, shared
weights or handed-off A tiles in shared memory, output tiles split across workers by rows
or columns; the charge reads the same picks for arrays of candidates
(`dse.plan.matmul.plan_matmuls`, `dse.cost.matmul`), and the figures of the picked tiles
(`gemm_figures`).

As the lowering emits it:

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
* a grouped or depthwise conv is the same, with its block-diagonal weight, or one core op,
  per candidate as `dse.plan.grouped.on_matrix` decides (the Ball path copies its
  accumulator out, so both leave the same row-major result);
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, fields, replace

import numpy as np

from emulator import CoreOp, DramTensor, Fence, Matmul, Mset, Mvin, Mvout

from ..cost.matmul import matmul_activity, matmul_cost
from ..mapping import MatmulShape
from ..mapping.matmul import check_tiles
from ..plan.graph_plan import OpPlan, copy_buffer
from ..plan.grouped import block_diagonal, on_matrix
from ..plan.mapper import candidate_groups
from ..plan.matmul import MatmulPlans, plan_matmul, plan_matmuls
from ..plan.memory import Blocked, Loc, pad, padded_shape
from ..plan.split import shared_loads
from ..plan.units import Infeasible, conv_pad
from ..workload.graph import CONV_KINDS, Graph, Op
from .charges import Charges, OpCost
from .core import emit_core
from .unit import OpLowering, Unit


def emit_matmul(builder, plan: OpPlan, ready: dict[str, Loc]) -> OpLowering:
    graph, op = builder.graph, plan.op
    a_spec, b_spec = (graph.tensors[name] for name in op.inputs[:2])
    out_spec = graph.tensors[op.outputs[0]]
    b_name = op.inputs[1]
    nb = math.prod(out_spec.shape[:-2])
    nbB = 1 if len(b_spec.shape) == 2 else nb
    b_nk = op.kind == "linear"  # linear: w[N, K]; matmul: b[..., K, N]
    if b_name in graph.weights:
        b_operand = ("weight", weight_bt(graph, op))
    else:
        b_operand = ("act", builder.operand(b_name, ready), b_nk, nbB)
    bias = None
    if op.attrs.get("has_bias") and len(op.inputs) > 2:
        bias = np.asarray(graph.weights[op.inputs[2]]).astype(np.int32)
    c_loc, rec = emit_gemm(builder, op, builder.operand(op.inputs[0], ready), b_operand, bias,
                            a_spec.shape[-2], out_spec.shape[-1], a_spec.shape[-1], nb, plan.writes)
    builder.locs[op.outputs[0]] = c_loc
    return rec


def emit_conv(builder, plan: OpPlan, ready: dict[str, Loc], weight: np.ndarray | None = None) -> OpLowering:
    """A channels-last int8 convolution as im2col on the core (one strided gather copy,
    charged, after a copy into a zero-padded image when the conv pads) and a GEMM on the
    matrix Ball: A[M = N*out positions, K = taps*C] @ W[K, O]; the blocked accumulator
    is the NHWC output (rows are output positions, columns channels)."""
    graph, op = builder.graph, plan.op
    gather_copy = next(each for each in plan.copies if each.kind == "gather")
    image = builder.operand(gather_copy.tensor, ready)  # a fused ReLU's input, or the conv's
    out_spec = graph.tensors[op.outputs[0]]
    # (*kernel, C, O)
    conv_weight = np.asarray(graph.weights[op.inputs[1]]).astype(np.int8) if weight is None else weight
    n_spatial = conv_weight.ndim - 2
    kernel, C, O = conv_weight.shape[:n_spatial], conv_weight.shape[n_spatial], conv_weight.shape[n_spatial + 1]
    weight_t = weight_bt(graph, op) if weight is None else conv_weight.reshape(-1, O).T[None]  # (1, O, K)
    stride, dilation = op.attrs["stride"], op.attrs["dilation"]
    batch = image.shape[0]
    outs = out_spec.shape[1:1 + n_spatial]
    pad_lr = conv_pad(op)
    if any(copy.kind == "pad" for copy in plan.copies):
        pad_copy = next(each for each in plan.copies if each.kind == "pad")
        padded = builder.dram.tensor(*copy_buffer(graph, op, pad_copy), name=f"{op.name}: pad")  # (n, *padded, C)
        strides = padded.view().strides
        offset = sum(lo * axis_stride for (lo, _), axis_stride in zip(pad_lr, strides[1:1 + n_spatial]))
        builder.core(CoreOp(pad_copy.apply or "copy", DramTensor(padded.addr + offset, image.shape, "int8", strides),
                            (image.view(),)))
        builder.sync(False)
        src_addr = padded.addr
    else:
        view = image.view()
        src_addr, strides = view.addr, view.strides
    M, K = batch * math.prod(outs), math.prod(kernel) * C
    im2col = builder.dram.tensor(*copy_buffer(graph, op, gather_copy), name=f"{op.name}: im2col")  # A: (M, K) int8
    Kp = im2col.buffer_shape[1]
    gshape = (batch, *outs, *kernel, C)
    spatial = strides[1:1 + n_spatial]
    gstrides = (strides[0], *[step * axis_stride for step, axis_stride in zip(stride, spatial)],
                *[dilate * axis_stride for dilate, axis_stride in zip(dilation, spatial)], strides[1 + n_spatial])
    dst_m = tuple(row * Kp for row in contiguous((batch, *outs)))
    dst_k = contiguous((*kernel, C))
    builder.core(CoreOp(gather_copy.apply or "copy", DramTensor(im2col.addr, gshape, "int8", dst_m + dst_k),
                     (DramTensor(src_addr, gshape, "int8", gstrides),)))
    builder.sync(False)
    bias = None
    if op.attrs.get("has_bias") and len(op.inputs) > 2:
        bias = np.asarray(graph.weights[op.inputs[2]]).astype(np.int32)
    # a grouped conv's accumulator is its own (the plan's result is the matrix it is unblocked into)
    result = plan.writes if plan.unit == "conv" else Loc(0, tuple(out_spec.shape), "int32", ())
    c_loc, rec = emit_gemm(builder, op, im2col, ("weight", np.ascontiguousarray(weight_t)), bias, M, O, K, 1, result)
    builder.locs[op.outputs[0]] = c_loc
    return rec


def emit_grouped(builder, plan: OpPlan, ready: dict[str, Loc]) -> OpLowering:
    """A grouped conv where `grouped.on_matrix` puts it: the block-diagonal GEMM, its
    accumulator then copied out (the plan's `after`), or one core op; either writes the
    plan's M-padded row-major matrix."""
    op = plan.op
    if on_matrix(builder.graph, plan, builder.params)[0]:
        conv_weight = np.asarray(builder.graph.weights[op.inputs[1]]).astype(np.int8)
        rec = emit_conv(builder, plan, ready, block_diagonal(conv_weight, int(op.attrs["groups"])))
        builder.locs[op.outputs[0]] = builder.logical(op.outputs[0])
        return rec
    return emit_core(builder, op, ready, planned=plan.writes)


def emit_gemm(builder, op: Op, a_loc: Loc, b, bias, M: int, N: int, K: int, nb: int, result: Loc):
    """C (blocked, int32) = A @ Bt.T (+ bias) on the matrix Ball. `a_loc` is a row-major
    padded (nb, Mp, Kp) int8 buffer; `b` is ("weight", Bt (nbB, N, K) int8) or ("act",
    loc, b_is_nk, nbB); `result` the accumulator as the plan lays it out (`OpPlan.writes`),
    placed in the picked tiles."""
    chip, mapping = builder.chip, builder.mapping
    nbB = b[1].shape[0] if b[0] == "weight" else b[3]
    shape = MatmulShape(M, N, K, nb, b_weight=b[0] == "weight", b_batched=nbB > 1, bias=bias is not None,
                        a_shared=builder.handoff_sets if op.name in builder.handoff_ops else 0,
                        a_shared_base=builder.handoff_bases.get(op.name, 0), b_shared_base=builder.b_picked)
    if builder.shared_stack is not None:
        shape = builder.shared_stack.gemm(op.name, shape)
    plan = plan_matmul(chip, mapping, shape)
    if not plan.feasible:
        raise Infeasible(f"op {op.name}: {plan.reason}")
    tm, tn, tk = plan.tm, plan.tn, plan.tk
    Mp, Np, Kp = shape.padded
    Mt, Nt, Kt = Mp // tm, Np // tn, Kp // tk
    check = check_tiles(builder.params, [tm], [tn], [tk], shape)
    col_a, col_b, col_c = int(check.col_a[0, 0]), int(check.col_b[0, 0]), int(check.col_c[0, 0])
    nbuf = int(check.buffers[0, 0])

    # A: row-major padded (batch, Mp, Kp); blocked (batch, Mt, Kt, tm, tk) unless Kt == 1.
    packs = []
    if Kt == 1:
        a_tile = lambda bi, mi, ki: a_loc.addr + bi * Mp * Kp + mi * tm * Kp  # noqa: E731
    else:
        a_base = builder.dram.alloc(nb * Mp * Kp, f"{op.name}: A packed")
        src = DramTensor(a_loc.addr, (nb, Mt, Kt, tm, tk), "int8", (Mp * Kp, tm * Kp, tk, Kp, 1))
        packs.append(CoreOp("copy", DramTensor(a_base, (nb, Mt, Kt, tm, tk), "int8"), (src,)))
        a_tile = lambda bi, mi, ki: a_base + ((bi * Mt + mi) * Kt + ki) * tm * tk  # noqa: E731
    # B as Bt blocked (nbB, Nt, Kt, tn, tk): offline for a weight, a packing core op otherwise.
    if b[0] == "weight":
        nbB = b[1].shape[0]
        # a preloaded B (spans' shared stack) was placed and loaded before the span
        # one copy a weight and layout (`Dram.constant`), keyed as the model counts it
        key = ("weight", op.inputs[1], op.kind, op.attrs.get("groups", 1), Np, Kp, tn, tk)
        b_base = None if shape.b_preloaded else builder.dram.constant(key, BlockedBt(b[1], Np, Kp, tn, tk),
                                                                   f"{op.inputs[1]}: Bt tiles")
    else:
        _, b_loc, b_nk, nbB = b
        b_base = builder.dram.alloc(nbB * Np * Kp, f"{op.name}: B packed")
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
        bias_base = builder.dram.constant(("bias", op.inputs[2], op.kind, Np, tm, tn), rep, f"{op.name}: bias tiles")
    c_loc = builder.dram.place(result, Blocked(nb, Mt, Nt, tm, tn, M, N))

    if packs:
        for pack in packs:
            builder.core(pack)
        builder.sync(False)

    lines_a, lines_b, lines_c = tm * tk // 16, tn * tk // 16, tm * tn * 4 // 16
    fence = mapping.policy == "framework"
    # Output tiles per worker: contiguous blocks of rows (or columns).
    if mapping.split == "rows":
        per = -(-Mt // builder.workers)
        share = [(range(worker * per, min(Mt, (worker + 1) * per)), range(Nt)) for worker in range(builder.workers)]
    else:
        per = -(-Nt // builder.workers)
        share = [(range(Mt), range(worker * per, min(Nt, (worker + 1) * per))) for worker in range(builder.workers)]
    # A shared weight (the plan's `check_tiles`): B tile j in shared bank first_bank_id +
    # region + j (its part's region, `WeightRegions`; a spans stack's base) of every tile of
    # cores with workers that compute (a prefix: blocks go in order), loaded there once by
    # those workers (`shared_loads`), then a BARRIER.
    shared_b = bool(check.shared_b[0, 0])
    shared_tiles = int(check.shared_tiles[0, 0])
    shared_mem = chip.shared_memory
    b_bank0 = shared_mem.first_bank_id + (shape.b_shared_base if shape.b_preloaded else builder.b_region)
    if shared_b and not shape.b_preloaded:
        computing = sum(1 for m_tiles, n_tiles in share if len(m_tiles) and len(n_tiles))
        load_shared_b(builder, b_bank0, b_base, shared_tiles, tn, tk, computing)
    # A handed off through shared memory (`dse.plan.placement.handoffs`): A tile (bi, mi) in
    # shared bank first_bank_id + banks - 1 - (base + set * nb * Mt + bi * Mt + mi), loaded
    # there by the cores of the range before, dealt round-robin, after its last op
    # (`lower_layers` then BARRIERs); the request's set of banks (`Schedule.handoff_sets`),
    # below the banks the other hand-offs' A tiles hold (`handoff_banks`)
    shared_a = bool(check.shared_a[0, 0])
    top = shared_mem.first_bank_id + shared_mem.banks - 1 - shape.a_shared_base - builder.handoff_set * nb * Mt
    if shared_a:
        loaders = builder.handoff_loaders
        for tile in range(nb * Mt):
            bi, mi = divmod(tile, Mt)
            loaders[tile % len(loaders)].append(Mvin(top - tile, a_tile(bi, mi, 0), lines_a, 0))
        builder.handoffs.append((op.name, op.inputs[0], nb * Mt, nb * Mt * lines_a * 16))
    used = 0
    for worker, (m_tiles, n_tiles) in enumerate(share):
        if len(m_tiles) == 0 or len(n_tiles) == 0:
            continue
        used += 1
        prog = builder.cores[worker]
        ids_a = [] if shared_a else list(range(nbuf))
        ids_b = [] if shared_b else list(range(len(ids_a), len(ids_a) + nbuf))
        ids_c = list(range(len(ids_a) + len(ids_b), len(ids_a) + len(ids_b) + nbuf))
        prog += [Mset(i, col_a) for i in ids_a] + [Mset(i, col_b) for i in ids_b] + [Mset(i, col_c) for i in ids_c]
        # the tile each bank slot holds (a tile's index: -1 none), refilled round robin; inline,
        # not a call a tile: a Llama layer loads 120 k tiles at seq 1024
        held_a, held_b = [-1] * len(ids_a), [-1] * len(ids_b)
        next_a = next_b = 0
        append = prog.append
        # one (immutable) MATMUL object per distinct instruction of the op, reused: a Llama
        # layer's 61 k are a few dozen distinct ones (labels are by object: the same op's)
        matmuls: dict[tuple, Matmul] = {}
        acc_slot = 0
        for bi in range(nb):
            bb = bi if nbB > 1 else 0
            for mi in m_tiles:
                for ni in n_tiles:
                    acc_bank = ids_c[acc_slot]
                    acc_slot = (acc_slot + 1) % nbuf
                    if bias_base is not None:
                        append(Mvin(acc_bank, bias_base + ni * tm * tn * 4, lines_c, 0))
                    for ki in range(Kt):
                        if shared_a:
                            a_bank = top - (bi * Mt + mi)
                        else:
                            tile = (bi * Mt + mi) * Kt + ki
                            if tile in held_a:
                                a_bank = ids_a[held_a.index(tile)]
                            else:
                                a_bank, held_a[next_a] = ids_a[next_a], tile
                                next_a = (next_a + 1) % len(ids_a)
                                append(Mvin(a_bank, a_tile(bi, mi, ki), lines_a, 0))
                        if shared_b:
                            b_bank = b_bank0 + (bb * Nt + ni) * Kt + ki
                        else:
                            tile = (bb * Nt + ni) * Kt + ki
                            if tile in held_b:
                                b_bank = ids_b[held_b.index(tile)]
                            else:
                                b_bank, held_b[next_b] = ids_b[next_b], tile
                                next_b = (next_b + 1) % len(ids_b)
                                append(Mvin(b_bank, b_tile(bi, ni, ki), lines_b, 0))
                        key = (a_bank, b_bank, acc_bank, ki > 0 or bias_base is not None)
                        matmul = matmuls.get(key)
                        if matmul is None:
                            matmul = matmuls[key] = Matmul(a_bank, b_bank, acc_bank, tm, tn, tk,
                                                           dataflow=mapping.dataflow, accumulate=key[3])
                        append(matmul)
                    append(Mvout(acc_bank, c_loc.addr + ((bi * Mt + mi) * Nt + ni) * tm * tn * 4, lines_c, 0))
                    if fence:
                        append(Fence())
        prog += [Mset(i, alloc=False) for i in ids_a + ids_b + ids_c]
    builder.sync(True)
    banks = int(check.banks[0, 0])
    return c_loc, OpLowering(op.name, op.kind, "matrix", (tm, tn, tk), nb, banks,
                             banks * chip.addressable_rows * chip.banks.row_bytes, used,
                             shared_bytes=shared_tiles * shared_mem.rows * shared_mem.row_bytes)


def load_shared_b(builder, bank0: int, b_base: int, tiles: int, tn: int, tk: int, computing: int) -> None:
    """A weight's `tiles` B tiles (blocked at `b_base`, tn x tk each) loaded into shared banks
    bank0 + j of every tile of cores with workers that compute (`computing`, a prefix), dealt
    to those workers (`shared_loads`), then the sync of a core op."""
    for worker, mine in enumerate(shared_loads(computing, builder.chip.cores.tile_size, tiles)):
        builder.cores[worker] += [Mvin(bank0 + tile, b_base + tile * tn * tk, tn * tk // 16, 0) for tile in mine]
    builder.sync(False)


def computing_workers(builder, Mt: int, Nt: int) -> int:
    """The workers that get output tiles (`mapping.split`: contiguous blocks of rows or columns)."""
    blocks = Mt if builder.mapping.split == "rows" else Nt
    return -(-blocks // -(-blocks // builder.workers))


def weight_bt(graph: Graph, op: Op) -> np.ndarray:
    """A matrix op's weight as the GEMM's Bt (nbB, N, K) int8: a linear's w[N, K], a
    matmul's b[..., K, N] transposed, a channels-last conv's (*kernel, C, O) as (O, taps x C)."""
    weight = np.asarray(graph.weights[op.inputs[1]]).astype(np.int8, copy=False)  # read only: no copy
    if op.kind in CONV_KINDS:
        return weight.reshape(-1, weight.shape[-1]).T[None]
    nbB = 1 if weight.ndim == 2 else math.prod(graph.tensors[op.outputs[0]].shape[:-2])
    weight = weight.reshape(nbB, *weight.shape[-2:])
    return weight if op.kind == "linear" else np.swapaxes(weight, -1, -2)


def blocked_bt(bt: np.ndarray, Np: int, Kp: int, tn: int, tk: int) -> np.ndarray:
    """A weight's Bt (nbB, N, K) int8, zero-padded to (Np, Kp) and blocked offline into
    (nbB, Nt, Kt, tn, tk) tiles: one contiguous MVIN a tile."""
    return BlockedBt(bt, Np, Kp, tn, tk).array()


class BlockedBt:
    """`blocked_bt` not yet computed: its tiles written where they are placed
    (`Dram.constant` writes them straight into the DRAM image; a Llama projection's are
    58 MB, and a copy of them as an array, then as bytes, then into the image cost a layer
    ~1 s)."""

    def __init__(self, bt: np.ndarray, Np: int, Kp: int, tn: int, tk: int):
        self.bt, self.Np, self.Kp, self.tn, self.tk = bt, Np, Kp, tn, tk
        self.shape = (bt.shape[0], Np // tn, Kp // tk, tn, tk)
        self.dtype = np.dtype(np.int8)
        self.nbytes = math.prod(self.shape)

    def array(self) -> np.ndarray:
        out = np.zeros(self.shape, dtype=np.int8)
        self.write(out)
        return out

    def write(self, out: np.ndarray) -> None:
        """The tiles into `out`, C-contiguous int8 of `shape` or its bytes (its padding zero
        already)."""
        bt, tn, tk = self.bt, self.tn, self.tk
        nbB, Nt, Kt = self.shape[:3]
        _, N, K = bt.shape
        out = out.view(np.int8).reshape(self.shape)
        if (N, K) != (self.Np, self.Kp):  # padded: blocked from a zero-padded copy (small weights)
            full = np.zeros((nbB, self.Np, self.Kp), dtype=np.int8)
            full[:, :N, :K] = bt
            bt = full
        if bt.strides[-2] == 1 and bt.strides[-1] == N:  # Bt a transposed (K, N) weight (`permute` pretransposes)
            import torch  # here only: the analytical model imports dse.units and never lowers

            # a Bt tile is a (tk, tn) block of the weight transposed: torch's blocked transpose
            # of tk rows at a time (whole rows: contiguous reads), 3-4x numpy's strided copy
            with warnings.catch_warnings():  # a read-only weight: torch only reads it
                warnings.simplefilter("ignore", UserWarning)
                for batch in range(nbB):
                    weight = torch.from_numpy(bt[batch].T)  # (K, N), C-contiguous
                    for ki in range(Kt):
                        rows = weight[ki * tk:(ki + 1) * tk].t().contiguous().numpy()  # (N, tk)
                        out[batch, :, ki] = rows.reshape(Nt, tn, tk)
            return
        # a row-major Bt: each tile row is tk contiguous bytes, copied as one item
        tiles = np.ascontiguousarray(bt).reshape(nbB, Nt, tn, Kt, tk).view(f"V{tk}")
        np.copyto(out.view(f"V{tk}"), tiles.transpose(0, 1, 3, 2, 4))


def contiguous(shape) -> tuple[int, ...]:
    """Element strides of a C-contiguous `shape`."""
    out, acc = [], 1
    for extent in reversed(shape):
        out.append(acc)
        acc *= int(extent)
    return tuple(reversed(out))


def charge_gemm(cost, charges: Charges, plan: OpPlan) -> MatmulPlans:
    plans = picked_plans(cost, plan.gemm)
    # the packing copies, closed before the Ball reads them
    charges.syncs += np.where(cost.workers > 1, (plans.core_cycles > 0).astype(np.int64), 0)
    # a shared copy of the weight, loaded before any worker's Ball reads it (by the op itself
    # unless it was loaded before: `MatmulShape.b_preloaded`)
    charges.syncs += np.where((plans.shared_bytes > 0) & (not plan.gemm.b_preloaded), cost.closes_after_core, 0)
    cost.close(charges, True)
    cost.tiles[plan.op.outputs[0]] = (np.maximum(plans.tm, 16), np.maximum(plans.tn, 16))
    return plans


def overlapped_plans(cost, shape: MatmulShape) -> MatmulPlans:
    """The tiles the plan picks, by the overlapped cost whatever the emulator's mode
    (and that cost), once per shape: repeated layers share one evaluation."""
    if shape not in cost.overlapped:
        serial = cost.params.serial
        params = replace(cost.params, serial=np.zeros(cost.n, dtype=bool)) if serial.any() else cost.params
        if cost.search_groups is None:  # the candidates' groups, found once for every shape
            cost.search_groups = candidate_groups(params)
        cost.overlapped[shape] = plan_matmuls(params, shape, cost.search_groups)
    return cost.overlapped[shape]


def picked_plans(cost, shape: MatmulShape) -> MatmulPlans:
    """The picked tiles costed in each candidate's timing mode."""
    if shape not in cost.plans:
        picked = overlapped_plans(cost, shape)
        if cost.params.serial.any():  # those tiles costed in serial timing
            ok = picked.feasible
            col = lambda a: np.where(ok, a, 16)[:, None]  # noqa: E731  (any tile where none fits)
            serial = matmul_cost(cost.params, shape, col(picked.tm), col(picked.tn), col(picked.tk))
            values = dict(picked.values)
            for name in ("cycles", "compute_cycles", "dma_cycles", "core_cycles", "busy_cycles", "preload_cycles"):
                values[name] = np.where(ok, getattr(serial, name)[:, 0], 0)
            picked = MatmulPlans(picked.feasible, picked.reason, values)
        cost.plans[shape] = picked
    return cost.plans[shape]


def cost_grouped(cost, plan: OpPlan) -> OpCost:
    """A grouped conv: per candidate, the Ball path (its copies, the block-diagonal GEMM,
    the unblock after it) where `grouped.on_matrix` takes it, else the conv on the core
    (reading its operands as they are: only their unblock / standardise copies)."""
    on_ball = on_matrix(cost.graph, plan, cost.params, overlapped_plans(cost, plan.gemm))
    ball = cost.op_cost(replace(plan, unit="conv"))
    gemm = plan.gemm  # the Ball path's accumulator, unblocked into the plan's matrix after it
    accumulator = pad(gemm.batch * pad(gemm.M) * pad(gemm.N) * 4, 64)
    ball.workspace_bytes = ball.workspace_bytes + np.where(ball.feasible, accumulator, 0)
    core = cost.op_cost(replace(plan, unit="core", after=(),
                                copies=tuple(copy for copy in plan.copies if copy.kind not in ("pad", "gather"))))
    names = [each.name for each in fields(OpCost)]
    return OpCost(*[np.where(on_ball, getattr(ball, name), getattr(core, name)) for name in names])


def conv_workspace(cost, plan: OpPlan) -> int:
    """DRAM a conv's copies lay out beyond the plan's tensors: the zero-padded image
    (`pad`) and the gathered A (`gather`: M x K int8, padded)."""
    out = 0
    for copy in plan.copies:
        if copy.kind == "pad":
            n, *spatial, C = copy.shape
            padded = tuple(s + lo + hi for s, (lo, hi) in zip(spatial, conv_pad(plan.op)))
            out += pad(math.prod(padded_shape((n, *padded, C))), 64)
        elif copy.kind == "gather":
            out += pad(pad(plan.gemm.M) * pad(plan.gemm.K), 64)
    return out


def gemm_activity(cost, shape: MatmulShape, plans: MatmulPlans):
    """The picked tiles' activity (`matmul_activity`), once per shape."""
    if shape not in cost.activity:
        ok = plans.feasible
        tile = lambda a: np.where(ok, a, 16)  # noqa: E731  (any tile where none is legal)
        cost.activity[shape] = matmul_activity(cost.params, shape, tile(plans.tm), tile(plans.tn), tile(plans.tk),
                                               plans.dma_bytes)
    return cost.activity[shape]


def bound_bytes(cost, plan: OpPlan, plans: MatmulPlans, act) -> np.ndarray:
    """Of the op's workspace, the read-only constants an earlier op laid out already, per
    candidate: a weight's blocked copy read again in the same tiles (tn, tk), a bias
    replicate in the same (tm, tn), keyed as the lowering binds them (`Dram.constant`);
    the frontend gave byte-identical weights one name."""
    op, shape, out = plan.op, plan.gemm, np.zeros(cost.n, dtype=np.int64)
    if shape.b_weight and not shape.b_preloaded and act.weight_blob_bytes:
        seen = seen_before(cost, ("weight", op.inputs[1], op.kind, op.attrs.get("groups", 1)), (plans.tn, plans.tk),
                          plans.feasible)
        out += np.where(seen, act.weight_blob_bytes, 0)
    if shape.bias and len(op.inputs) > 2:
        seen = seen_before(cost, ("bias", op.inputs[2], op.kind), (plans.tm, plans.tn), plans.feasible)
        out += np.where(seen, act.bias_blob_bytes, 0)
    return out


def seen_before(cost, key: tuple, tiles: tuple[np.ndarray, ...], feasible: np.ndarray) -> np.ndarray:
    """Per candidate: an earlier op laid out the constant `key` in these tiles."""
    earlier = cost.constants.setdefault(key, [])
    seen = np.zeros(cost.n, dtype=bool)
    for before, ok in earlier:
        seen |= ok & np.logical_and.reduce([np.asarray(now) == np.asarray(then) for now, then in zip(tiles, before)])
    earlier.append((tuple(np.asarray(tile).copy() for tile in tiles), np.asarray(feasible).copy()))
    return seen


@dataclass
class GemmFigures:
    """A Ball product's figures beside its charges, per candidate: where its tiles fit, with
    what, and what they hold."""

    feasible: np.ndarray
    reason: np.ndarray
    compute: np.ndarray
    banks: np.ndarray
    sram: np.ndarray
    rows_used: np.ndarray
    dma_bytes: np.ndarray
    shared: np.ndarray
    tiles: tuple
    workers_used: np.ndarray
    preload: np.ndarray
    workspace: np.ndarray


def gemm_figures(cost, charges: Charges, plan: OpPlan, plans: MatmulPlans, workers_used) -> GemmFigures:
    """The picked tiles' cycles, transfers and activity added to `charges`, and their figures."""
    op = plan.op
    feasible = plans.feasible.copy()
    # the very words the lowering raises (`Infeasible`), worded once per distinct reason
    worded = {why: f"op {op.name}: {why}" if why else "" for why in set(plans.reason)}
    reason = np.array([worded[why] for why in plans.reason], dtype=object)
    charges.core += np.where(feasible, plans.core_cycles, 0)
    charges.busy += np.where(feasible, plans.busy_cycles, 0)
    charges.ball += np.where(feasible, plans.cycles - plans.core_cycles, 0)
    charges.dma += plans.dma_cycles
    act = gemm_activity(cost, plan.gemm, plans)
    charges.workspace_bytes = charges.workspace_bytes + conv_workspace(cost, plan)
    for name in ("bank_reads", "bank_writes", "shared_reads", "shared_writes"):
        setattr(charges, name, getattr(charges, name) + np.where(feasible, getattr(act, name), 0))
    charges.ball_macs = charges.ball_macs + np.where(feasible, act.macs, 0)
    charges.core_busy = charges.core_busy + np.where(feasible, act.core_cycles, 0)
    return GemmFigures(
        feasible, reason, plans.compute_cycles, plans.banks, plans.sram_bytes, plans.bank_rows, plans.dma_bytes,
        np.where(feasible, plans.shared_bytes, 0), (plans.tm, plans.tn, plans.tk),
        np.where(feasible, plans.workers_used, workers_used),
        np.where(feasible & (plans.shared_bytes > 0), plans.preload_cycles, 0),
        np.where(feasible, act.workspace_bytes - bound_bytes(cost, plan, plans, act), 0))


def _charge(cost, charges: Charges, plan: OpPlan):
    plans = charge_gemm(cost, charges, plan)
    for copy in plan.after:
        cost.copy(charges, copy)
    return "matrix", plans


UNITS = (Unit("matrix", emit_matmul, _charge),
         Unit("conv", emit_conv, _charge),
         Unit("grouped", emit_grouped, cost=cost_grouped))
