"""The captured workload: a flat list of typed ops over named tensors.

The graph is plain data (dataclasses, numpy weights) so that mapping, the analytical
model and lowering can read it without torch: this module imports neither torch nor
pandas (a cached graph is unpickled without them). `Graph.run` is the reference
interpreter (`dse.workload.interpret`, torch): it executes the dse ops (not the original
module) so a capture, and any frontend step that rewrites the graph, can be checked
against PyTorch. The interpreter's names are still importable from here (on first use).
The op kinds and records below live in `dse.workload.vocabulary` (which the interpreter
reads without this module) and are importable from here too.

Kinds and their attrs (inputs in order; `?` marks an optional input, flagged in attrs):
- linear(x, w[N, K], bias?): M, N, K, batch, has_bias. matmul(a, b, bias?): M, N, K,
  batch, has_bias (alpha, beta when not 1). conv1d / conv2d / conv3d(x, w, bias?): stride,
  padding, dilation, groups (1), layout (NCL/NCHW/NCDHW or channels-last NLC/NHWC/NDHWC),
  weight_layout (OIW/OIHW/OIDHW or pre-transposed WIO/HWIO/DHWIO), M, N, K (the implicit GEMM:
  M = batch * output positions, N = out channels, K = in channels * kernel), batch, has_bias.
  With int8 operands these ops compute int32 with wraparound (see dse/frontend/quantize.py).
- add, sub, mul, div, maximum, minimum (tensor or scalar operand); relu, gelu, silu; neg, abs, exp, rsqrt, sqrt,
  tanh, sigmoid, cos, sin, softplus (beta 1, threshold 20); pow(exponent).
- softmax(dim); layer_norm(x, w?, b?: normalized_shape, eps); batch_norm(x, w?, b?, mean,
  var: eps, axis); mean / sum(dims, keepdim).
- max_pool2d(kernel, stride, padding, dilation, ceil_mode, layout); avg_pool2d(kernel,
  stride, padding, ceil_mode, count_include_pad, divisor_override, layout);
  adaptive_avg_pool2d(output_size): NCHW, windows that do not tile the input evenly.
- vector_norm(ord, dims, keepdim): torch.linalg.vector_norm; repeat(repeats): Tensor.repeat.
- embedding(table, indices); sdpa(q, k, v, mask?: scale, is_causal, has_mask).
- pad(pad, value): constant padding, a negative amount crops (RWKV's time shift).
- views: reshape(shape), expand(shape), slice(dim, start, end, step), select(dim, index);
  data movement: permute(dims), cat(dim), stack(dim), slice_scatter(x, src: dim, start, end,
  step[, select]): x with src written over the slice (`zero_` on a slice is one with src all zeros;
  `select`: select_scatter, src lacks the dim).
- real(fft_fftn(x, dims)) is captured as DFT `linear`s by constant cos / sin weights, one dim at
  a time (dse/workload/capture.py), so it reaches the matrix Ball as any product.
- scan(seqs..., states..., invariants...): a recurrence over `steps` time steps as one op, its
  output the steps' outputs stacked time first. An LSTM / GRU (cell, hidden, batch, reverse
  [, h_scale, deq_scale]: xp, s0, w, b) or a loop found in the capture (body: its step's ops
  recorded, specs, seq, state, next, out, n_seq, n_state); rnn_cell(r, x, s: cell, hidden), an
  LSTM / GRU step's cell (dse/workload/scan.py).
- topk(x: k, dim, largest, sorted, item): item 0 the values, 1 the int64 indices; sort(x: dim,
  descending, stable, item) likewise; cumsum(x: dim, dtype); one_hot(x: classes);
  scatter(x, index, src?: dim, value when no src); scatter_add(x, index, src: dim);
  bitwise_not(x) (logical not of a bool).
- a mixture of experts (dse/workload/moe.py): moe_tokens(top_k_index: layer, experts, top_k,
  expert, count) the token ids routed to `expert`; moe_weights(top_k_index, top_k_weights:
  same attrs) their routing weights [count, 1]; index_add(acc, index, src: dim, ...).
- quantize (float32 -> int8), requantize (int32 -> int8), dequantize (int -> float32):
  scale, scale_axes, scale_groups (see `scale_tensor`).
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import pandas as pd
    import torch

import numpy as np

# the op vocabulary, importable from here as before
from dse.workload.vocabulary import (  # noqa: F401
    MATMUL_KINDS, CONV_KINDS, BINARY_KINDS, ACTIVATION_KINDS, UNARY_KINDS, ATEN_ELEMENTWISE, NORM_KINDS, REDUCE_KINDS,
    POOL_KINDS, ADAPTIVE_KINDS, VECTOR_NORM_KINDS, LAYOUT_KINDS, VIEW_KINDS, DATA_KINDS, ARG_KINDS,
    ATTENTION_KINDS, CHOICE_KINDS, QUANT_KINDS, ROUTING_KINDS, SCAN_KINDS, MOVE_KINDS, KINDS, CHANNELS_LAST, CHANNELS_LAST_WEIGHTS,
    CHANNELS_FIRST, CHANNELS_FIRST_WEIGHTS, INT8_MIN, INT8_MAX, itemsize, TensorSpec,
    OpCounts, Op, scale_array)


@dataclass
class Graph:
    name: str
    ops: list[Op]
    tensors: dict[str, TensorSpec]
    inputs: list[str]
    outputs: list[str]
    weights: dict[str, np.ndarray] = field(default_factory=dict)

    def ops_of_kind(self, *kinds: str) -> list[Op]:
        return [op for op in self.ops if op.kind in kinds]

    def producers(self) -> dict[str, Op]:
        """Tensor name -> the op that writes it."""
        return {out: op for op in self.ops for out in op.outputs}

    def consumers(self) -> dict[str, list[Op]]:
        """Tensor name -> the ops that read it, in graph order (each op once)."""
        users: dict[str, list[Op]] = {name: [] for name in self.tensors}
        for op in self.ops:
            for name in dict.fromkeys(op.inputs):
                users.setdefault(name, []).append(op)
        return users

    def copy(self) -> Graph:
        """A copy whose ops, attrs and lists can be edited; weight arrays are shared
        (treat them as immutable: a step that changes a weight stores a new array)."""
        return Graph(self.name, copy.deepcopy(self.ops), dict(self.tensors), list(self.inputs),
                     list(self.outputs), dict(self.weights))

    def trace(self, *inputs: torch.Tensor | np.ndarray, known: dict[str, torch.Tensor] | None = None,
              keep: set[str] | None = None, previous: tuple[Graph, dict] | None = None,
              watch: Callable[[Op, LiveValues], None] | None = None) -> dict[str, torch.Tensor]:
        """Execute the dse ops in torch; every tensor's value by name (inputs, weights, op outputs).
        `known`: op outputs already computed on these inputs (by an identical op of another
        graph over identical inputs, see `unchanged_values`), taken rather than computed again.
        `keep`: only these op outputs are returned, and every other goes once its last reader
        has run (a real model's intermediates are gigabytes).
        `previous`: (graph, its trace on these inputs), the trace consumed (each value dropped
        from it once passed): an op the same as its namesake there over inputs that hold the
        same values takes that op's value. Unlike `known`, "the same values" is decided as
        the trace goes: a rewritten op (a linear made a matmul of the transposed weight) is
        computed, and when its value has the bits and layout of the previous one, the ops
        reading it count as unchanged (`_identical`). A value the previous trace let go (not in
        its `keep`) is computed again when something reads it (a reader computed, a `watch`,
        this trace's `keep`): from inputs that hold the same values, by the same op, it is the
        same value (the axiom of `unchanged_values`), so its readers still count as unchanged.
        `watch(op, values)`: called as each op's value is computed, with the live values (a
        `LiveValues`, the op's inputs among them): a check that reads values op by op runs
        during the trace, and needs none of them kept."""
        values: dict[str, torch.Tensor] = {}
        for _ in self._execute(inputs, known, keep, False, values, previous, watch):
            pass
        return values

    def _execute(self, inputs: tuple, known: dict | None, keep: set[str] | None, stream: bool,
                 values: dict | None = None, previous: tuple[Graph, dict] | None = None,
                 watch: Callable[[Op, LiveValues], None] | None = None):
        """The one interpreter loop of `trace` and `stream`: op outputs into `values`, each
        yielded (with `stream`) as it is computed; with `keep`, every other value goes once
        its last reader has run."""
        import torch

        from dse.workload.interpret import INTERPRETERS, weight_tensor

        values = {} if values is None else values
        if len(inputs) != len(self.inputs):
            raise ValueError(f"graph {self.name!r} takes {len(self.inputs)} inputs, got {len(inputs)}")
        for name, value in zip(self.inputs, inputs):
            tensor = torch.as_tensor(value)
            spec = self.tensors[name]
            if tuple(tensor.shape) != spec.shape:
                raise ValueError(f"input {name!r}: expected shape {spec.shape}, got {tuple(tensor.shape)}")
            values[name] = tensor
        for name, array in self.weights.items():
            values[name] = weight_tensor(array, self.tensors[name].dtype)
        last_use = {} if keep is None else {name: i for i, op in enumerate(self.ops) for name in op.inputs}
        before, old, same, producers = None, {}, set(), {}
        if previous is not None:
            before, old = previous
            produced = {op.outputs[0] for op in self.ops}
            for name in [n for n in old if n not in produced or before.tensors.get(n) != self.tensors[n]]:
                del old[name]  # no op here computes it (of that spec): never taken
            same = _same_sources(before, self)
            producers = before.producers()
        readers: dict[str, list[str]] = {}  # value -> the op outputs computed from it
        if old:
            for op in self.ops:
                for name in dict.fromkeys(op.inputs):
                    readers.setdefault(name, []).append(op.outputs[0])
        tainted: set[str] = set()
        # A value the previous trace let go, of an op unchanged over unchanged inputs, is computed
        # only when something reads it (`pending`): its readers may all be taken. Its inputs then
        # live until its own last reader has run (`until`).
        pending: dict[str, tuple[int, Op]] = {}
        until = dict(last_use)
        fresh: list[str] = []  # values computed on demand while the current op ran

        def materialize(names) -> None:
            need, stack = set(), [name for name in names if name in pending]
            while stack:
                name = stack.pop()
                if name not in need:
                    need.add(name)
                    stack.extend(n for n in pending[name][1].inputs if n in pending)
            for name in sorted(need, key=lambda n: pending[n][0]):
                _, waiting = pending.pop(name)
                values[name] = INTERPRETERS[waiting.kind](waiting, [values[n] for n in waiting.inputs])
                fresh.append(name)

        def extend(names, to: int) -> None:
            stack = list(names)
            while stack:
                name = stack.pop()
                if until.get(name, -1) < to:
                    until[name] = to
                    if name in pending:
                        stack.extend(pending[name][1].inputs)

        live = LiveValues(values, pending, materialize)
        with torch.no_grad():
            for i, op in enumerate(self.ops):
                out = op.outputs[0]
                prev = old.pop(out, None)
                if known and out in known:
                    values[out] = known[out]
                elif before is not None and _same_op(producers.get(out), op, before, self) and all(
                        name in same for name in op.inputs):
                    if prev is not None:
                        values[out] = prev
                    elif keep is not None and out not in keep and not stream:
                        pending[out] = (i, op)  # the same op on the same values again, when read
                        extend(op.inputs, until.get(out, -1))
                    else:
                        materialize(op.inputs)
                        values[out] = INTERPRETERS[op.kind](op, [values[n] for n in op.inputs])
                    same.add(out)
                else:
                    materialize(op.inputs)
                    args = [values[name] for name in op.inputs]
                    values[out] = INTERPRETERS[op.kind](op, args)
                    del args
                    # compared only when the op itself was rewritten (its other inputs unchanged):
                    # from inputs that changed, a value almost never comes out the same
                    if (prev is not None and before.tensors[out] == self.tensors[out]
                            and all(name in same or name in self.weights for name in op.inputs)
                            and _identical(prev, values[out])):
                        values[out] = prev  # one tensor, not two equal ones
                        same.add(out)
                    if out not in same and old:
                        # no op computed from it, however far down, can take its previous value:
                        # those go now, not when the trace reaches them
                        stack = [out]
                        while stack:
                            for reader in readers.get(stack.pop(), ()):
                                if reader not in tainted:
                                    tainted.add(reader)
                                    old.pop(reader, None)
                                    stack.append(reader)
                del prev
                if watch is not None:
                    watch(op, live)
                if keep is not None:  # inputs read for the last time go before a streamed reader takes `out`
                    for name in {*op.inputs, *fresh}:
                        if name not in keep and until.get(name, -1) <= i:
                            values.pop(name, None)
                            pending.pop(name, None)
                    fresh.clear()
                if stream:
                    yield out, values[out]
                if keep is not None and out not in keep and until.get(out, -1) <= i:
                    values.pop(out, None)
                    pending.pop(out, None)

    def stream(self, *inputs: torch.Tensor | np.ndarray):
        """(name, value) of every op output in op order, as `trace` computes them, holding
        only the values later ops still read: a reader that takes each in turn (a comparison
        op by op) never has a whole model's values at once."""
        return self._execute(inputs, None, set(self.outputs), True)

    def run(self, *inputs: torch.Tensor | np.ndarray) -> list[torch.Tensor]:
        """Execute the dse ops in torch; returns the graph outputs in order (intermediates
        go once read for the last time)."""
        values = self.trace(*inputs, keep=set(self.outputs))
        return [values[name] for name in self.outputs]

    def counts_frame(self) -> pd.DataFrame:
        import pandas as pd

        columns = ["name", "kind", *(f.name for f in fields(OpCounts)), "source"]
        rows = [
            [op.name, op.kind, *(getattr(op.counts, f.name) for f in fields(OpCounts)), op.source]
            for op in self.ops
        ]
        return pd.DataFrame(rows, columns=columns)

    def totals(self) -> OpCounts:
        """Sum over ops, except weight_bytes: the bytes of the distinct weights, so a
        weight shared by several ops (tied embeddings) counts once, as the model size."""
        summed = sum((op.counts for op in self.ops), OpCounts())
        return OpCounts(
            macs=summed.macs,
            other_ops=summed.other_ops,
            bytes_read=summed.bytes_read,
            bytes_written=summed.bytes_written,
            weight_bytes=sum(self.tensors[name].nbytes for name in self.weights),
        )

    def dump(self) -> str:
        """Stable text form: same graph, same text (no addresses, sorted attrs; a long
        list attr such as a per-channel scale is shown by its length and content hash)."""
        lines = [f"graph {self.name}"]
        lines += [f"input  {name}: {self.tensors[name]}" for name in self.inputs]
        lines += [f"weight {name}: {self.tensors[name]}" for name in self.weights]
        for op in self.ops:
            out = op.outputs[0]
            attrs = ", ".join(f"{key}={_attr_text(op.attrs[key])}" for key in sorted(op.attrs))
            c = op.counts
            lines.append(
                f"op     {out}: {self.tensors[out]} = {op.kind}({', '.join(op.inputs)})"
                f" {{{attrs}}} macs={c.macs} other={c.other_ops} read={c.bytes_read}"
                f" written={c.bytes_written} weight={c.weight_bytes} @ {op.source}"
            )
        lines += [f"output {name}: {self.tensors[name]}" for name in self.outputs]
        t = self.totals()
        lines.append(
            f"total  macs={t.macs} other={t.other_ops} read={t.bytes_read}"
            f" written={t.bytes_written} weight={t.weight_bytes}"
        )
        return "\n".join(lines) + "\n"


class LiveValues:
    """A running trace's values as a `watch` sees them: a value the trace has not computed
    (the previous trace's, let go there, that nothing has read yet) is computed when read."""

    def __init__(self, values: dict, pending: dict, materialize: Callable):
        self._values, self._pending, self._materialize = values, pending, materialize

    def __getitem__(self, name: str):
        if name in self._pending:
            self._materialize([name])
        return self._values[name]

    def __contains__(self, name: str) -> bool:
        return name in self._values or name in self._pending

    def pending(self, name: str) -> bool:
        """Whether `name` is an unchanged op's value over unchanged inputs not computed yet:
        the previous trace's, bit for bit, when read."""
        return name in self._pending


def _same_sources(before: Graph, after: Graph) -> set[str]:
    """`after`'s inputs and weights that hold what `before`'s namesakes hold: inputs of the
    same spec (given the same values), the very same weight arrays."""
    same = {name for name in after.inputs if name in before.tensors and before.tensors[name] == after.tensors[name]}
    return same | {name for name, array in after.weights.items()
                   if before.weights.get(name) is array and before.tensors[name] == after.tensors[name]}


def _same_op(old: Op | None, op: Op, before: Graph, after: Graph) -> bool:
    """Whether `old` (of `before`) computes what `op` (of `after`) does from inputs of the same names."""
    name = op.outputs[0]
    return (old is not None and old.kind == op.kind and old.inputs == op.inputs and old.outputs == op.outputs
            and before.tensors[name] == after.tensors[name] and _same_attrs(old.attrs, op.attrs))


def _identical(a, b) -> bool:
    """Whether two torch tensors are indistinguishable to an op reading them: the same dtype,
    shape, strides and offset (a kernel may reduce a strided view in another order than a
    contiguous one), and the same bits (NaNs and signed zeros included; torch.equal alone
    takes -0.0 for 0.0). Their storage is 64-byte aligned either way (torch's allocator)."""
    import torch

    if a is b:
        return True
    if (a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride()
            or a.storage_offset() != b.storage_offset()):
        return False
    if a.dtype.is_floating_point or a.dtype.is_complex:
        bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(a.element_size())
        if bits is None or a.dtype.is_complex:
            return False
        a, b = a.view(bits), b.view(bits)
    return bool(torch.equal(a, b))


def unchanged_values(before: Graph, values: dict[str, Any], after: Graph) -> dict[str, Any]:
    """The values of `before`'s trace that `after`'s trace on the same inputs would compute
    again, by op output name: an op of `after` whose output `before` has too, produced by an
    op of the same kind and attrs over the same inputs (graph inputs, the very same weight
    arrays, or outputs unchanged themselves), with the same spec. A step rewrites part of a
    graph; the rest need not be executed again to be checked."""
    same = _same_sources(before, after)
    producers = before.producers()
    out: dict[str, Any] = {}
    for op in after.ops:
        name = op.outputs[0]
        if name in values and _same_op(producers.get(name), op, before, after) and all(i in same for i in op.inputs):
            same.add(name)
            out[name] = values[name]
    return out


def same_computation(before: Graph, after: Graph) -> bool:
    """Whether `after` computes what `before` does, value for value: the same inputs, the very
    same weight arrays, the same ops in the same order (a graph unchanged since it was copied)."""
    return (before.inputs == after.inputs and before.outputs == after.outputs and len(before.ops) == len(after.ops)
            and before.weights.keys() == after.weights.keys()
            and all(before.weights[name] is array for name, array in after.weights.items())
            and all(before.tensors[name] == after.tensors[name] for name in [*after.inputs, *after.weights])
            and all(_same_op(old, op, before, after) for old, op in zip(before.ops, after.ops)))


def _same_attrs(a: dict[str, Any], b: dict[str, Any]) -> bool:
    try:
        return bool(a == b)
    except (ValueError, TypeError):  # an array attr: compare no further, compute again
        return False


_LONG_ATTR = 8


def _attr_text(value: Any) -> str:
    if isinstance(value, list) and _flat_len(value) > _LONG_ATTR:
        digest = hashlib.sha256(repr(value).encode()).hexdigest()[:12]
        try:
            shape = "x".join(map(str, np.shape(value)))
            head = np.ravel(np.asarray(value, dtype=object))[:3].tolist()
        except ValueError:  # ragged (a scan's recorded step ops): its length and first entries
            shape, head = str(len(value)), value[:3]
        return f"<{shape} list {head!r}... sha256:{digest}>"
    return repr(value)


def _flat_len(value: Any) -> int:
    return sum(_flat_len(v) for v in value) if isinstance(value, list) else 1




# The reference interpreter's names, importable from here as before: loaded (with torch)
# on first use only (PEP 562).
_INTERPRETER_NAMES = ("torch_dtype", "dtype_name", "weight_array", "weight_tensor", "scale_tensor", "is_integer",
                      "wrap_int32", "conv_weight_oi", "INTERPRETERS", "_INTERPRETERS")


def __getattr__(name: str):
    if name in _INTERPRETER_NAMES:
        from dse.workload import interpret

        return getattr(interpret, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
