"""Helpers shared by the frontend steps: build a new graph from an old one, op by op.

A step never edits the graph it is given (the pipeline keeps every stage to dump and
check); it reads the old graph and emits a new one through a `Rewriter`, which keeps ops
in topological order, gives new tensors unique names, drops what nothing reads, and
recomputes the source-derived counts.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np

from dse.workload.counts import recount
from dse.workload.graph import CHANNELS_LAST, CONV_KINDS, Graph, Op, OpCounts, TensorSpec


class StepError(Exception):
    """A step cannot apply to this graph (the pattern it rewrites is not there)."""


class Rewriter:
    def __init__(self, graph: Graph, step: str):
        self.graph = graph
        self.step = step
        self.ops: list[Op] = []
        self.tensors: dict[str, TensorSpec] = dict(graph.tensors)
        self.weights: dict[str, np.ndarray] = dict(graph.weights)
        self.rename: dict[str, str] = {}
        self._taken = set(graph.tensors) | {op.name for op in graph.ops}

    # --- names ---
    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self._taken:
            name, i = f"{base}_{i}", i + 1
        self._taken.add(name)
        return name

    def get(self, name: str) -> str:
        """The current name of an old tensor (after aliases)."""
        while name in self.rename:
            name = self.rename[name]
        return name

    def alias(self, old: str, new: str) -> None:
        """Readers of `old` read `new` from now on."""
        if old != new:
            self.rename[old] = new

    def spec(self, name: str) -> TensorSpec:
        return self.tensors[self.get(name)]

    def is_weight(self, name: str) -> bool:
        return self.get(name) in self.weights

    # --- emitting ---
    def keep(self, op: Op, **changes: Any) -> Op:
        """Copy an old op into the new graph, its inputs renamed; `changes` replaces fields."""
        new = Op(op.name, op.kind, [self.get(n) for n in op.inputs], list(op.outputs), dict(op.attrs), op.source,
                 op.counts)
        for key, value in changes.items():
            setattr(new, key, value)
        self.ops.append(new)
        return new

    def emit(self, kind: str, inputs: list[str], shape: tuple[int, ...], dtype: str, attrs: dict[str, Any],
             source: str, name: str | None = None, hint: str | None = None) -> str:
        """Append a new op; returns its output tensor's name (`name` exactly, or fresh from `hint`)."""
        out = name if name is not None else self.fresh(hint or kind)
        self._taken.add(out)
        self.tensors[out] = TensorSpec(out, tuple(int(d) for d in shape), dtype)
        self.ops.append(Op(out, kind, [self.get(n) for n in inputs], [out], attrs, f"{source} [{self.step}]",
                           OpCounts()))
        return out

    def set_spec(self, name: str, shape: tuple[int, ...], dtype: str | None = None) -> None:
        old = self.tensors[name]
        self.tensors[name] = TensorSpec(name, tuple(int(d) for d in shape), dtype or old.dtype)

    def weight(self, hint: str, array: np.ndarray) -> str:
        name = self.fresh(hint)
        array = np.asarray(array, order="C")
        self.weights[name] = array
        self.tensors[name] = TensorSpec(name, tuple(array.shape), str(array.dtype))
        return name

    def permute(self, tensor: str, dims: list[int], source: str, hint: str) -> str:
        """A permute op, or a free reshape when only size-1 dims move."""
        spec = self.spec(tensor)
        shape = tuple(spec.shape[d] for d in dims)
        moving = [d for d in dims if spec.shape[d] != 1]
        if moving == sorted(moving):
            return self.emit("reshape", [tensor], shape, spec.dtype, {"shape": list(shape)}, source, hint=hint)
        return self.emit("permute", [tensor], shape, spec.dtype, {"dims": list(dims)}, source, hint=hint)

    # --- finishing ---
    def finish(self, outputs: list[str] | None = None) -> Graph:
        outputs = [self.get(n) for n in (outputs if outputs is not None else self.graph.outputs)]
        ops = _live_ops(self.ops, outputs)
        bound = self._identical_weights({n for op in ops for n in op.inputs} | set(outputs))
        if bound:  # readers of a copy read the one kept
            for op in ops:
                op.inputs = [bound.get(n, n) for n in op.inputs]
            outputs = [bound.get(n, n) for n in outputs]
        read = {n for op in ops for n in op.inputs} | set(outputs)
        weights = {name: array for name, array in self.weights.items() if name in read}
        live = set(self.graph.inputs) | set(weights) | {out for op in ops for out in op.outputs}
        tensors = {name: spec for name, spec in self.tensors.items() if name in live}
        graph = Graph(self.graph.name, ops, tensors, list(self.graph.inputs), outputs, weights)
        for op in graph.ops:
            refresh_gemm_attrs(op, graph.tensors)
        recount(graph)
        return graph


    def _identical_weights(self, read: set[str]) -> dict[str, str]:
        """{copy: the weight kept}: read-only payloads the step's graph would hold twice,
        byte for byte (same dtype, shape and bytes: a Linear applied twice, permuted and
        quantized once per use), bound to one resource, the first made. The old graph's
        weights were bound already, so only the step's new ones are hashed, and an old one
        only when a new one has its dtype and shape."""
        live = [n for n in self.weights if n in read]
        new = [n for n in live if n not in self.graph.weights]
        if not new:
            return {}
        forms = {(self.weights[n].dtype.str, self.weights[n].shape) for n in new}
        # A weight no other shares a form and a sample of bytes with has no copy: only the
        # rest are hashed whole (a real layer's projections are GBs, their samples differ).
        sampled: dict[tuple, list[str]] = {}
        for name in live:
            array = self.weights[name]
            form = (array.dtype.str, array.shape)
            if form in forms:
                sampled.setdefault((*form, _sample(array)), []).append(name)
        alike = {name for names in sampled.values() if len(names) > 1 for name in names}
        kept: dict[tuple, str] = {}
        bound = {}
        for name in live:
            if name not in alike:
                continue
            array = self.weights[name]
            form = (array.dtype.str, array.shape)
            key = (*form, hashlib.sha256(np.ascontiguousarray(array).view(np.uint8).data).digest())
            if key in kept:
                bound[name] = kept[key]
            else:
                kept[key] = name
        return bound


