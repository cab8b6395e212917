"""Fold an inference batch norm into the convolution before it.

conv(x, W, b) followed by batch_norm(gamma, beta, mean, var, eps) over the conv's output
channels becomes conv(x, W', b') with, per output channel c,
    a[c] = gamma[c] / sqrt(var[c] + eps),  W'[c] = W[c] * a[c],  b'[c] = (b[c] - mean[c]) * a[c] + beta[c]
computed in float64 and stored as float32. Only a conv whose output nothing else reads is
folded (otherwise the unnormalised value is still needed); a batch norm left in place
(no conv before it, or a shared conv output) is reported, not an error.
"""

from __future__ import annotations

import numpy as np

from dse.frontend.rewrite import Rewriter
from dse.workload.graph import CHANNELS_LAST, CHANNELS_LAST_WEIGHTS, CONV_KINDS, Graph

OPTIONS: dict = {}


def _channel_axis(layout: str, rank: int) -> int:
    return rank - 1 if layout in CHANNELS_LAST else 1


def run(graph: Graph, ctx) -> Graph:
    producers, consumers = graph.producers(), graph.consumers()
    folds = {}  # batch_norm op name -> conv op
    for op in graph.ops_of_kind("batch_norm"):
        conv = producers.get(op.inputs[0])
        if conv is None or conv.kind not in CONV_KINDS or len(consumers[conv.outputs[0]]) != 1:
            continue
        if conv.outputs[0] in graph.outputs or not all(n in graph.weights for n in op.inputs[1:]):
            continue
        rank = len(graph.tensors[conv.outputs[0]].shape)
        if op.attrs.get("axis", 1) != _channel_axis(conv.attrs.get("layout", "NCHW"), rank):
            continue
        if conv.inputs[1] not in graph.weights or (conv.attrs.get("has_bias") and conv.inputs[2] not in graph.weights):
            continue
        folds[op.name] = conv
    folded_convs = {conv.name: name for name, conv in folds.items()}
    bn_ops = {op.name: op for op in graph.ops_of_kind("batch_norm")}

    rw = Rewriter(graph, "fold_batch_norm")
    for op in graph.ops:
        if op.name in folds:
            rw.alias(op.outputs[0], folds[op.name].outputs[0])
            continue
        if op.name not in folded_convs:
            rw.keep(op)
            continue
        bn = bn_ops[folded_convs[op.name]]
        params = [graph.weights[n].astype(np.float64) for n in bn.inputs[1:]]
        gamma = params.pop(0) if bn.attrs.get("has_weight", True) else None
        beta = params.pop(0) if bn.attrs.get("has_bias", True) else None
        mean, var = params
        a = 1.0 / np.sqrt(var + bn.attrs["eps"])
        if gamma is not None:
            a = a * gamma
        weight = graph.weights[op.inputs[1]].astype(np.float64)
        out_axis = weight.ndim - 1 if op.attrs.get("weight_layout", "OIHW") in CHANNELS_LAST_WEIGHTS else 0
        shape = [1] * weight.ndim
        shape[out_axis] = -1
        bias = graph.weights[op.inputs[2]].astype(np.float64) if op.attrs.get("has_bias") else np.zeros_like(mean)
        new_bias = (bias - mean) * a + (beta if beta is not None else 0.0)
        w_name = rw.weight(f"{op.inputs[1]}_folded", (weight * a.reshape(shape)).astype(np.float32))
        b_name = rw.weight(f"{bn.inputs[-1].removesuffix('_running_var')}_folded_bias", new_bias.astype(np.float32))
        rw.keep(op, inputs=[rw.get(op.inputs[0]), w_name, b_name], attrs={**op.attrs, "has_bias": True},
                source=f"{op.source} + {bn.source} [fold_batch_norm]")
    ctx.details.update(folded=len(folds), left=len(bn_ops) - len(folds))
    return rw.finish()
