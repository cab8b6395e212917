"""The stream units: elementwise ops streamed through a Ball. "scale": quantize (fp32 ->
int8), requantize (int32 / int8 -> int8) and dequantize (int32 / int8 -> fp32) on the
Fp2Int / Int2Fp Ball where the chip has it and one fp32 scale covers runs of whole 16-byte
lines - a per-tensor scale, or one that varies only along the rows - when the plan's
stream-or-core rule takes it (`dse.plan.streams.scale_stream`, `stream_or_core`); else,
and always for a per-channel scale, one core op. "relu": an int8 / int32 ReLU on the ReLU
Ball where the chip has one (toy, pebble), else a core op.

The emitter writes each stream's pieces (`emit_stream`); the charge reads the same pieces'
costs (`dse.analytical.stream_cost.StreamCosts`), per candidate.

As the lowering emits it:

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
"""

from __future__ import annotations

import math

import numpy as np

from emulator import Fence, Fp2Int, Int2Fp, Mset, Mvin, Mvout, Relu

from ..plan.graph_plan import OpPlan
from ..plan.memory import pad
from ..plan.streams import (Stream, blocked_scale_extent, relu_ball, relu_plan_key, relu_stream, scale_core_op,
                            scale_stream, stream_or_core)
from ..workload.graph import Op, scale_array
from .charges import Charges
from .core import charge_core
from .unit import OpLowering, Unit


# The Ball instruction of one piece of a stream, by the stream's Ball: the Balls the plan
# streams through, whose busy cycles the model totals by kind (`dse.analytical.estimate`).
STREAM_BALL_OPS = {
    "relu": lambda s, p: Relu(0, 1, p.in_lines, s.in_bits),
    "fp2int": lambda s, p: Fp2Int(0, 1, p.in_lines, p.scale, s.out_bits),
    "int2fp": lambda s, p: Int2Fp(0, 1, p.in_lines, p.scale, s.in_bits, s.out_bits),
}


def emit_relu(builder, plan: OpPlan) -> OpLowering | None:
    """An int8 / int32 ReLU on the chip's ReLU Ball (`relu_stream`)."""
    op = plan.op
    spec = builder.graph.tensors[op.outputs[0]]
    src = builder.loc(op.inputs[0])
    if not relu_ball(builder.chip.ball("relu") is not None, spec.dtype, src):
        return None
    out = builder.dram.place(plan.writes)
    builder.locs[op.outputs[0]] = out
    return emit_stream_op(builder, op, relu_stream(builder.chip, src, out))


def emit_stream_op(builder, op: Op, plan: Stream) -> OpLowering:
    used = emit_stream(builder, plan)
    builder.sync(True)
    banks = plan.src_col + plan.dst_col
    return OpLowering(op.name, op.kind, plan.kind, None, 1, banks,
                      banks * builder.chip.addressable_rows * builder.chip.banks.row_bytes, used)


def emit_scale(builder, plan: OpPlan) -> OpLowering | None:
    """quantize / requantize / dequantize: ``y = store(fp32(x) * scale)`` (round half to
    even, saturate into int8; fp32 for dequantize) - on the Fp2Int / Int2Fp Ball
    (`dse.plan.streams.scale_stream`) when the chip has it, the semantics match bit for
    bit and the plan's choice (`stream_or_core`) takes it. Else one charged core op
    (`scale_core_op`)."""
    op = plan.op
    src = builder.loc(op.inputs[0])
    shape = tuple(builder.graph.tensors[op.outputs[0]].shape)
    scale = scale_array(op.attrs, shape)
    # row-major: over a blocked accumulator, its (batch, M, N) padded (`OpPlan.writes`)
    out = builder.locs[op.outputs[0]] = builder.dram.place(plan.writes)
    plan = None if builder.elementwise == "core" else scale_stream(builder.chip, op, src, out, scale, shape)
    if plan is not None and not stream_or_core(builder.chip, builder.workers, plan,
                                               scale_core_op(builder.dram, src, out, scale, shape, place=False),
                                               builder.elementwise):
        plan = None
    if plan is None:
        builder.core(scale_core_op(builder.dram, src, out, scale, shape))
        builder.sync(False)
        return OpLowering(op.name, op.kind, "epilogue" if src.blocked is not None else "core")
    return emit_stream_op(builder, op, plan)


