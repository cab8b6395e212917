"""How a core op is split across workers: decided here for the lowering (which emits the
parts) and the analytical model (which charges the busiest part)."""

from __future__ import annotations

import math

from emulator import CoreOp, DramTensor

from ..cost.core import GRAPH_OP
from .memory import contiguous_strides, itemsize

# Graph ops whose rows (all axes before the normalised ones) are independent: a core op of
# these kinds is split across workers.
# Transcendental kinds (exp, silu, gelu, ...) are not split: torch's vectorised kernels may
# round a slice's tail differently from the whole tensor, and the contract is bit-identity
# with the unsplit reference.
SPLITTABLE = ("add", "sub", "mul", "div", "relu", "neg", "abs", "softmax", "layer_norm", "quantize", "requantize",
              "dequantize")
# Layout conversions: a permute's output rows are independent copies of source elements,
# split by the output's first axis of at least 2 (the source cut along the axis it comes
# from). Copies are exact, so the parts give the unsplit bits.
PERMUTES = ("permute",)
# Core-op kinds (other than whole graph ops) that are elementwise or copies.
ROW_INDEPENDENT_KINDS = ("copy", "mul", "scale", "add", "sub", "relu", "cast")


def split_plan(kind: str, op, dst_shape, src_shapes) -> tuple[int, list[int | None]] | None:
    """The destination axis cut into ``ceil(n / W)`` slices and, per source, the axis cut
    with it (None: the source is read whole, it broadcasts); None when the op runs whole
    on worker 0. Row-independent ops only: elementwise kinds and copies, and graph ops in
    `SPLITTABLE` along their rows (softmax over its last axis, layer norm over its
    normalised axes), and permutes by output rows (the source cut along the axis that
    output axis reads)."""
    if kind == GRAPH_OP and op.kind in PERMUTES and not op.counts.macs:
        axis = next((a for a in range(len(dst_shape)) if dst_shape[a] >= 2), None)
        if axis is None or len(src_shapes) != 1:
            return None
        return axis, [op.attrs["dims"][axis]]
    if kind == GRAPH_OP:
        if op.kind not in SPLITTABLE or op.counts.macs:
            return None
        if op.kind == "softmax":
            keep_from = len(dst_shape) - 1 if op.attrs.get("dim", -1) in (-1, len(dst_shape) - 1) else -1
        elif op.kind == "layer_norm":
            keep_from = len(dst_shape) - len(op.attrs.get("normalized_shape", [1]))
        else:
            keep_from = len(dst_shape)
    elif kind in ROW_INDEPENDENT_KINDS:
        keep_from = len(dst_shape)
    else:
        return None
    if keep_from <= 0:
        return None
    axis = next((a for a in range(keep_from) if dst_shape[a] >= 2), None)
    if axis is None:
        return None
    n = dst_shape[axis]
    plans: list[int | None] = []
    for shape in src_shapes:
        sa = axis - (len(dst_shape) - len(shape))
        if kind == "copy":
            if tuple(shape) != tuple(dst_shape):
                return None
            sa = axis
        if sa < 0 or shape[sa] == 1:
            plans.append(None)
        elif shape[sa] == n:
            plans.append(sa)
        else:
            return None
    return axis, plans


def busiest_elements(kind: str, op, dst_shape, src_shapes, elements: int, workers: int) -> int:
    """Elements the busiest worker runs of a core op (the whole op when it is not split):
    the first slice of `split_plan`."""
    if workers <= 1:
        return elements
    plan = split_plan(kind, op, dst_shape, src_shapes)
    if plan is None:
        return elements
    axis, cuts = plan
    per = -(-dst_shape[axis] // workers)
    part_dst = list(dst_shape)
    part_dst[axis] = per
    sizes = [math.prod(part_dst)]
    for shape, cut in zip(src_shapes, cuts):
        part = list(shape)
        if cut is not None:
            part[cut] = per
        sizes.append(math.prod(part))
    return max(sizes)


def _cut(t: DramTensor, axis: int, lo: int, hi: int) -> DramTensor:
    strides = t.strides
    if strides is None:
        strides = contiguous_strides(t.shape, itemsize({"fp32": "float32"}.get(t.dtype, t.dtype)))
    shape = list(t.shape)
    shape[axis] = hi - lo
    return DramTensor(t.addr + lo * strides[axis], tuple(shape), t.dtype, tuple(strides))


def split_core_op(ins: CoreOp, workers: int) -> list[CoreOp | None] | None:
    """The parts of a core op per worker (None for a worker with nothing to do), or None
    when it runs whole on worker 0."""
    if workers <= 1 or ins.dst is None:
        return None
    plan = split_plan(ins.kind, ins.params.get("op"), ins.dst.shape, [src.shape for src in ins.srcs])
    if plan is None:
        return None
    axis, cuts = plan
    n = ins.dst.shape[axis]
    per = -(-n // workers)
    parts: list[CoreOp | None] = []
    for w in range(workers):
        lo, hi = w * per, min(n, (w + 1) * per)
        if lo >= hi:
            parts.append(None)
            continue
        srcs = tuple(src if a is None else _cut(src, a, lo, hi) for src, a in zip(ins.srcs, cuts))
        dst = _cut(ins.dst, axis, lo, hi)
        elements = None if ins.elements is None else max([dst.size] + [x.size for x in srcs])
        parts.append(CoreOp(ins.kind, dst, srcs, ins.params, elements))
    return parts


def shared_loads(workers: int, tile_size: int, tiles: int) -> list[list[int]]:
    """Which of a shared weight's `tiles` B tiles each of the first `workers` workers (those
    with output tiles to compute) loads (``mapping.weights = "shared"``): every tile of
    cores among them loads its own copy into its shared memory, the tiles dealt round-robin
    to its workers (`dse.cost.matmul` charges the busiest)."""
    out = []
    for w in range(workers):
        first = w - w % tile_size
        members = min(workers, first + tile_size) - first
        out.append(list(range(w - first, tiles, members)))
    return out


__all__ = ["PERMUTES", "ROW_INDEPENDENT_KINDS", "SPLITTABLE", "busiest_elements", "shared_loads", "split_core_op",
           "split_plan"]
