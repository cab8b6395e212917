"""Temporal spans: which rows of every tensor a worker needs to produce its owned output rows.

For a subgraph along a temporal axis (a conv1d stack: kernels, dilations, strides, "same"
padding, residual adds, elementwise ops, quantization), :func:`needed_rows` walks the graph
backwards from the owned output rows ``[lo, hi)`` and returns, for every tensor, the row
range the owned outputs depend on; the halo of a tensor is how far that range reaches
beyond the owned rows. Every dependency counts: a residual add needs the union of its
operands' ranges, stacked convolutions add their reaches.

:func:`span_partition` chooses the owned output rows of each worker *before* anything is
computed (contiguous spans, a shorter tail span), so no worker computes an output row it
then discards. (The lowering today splits each convolution's output rows across workers
with a barrier between layers, reading halo rows from DRAM; a fused per-span lowering
would use these ranges to size each worker's private intermediate spans.)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..workload.graph import Graph, Op, OpCounts, TensorSpec
from .graph_plan import plan_graph
from .matmul import plan_matmul
from .split import shared_loads
from .units import BALL_OR_CORE_UNITS, MATRIX_UNITS

ROWWISE = ("relu", "gelu", "silu", "neg", "abs", "exp", "tanh", "sigmoid", "add", "sub", "mul", "div",
           "quantize", "requantize", "dequantize")


class SpanError(ValueError):
    pass


@dataclass(frozen=True)
class Span:
    lo: int
    hi: int

    def __len__(self) -> int:
        return max(0, self.hi - self.lo)

    def union(self, other: "Span | None") -> "Span":
        return self if other is None else Span(min(self.lo, other.lo), max(self.hi, other.hi))


def span_partition(length: int, workers: int) -> list[Span]:
    """Contiguous owned spans of ceil(length / workers) rows; the tail span is shorter and
    trailing workers with nothing to own get an empty span."""
    per = -(-length // workers)
    return [Span(min(length, worker * per), min(length, (worker + 1) * per)) for worker in range(workers)]


def time_axis(graph: Graph, tensor: str) -> int:
    """The temporal axis of a 3-D activation: 1 in NLC (channels-last), 2 in NCL."""
    producers = graph.producers()
    op = producers.get(tensor)
    if op is not None and op.kind == "conv1d":
        return 1 if op.attrs.get("layout") == "NLC" else 2
    consumers = graph.consumers().get(tensor, [])
    for consumer in consumers:
        if consumer.kind == "conv1d" and consumer.inputs[0] == tensor:
            return 1 if consumer.attrs.get("layout") == "NLC" else 2
    return 1


def needed_rows(graph: Graph, output: str, owned: Span) -> dict[str, Span]:
    """Per tensor (activations only), the rows along the temporal axis that output rows
    `owned` of `output` depend on, clamped to the tensor's length."""
    producers = graph.producers()
    need: dict[str, Span] = {output: owned}
    order = [op for op in graph.ops]
    for op in reversed(order):
        out = op.outputs[0]
        if out not in need:
            continue
        span = need[out]
        if len(span) == 0:
            continue
        if op.kind == "conv1d":
            w_shape = graph.tensors[op.inputs[1]].shape
            kernel = w_shape[0] if op.attrs.get("weight_layout") == "WIO" else w_shape[-1]
            (stride,), (padding,), (dilation,) = op.attrs["stride"], op.attrs["padding"], op.attrs["dilation"]
            src = op.inputs[0]
            length = graph.tensors[src].shape[time_axis(graph, src)]
            lo = span.lo * stride - padding
            hi = (span.hi - 1) * stride - padding + dilation * (kernel - 1) + 1
            srcs = {src: Span(max(0, lo), min(length, hi))}
        elif op.kind in ROWWISE or op.kind == "permute":
            srcs = {}
            for name in op.inputs:
                if name in graph.weights:
                    continue
                shape = graph.tensors[name].shape
                if len(shape) != 3 and op.kind != "permute":
                    continue  # a broadcast scalar or per-channel operand: no temporal rows
                srcs[name] = span
        else:
            raise SpanError(f"op {op.name} ({op.kind}) has no temporal span rule")
        for name, rows in srcs.items():
            if name in producers or name in graph.inputs:
                need[name] = rows.union(need.get(name))
    return need


def halos(graph: Graph, output: str, owned: Span) -> dict[str, tuple[int, int]]:
    """Per tensor, (rows before, rows after) the owned span that it must provide."""
    return {name: (max(0, owned.lo - rows.lo), max(0, rows.hi - owned.hi))
            for name, rows in needed_rows(graph, output, owned).items()}


