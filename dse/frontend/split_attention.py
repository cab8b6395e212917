"""Split scaled-dot-product attention into the ops a chip runs: two matrix products for
the matrix Ball and the softmax between them on the core.

sdpa(q, k, v, mask?) becomes
    scores = matmul(q, permute(k, [..., -1, -2])) * scale      (scale = 1 / sqrt(D) unless given)
    probs  = softmax(scores + mask, dim=-1)                    (is_causal: a constant 0 / -inf mask)
    out    = matmul(probs, v)
A boolean mask given as a weight becomes an additive 0 / -inf weight; an attention whose
boolean mask is computed at run time is left whole.
"""

from __future__ import annotations

import math

import numpy as np

from dse.frontend.rewrite import Rewriter
from dse.workload.graph import Graph

OPTIONS: dict = {}


def run(graph: Graph, ctx) -> Graph:
    rw = Rewriter(graph, "split_attention")
    split = kept = 0
    for op in graph.ops:
        if op.kind != "sdpa":
            rw.keep(op)
            continue
        q, k, v, *mask = op.inputs
        a = op.attrs
        if mask and graph.tensors[mask[0]].dtype == "bool" and mask[0] not in graph.weights:
            rw.keep(op)
            kept += 1
            continue
        qs, ks, vs = (graph.tensors[n].shape for n in (q, k, v))
        dtype = graph.tensors[op.outputs[0]].dtype
        rank = len(ks)
        swap = list(range(rank - 2)) + [rank - 1, rank - 2]
        kt = rw.permute(k, swap, op.source, hint=f"{op.name}_kt")
        score_shape = qs[:-1] + (ks[-2],)
        gemm = {"M": qs[-2], "N": ks[-2], "K": qs[-1], "batch": a["batch"], "has_bias": False}
        scores = rw.emit("matmul", [q, kt], score_shape, dtype, gemm, op.source, hint=f"{op.name}_scores")
        scale = a["scale"] if a.get("scale") is not None else 1.0 / math.sqrt(qs[-1])
        scores = rw.emit("mul", [scores], score_shape, dtype, {"scalar": scale, "scalar_index": 1}, op.source,
                         hint=f"{op.name}_scaled")
        additive = None
        if a.get("is_causal"):
            keep = np.tril(np.ones((qs[-2], ks[-2]), dtype=bool))
            additive = rw.weight(f"{op.name}_causal_mask", np.where(keep, 0.0, -np.inf).astype(np.float32))
        elif mask and graph.tensors[mask[0]].dtype == "bool":
            additive = rw.weight(f"{mask[0]}_additive",
                                 np.where(graph.weights[mask[0]], 0.0, -np.inf).astype(np.float32))
        elif mask:
            additive = rw.get(mask[0])
        if additive is not None:
            scores = rw.emit("add", [scores, additive], score_shape, dtype, {}, op.source, hint=f"{op.name}_masked")
        probs = rw.emit("softmax", [scores], score_shape, dtype, {"dim": rank - 1}, op.source,
                        hint=f"{op.name}_probs")
        gemm = {"M": qs[-2], "N": vs[-1], "K": ks[-2], "batch": a["batch"], "has_bias": False}
        rw.emit("matmul", [probs, v], graph.tensors[op.outputs[0]].shape, dtype, gemm, op.source,
                name=op.outputs[0])
        split += 1
    ctx.details.update(split=split, left_whole=kept)
    return rw.finish()
