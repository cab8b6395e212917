"""Which unit runs an op, and how ops are closed: decided here for the lowering and the
analytical model alike.

* an int8 x int8 ``linear`` / ``matmul`` (batched too) goes to the matrix Ball
  (`matrix_product`); so does an int8 channels-last ``conv1d`` / ``conv2d`` as im2col plus
  a GEMM (`matrix_conv`);
* an int8 / int32 ReLU on a padded row-major tensor goes to the ReLU Ball when the chip
  has one, and quantize / requantize / dequantize to the Fp2Int / Int2Fp Ball when one
  scale covers whole lines and the stream is cheaper: each stream's rule beside its pieces
  (`dse.plan.streams`);
* reshape of an unpadded contiguous tensor is a descriptor (`reshape_view`);
* everything else is a core op (split across workers by `dse.plan.split`).
"""

from __future__ import annotations

import math

from ..workload.graph import CHANNELS_LAST, CHANNELS_LAST_WEIGHTS, CONV_KINDS, MATMUL_KINDS, Graph, Op
from .memory import Loc, padded_shape

# the vocabulary's products and convolutions: every one is a GEMM form of the matrix Ball
MATRIX_PRODUCTS = MATMUL_KINDS
MATRIX_CONVS = CONV_KINDS
# The plan's units that run a GEMM on the matrix Ball (`OpPlan.gemm` set): products, convs as
# im2col, grouped convs.
MATRIX_UNITS = ("matrix", "conv", "grouped")
# Of them, those whose op runs on the matrix Ball or as one core op, per candidate
# (`dse.plan.grouped.on_matrix`), with what a reason calls such an op.
BALL_OR_CORE_UNITS = {"grouped": "grouped conv"}
# Of them, those whose A can come from the range before through shared memory
# (`dse.plan.placement.handoffs`): a plain GEMM reads its A as it is; conv reads an im2col of
# it and grouped a group's slice, which their copies make.
HANDOFF_UNITS = ("matrix",)


class Infeasible(Exception):
    """The candidate cannot run this graph; the message names the constraint and numbers.
    The lowering raises it; the analytical model reports the same words as the reason."""


def too_many_workers(workers: int, chip_name: str, cores: int) -> str:
    """The reason a mapping with more workers than the chip's cores is refused."""
    return f"{workers} workers but chip {chip_name} has {cores} cores"


def matrix_product(graph: Graph, op: Op) -> bool:
    """An int8 x int8 -> int32 product the matrix Ball runs: batch axes that match, a 2-D
    weight for ``linear``, no alpha / beta scaling, a 1-D bias that is a weight."""
    if op.kind not in MATRIX_PRODUCTS:
        return False
    a, b = (graph.tensors[n] for n in op.inputs[:2])
    if a.dtype != "int8" or b.dtype != "int8" or len(a.shape) < 2 or len(b.shape) < 2:
        return False
    out = graph.tensors[op.outputs[0]]
    nb = math.prod(out.shape[:-2])
    if math.prod(a.shape[:-2]) != nb:
        return False
    if len(b.shape) > 2 and math.prod(b.shape[:-2]) != nb:
        return False
    if op.kind == "linear" and len(b.shape) != 2:
        return False
    if op.attrs.get("alpha", 1) != 1 or op.attrs.get("beta", 1) != 1:
        return False
    if op.attrs.get("has_bias") and (len(op.inputs) < 3 or op.inputs[2] not in graph.weights
                                     or len(graph.tensors[op.inputs[2]].shape) != 1):
        return False
    return True


def _channels_last_int8_conv(graph: Graph, op: Op) -> bool:
    if op.kind not in MATRIX_CONVS:
        return False
    x, w = (graph.tensors[n] for n in op.inputs[:2])
    return (x.dtype == "int8" and w.dtype == "int8" and op.inputs[1] in graph.weights
            and op.attrs.get("layout") in CHANNELS_LAST
            and op.attrs.get("weight_layout") in CHANNELS_LAST_WEIGHTS
            and (not op.attrs.get("has_bias") or (len(op.inputs) > 2 and op.inputs[2] in graph.weights)))


def matrix_conv(graph: Graph, op: Op) -> bool:
    """An int8 channels-last convolution (NHWC / NLC, HWIO / WIO weights, one group) the
    matrix Ball runs as im2col on the core and a GEMM."""
    return _channels_last_int8_conv(graph, op) and op.attrs.get("groups", 1) == 1


def grouped_conv(graph: Graph, op: Op) -> bool:
    """An int8 channels-last convolution of several groups (depthwise included): the
    block-diagonal GEMM on the matrix Ball or a core op, per candidate (`dse.plan.grouped`)."""
    return (_channels_last_int8_conv(graph, op) and op.attrs.get("groups", 1) > 1
            and graph.tensors[op.outputs[0]].dtype == "int32")


def conv_pad(op: Op) -> list[tuple[int, int]]:
    """(before, after) zero padding per spatial dim: symmetric, or a span's own edges."""
    return [tuple(v) for v in op.attrs.get("pad_lr", [(p, p) for p in op.attrs["padding"]])]


def reshape_view(src: Loc, shape, dtype: str) -> Loc | None:
    """A reshape of an unpadded contiguous buffer is a descriptor over the same bytes; None
    when the data must move (a core copy)."""
    shape = tuple(shape)
    if src.blocked is None and src.standard and src.buffer_shape == src.shape and padded_shape(shape) == shape:
        return Loc(src.addr, shape, dtype, shape)
    # Regrouping the leading dims of a padded row-major buffer (its matrix dims kept, unit
    # dims dropped or added) moves nothing either: multi-query attention's K and V.
    if src.blocked is None and src.standard and len(shape) >= 2 and len(src.shape) >= 2 \
            and shape[-2:] == src.shape[-2:] and math.prod(shape[:-2]) == math.prod(src.shape[:-2]):
        return Loc(src.addr, shape, dtype, padded_shape(shape))
    return None


def sync_after(workers: int, after_ball: bool) -> str | None:
    """What closes an op's part: with several workers a BARRIER on every worker after every
    op; with one worker a FENCE after Ball work only (the core then reads its MVOUTs)."""
    if workers > 1:
        return "barrier"
    return "fence" if after_ball else None


__all__ = ["BALL_OR_CORE_UNITS", "HANDOFF_UNITS", "Infeasible", "MATRIX_CONVS", "MATRIX_PRODUCTS", "MATRIX_UNITS", "conv_pad",
           "grouped_conv", "matrix_conv", "matrix_product", "reshape_view", "sync_after", "too_many_workers"]
