"""The model of temporal span partitioning (`dse.lower.spans.lower_spans`).

Worker w owns output rows ``span_partition(L, W)[w]`` and runs the whole stack on its
span plus halo (`span_graph`: every temporal tensor cut to the rows the owned outputs
need, slices where an operand has more rows than an op needs), one worker's program with
no barrier between layers; then copies its owned rows into the assembled output, and one
BARRIER ends the program. So the latency is the slowest worker's stack plus its assembly
copy plus the barrier, and the partitioning overheads are explicit:

* halo recomputation: the rows each worker computes beyond its owned share, summed over
  workers (``sum_w cost_w(op) - cost(op, unpartitioned)`` per op);
* assembly: the copy of the owned rows into the shared output;
* the final barrier.

Each span graph is costed by the very walk the tile partitioning uses
(`dse.analytical.graph_cost`), for one worker.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..mapping import CandidateArrays
from ..plan.spans import SpanError, span_graph, span_partition, time_axes
from .graph_cost import OpCost, graph_costs


def _one_worker(params: CandidateArrays) -> CandidateArrays:
    return dataclasses.replace(params, workers=np.ones(params.n, dtype=np.int64))


def span_costs(graph, params: CandidateArrays, chips, workers: int) -> tuple[list[OpCost], np.ndarray]:
    """Per op of `graph`, the slowest worker's costs (a slice op's cost goes to the op it
    feeds; the assembly copy and the final barrier to the last op), and per op the halo
    recomputation summed over workers. `params` are candidates that all use `workers`
    workers; raises `SpanError` when the graph has no temporal span rule."""
    out = graph.outputs[0]
    axes = time_axes(graph)
    if out not in axes or len(graph.outputs) != 1:
        raise SpanError(f"output {out} of {graph.name} has no temporal axis (span partitioning needs a conv1d / "
                        f"elementwise stack over a 3-D input)")
    spec = graph.tensors[out]
    length = spec.shape[axes[out]]
    one = _one_worker(params)
    whole = {op.name: c for op, c in zip(graph.ops, graph_costs(graph, one, chips))}
    names = [op.name for op in graph.ops]
    per_worker = []  # per worker: {op name: OpCost} with slices folded into their consumer
    totals = []
    assembly = []  # per worker: the copy into the shared output and the barrier
    for span in span_partition(length, workers):
        if len(span) == 0:
            continue
        sg, _, _ = span_graph(graph, out, span)
        costs = graph_costs(sg, one, chips)
        folded: dict[str, OpCost] = {}
        pending = None
        for op, c in zip(sg.ops, costs):
            if op.name not in whole:  # a slice the span graph added: charge it to its consumer
                pending = c if pending is None else _sum(pending, c)
                continue
            folded[op.name] = c if pending is None else _sum(c, pending)
            pending = None
        # assembly: the owned rows copied into the shared output (a core copy)
        shape = list(spec.shape)
        shape[axes[out]] = len(span)
        last = folded[names[-1]]
        assembly.append(np.ceil(math.prod(shape) * params.copy_cpe).astype(np.int64) + params.barrier_cycles)
        last.core_cycles = last.core_cycles + np.ceil(math.prod(shape) * params.copy_cpe).astype(np.int64)
        last.syncs = last.syncs + 1
        last.cycles = np.where(last.feasible, last.cycles + np.ceil(math.prod(shape) * params.copy_cpe).astype(np.int64)
                               + params.barrier_cycles, 0)
        last.busy_cycles = last.busy_cycles + np.ceil(math.prod(shape) * params.copy_cpe).astype(np.int64)
        per_worker.append(folded)
        totals.append(sum(folded[n].cycles for n in names if n in folded))
    slowest = np.argmax(np.stack(totals), axis=0)  # per candidate
    result = []
    halo = []
    for name in names:
        parts = [w.get(name) for w in per_worker]
        present = [p for p in parts if p is not None]
        chosen = _pick(parts, slowest, whole[name])
        busy = sum(p.busy_cycles for p in present)
        chosen.busy_cycles = busy
        result.append(chosen)
        computed = sum(p.cycles for p in present) - (sum(assembly) if name == names[-1] else 0)
        halo.append(np.maximum(computed - whole[name].cycles, 0))
    return result, np.stack(halo)


def _sum(a: OpCost, b: OpCost) -> OpCost:
    out = OpCost(**vars(a))
    for f in ("cycles", "compute_cycles", "dma_cycles", "core_cycles", "ball_cycles", "busy_cycles", "syncs",
              "dma_bytes"):
        setattr(out, f, getattr(a, f) + getattr(b, f))
    for f in ("sram_bytes", "bank_rows", "banks"):
        setattr(out, f, np.maximum(getattr(a, f), getattr(b, f)))
    out.feasible = a.feasible & b.feasible
    out.reason = np.where(a.reason != "", a.reason, b.reason)
    return out


def _pick(parts: list[OpCost | None], slowest: np.ndarray, fallback: OpCost) -> OpCost:
    """Per candidate, the slowest worker's figures for this op."""
    out = OpCost(**vars(fallback))
    for f, v in vars(fallback).items():
        rows = [getattr(p, f) if p is not None else np.zeros_like(v) for p in parts]
        stacked = np.stack([np.broadcast_to(r, np.shape(v)) for r in rows])
        setattr(out, f, np.take_along_axis(stacked, slowest[None, :], axis=0)[0])
    return out
