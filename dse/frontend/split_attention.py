"""Split scaled-dot-product attention into the ops a chip runs: two matrix products for
the matrix Ball and the softmax between them on the core.

sdpa(q, k, v, mask?) becomes
    scores = matmul(q, permute(k, [..., -1, -2])) * scale      (scale = 1 / sqrt(D) unless given)
    probs  = softmax(scores + mask, dim=-1)                    (is_causal: a constant 0 / -inf mask)
    out    = matmul(probs, v)
A boolean mask given as a weight becomes an additive 0 / -inf weight; an attention whose
boolean mask is computed at run time is left whole.

K and V shared by trailing head dims (multi-query attention: K, V of shape (B, 1, T, D)
for the query's (B, H, S, D)) are read in place: the query heads fold into the rows,
(B, H*S, D) @ (B, D, T), so each batch is one product on the matrix Ball and no K or V
is copied per head.
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
        shared = _shared_heads(qs, ks, vs)
        if shared:
            _split_shared(rw, op, shared, qs, ks, vs, dtype, graph)
            split += 1
            continue
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


def _shared_heads(qs, ks, vs) -> int:
    """How many trailing batch dims K and V share (size 1 where the query's are not); 0
    when they share none or broadcast otherwise."""
    if len(ks) != len(qs) or ks[:-2] != vs[:-2]:
        return 0
    lead = len(qs) - 2
    while lead > 0 and ks[lead - 1] == 1 and qs[lead - 1] != 1:
        lead -= 1
    if lead == len(qs) - 2 or ks[:lead] != qs[:lead] or any(d != 1 for d in ks[lead:-2]):
        return 0
    return len(qs) - 2 - lead


def _split_shared(rw: Rewriter, op, shared: int, qs, ks, vs, dtype: str, graph: Graph) -> None:
    q, k, v, *mask = op.inputs
    a = op.attrs
    lead = len(qs) - 2 - shared
    outer, rows = qs[:lead], math.prod(qs[lead:-1])  # the query heads folded into the rows
    S, T, D, Dv = qs[-2], ks[-2], qs[-1], vs[-1]

    def reshape(tensor, shape, hint, name=None):
        return rw.emit("reshape", [tensor], tuple(shape), dtype, {"shape": list(shape)}, op.source,
                       hint=f"{op.name}_{hint}", **({"name": name} if name else {}))

    k2 = reshape(k, outer + (T, D), "k_shared")
    kt = rw.permute(k2, list(range(lead)) + [lead + 1, lead], op.source, hint=f"{op.name}_kt")
    q2 = reshape(q, outer + (rows, D), "q_rows")
    flat = outer + (rows, T)
    gemm = {"M": rows, "N": T, "K": D, "batch": math.prod(outer), "has_bias": False}
    scores = rw.emit("matmul", [q2, kt], flat, dtype, gemm, op.source, hint=f"{op.name}_scores")
    scale = a["scale"] if a.get("scale") is not None else 1.0 / math.sqrt(D)
    scores = rw.emit("mul", [scores], flat, dtype, {"scalar": scale, "scalar_index": 1}, op.source,
                     hint=f"{op.name}_scaled")
    additive = None
    if a.get("is_causal"):
        keep = np.tril(np.ones((S, T), dtype=bool))
        additive = rw.weight(f"{op.name}_causal_mask", np.where(keep, 0.0, -np.inf).astype(np.float32))
    elif mask and graph.tensors[mask[0]].dtype == "bool":
        additive = rw.weight(f"{mask[0]}_additive", np.where(graph.weights[mask[0]], 0.0, -np.inf).astype(np.float32))
    elif mask:
        additive = rw.get(mask[0])
    if additive is not None:  # the mask is per query position: back to (..., S, T) for it
        score_shape = qs[:-1] + (T,)
        scores = reshape(scores, score_shape, "scores_heads")
        scores = rw.emit("add", [scores, additive], score_shape, dtype, {}, op.source, hint=f"{op.name}_masked")
        probs = rw.emit("softmax", [scores], score_shape, dtype, {"dim": len(qs) - 1}, op.source,
                        hint=f"{op.name}_probs")
        probs = reshape(probs, flat, "probs_rows")
    else:
        probs = rw.emit("softmax", [scores], flat, dtype, {"dim": lead + 1}, op.source, hint=f"{op.name}_probs")
    v2 = reshape(v, outer + (T, Dv), "v_shared")
    gemm = {"M": rows, "N": Dv, "K": T, "batch": math.prod(outer), "has_bias": False}
    out = rw.emit("matmul", [probs, v2], outer + (rows, Dv), dtype, gemm, op.source, hint=f"{op.name}_out")
    reshape(out, graph.tensors[op.outputs[0]].shape, "heads", name=op.outputs[0])
