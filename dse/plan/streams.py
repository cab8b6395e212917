"""Elementwise scale ops (quantize / requantize / dequantize) on the Fp2Int / Int2Fp Balls:
whether a Ball can do one bit for bit, the stream of pieces it runs (`scale_stream`), the
core-op form otherwise (`scale_core_op`), and which of the two a candidate takes
(`stream_or_core`). A ReLU on the ReLU Ball: its rule (`relu_ball`) and its stream
(`relu_stream`). Each stream's chip figures: `PLAN_KEYS`. Decided here for the lowering
and the analytical model alike; the stream's cost is `dse.cost.stream_cycles`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from emulator import CoreOp, DramTensor

from ..cost.core import core_cycles
from ..cost.stream import stream_cycles
from ..workload.graph import Op
from .memory import Dram, Loc, itemsize
from .split import split_core_op

SCALE_KINDS = ("requantize", "dequantize", "quantize")
# The op kinds the plan may stream through a Ball (unit "scale", "relu"): each reads and writes
# a padded row-major buffer only (`dse.plan.layout`).
STREAMED_KINDS = SCALE_KINDS + ("relu",)

# Where scale ops run when a Ball can do them: "auto" (the cheaper side), always the Ball,
# always the core.
ELEMENTWISE = ("auto", "ball", "core")


@dataclass(frozen=True)
class StreamPiece:
    """One MVIN -> Ball -> MVOUT round: `in_lines` 16-byte lines from DRAM `src` (contiguous),
    `out_lines` to DRAM `dst` (contiguous, or one destination-bank row every `dst_stride`
    bytes), one fp32 `scale`."""

    src: int
    in_lines: int
    dst: int
    out_lines: int
    dst_stride: int
    scale: float


@dataclass(frozen=True)
class Stream:
    """An elementwise op streamed through two private banks on a Ball ("fp2int", "int2fp",
    "relu")."""

    kind: str
    in_bits: int
    out_bits: int
    src_col: int
    dst_col: int
    pieces: list[StreamPiece]


def scale_stream(chip, op: Op, src: Loc, out: Loc, scale: np.ndarray, shape) -> "Stream | None":
    """The Ball form, or None (with the reason in the comments) when it does not apply.

    Which Ball: quantize fp32 -> int8 is ``FP2INT(out_bits 8)``; requantize int32 / int8 ->
    int8 is ``INT2FP(in_bits 32 / 8, out_bits 8)``; dequantize int32 / int8 -> fp32 is
    ``INT2FP(in_bits 32 / 8, out_bits 32)``. Both compute ``fp32(x) * scale`` with one fp32
    product (round to nearest even), then round half to even and saturate - exactly the
    graph's ``clamp(round(x.float() * scale))`` and the core op's store rule.

    The scale is one fp32 register per instruction, so an instruction covers a run of
    elements with one scale. Per tensor: any run. A scale that varies only along the
    rows (batch axes, or the row axis per row / per 16-row strip): one run per block of
    equal-scale rows. A scale that varies along the last axis (per channel / per column,
    what the frontend gives every requantize / dequantize of a weight product) stays on
    the core: a 16-byte line holds 4 int32 (16 int8) consecutive columns, every DMA beat
    and every Ball operand is a stream of whole lines from line 0, so no run of lines
    has a single scale.

    Layout: a padded row-major source streams as a flat buffer (the zero padding maps to
    zero: 0 * scale rounds to 0), runs cut at equal-scale row blocks and at the bank's
    addressable rows. A blocked accumulator (`Blocked`) keeps its bias-filled padding
    rows out of the stream (only rows < M are moved; the output's padding stays zero):
    with one column tile (``Nt == 1``) the blocked buffer is the row-major matrix, so
    each batch entry's M rows are one contiguous run; with ``Nt > 1`` each tile's rows
    are a run whose result is scattered into the row-major output by a strided MVOUT
    (a destination bank of ``tn * out bytes / 16`` columns holds one tile row a bank
    row, stride = the output row). Output: the same padded row-major layout as the core
    op writes, so every consumer reads the same bytes.
    """
    kind_in, kind_out = src.dtype, out.dtype
    if op.kind == "quantize":
        if kind_in != "float32" or kind_out != "int8":
            return None
        ball, in_bytes, out_bytes = "fp2int", 4, 1
    elif op.kind == "requantize":
        if kind_in not in ("int32", "int8") or kind_out != "int8":
            return None
        ball, in_bytes, out_bytes = "int2fp", itemsize(kind_in), 1
    else:
        if kind_in not in ("int32", "int8") or kind_out != "float32":
            return None
        ball, in_bytes, out_bytes = "int2fp", itemsize(kind_in), 4
    if chip.ball(ball) is None or len(shape) == 0:
        return None
    # checked on the scale itself, not broadcast to the tensor (a Llama layer's are 58 MB):
    # every value of it appears in the broadcast one unless that is empty
    scale32 = np.asarray(scale).astype(np.float32)
    full = np.broadcast_to(scale32, shape)
    if full.size and scale32.size < full.size:
        full = scale32.reshape((1,) * (len(shape) - scale32.ndim) + scale32.shape)
    if not np.all(np.isfinite(full)) or not np.all(full > 0):
        return None  # a negative scale would write -0.0 into zero fp32 padding; NaN/inf: keep the core's path
    if not np.array_equal(full.view(np.uint32), np.broadcast_to(full[..., :1], full.shape).view(np.uint32)):
        return None  # the scale varies along the last axis (per channel): see the docstring
    rows_scale = np.broadcast_to(scale32, shape)[..., 0]
    row_bytes = chip.banks.row_bytes
    lim = chip.addressable_rows
    runs: list[tuple] = []  # (src, rows, src row bytes, dst row bytes, dst, dst row stride (0: contiguous), scale)
    if src.blocked is None:
        if not src.standard:
            return None
        bshape = src.buffer_shape
        Np = bshape[-1]
        lead = bshape[:-1]
        buffer_rows = math.prod(lead)
        # per buffer row: its scale, or NaN for a padding row (zero data: any scale)
        row_scales = np.full(buffer_rows, np.nan, dtype=np.float32)
        flat = np.asarray(rows_scale, dtype=np.float32).reshape(-1)
        if len(shape) >= 2:
            M, Mp = shape[-2], bshape[-2]
            logical_scales = flat.reshape(-1, M)
            row_scales[:logical_scales.shape[0] * Mp].reshape(-1, Mp)[:, :M] = logical_scales
        else:
            row_scales[0] = flat[0]
        row_in, row_out = Np * in_bytes, Np * out_bytes
        _runs(runs, src.addr, out.addr, _scale_runs(row_scales), row_in, row_out, 0)
        dst_col = 1
    else:
        acc = src.blocked
        Mp, Np = acc.Mt * acc.tm, acc.Nt * acc.tn
        logical_scales = np.asarray(rows_scale, dtype=np.float32).reshape(acc.batch, acc.M)
        if acc.Nt == 1:
            for bi in range(acc.batch):
                _runs(runs, src.addr + bi * Mp * Np * 4, out.addr + bi * Mp * Np * out_bytes,
                      _scale_runs(logical_scales[bi]), Np * 4, Np * out_bytes, 0)
            dst_col = 1
        else:
            dst_col = acc.tn * out_bytes // row_bytes
            stride = Np * out_bytes
            if dst_col < 1 or dst_col > chip.banks.max_col or dst_col + 1 > chip.banks.count \
                    or stride > chip.isa.max_value("stride"):
                return None
            for bi in range(acc.batch):
                for mi in range(acc.Mt):
                    row_start, row_end = mi * acc.tm, min(acc.M, (mi + 1) * acc.tm)
                    groups = _scale_runs(logical_scales[bi, row_start:row_end])  # the same rows for every column tile
                    for ni in range(acc.Nt):
                        tile = src.addr + ((bi * acc.Mt + mi) * acc.Nt + ni) * acc.tm * acc.tn * 4
                        dst = out.addr + ((bi * Mp + row_start) * Np + ni * acc.tn) * out_bytes
                        _runs(runs, tile, dst, groups, acc.tn * 4, acc.tn * out_bytes, stride)
    pieces = []
    for s_addr, nrows, row_in, row_out, d_addr, d_stride, run_scale in runs:
        if d_stride == 0:  # contiguous in and out: cut anywhere on a 16-element boundary
            elems, chunk = nrows * row_in // in_bytes, (lim * row_bytes // max(in_bytes, out_bytes)) // 16 * 16
            for first in range(0, elems, chunk):
                count = min(chunk, elems - first)
                pieces.append(StreamPiece(s_addr + first * in_bytes, count * in_bytes // row_bytes,
                                          d_addr + first * out_bytes, count * out_bytes // row_bytes, 0, run_scale))
        else:  # one tile row a destination bank row: cut at rows
            per = min(lim, lim * row_bytes // row_in)
            if per < 1:
                return None
            for first_row in range(0, nrows, per):
                rows = min(per, nrows - first_row)
                pieces.append(StreamPiece(s_addr + first_row * row_in, rows * row_in // row_bytes,
                                          d_addr + first_row * d_stride, rows * row_out // row_bytes, d_stride,
                                          run_scale))
    if not pieces:
        return None
    return Stream(ball, 8 * in_bytes, 8 * out_bytes, 1, dst_col, pieces)


def _scale_runs(row_scales: np.ndarray) -> list[tuple[int, int, float]]:
    """The maximal runs ``(first row, end row, scale)`` of consecutive rows with one scale,
    of float32 row scales `row_scales` (NaN: a zero padding row, which joins any run; a run never
    starts or ends with one, and padding alone makes no run). With numpy, not row by row:
    at seq 2048 the Llama layer's scores have 65,536 rows."""
    rows = np.flatnonzero(~np.isnan(row_scales))
    if not len(rows):
        return []
    scales = row_scales[rows]
    first = np.flatnonzero(np.concatenate(([True], scales[1:] != scales[:-1])))
    last = np.concatenate((first[1:], [len(rows)])) - 1
    return list(zip(rows[first].tolist(), (rows[last] + 1).tolist(), scales[first].astype(np.float64).tolist()))


def _runs(runs: list, src: int, dst: int, groups: list, row_in: int, row_out: int, d_stride: int) -> None:
    """Append the runs of `groups` (`_scale_runs`) as (src, rows, src row bytes, dst row
    bytes, dst, dst row stride, scale)."""
    step = d_stride or row_out
    for first, end, scale in groups:
        runs.append((src + first * row_in, end - first, row_in, row_out, dst + first * step, d_stride, scale))


def _scale_groups(shape: tuple[int, ...], logical: tuple[int, int, int]) -> list[list[int]] | None:
    """The axes of `shape` that make each of an accumulator's (batch, rows, columns)
    `logical` (the columns the last axis, the rows the axes before it whose product they
    are, the batch the rest); None where `shape` does not split so."""
    if not shape or shape[-1] != logical[2]:
        return None
    rows, size = [], 1
    for axis in range(len(shape) - 2, -1, -1):
        if size == logical[1]:
            break
        rows.insert(0, axis)
        size *= shape[axis]
    batch = list(range(0, rows[0] if rows else len(shape) - 1))
    if size != logical[1] or math.prod(shape[axis] for axis in batch) != logical[0]:
        return None
    return [batch, rows, [len(shape) - 1]]


def blocked_scale_extent(scale: np.ndarray, shape, logical: tuple[int, int, int],
                         padded: tuple[int, int, int]) -> tuple[int, int, int]:
    """The (batch, rows, columns) of a blocked accumulator's scale as DRAM holds it, for
    the accumulator's `logical` and `padded` (batch, M, N): an axis whole where the scale
    varies along it or the accumulator has padding there (a zero scale multiplies the
    padding), else 1 (the core op's view reads it with stride 0). So each product still
    meets the element a whole padded tensor would hold, while a per-tensor scale over a
    Llama layer's [8, 8192, 2048] scores is 4 bytes, not 512 MB of DRAM image (pages the
    lowering wrote and the run read)."""
    return _scale_layout(scale, shape, logical, padded)[0]


def _scale_layout(scale, shape, logical: tuple[int, int, int], padded: tuple[int, int, int]
                  ) -> tuple[tuple[int, int, int], list[list[int]] | None]:
    """`blocked_scale_extent`, and `_scale_groups` of `shape` (None: every axis kept whole)."""
    shape, scale = tuple(int(n) for n in shape), np.asarray(scale)
    groups = _scale_groups(shape, logical) if scale.ndim <= len(shape) else None
    if groups is None:
        return tuple(padded), None
    lead = (1,) * (len(shape) - scale.ndim) + scale.shape
    return tuple(whole if whole != used or any(lead[axis] != 1 for axis in axes) else 1
                 for whole, used, axes in zip(padded, logical, groups)), groups


def blocked_scale(scale: np.ndarray, shape, logical: tuple[int, int, int],
                  padded: tuple[int, int, int]) -> np.ndarray:
    """A blocked accumulator's fp32 scale as DRAM holds it (`blocked_scale_extent`), zero
    over the padding."""
    shape = tuple(int(n) for n in shape)
    extent, groups = _scale_layout(scale, shape, logical, padded)
    if groups is None:  # every axis whole
        narrow, cut = shape, logical
    else:  # the scale along the axes kept whole, 1 along the others
        whole = {axis for kept_as, axes in zip(extent, groups) if kept_as > 1 for axis in axes}
        narrow = tuple(size if axis in whole else 1 for axis, size in enumerate(shape))
        cut = tuple(size if kept_as > 1 else 1 for size, kept_as in zip(logical, extent))
    kept = np.zeros(extent, dtype=np.float32)
    kept[:cut[0], :cut[1], :cut[2]] = np.broadcast_to(np.asarray(scale, dtype=np.float32), narrow).reshape(cut)
    return kept


def scale_core_op(dram: Dram, src: Loc, out: Loc, scale: np.ndarray, shape, place: bool = True) -> CoreOp:
    """The core-op form: one op (split across workers). A blocked accumulator is read
    tile by tile directly (a ``mul`` over the padded tile grid by `blocked_scale`, the
    padding multiplied by a zero scale); a per-tensor scale on a row-major tensor is a
    ``scale`` op, any other a ``mul`` by the scale as broadcast. Charged ``elements x
    op_cycles[kind]`` (`dse.cost.core_cycles`). With ``place=False`` the scale constant is not
    stored (the op is only costed)."""
    if src.blocked is not None:
        acc = src.blocked
        logical, padded = (acc.batch, acc.M, acc.N), (acc.batch, acc.Mt * acc.tm, acc.Nt * acc.tn)
        kept = blocked_scale(scale, shape, logical, padded) if place else None
        batch, rows, cols = kept.shape if kept is not None else blocked_scale_extent(scale, shape, logical, padded)
        saddr = dram.blob(kept) if kept is not None else 0
        word = 4  # fp32; stride 0 along an axis the scale is not kept over
        strides = (rows * cols * word if batch > 1 else 0, acc.tm * cols * word if rows > 1 else 0,
                   cols * word if rows > 1 else 0, acc.tn * word if cols > 1 else 0, word if cols > 1 else 0)
        return CoreOp("mul", out.padded_grid_view(acc.tm, acc.tn),
                      (src.padded_view(), DramTensor(saddr, (acc.batch, acc.Mt, acc.tm, acc.Nt, acc.tn), "fp32",
                                                     strides)))
    if scale.ndim == 0 or scale.size == 1:
        return CoreOp("scale", out.view(), (src.view(),), {"scale": float(scale.reshape(-1)[0])})
    saddr = dram.blob(np.ascontiguousarray(scale)) if place else 0
    return CoreOp("mul", out.view(), (src.view(), DramTensor(saddr, scale.shape, "fp32")))


def relu_ball(has_relu_ball: bool, dtype: str, src: Loc | None) -> bool:
    """A ReLU runs on the ReLU Ball: the chip has one, the data is int8 / int32 and its
    source a padded row-major buffer (the padding stays zero through it)."""
    return has_relu_ball and dtype in ("int8", "int32") and src is not None and src.blocked is None and src.standard


def relu_chunks(lines: int, rows: int) -> list[tuple[int, int]]:
    """The ReLU Ball's chunks of a buffer of `lines` 16-byte lines: a bank's addressable
    `rows` each (the last the rest), dealt to workers round-robin."""
    return [(lo, min(lines, lo + rows)) for lo in range(0, lines, rows)]


def relu_stream(chip, src: Loc, out: Loc) -> "Stream | None":
    """The ReLU Ball's stream, or None when the chip has no ReLU Ball: the whole padded
    buffer (its padding stays zero) in chunks of a bank's addressable rows (`relu_chunks`),
    each MVIN, RELU, MVOUT through two one-bank buffers."""
    if chip.ball("relu") is None:
        return None
    bits = 8 if src.dtype == "int8" else 32
    pieces = [StreamPiece(src.addr + lo * 16, hi - lo, out.addr + lo * 16, hi - lo, 0, 1.0)
              for lo, hi in relu_chunks(src.nbytes // 16, chip.addressable_rows)]
    return Stream("relu", bits, bits, 1, 1, pieces)


def relu_plan_key(chip) -> tuple:
    """The chip figures `relu_stream` reads, with the ReLU Ball's latency; () without one."""
    ball = chip.ball("relu")
    return () if ball is None else (tuple(sorted(ball.latency.items())), chip.addressable_rows)


def stream_plan_key(chip) -> tuple:
    """The chip figures `scale_stream` reads (chips equal in these get the same stream), with
    the stream Balls' latency formulas; () when the chip has no stream Ball (always the core
    op). The bank count matters only against 1 + a destination bank's col (at most max_col)."""
    banks = chip.banks
    balls = tuple((ball.kind, tuple(sorted(ball.latency.items()))) for ball in chip.balls
                  if ball.kind in ("fp2int", "int2fp"))
    if not balls:
        return ()
    return (balls, chip.addressable_rows, banks.row_bytes, min(banks.count, banks.max_col + 1), banks.max_col,
            chip.isa.max_value("stride"))


# The chip figures each stream's plan reads (`stream_plan_key`, `relu_plan_key`): the model
# groups candidates by them (`dse.analytical.stream_cost`).
PLAN_KEYS = (stream_plan_key, relu_plan_key)


def busiest_core_part(core_op: CoreOp, workers: int) -> CoreOp:
    """The largest part of a core op as `split_core_op` cuts it (the whole op when it is not
    split): the core side of the stream-or-core choice."""
    parts = [p for p in (split_core_op(core_op, workers) or [core_op]) if p is not None]
    return max(parts, key=lambda p: p.element_count())


def takes_stream(stream_cycles, core_cycles, elementwise: str = "auto"):
    """The rule: under ``"auto"`` the stream when its cycles on the slowest worker are fewer
    than the core op's busiest part; ``"ball"`` always; ``"core"`` never. Arrays broadcast
    (one entry a candidate)."""
    if elementwise == "ball":
        return np.ones(np.shape(stream_cycles), dtype=bool)
    if elementwise == "core":
        return np.zeros(np.shape(stream_cycles), dtype=bool)
    return np.asarray(stream_cycles) < np.asarray(core_cycles)


def stream_or_core(chip, workers: int, stream: "Stream | None", core_op: CoreOp, elementwise: str = "auto") -> bool:
    """True when the op runs as the Ball stream (`takes_stream` for one chip)."""
    if stream is None:
        return False
    return bool(takes_stream(stream_cycles(chip, stream, workers), core_cycles(chip, busiest_core_part(core_op, workers)),
                             elementwise))


__all__ = ["ELEMENTWISE", "PLAN_KEYS", "SCALE_KINDS", "STREAMED_KINDS", "Stream", "StreamPiece", "busiest_core_part",
           "relu_ball", "relu_chunks", "relu_plan_key", "relu_stream", "scale_core_op", "scale_stream", "stream_or_core",
           "stream_plan_key", "takes_stream"]