def time_axes(graph: Graph, input_axis: int | None = None) -> dict[str, int]:
    """The temporal axis of every activation, propagated from the graph input (its last
    axis unless `input_axis` says otherwise) through permutes and convolutions."""
    axes: dict[str, int] = {}
    for name in graph.inputs:
        axes[name] = len(graph.tensors[name].shape) - 1 if input_axis is None else input_axis
    for op in graph.ops:
        out = op.outputs[0]
        if op.kind == "conv1d":
            axes[out] = 1 if op.attrs.get("layout") == "NLC" else 2
        elif op.kind == "permute":
            src = axes.get(op.inputs[0])
            if src is not None:
                axes[out] = list(op.attrs["dims"]).index(src)
        else:
            temporal = [tensor for tensor in op.inputs if tensor in axes and len(graph.tensors[tensor].shape) == 3]
            src = axes[temporal[0]] if temporal else None
            if src is not None:
                axes[out] = src
    return axes


def span_graph(graph: Graph, output: str, owned: Span, input_axis: int | None = None):
    """The graph one worker runs for its owned rows: every temporal tensor cut to the rows
    it needs (`needed_rows`), convolutions padded only at the sequence's true edges
    (``pad_lr``), an operand with more rows than an op needs cut by a slice op. Returns
    (graph, needed rows, time axes)."""
    need = needed_rows(graph, output, owned)
    axes = time_axes(graph, input_axis)
    tensors = dict(graph.tensors)
    ops: list = []
    cut_cache: dict[tuple, str] = {}

    def resized(name: str, span: Span) -> None:
        spec = graph.tensors[name]
        shape = list(spec.shape)
        shape[axes[name]] = len(span)
        tensors[name] = TensorSpec(name, tuple(shape), spec.dtype)

    for name in graph.inputs:
        if name in need:
            resized(name, need[name])

    def cut(name: str, want: Span, source: str) -> str:
        have = need[name]
        if have == want:
            return name
        key = (name, want)
        if key not in cut_cache:
            new = f"{name}__rows_{want.lo}_{want.hi}"
            spec = tensors[name]
            shape = list(spec.shape)
            shape[axes[name]] = len(want)
            tensors[new] = TensorSpec(new, tuple(shape), spec.dtype)
            ops.append(Op(f"{new}", "slice", [name], [new], {"dim": axes[name], "start": want.lo - have.lo,
                                                              "end": want.hi - have.lo, "step": 1}, source,
                          OpCounts()))
            cut_cache[key] = new
        return cut_cache[key]

    for op in graph.ops:
        out = op.outputs[0]
        span = need.get(out)
        if span is None or len(span) == 0:
            continue
        attrs = dict(op.attrs)
        if op.kind == "conv1d":
            src = op.inputs[0]
            w_shape = graph.tensors[op.inputs[1]].shape
            kernel = w_shape[0] if op.attrs.get("weight_layout") == "WIO" else w_shape[-1]
            (stride,), (padding,), (dilation,) = op.attrs["stride"], op.attrs["padding"], op.attrs["dilation"]
            length = graph.tensors[src].shape[axes[src]]
            lo, hi = span.lo * stride - padding, (span.hi - 1) * stride - padding + dilation * (kernel - 1) + 1
            want = Span(max(0, lo), min(length, hi))
            attrs["pad_lr"] = [[want.lo - lo, hi - want.hi]]
            inputs = [cut(src, want, op.source)] + list(op.inputs[1:])
        elif op.kind in ROWWISE or op.kind == "permute":
            for key in ("scale_axes",):
                if axes.get(op.inputs[0]) in attrs.get(key, []):
                    raise SpanError(f"op {op.name}: its scale varies along the temporal axis")
            inputs = [cut(tensor, span, op.source)
                      if tensor in need and tensor in axes and len(graph.tensors[tensor].shape) == 3 else tensor
                      for tensor in op.inputs]
        else:
            raise SpanError(f"op {op.name} ({op.kind}) has no temporal span rule")
        resized(out, span)
        ops.append(Op(op.name, op.kind, inputs, [out], attrs, op.source, op.counts))
    inputs = [tensor for tensor in graph.inputs if tensor in need]
    used = {tensor for op in ops for tensor in op.inputs}
    weights = {name: value for name, value in graph.weights.items() if name in used}
    return Graph(f"{graph.name}[{owned.lo}:{owned.hi}]", ops, tensors, inputs, [output], weights), need, axes


@dataclass(frozen=True)
class SharedWeight:
    """One matrix op's weight in the stack's shared copy: its B tiles blocked as `tile` (tn,
    tk), in shared banks ``base .. base + tiles - 1`` (counted up from the first shared bank),
    loaded with the other weights of its `wave`."""

    op: str
    tile: tuple[int, int]
    base: int
    tiles: int
    wave: int = 0

    @property
    def tile_bytes(self) -> int:
        return self.tile[0] * self.tile[1]


