"""Offline layout choices that remove activation transposes.

Three rewrites, in order; each keeps the numerics (checked against PyTorch):
1. Layout ops applied to weights alone (`W.t()`, a sliced buffer) are computed offline:
   the result is a new weight and the op disappears.
2. Channels-last regions (`channels_last`): every conv1d / conv2d runs on channels-last
   activations (NLC / NHWC) with its weight pre-transposed to WIO / HWIO, so that the
   im2col matrix [positions, kernel * in] times the weight [kernel * in, out] is a plain
   matrix product. The ops around the convolutions that do not mix channels with
   positions join the region: elementwise ops and activations whose activation inputs are
   all in the region, batch norm, max / avg pooling, means and sums over positions, cat.
   One permute enters the region where a conv reads a tensor from outside it, one leaves
   it where a non-region op (or a graph output) reads a region tensor; a permute that only
   moves size-1 dims is a free reshape. A flatten of a region tensor that only feeds a
   linear layer reads the channels-last tensor directly: the linear weight's input
   columns are permuted offline instead (LeNet's classifier).
3. Pre-transposed linear weights (`pretranspose`): linear(x, W[N, K], b) becomes
   matmul(x, Wt[K, N], b) with attr weight_layout="KN" (the matrix Ball's B operand).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from dse.frontend.rewrite import Rewriter
from dse.workload.counts import constant_tensors
from dse.workload.graph import (
    ACTIVATION_KINDS,
    BINARY_KINDS,
    CHANNELS_LAST,
    CONV_KINDS,
    INTERPRETERS,
    MOVE_KINDS,
    UNARY_KINDS,
    Graph,
    Op,
    weight_array,
    weight_tensor,
)

OPTIONS = {"channels_last": (bool, True), "pretranspose": (bool, True)}

CF_TO_CL = {3: [0, 2, 1], 4: [0, 2, 3, 1], 5: [0, 2, 3, 4, 1]}
CL_TO_CF = {3: [0, 2, 1], 4: [0, 3, 1, 2], 5: [0, 4, 1, 2, 3]}
_LAYOUT_CL = {"NCL": "NLC", "NCHW": "NHWC", "NCDHW": "NDHWC"}
_WEIGHT_CL = {"OIW": ("WIO", (2, 1, 0)), "OIHW": ("HWIO", (2, 3, 1, 0)), "OIDHW": ("DHWIO", (2, 3, 4, 1, 0))}
_ELEMENTWISE = BINARY_KINDS + ACTIVATION_KINDS + UNARY_KINDS


def _cl_axis(axis: int, rank: int) -> int:
    return 0 if axis == 0 else rank - 1 if axis == 1 else axis - 1


def activation_permutes(graph: Graph) -> tuple[int, int]:
    """(count, elements) of permute ops that move activations (not weights) at run time."""
    constants = constant_tensors(graph)
    moving = [op for op in graph.ops_of_kind("permute") if op.inputs[0] not in constants]
    return len(moving), sum(graph.tensors[op.outputs[0]].numel for op in moving)


def fold_constants(graph: Graph) -> Graph:
    rw = Rewriter(graph, "permute")
    for op in graph.ops:
        if op.kind in MOVE_KINDS and op.inputs and all(rw.is_weight(n) for n in op.inputs):
            args = [weight_tensor(rw.weights[rw.get(n)], rw.spec(n).dtype) for n in op.inputs]
            value = INTERPRETERS[op.kind](op, args)
            rw.alias(op.outputs[0], rw.weight(op.outputs[0], weight_array(value)))
        else:
            rw.keep(op)
    return rw.finish()


def _joins(op: Op, graph: Graph, cl: dict[str, str]) -> bool:
    """Can this op run on the channels-last tensors of the region as they are?"""
    out_shape = graph.tensors[op.outputs[0]].shape
    activations = [n for n in op.inputs if n not in graph.weights]
    if not activations or not all(n in cl for n in activations):
        return False
    if op.kind in _ELEMENTWISE:
        weights_ok = all(graph.tensors[n].numel == 1 for n in op.inputs if n in graph.weights)
        return weights_ok and all(graph.tensors[n].shape == out_shape for n in activations)
    if op.kind == "batch_norm":
        return op.attrs.get("axis", 1) == 1 and len(activations) == 1
    if op.kind in ("max_pool2d", "avg_pool2d"):
        return op.attrs.get("layout", "NCHW") == "NCHW"
    if op.kind in ("mean", "sum"):
        rank = len(graph.tensors[op.inputs[0]].shape)
        spatial = set(range(2, rank))
        dims = set(op.attrs["dims"])
        return dims <= spatial and (op.attrs["keepdim"] or dims == spatial)
    if op.kind == "cat":
        return len(activations) == len(op.inputs)
    return False


def to_channels_last(graph: Graph) -> Graph:
    rw = Rewriter(graph, "permute")
    consumers = graph.consumers()
    cl: dict[str, str] = {}  # old tensor -> its channels-last tensor in the new graph
    entering: dict[str, str] = {}
    leaving: dict[str, str] = {}
    flatten_fix: dict[str, tuple[int, ...]] = {}  # linear op -> channels-first dims of its flattened input

    def to_cl(name: str, source: str) -> str:
        if name in cl:
            return cl[name]
        if name not in entering:
            rank = len(graph.tensors[name].shape)
            entering[name] = rw.permute(rw.get(name), CF_TO_CL[rank], source, hint=f"{name}_cl")
        return entering[name]

    def to_cf(name: str, source: str) -> str:
        if name not in cl:
            return rw.get(name)
        if name not in leaving:
            rank = len(rw.tensors[cl[name]].shape)
            leaving[name] = rw.permute(cl[name], CL_TO_CF[rank], source, hint=f"{name}_cf")
        return leaving[name]

    for op in graph.ops:
        out = op.outputs[0]
        shape = graph.tensors[out].shape
        if (op.kind in CONV_KINDS and op.attrs.get("layout") in _LAYOUT_CL and op.inputs[1] in graph.weights
                and len(shape) in CF_TO_CL):
            weight_layout, dims = _WEIGHT_CL[op.attrs["weight_layout"]]
            w = rw.weight(f"{op.inputs[1]}_{weight_layout.lower()}", graph.weights[op.inputs[1]].transpose(dims))
            inputs = [to_cl(op.inputs[0], op.source), w] + [rw.get(n) for n in op.inputs[2:]]
            rw.keep(op, inputs=inputs, attrs={**op.attrs, "layout": _LAYOUT_CL[op.attrs["layout"]],
                                              "weight_layout": weight_layout})
            rw.set_spec(out, tuple(shape[d] for d in CF_TO_CL[len(shape)]))
            cl[out] = out
            continue
        if len(graph.tensors[op.inputs[0]].shape) in CF_TO_CL and _joins(op, graph, cl):
            rank = len(graph.tensors[op.inputs[0]].shape)
            attrs = dict(op.attrs)
            stays = len(shape) == rank
            if op.kind == "batch_norm":
                attrs["axis"] = rank - 1
            elif op.kind in ("max_pool2d", "avg_pool2d"):
                attrs["layout"] = "NHWC"
            elif op.kind in ("mean", "sum"):
                attrs["dims"] = sorted(_cl_axis(d, rank) for d in attrs["dims"])
            elif op.kind == "cat":
                attrs["dim"] = _cl_axis(attrs["dim"], rank)
            rw.keep(op, inputs=[cl.get(n, rw.get(n)) for n in op.inputs], attrs=attrs)
            if stays:  # [N, C] after a mean over every position is the same in both layouts
                rw.set_spec(out, tuple(shape[d] for d in CF_TO_CL[rank]))
                cl[out] = out
            continue
        if op.kind == "reshape" and op.inputs[0] in cl and _flattens_into_linear(op, graph, consumers):
            source_shape = graph.tensors[op.inputs[0]].shape
            rw.keep(op, inputs=[cl[op.inputs[0]]])
            flatten_fix[consumers[out][0].name] = source_shape[1:]
            continue
        if op.name in flatten_fix:
            dims = flatten_fix[op.name]  # (C, *spatial): permute W's input columns to (*spatial, C)
            weight = graph.weights[op.inputs[1]]
            moved = weight.reshape(weight.shape[0], *dims)
            moved = moved.transpose(0, *range(2, len(dims) + 1), 1).reshape(weight.shape)
            w = rw.weight(f"{op.inputs[1]}_cl_columns", moved)
            rw.keep(op, inputs=[rw.get(op.inputs[0]), w] + [rw.get(n) for n in op.inputs[2:]])
            continue
        rw.keep(op, inputs=[to_cf(n, op.source) for n in op.inputs])
    outputs = [to_cf(n, "output") for n in graph.outputs]
    return rw.finish(outputs)


def _flattens_into_linear(op: Op, graph: Graph, consumers: dict[str, list[Op]]) -> bool:
    source = graph.tensors[op.inputs[0]].shape
    target = tuple(op.attrs["shape"])
    users = consumers[op.outputs[0]]
    return (target == (source[0], math.prod(source[1:])) and op.outputs[0] not in graph.outputs
            and len(users) == 1 and users[0].kind == "linear" and users[0].inputs[0] == op.outputs[0]
            and users[0].inputs[1] in graph.weights and op.outputs[0] not in users[0].inputs[1:])


def _transposed(weight: np.ndarray) -> np.ndarray:
    """A 2-D weight's transpose as a new C-contiguous array: torch's blocked transpose, 2.5x
    numpy's strided copy on a 14336 x 4096 projection (the same values, copied)."""
    try:
        return torch.from_numpy(np.ascontiguousarray(weight)).t().contiguous().numpy()
    except TypeError:  # a dtype torch does not take from numpy
        return np.ascontiguousarray(weight.T)