def emit_stream(builder, plan: "Stream") -> int:
    """Emit a Ball stream; returns the workers used.

    Pieces are dealt to workers round-robin (worker w takes pieces w, w + workers, ...). Each
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
    for worker in range(builder.workers):
        mine = plan.pieces[worker::builder.workers]
        if not mine:
            continue
        used += 1
        prog = builder.cores[worker]
        prog += [Mset(0, plan.src_col), Mset(1, plan.dst_col)]
        for piece in mine:
            prog.append(Mvin(0, piece.src, piece.in_lines, 0))
            prog.append(STREAM_BALL_OPS[plan.kind](plan, piece))
            prog.append(Mvout(1, piece.dst, piece.out_lines, piece.dst_stride))
            if builder.mapping.policy == "framework":
                prog.append(Fence())
        prog += [Mset(0, alloc=False), Mset(1, alloc=False)]
    return used


def charge_scale(cost, charges: Charges, plan: OpPlan) -> str | np.ndarray:
    """quantize / requantize / dequantize: the plan's Ball stream where the plan takes it
    (`StreamCosts`, per candidate), else the core op."""
    op = plan.op
    shape = tuple(cost.graph.tensors[op.outputs[0]].shape)
    src = plan.reads[0]
    acc = plan.blocked_source
    core = Charges(cost.n)
    tiles = cost.tiles[op.inputs[0]] if acc is not None else None
    if acc is not None:
        cost.core_op_tiled(core, acc.batch, acc.M, acc.N, tiles[0], cost.params.mul_cpe)
        extent = blocked_scale_extent(scale_array(op.attrs, shape), shape, (acc.batch, acc.M, acc.N),
                                      (acc.batch, pad(acc.M), pad(acc.N)))
        core.workspace_bytes += pad(math.prod(extent) * 4, 64)  # the fp32 scale, where it varies or pads
    else:
        scale_t = scale_array(op.attrs, shape)
        if scale_t.ndim == 0 or scale_t.size == 1:
            cost.core_op(core, "scale", None, shape, [src.shape],
                         max(math.prod(shape), math.prod(src.shape)), cost.params.scale_cpe)
        else:
            sshape = tuple(scale_t.shape)
            cost.core_op(core, "mul", None, shape, [src.shape, sshape],
                         max(math.prod(shape), math.prod(src.shape), math.prod(sshape)), cost.params.mul_cpe)
            core.workspace_bytes += pad(scale_t.size * 4, 64)  # the scale constant
    cost.close(core, False)
    on_core = "epilogue" if acc is not None else "core"
    stream = cost.streams.scale_charges(op, src, plan.writes, shape, tiles) if cost.streams is not None else None
    if stream is None:
        charges.add(core)
        return on_core
    on_ball, ball, kinds = stream
    cost.close(ball, True)
    charges.select(on_ball, ball, core)
    return np.where(on_ball, kinds, on_core) if on_ball.any() else on_core


def charge_relu(cost, charges: Charges, plan: OpPlan) -> str | np.ndarray:
    """The ReLU Ball's stream where the candidate's chip has the Ball (`relu_stream`),
    else the core op. Returns the unit (per candidate when they differ)."""
    src, out = plan.reads[0], plan.writes
    # on its Ball wherever the candidate's chip has one: no core alternative to weigh
    stream = cost.streams.stream_charges(plan.op, relu_plan_key, lambda chip: relu_stream(chip, src, out)) \
        if cost.streams is not None else None
    if stream is None:
        charge_core(cost, charges, plan)
        return "core"
    on_ball, ball, _ = stream
    cost.close(ball, True)
    core = Charges(cost.n)
    charge_core(cost, core, plan)
    charges.select(on_ball, ball, core)
    return "relu" if on_ball.all() else np.where(on_ball, "relu", "core")


def _charge_scale(cost, charges: Charges, plan: OpPlan):
    return charge_scale(cost, charges, plan), None


def _charge_relu(cost, charges: Charges, plan: OpPlan):
    return charge_relu(cost, charges, plan), None


UNITS = (Unit("scale", lambda builder, plan, ready: emit_scale(builder, plan), _charge_scale),
         Unit("relu", lambda builder, plan, ready: emit_relu(builder, plan), _charge_relu))