@dataclass(frozen=True)
class SharedStack:
    """Spans with ``mapping.weights = "shared"``: every matrix op's weight loaded into the
    tile's shared memory in waves (`shared_stack`): wave 0 before the spans, then one
    BARRIER; a span runs its ops with no barrier between them, so a wave's weights are
    there before the first of its ops. Where the next weight does not fit above its wave's,
    a BARRIER before its op (every span is then past the ops that read the earlier waves'
    weights: their banks are free), its wave's loads from the first shared bank up, and
    one more BARRIER. `reason` says why the stack cannot (empty: it can)."""

    weights: dict[str, SharedWeight] = field(default_factory=dict)  # by op name, in graph order
    reason: str = ""

    @property
    def waves(self) -> list[list[SharedWeight]]:
        """The weights of each wave, in load order."""
        out: list[list[SharedWeight]] = []
        for weight in self.weights.values():
            if weight.wave == len(out):
                out.append([])
            out[weight.wave].append(weight)
        return out

    @property
    def starts(self) -> dict[str, int]:
        """The op that begins each wave after the first (its weight the wave's first): its wave."""
        return {wave[0].op: wave_index for wave_index, wave in enumerate(self.waves) if wave_index}

    @property
    def banks(self) -> int:
        """The shared banks held at once: the largest wave's."""
        return max((sum(weight.tiles for weight in wave) for wave in self.waves), default=0)

    def tile_bytes(self, wave: int = 0) -> list[int]:
        """The bytes of each of a wave's B tiles, in bank order."""
        return [weight.tile_bytes for weight in self.waves[wave] for _ in range(weight.tiles)] if self.weights else []

    def gemm(self, op: str, shape):
        """The GEMM `op` runs in a span: B read from its banks of the stack, no load of its own."""
        weight = self.weights.get(op)
        if weight is None or not shape.b_weight:
            return shape
        return replace(shape, b_preloaded=True, b_shared_base=weight.base, b_tile=weight.tile)

    def loads(self, workers: int, tile_size: int, wave: int = 0) -> list[list[int]]:
        """Which of a wave's B tiles (by shared bank, from 0) each of the first `workers`
        workers loads: every tile of cores its own copy, dealt as the tiles path deals one
        weight's (`dse.plan.split.shared_loads`)."""
        return shared_loads(workers, tile_size, len(self.tile_bytes(wave)))


def shared_stack(span_graphs: list[Graph], chip, mapping) -> SharedStack:
    """Decide the stack's shared copy once, for the lowering and the model alike. Per matrix
    op with a weight B, in graph order: its tile is the one-worker plan's pick
    (`plan_matmul`, the B already loaded) for the span that runs the op's largest GEMM (the
    longest span decides the latency), with its banks from the first the earlier weights of
    its wave left free; every span then reads that blocking (`MatmulShape.b_tile`). Each
    weight is read by its own op alone, so once every span is past an op its banks are free
    (liveness): a weight that does not fit above its wave's begins a new wave from the first
    shared bank (`SharedStack`: loaded after a BARRIER before its op). One that does not fit
    even there makes the stack infeasible, in `check_tiles`' words."""
    one = mapping.model_copy(update={"workers": 1})
    gemms: dict[str, list] = {}
    for span in span_graphs:
        for plan in plan_graph(span):
            if plan.unit in BALL_OR_CORE_UNITS:
                return SharedStack(reason=f"partition = spans with weights = shared: {BALL_OR_CORE_UNITS[plan.unit]} "
                                          f"{plan.op.name} may run on the core in one span and on the matrix Ball in "
                                          "another")
            if plan.unit in MATRIX_UNITS and plan.gemm.b_weight:
                gemms.setdefault(plan.op.name, []).append(plan.gemm)
    weights: dict[str, SharedWeight] = {}
    base, wave = 0, 0
    bank_bytes = chip.shared_memory.rows * chip.shared_memory.row_bytes
    for name, shapes in gemms.items():
        widest = max(shapes, key=lambda gemm: gemm.M)
        picked = plan_matmul(chip, one, replace(widest, b_preloaded=True, b_shared_base=base))
        if not picked.feasible and base:  # a new wave, in the banks the earlier waves freed
            base, wave = 0, wave + 1
            picked = plan_matmul(chip, one, replace(widest, b_preloaded=True, b_shared_base=0))
        if not picked.feasible:
            return SharedStack(weights, f"partition = spans with weights = shared: op {name}: {picked.reason}")
        tiles = picked.shared_bytes // bank_bytes
        weights[name] = SharedWeight(name, (picked.tn, picked.tk), base, tiles, wave)
        base += tiles
    return SharedStack(weights)


__all__ = ["ROWWISE", "SharedStack", "SharedWeight", "Span", "SpanError", "halos", "needed_rows", "shared_stack",
           "span_graph", "span_partition", "time_axes", "time_axis"]