def pretranspose_linears(graph: Graph) -> Graph:
    rw = Rewriter(graph, "permute")
    for op in graph.ops:
        if op.kind == "linear" and op.inputs[1] in graph.weights:
            w = rw.weight(f"{op.inputs[1]}_kn", _transposed(graph.weights[op.inputs[1]]))
            attrs = {**op.attrs, "weight_layout": "KN"}
            rw.keep(op, kind="matmul", inputs=[rw.get(op.inputs[0]), w] + [rw.get(n) for n in op.inputs[2:]],
                    attrs=attrs)
        else:
            rw.keep(op)
    return rw.finish()


def run(graph: Graph, ctx, channels_last: bool = True, pretranspose: bool = True) -> Graph:
    before = activation_permutes(graph)
    result = fold_constants(graph)
    if channels_last:
        result = to_channels_last(result)
    if pretranspose:
        result = pretranspose_linears(result)
    after = activation_permutes(result)
    ctx.details.update(
        activation_permutes_before=before[0], activation_permutes_after=after[0],
        permuted_elements_before=before[1], permuted_elements_after=after[1],
        convs_channels_last=sum(op.attrs.get("layout") in CHANNELS_LAST for op in result.ops_of_kind(*CONV_KINDS)),
        weights_pretransposed=sum(op.attrs.get("weight_layout") == "KN" for op in result.ops_of_kind("matmul")),
    )
    return result

