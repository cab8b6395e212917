"""Activation layout as a mapping choice (``mapping.channels_last``): which layout
conversions (``permute`` ops on activations) the plan turns into views, decided once per
graph for the lowering and the analytical model alike.

The frontend's permute step leaves one permute where a channels-last region is entered and
one where it is left (`dse.frontend.permute`); with ``channels_last = false`` (the default)
each is a core copy (`region_edge`: NCHW <-> NHWC, NCL <-> NLC). With ``true`` the tensors
at a region's edge are *stored* channels-last (as torch's ``channels_last`` memory format:
the logical shape is unchanged, the bytes are in NHWC order), so a conversion is a strided
view of the same bytes and moves nothing:

* a graph input read by a permute is placed in DRAM in that permute's order (the host, or
  the previous layer, hands it over channels-last), and a core op read by a permute writes
  its result in that order; the permute's result is that padded row-major buffer and the
  tensor itself a strided view of it (`stored_orders`);
* a permute whose every reader reads any strides (a convolution's pad / im2col gather copy,
  a core op, a graph output) is a view of its source (`absorbs_permute`).

A permute that feeds the matrix Ball (which needs a padded row-major operand), a Ball
stream or a reshape descriptor stays a copy: its layout choice would only move the copy.
Weights never transpose at run time in either case: the frontend and the lowering
permute and block them offline.
"""

from __future__ import annotations

from ..workload.graph import Graph, Op
from .memory import Loc, contiguous_strides
from .streams import STREAMED_KINDS
from .units import MATRIX_PRODUCTS, grouped_conv, matrix_conv

CHANNELS_LAST = (None, True)  # mapping.channels_last: None (false, the default) or True
# The conversions at a channels-last region's edge, by rank: the frontend's CF_TO_CL and
# CL_TO_CF (`dse.frontend.permute`, not imported: it loads torch). Other activation permutes
# (an attention's head split, K transposed) are not a channels-last choice and stay copies.
REGION_EDGES = {3: ((0, 2, 1),), 4: ((0, 2, 3, 1), (0, 3, 1, 2)), 5: ((0, 2, 3, 4, 1), (0, 4, 1, 2, 3))}


def reads_any_layout(graph: Graph, reader: Op, name: str) -> bool:
    """`reader` reads `name` through a strided view as well as a padded row-major buffer:
    a convolution's activation (its first copy gathers by strides) or a core op. Not the
    matrix Ball's operands, a Ball stream's source (scale, ReLU), or a reshape (a descriptor
    of a row-major buffer only)."""
    if matrix_conv(graph, reader) or grouped_conv(graph, reader):
        return name == reader.inputs[0] and name not in reader.inputs[1:]
    return reader.kind not in MATRIX_PRODUCTS + STREAMED_KINDS + ("reshape",)


def region_edge(graph: Graph, op: Op) -> bool:
    """`op` converts an activation between channels-first and channels-last."""
    if op.kind != "permute" or len(op.inputs) != 1 or op.inputs[0] in graph.weights:
        return False
    dims = tuple(op.attrs["dims"])
    return dims in REGION_EDGES.get(len(dims), ())


def writes_any_layout(graph: Graph, op: Op) -> bool:
    """`op` is a core op of the graph (one `CoreOp` over the views of its operands), so it
    writes its result through a strided view as well: not a Ball op, a Ball stream, a
    convolution, a ReLU (the ReLU Ball or a fused copy) or a view."""
    return not (matrix_conv(graph, op) or grouped_conv(graph, op)) and op.kind not in (
        MATRIX_PRODUCTS + STREAMED_KINDS + ("reshape", "permute"))


def stored_orders(graph: Graph, channels_last: bool | None) -> dict[str, tuple[int, ...]]:
    """Tensors stored in a permuted order: a graph input, or the result of a core op
    (`writes_any_layout`), read by a permute -> that permute's dims, when every other reader
    of the tensor reads any layout. The permute is then a view that is a padded row-major
    buffer."""
    if not channels_last:
        return {}
    consumers = graph.consumers()
    producers = {op.outputs[0]: op for op in graph.ops}
    orders: dict[str, tuple[int, ...]] = {}
    for name in list(graph.inputs) + list(producers):
        op = producers.get(name)
        if op is not None and (len(op.outputs) != 1 or not writes_any_layout(graph, op)):
            continue
        readers = consumers.get(name, [])
        first = next((r for r in readers if region_edge(graph, r) and r.inputs[0] == name), None)
        if first is None:
            continue
        if all(r is first or reads_any_layout(graph, r, name) for r in readers):
            orders[name] = tuple(first.attrs["dims"])
    return orders


def absorbs_permute(graph: Graph, op: Op, source: Loc, channels_last: bool | None, consumers,
                    orders: dict[str, tuple[int, ...]]) -> bool:
    """The permute `op` is a view of its `source`'s bytes: channels-last is chosen, the
    source is not a blocked accumulator, and the source is a graph input stored in this
    permute's order (`stored_orders`: the view is then a padded row-major buffer) or every
    reader of the result reads any layout."""
    if not channels_last or not region_edge(graph, op) or source.blocked is not None:
        return False
    if orders.get(op.inputs[0]) == tuple(op.attrs["dims"]):
        return True
    out = op.outputs[0]
    return all(reads_any_layout(graph, reader, out) for reader in consumers.get(out, []))


def permuted(loc: Loc, dims) -> Loc:
    """`loc`'s tensor permuted by `dims`, as a view over the same buffer (no data moves)."""
    strides = loc.strides or contiguous_strides(loc.buffer_shape, loc.isize)
    return Loc(loc.addr, tuple(loc.shape[d] for d in dims), loc.dtype, loc.buffer_shape, None,
               tuple(strides[d] for d in dims))


def inverse(dims) -> tuple[int, ...]:
    out = [0] * len(dims)
    for j, d in enumerate(dims):
        out[d] = j
    return tuple(out)


def stored_shape(shape, dims) -> tuple[int, ...]:
    """The shape an input stored in `dims` order is laid out as (before padding)."""
    return tuple(shape[d] for d in dims)


__all__ = ["CHANNELS_LAST", "REGION_EDGES", "absorbs_permute", "inverse", "permuted", "reads_any_layout", "region_edge",
           "stored_orders", "stored_shape", "writes_any_layout"]
