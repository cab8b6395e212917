"""The graph's plan: per op, its unit and the charged copies that prepare its operands.

The layout of every tensor follows from the graph alone (a matrix-Ball product leaves a
blocked accumulator whatever the candidate; every other op writes a padded row-major
buffer), so this walk runs once per graph and both consumers read its `OpPlan`s: the
lowering emits each copy and the op (with real addresses and data), the analytical model
charges them for arrays of candidates. What varies per candidate is decided by the
functions the plan names: tiles (`plan_matmuls`), the ReLU Ball (the chip has one or not),
Ball stream or core op (`stream_or_core` / `takes_stream`), splits (`split_core_op`),
syncs (`sync_after`).

Copies, in the order the lowering emits them:

* ``unblock``: a blocked accumulator read as a row-major matrix is copied out once, on
  first such read (later readers use the copy);
* ``standardise``: a matmul's A operand that is not a padded row-major buffer of its own
  shape (a strided view) is copied into one, for every such matmul;
* ``pad``: a convolution that pads copies its input into a zero-padded image;
* ``gather``: a convolution's im2col gather of every tap into the GEMM's A.

A grouped convolution (unit ``grouped``) has two paths, chosen per candidate
(`dse.plan.grouped.on_matrix`): its pad and gather copies, the block-diagonal GEMM and an
``unblock`` copy after it (`OpPlan.after`) on the Ball path, or one core op; both leave the
result in the same M-padded row-major matrix, so the rest of the plan does not depend on it.

Fusion (``mapping.fusion = "fuse"``, `plan_graph(graph, "fuse")`): an int8 / int32 ReLU on
the core whose only reader is a convolution (and not a graph output) is not materialized
(unit ``fused``): the convolution's first copy (pad, else gather) reads the ReLU's input and
applies it (``Copy.apply``), which is exact (max(x, 0) element by element). Attention's
score chain (dequantize of QK^T, scalar and mask stages, softmax, quantize for PV) is one
core pass (unit ``chain`` on the quantize, ``fused`` on the stages before it:
`dse.plan.chains`).

Layout (``mapping.channels_last = true``, `plan_graph(graph, fusion, True)`): a layout
conversion the layout choice removes is a view (unit ``view``): a graph input read by a
permute is stored in that permute's order, and a permute whose readers all read strided
views is a view of its source (`dse.plan.layout`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..mapping import MatmulShape
from ..workload.graph import Graph, Op
from .chains import score_chains
from .layout import CHANNELS_LAST, absorbs_permute, inverse, permuted, stored_orders, stored_shape
from .mapper import gemm_shape
from .memory import Blocked, Dram, Loc, itemsize, pad, padded_shape
from .scan import scan_plan
from .streams import SCALE_KINDS
from .units import MATRIX_UNITS, conv_pad, grouped_conv, matrix_conv, matrix_product, reshape_view

UNITS = (*MATRIX_UNITS, "scale", "relu", "view", "core", "fused", "chain", "scan")
FUSIONS = (None, "fuse")


@dataclass(frozen=True)
class Copy:
    """A charged core copy before an op: what it copies and the shape it moves."""

    kind: str  # "unblock" | "standardise" | "pad" | "gather"
    tensor: str
    shape: tuple[int, ...]
    blocked: tuple[int, int, int] | None = None  # unblock: the accumulator's (batch, M, N)
    apply: str | None = None  # a fused producer applied while copying ("relu"), else a plain copy


@dataclass(frozen=True)
class OpPlan:
    """One op's plan. `unit`: "matrix" (a product on the matrix Ball), "conv" (im2col + a
    GEMM on it), "grouped" (a grouped conv: the block-diagonal GEMM or a core op, per
    candidate), "scale" (a Fp2Int / Int2Fp stream or a core op, per candidate), "relu"
    (the ReLU Ball where the chip has one, else a core op), "view" (a descriptor), "core",
    "scan" (a loop of its step graph's plan, `dse.plan.scan`).
    `reads` are the operand locations after the copies, `writes` the result's: the lowering
    places each result with this geometry (`Dram.place`: shape, buffer, strides; a product's
    accumulator in the candidate's tiles), while the addresses here are placement-only (the
    plan places no candidate's own buffers: packed operands, tiles); `gemm` the GEMM of a
    matrix-Ball op."""

    op: Op
    unit: str
    copies: tuple[Copy, ...]
    reads: tuple[Loc, ...]
    writes: Loc
    gemm: MatmulShape | None = None
    after: tuple[Copy, ...] = ()  # copies after the op's Ball path (a grouped conv's unblock)
    chain: tuple[Op, ...] = ()  # unit "chain": the fused stages, this op last (`dse.plan.chains`)

    @property
    def blocked_source(self) -> Blocked | None:
        """A scale op over a blocked accumulator reads it tile by tile (its (batch, M, N))."""
        return self.reads[0].blocked if self.reads else None


# The mapping fields that shape a graph's plan: candidates equal in these share one plan.
PLAN_KNOBS = ("fusion", "channels_last")


def plan_key(mapping) -> tuple:
    """What of `mapping` shapes its graph's plan (`PLAN_KNOBS`), as `plan_graph` takes it."""
    return tuple(getattr(mapping, name) for name in PLAN_KNOBS)


def plan_for(graph: Graph, mapping) -> list[OpPlan]:
    """The plan of `graph` for a candidate of this `mapping`."""
    return plan_graph(graph, *plan_key(mapping))


def plan_graph(graph: Graph, fusion: str | None = None, channels_last: bool | None = None) -> list[OpPlan]:
    """The plan of every op of `graph`, in order (made once per `fusion` and `channels_last`
    and kept on the graph): `fusion` is the mapping's (None: every op materialized; "fuse"),
    `channels_last` its layout choice (None: every permute a copy; True: `dse.plan.layout`)."""
    if fusion not in FUSIONS:
        raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
    if channels_last not in CHANNELS_LAST:
        raise ValueError(f"channels_last must be one of {CHANNELS_LAST}, got {channels_last!r}")
    plans = graph.__dict__.setdefault("op_plans", {})
    key = (fusion, channels_last)
    # (a graph cached with plans from before their footprints: planned again)
    if key not in plans or key not in graph.__dict__.get("plan_weights", {}):
        walk = _Walk(graph, fusion == "fuse", channels_last)
        plans[key] = walk.run()
        graph.__dict__.setdefault("plan_dram_bytes", {})[key] = (walk.dram.top, walk.weight_bytes)
        graph.__dict__.setdefault("plan_weights", {})[key] = list(walk.weights)
    return plans[key]


def dram_footprint(graph: Graph, fusion: str | None = None, channels_last: bool | None = None,
                   requests: int = 1) -> int:
    """The DRAM the plan of `graph` places (every tensor in its own padded buffer: inputs,
    weights, results and the copies' temporaries), in bytes; with several `requests`, each
    has its own tensors but the weights are placed once (`dse.lower.lower_layers`)."""
    plan_graph(graph, fusion, channels_last)
    top, weights = graph.__dict__["plan_dram_bytes"][(fusion, channels_last)]
    return requests * top - (requests - 1) * weights


def placed_weights(graph: Graph, fusion: str | None = None, channels_last: bool | None = None
                   ) -> list[tuple[str, int]]:
    """The weights the plan of `graph` places, in order, each with the DRAM it takes."""
    plan_graph(graph, fusion, channels_last)
    return graph.__dict__["plan_weights"][(fusion, channels_last)]


def stored_loc(dram: Dram, graph: Graph, name: str, orders: dict, value=None) -> Loc:
    """A graph input's or a core op's result's location: a padded row-major buffer, or
    (`stored_orders`) a strided view of a buffer laid out in its permute's order (an input's
    value placed in that order)."""
    spec = graph.tensors[name]
    dims = orders.get(name)
    if dims is None:
        return dram.tensor(spec.shape, spec.dtype, value)
    stored = None if value is None else value.transpose(dims)
    return permuted(dram.tensor(stored_shape(spec.shape, dims), spec.dtype, stored), inverse(dims))


class _Walk:
    def __init__(self, graph: Graph, fuse: bool = False, channels_last: bool | None = None):
        self.graph = graph
        self.fuse = fuse
        self.channels_last = channels_last
        self.fused: dict[str, str] = {}  # a fused ReLU's output -> its input
        self.consumers = graph.consumers() if fuse or channels_last else {}
        self.orders = stored_orders(graph, channels_last)
        self.chains = score_chains(graph) if fuse else {}
        self.chained = {op.name: chain for chain in self.chains.values() for op in chain[:-1]}
        self.dram = Dram()  # placement only: no data
        self.weight_bytes = 0  # of the DRAM placed, the weights' (each placed once, whatever the requests)
        self.weights: list[tuple[str, int]] = []  # each weight placed, with the DRAM it takes
        self.locs: dict[str, Loc] = {}
        self.unblocked: dict[str, Loc] = {}
        for name in graph.inputs:
            self.locs[name] = stored_loc(self.dram, graph, name, self.orders)

    def loc(self, name: str) -> Loc:
        if name not in self.locs:  # a weight, placed on first use
            spec = self.graph.tensors[name]
            top = self.dram.top
            self.locs[name] = self.dram.tensor(spec.shape, spec.dtype)
            self.weight_bytes += self.dram.top - top
            self.weights.append((name, self.dram.top - top))
        return self.locs[name]

    def logical(self, name: str, copies: list[Copy]) -> Loc:
        loc = self.loc(name)
        if loc.blocked is None:
            return loc
        if name not in self.unblocked:
            b = loc.blocked
            copies.append(Copy("unblock", name, (b.batch, pad(b.M), pad(b.N)), (b.batch, b.M, b.N)))
            self.unblocked[name] = self.dram.matrix(loc.shape, "int32", b.batch, b.M, b.N)
        return self.unblocked[name]

    def standard(self, name: str, copies: list[Copy]) -> Loc:
        loc = self.logical(name, copies)
        if loc.standard:
            return loc
        copies.append(Copy("standardise", name, tuple(loc.shape)))
        return self.dram.tensor(loc.shape, loc.dtype)

    def blocked_result(self, op: Op, shape: MatmulShape) -> Loc:
        spec = self.graph.tensors[op.outputs[0]]
        # the tile is each candidate's: the plan records the accumulator's extent only
        return self.dram.blocked(spec.shape, Blocked(shape.batch, 1, 1, pad(shape.M), pad(shape.N), shape.M,
                                                     shape.N))

    def run(self) -> list[OpPlan]:
        return [self.plan(op) for op in self.graph.ops]

    def plan(self, op: Op) -> OpPlan:
        graph = self.graph
        spec = graph.tensors[op.outputs[0]]
        copies: list[Copy] = []
        if op.name in self.chained:  # a stage of a fused score chain: never written
            scores = self.loc(self.chained[op.name][0].inputs[0])
            return OpPlan(op, "fused", (), (scores,), scores)
        if op.name in self.chains:
            chain = self.chains[op.name]
            reads = (self.loc(chain[0].inputs[0]),) + tuple(self.loc(n) for s in chain for n in s.inputs[1:])
            out = self.locs[op.outputs[0]] = self.dram.tensor(spec.shape, spec.dtype)
            return OpPlan(op, "chain", (), reads, out, chain=chain)
        if matrix_product(graph, op):
            shape = gemm_shape(graph, op)
            reads = []
            if not shape.b_weight:  # the lowering reads B first
                b = self.logical(op.inputs[1], copies)
            a = self.standard(op.inputs[0], copies)
            reads = [a] if shape.b_weight else [a, b]
            out = self.locs[op.outputs[0]] = self.blocked_result(op, shape)
            return OpPlan(op, "matrix", tuple(copies), tuple(reads), out, shape)
        conv, grouped = matrix_conv(graph, op), grouped_conv(graph, op)
        if conv or grouped:
            # a fused ReLU's input, applied by the first copy (only a plain conv reads one: `fusable`)
            source = self.fused.get(op.inputs[0], op.inputs[0])
            apply = "relu" if source != op.inputs[0] else None
            x = self.logical(source, copies)
            reads = (x,) if conv else tuple([x] + [self.logical(n, copies) for n in op.inputs[1:]])
            w_shape = graph.tensors[op.inputs[1]].shape
            nd = len(w_shape) - 2
            if any(lo or hi for lo, hi in conv_pad(op)):
                copies.append(Copy("pad", source, tuple(x.shape), apply=apply))
                apply = None
            gather = (x.shape[0], *spec.shape[1:1 + nd], *w_shape[:nd], x.shape[-1])  # every input channel
            copies.append(Copy("gather", source, tuple(gather), apply=apply))
            shape = gemm_shape(graph, op)
            if conv:
                out = self.locs[op.outputs[0]] = self.blocked_result(op, shape)
                return OpPlan(op, "conv", tuple(copies), reads, out, shape)
            out = self.locs[op.outputs[0]] = self.dram.matrix(spec.shape, spec.dtype, 1, shape.M, shape.N)
            after = (Copy("unblock", op.outputs[0], (1, pad(shape.M), pad(shape.N)), (1, shape.M, shape.N)),)
            return OpPlan(op, "grouped", tuple(copies), reads, out, shape, after)
        if op.kind in SCALE_KINDS:
            src = self.loc(op.inputs[0])  # a blocked accumulator is read tile by tile, not copied
            b = src.blocked
            out = self.dram.matrix(spec.shape, spec.dtype, b.batch, b.M, b.N) if b is not None \
                else self.dram.tensor(spec.shape, spec.dtype)
            self.locs[op.outputs[0]] = out
            return OpPlan(op, "scale", (), (src,), out)
        if op.kind == "relu":
            src = self.loc(op.inputs[0])
            if spec.dtype in ("int8", "int32") and src.standard:
                out = self.locs[op.outputs[0]] = self.dram.tensor(spec.shape, spec.dtype)
                return OpPlan(op, "relu", (), (src,), out)
            if self.fusable(op):
                self.fused[op.outputs[0]] = op.inputs[0]
                return OpPlan(op, "fused", (), (src,), src)
        if op.kind == "permute" and absorbs_permute(graph, op, self.loc(op.inputs[0]), self.channels_last,
                                                    self.consumers, self.orders):
            view = self.locs[op.outputs[0]] = permuted(self.loc(op.inputs[0]), op.attrs["dims"])
            return OpPlan(op, "view", (), (self.loc(op.inputs[0]),), view)
        if op.kind == "reshape":
            view = reshape_view(self.loc(op.inputs[0]), spec.shape, spec.dtype)
            if view is not None:
                self.locs[op.outputs[0]] = view
                return OpPlan(op, "view", (), (self.loc(op.inputs[0]),), view)
        if op.kind == "scan":  # a loop of its step's plan (`dse.plan.scan`)
            return OpPlan(op, "scan", *scan_plan(self, op))
        reads = tuple(self.logical(name, copies) for name in op.inputs)
        out = self.locs[op.outputs[0]] = stored_loc(self.dram, graph, op.outputs[0], self.orders)
        return OpPlan(op, "core", tuple(copies), reads, out)


    def fusable(self, op: Op) -> bool:
        """A ReLU the next conv's copy can apply: integer, on the core (its input is not a
        blocked accumulator), read by one convolution only, not a graph output."""
        graph, out = self.graph, op.outputs[0]
        readers = self.consumers.get(out, [])
        return (self.fuse and graph.tensors[out].dtype in ("int8", "int32") and out not in graph.outputs
                and self.loc(op.inputs[0]).blocked is None and len(readers) == 1 and matrix_conv(graph, readers[0])
                and readers[0].inputs[0] == out)


@dataclass(frozen=True)
class Temporary:
    """A buffer the lowering places for one op's copy (never a graph tensor): a conv's
    zero-padded image (``pad``) or im2col matrix (``gather``), a strided operand's padded
    copy (``standardise``), an accumulator's row-major copy (``unblock``)."""

    op: str
    kind: str  # the copy's kind
    tensor: str  # the tensor it copies
    shape: tuple[int, ...]  # the buffer's logical shape (`Dram.tensor` pads its last two dims)
    dtype: str
    nbytes: int  # its padded buffer's bytes, as placed in DRAM


def copy_buffer(graph: Graph, op: Op, copy: Copy) -> tuple[tuple[int, ...], str]:
    """The shape and dtype of the buffer `copy` (one of `op`'s) writes: what the lowering
    places for it (`dse.lower.lower`'s `_conv` asks here) and `temporaries` counts."""
    if copy.kind == "unblock":  # (batch, pad(M), pad(N)) int32: `Dram.matrix`
        return tuple(copy.shape), "int32"
    if copy.kind == "pad":  # the input, every spatial axis grown by its padding
        n, *spatial, channels = copy.shape
        return (n, *[s + lo + hi for s, (lo, hi) in zip(spatial, conv_pad(op))], channels), "int8"
    if copy.kind == "gather":  # (n, *outs, *kernel, C) gathered into the GEMM's A: (n * outs, taps * C)
        nd = (len(copy.shape) - 2) // 2
        n, outs, kernel, channels = copy.shape[0], copy.shape[1:1 + nd], copy.shape[1 + nd:1 + 2 * nd], copy.shape[-1]
        return (n * math.prod(outs), math.prod(kernel) * channels), "int8"
    return tuple(copy.shape), graph.tensors[copy.tensor].dtype  # standardise


def temporaries(graph: Graph, fusion: str | None = None, channels_last: bool | None = None) -> list[Temporary]:
    """Every buffer the plan's copies place, op by op (`plan_graph`'s copies and `after`
    copies). A matmul's pack copies (A when its K is split, an activation B) are not
    here: their size follows each candidate's tile."""
    out = []
    for plan in plan_graph(graph, fusion, channels_last):
        for copy in plan.copies + plan.after:
            shape, dtype = copy_buffer(graph, plan.op, copy)
            out.append(Temporary(plan.op.name, copy.kind, copy.tensor, shape, dtype,
                                 math.prod(padded_shape(shape)) * itemsize(dtype)))
    return out


def copy_elements(copy: Copy) -> int:
    """Elements a copy moves (its charge is ``elements x cycles per element`` of "copy")."""
    return math.prod(copy.shape)


__all__ = ["Copy", "FUSIONS", "OpPlan", "Temporary", "UNITS", "copy_buffer", "copy_elements", "dram_footprint",
           "placed_weights",
           "plan_graph", "stored_loc", "temporaries"]
