"""Attention's score chain fused into one core pass (``mapping.fusion = "fuse"``): decided
here for the lowering and the analytical model alike.

Between attention's two products the graph has, on the core, a chain of passes over the
scores: ``dequantize`` of the QK^T accumulator, a scalar ``mul`` / ``div`` (1 / sqrt(D)), an
optional additive mask (a weight), reshapes that regroup the rows (grouped-query
attention), ``softmax`` over the last axis, and the ``quantize`` that
PV reads as its A operand. Materialized, each pass writes its fp32 tensor to DRAM and the
next reads it back (the quantizations may go through Int2Fp / Fp2Int streams, MVIN and
MVOUT each), with a sync after each. Fused, one core op (kind ``graph_chain``) reads the
accumulator's blocked tiles where the matrix Ball left them (only the logical rows and
columns), applies the stages in order with the graph's own interpreters (so the bits are
the reference's), and writes the int8 probabilities straight into PV's padded A buffer.
Its charge is the stages' elements together (every stage's arithmetic still runs); what
goes is the intermediate tensors, their syncs and the streams' transfers.

What cannot be fused on this chip family: the scores themselves still leave the
accumulator bank by MVOUT, and the probabilities enter PV's bank by MVIN, because softmax
has no Ball and the core reads DRAM, not banks (`HARDWARE.md`). No bank is held across the
chain, so it needs no bank budget of its own.

The pass is split across workers as the materialized passes are, along the first of the
scores' axes of at least 2: by batch entries (heads), else by rows (`chain_parts`); every
stage is row-independent (elementwise, a mask broadcast over the heads, softmax along a row).
"""

from __future__ import annotations

import math

from ..workload.graph import Graph, Op, scale_array
from .units import matrix_product

CHAIN_KIND = "graph_chain"  # the core-op kind of a fused chain
SCALARS = ("mul", "div")  # a scalar stage: one operand, the scalar in the op's attrs


def _per_tensor(graph: Graph, op: Op) -> bool:
    return scale_array(op.attrs, graph.tensors[op.outputs[0]].shape).size == 1


def _only_reader(graph: Graph, consumers, name: str) -> Op | None:
    readers = consumers.get(name, [])
    return readers[0] if len(readers) == 1 and name not in graph.outputs else None


def _stage(graph: Graph, op: Op, src: str, batch: tuple[int, ...]) -> bool:
    """A stage between the dequantize and the softmax: a scalar mul / div, the add of a
    mask weight that broadcasts over the batch axes (every axis but the last two is 1), or
    a reshape that keeps the `batch` axes and the last one (grouped-query attention's view
    of a KV head's query rows as (query heads, positions))."""
    if op.inputs[0] != src:
        return False
    if op.kind == "reshape":
        shape = graph.tensors[op.outputs[0]].shape
        return (len(op.inputs) == 1 and tuple(shape[:len(batch)]) == batch
                and shape[-1] == graph.tensors[src].shape[-1] and len(shape) > len(batch))
    if op.kind in SCALARS:
        return len(op.inputs) == 1 and "scalar" in op.attrs
    if op.kind == "add" and len(op.inputs) == 2 and op.inputs[1] in graph.weights:
        shape = graph.tensors[op.inputs[1]].shape
        return all(n == 1 for n in shape[:-2])
    return False


def score_chains(graph: Graph) -> dict[str, tuple[Op, ...]]:
    """The fusable chains, by the name of the quantize that ends each: dequantize of a
    matrix-Ball product (per-tensor scale) -> scalar / mask stages -> softmax over the last
    axis -> quantize (per-tensor) read only as the A operand of one matrix-Ball product;
    every tensor in between read once and not a graph output."""
    consumers = graph.consumers()
    producers = graph.producers()
    chains: dict[str, tuple[Op, ...]] = {}
    for op in graph.ops:
        if op.kind != "dequantize" or not _per_tensor(graph, op):
            continue
        source = producers.get(op.inputs[0])
        if source is None or not matrix_product(graph, source):
            continue
        chain = [op]
        batch = tuple(graph.tensors[op.outputs[0]].shape[:-2])
        nxt = _only_reader(graph, consumers, op.outputs[0])
        while nxt is not None and _stage(graph, nxt, chain[-1].outputs[0], batch):
            chain.append(nxt)
            nxt = _only_reader(graph, consumers, nxt.outputs[0])
        rank = len(graph.tensors[chain[-1].outputs[0]].shape)
        if nxt is None or nxt.kind != "softmax" or nxt.inputs[0] != chain[-1].outputs[0] \
                or nxt.attrs.get("dim", -1) not in (-1, rank - 1) or rank < 2:
            continue
        chain.append(nxt)
        quant = _only_reader(graph, consumers, nxt.outputs[0])
        if quant is None or quant.kind != "quantize" or not _per_tensor(graph, quant):
            continue
        pv = _only_reader(graph, consumers, quant.outputs[0])
        if pv is None or not matrix_product(graph, pv) or pv.inputs[0] != quant.outputs[0] \
                or quant.outputs[0] in pv.inputs[1:]:
            continue
        chains[quant.name] = (*chain, quant)
    return chains


def chain_extent(graph: Graph, chain: tuple[Op, ...]) -> tuple[int, int, int]:
    """(batch, M, N) of the scores the chain runs over."""
    shape = graph.tensors[chain[0].outputs[0]].shape
    return math.prod(shape[:-2]), shape[-2], shape[-1]


def chain_elements(graph: Graph, chain: tuple[Op, ...], rows: int) -> int:
    """Elements the fused pass is charged for over `rows` rows of scores: every stage's (a
    reshape is a view: none)."""
    N = chain_extent(graph, chain)[2]
    return sum(op.kind != "reshape" for op in chain) * rows * N


def chain_parts(graph: Graph, chain: tuple[Op, ...], workers: int) -> list[tuple[int, int, int, int]]:
    """Each worker's part ``(batch lo, batch hi, row lo, row hi)`` (workers with none left
    out): ``ceil(batch / W)`` batch entries each when there are several, else ``ceil(M / W)``
    rows of the one entry."""
    batch, M, _ = chain_extent(graph, chain)
    workers = max(workers, 1)
    if batch >= 2 or workers == 1:
        per = -(-batch // workers)
        return [(lo, min(batch, lo + per), 0, M) for lo in range(0, batch, per)]
    per = -(-M // workers)
    return [(0, 1, lo, min(M, lo + per)) for lo in range(0, M, per)]


__all__ = ["CHAIN_KIND", "chain_elements", "chain_extent", "chain_parts", "score_chains"]