def _sample(array: np.ndarray, count: int = 4096) -> bytes:
    """About `count` elements of `array` spread over it, as bytes: equal arrays give equal samples."""
    return np.asarray(array.flat[np.arange(0, array.size, max(1, array.size // count))]).tobytes()


def _live_ops(ops: list[Op], outputs: list[str]) -> list[Op]:
    needed = set(outputs)
    live: list[Op] = []
    for op in reversed(ops):
        if any(out in needed for out in op.outputs):
            live.append(op)
            needed.update(op.inputs)
    return live[::-1]


def refresh_gemm_attrs(op: Op, tensors: dict[str, TensorSpec]) -> None:
    """Recompute M, N, K, batch of a linear / matmul / conv from its current shapes."""
    if op.kind not in ("linear", "matmul", *CONV_KINDS):
        return
    a, b = tensors[op.inputs[0]].shape, tensors[op.inputs[1]].shape
    out = tensors[op.outputs[0]].shape
    if op.kind == "linear":
        op.attrs.update(M=math.prod(a[:-1]), N=b[0], K=a[-1], batch=1)
    elif op.kind == "matmul":
        if op.attrs.get("weight_layout") == "KN":  # a linear whose weight was pre-transposed: rows flattened
            op.attrs.update(M=math.prod(a[:-1]), N=b[-1], K=a[-1], batch=1)
        else:
            matrix_dims = (len(a) >= 2) + (len(b) >= 2)
            op.attrs.update(M=a[-2] if len(a) >= 2 else 1, N=b[-1] if len(b) >= 2 else 1, K=a[-1],
                            batch=math.prod(out[: len(out) - matrix_dims]))
    else:
        channels_last = op.attrs.get("layout") in CHANNELS_LAST
        spatial = out[1:-1] if channels_last else out[2:]
        out_channels = out[-1] if channels_last else out[1]
        op.attrs.update(M=out[0] * math.prod(spatial), N=out_channels, K=math.prod(b) // out_channels, batch=1)
