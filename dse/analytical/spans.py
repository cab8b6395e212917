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
(`dse.analytical.graph_cost`), for one worker. DMA bytes are summed over the workers (each
moves its own), as the emulator counts them.

With ``mapping.weights = "shared"`` the program starts with the stack's shared copy of the
weights (`dse.plan.spans.shared_stack`): each worker loads its share of the stack's B tiles
(`SharedStack.loads`: back to back on its DMA engine, the tiles of cores' copies sharing
the system bus, the last landing ``shared_memory.latency_cycles`` later), one BARRIER, then
the spans, whose matmuls read B in shared memory with no load of their own. That is charged
to each worker's first op. A stack loaded in waves (`SharedStack.waves`: a weight that does
not fit above the earlier ones of its wave takes the banks they free once every span is past
their ops) charges each later wave's BARRIER, loads and BARRIER to the op it begins, and the
workers meet there: per wave, the slowest worker's ops. Every op reports the shared banks
of the largest wave.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..cost.dma import candidate_dma_cycles
from ..mapping import CandidateArrays
from ..plan.graph_plan import dram_footprint, plan_graph
from ..plan.memory import itemsize, pad, padded_shape
from ..plan.spans import SharedStack, SpanError, shared_stack, span_graph, span_partition, time_axes
from .graph_cost import ACTIVITY_FIELDS, OpCost, graph_costs


def _one_worker(params: CandidateArrays) -> CandidateArrays:
    return dataclasses.replace(params, workers=np.ones(params.n, dtype=np.int64))


def span_costs(graph, params: CandidateArrays, chips, workers: int, mappings=None) -> tuple[list[OpCost], np.ndarray]:
    """Per op of `graph`, the slowest worker's costs (a slice op's cost goes to the op it
    feeds; the assembly copy and the final barrier to the last op; DMA bytes summed over the
    workers), and per op the halo recomputation summed over workers. `params` are candidates
    that all use `workers` workers, `mappings` their mappings (needed for those with
    ``weights = "shared"``, each costed with its own stack); raises `SpanError` when the
    graph has no temporal span rule."""
    out = graph.outputs[0]
    axes = time_axes(graph)
    if out not in axes or len(graph.outputs) != 1:
        raise SpanError(f"output {out} of {graph.name} has no temporal axis (span partitioning needs a conv1d / "
                        f"elementwise stack over a 3-D input)")
    shared = np.flatnonzero(params.shared_weights)
    if shared.size == 0:
        return _span_costs(graph, params, chips, workers)
    groups = []
    own = np.flatnonzero(~params.shared_weights)
    if own.size:
        groups.append((own, _span_costs(graph, params.take(own), [chips[i] for i in own], workers)))
    for i in shared:  # each its own stack (its tiles are its chip's and mapping's)
        groups.append((np.array([i]), _span_costs(graph, params.take(np.array([i])), [chips[i]], workers,
                                                  mappings[i])))
    return _merged(groups, params.n)


def _merged(groups, n_cands: int) -> tuple[list[OpCost], np.ndarray]:
    """Per-group results (candidate indices, (costs, halo)) put back in candidate order."""
    first_costs, first_halo = groups[0][1]
    costs = []
    for position, proto in enumerate(first_costs):
        fields = {}
        for name, value in vars(proto).items():
            arr = np.empty(n_cands, dtype=value.dtype)
            for idx, (group_costs, _) in groups:
                arr[idx] = getattr(group_costs[position], name)
            fields[name] = arr
        costs.append(OpCost(**fields))
    halo = np.empty((first_halo.shape[0], n_cands), dtype=first_halo.dtype)
    for idx, (_, group_halo) in groups:
        halo[:, idx] = group_halo
    return costs, halo


def _stack_plans(graph, stack: SharedStack | None):
    """The graph's plans, each matmul reading its weight from the stack (None: as planned)."""
    plans = plan_graph(graph)
    if stack is None:
        return plans
    return [dataclasses.replace(plan, gemm=stack.gemm(plan.op.name, plan.gemm)) if plan.gemm is not None else plan
            for plan in plans]


def _preload(params: CandidateArrays, stack: SharedStack, active: int,
             wave: int = 0) -> tuple[list[int], list[int], int]:
    """A wave of the stack's shared copy loaded (one candidate; wave 0 before the spans): per
    worker its loads' DMA cycles and bytes, and the cycles until every worker passes the
    BARRIER after them."""
    sizes = stack.tile_bytes(wave)
    tile_size = int(params.tile_size[0])
    cycles, nbytes = [], []
    for banks in stack.loads(active, tile_size, wave):
        tile_bytes = np.array([sizes[bank] for bank in banks], dtype=np.int64)
        cycles.append(int(candidate_dma_cycles(params, tile_bytes[:, None]).sum()) if tile_bytes.size else 0)
        nbytes.append(int(tile_bytes.sum()))
    bus = -(-sum(nbytes) // int(params.system_bus_bytes[0]))
    ready = max(max(cycles, default=0), bus) + int(params.shared_latency[0]) + int(params.barrier_cycles[0])
    return cycles, nbytes, ready


def _span_costs(graph, params: CandidateArrays, chips, workers: int, mapping=None) -> tuple[list[OpCost], np.ndarray]:
    out = graph.outputs[0]
    axes = time_axes(graph)
    spec = graph.tensors[out]
    length = spec.shape[axes[out]]
    one = _one_worker(params)
    spans = [span for span in span_partition(length, workers) if len(span)]
    graphs = [span_graph(graph, out, span)[0] for span in spans]
    stack = None
    if mapping is not None:
        stack = shared_stack(graphs, chips[0], mapping.model_copy(update={"workers": 1}))
    usable = stack if stack is not None and not stack.reason else None
    whole = {op.name: cost for op, cost in zip(graph.ops, graph_costs(graph, one, chips, _stack_plans(graph, usable)))}
    names = [op.name for op in graph.ops]
    per_worker = []  # per worker: {op name: OpCost} with slices folded into their consumer
    totals = []
    assembly = []  # per worker: the copy into the shared output and the barrier
    loads = _preload(params, usable, len(spans)) if usable is not None else None
    # each later wave: a BARRIER, its loads, a BARRIER before the op it begins (every worker
    # meets them, so the workers run in lock step wave by wave)
    starts = usable.starts if usable is not None else {}
    later = {name: _preload(params, usable, len(spans), wave_index) for name, wave_index in starts.items()}
    wave_of = np.cumsum([name in starts for name in names]).tolist()
    for worker, (span, worker_graph) in enumerate(zip(spans, graphs)):
        costs = graph_costs(worker_graph, one, chips, _stack_plans(worker_graph, usable))
        folded: dict[str, OpCost] = {}
        pending = None
        for op, cost in zip(worker_graph.ops, costs):
            if op.name not in whole:  # a slice the span graph added: charge it to its consumer
                pending = cost if pending is None else _sum(pending, cost)
                continue
            folded[op.name] = cost if pending is None else _sum(cost, pending)
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
        last.core_busy = last.core_busy + np.ceil(math.prod(shape) * params.copy_cpe).astype(np.int64)
        if loads is not None:  # the stack's shared copy, then its BARRIER, before the span's first op
            first = folded[next(op_name for op_name in names if op_name in folded)]
            cycles, nbytes, ready = loads
            first.cycles = np.where(first.feasible, first.cycles + ready, 0)
            first.dma_cycles = first.dma_cycles + cycles[worker]
            first.dma_bytes = first.dma_bytes + nbytes[worker]
            first.shared_writes = first.shared_writes + nbytes[worker] // int(params.row_bytes[0])  # into shared banks
            first.syncs = first.syncs + 1
        for name, (cycles, nbytes, ready) in later.items():
            op = folded[name]
            op.cycles = np.where(op.feasible, op.cycles + params.barrier_cycles + ready, 0)
            op.dma_cycles = op.dma_cycles + cycles[worker]
            op.dma_bytes = op.dma_bytes + nbytes[worker]
            op.shared_writes = op.shared_writes + nbytes[worker] // int(params.row_bytes[0])
            op.syncs = op.syncs + 2
        per_worker.append(folded)
        totals.append([sum((folded[op_name].cycles for op_name, wave_index in zip(names, wave_of)
                            if op_name in folded and wave_index == wave),
                           np.zeros(params.n, dtype=np.int64)) for wave in range(len(starts) + 1)])
    # per wave and candidate, the slowest worker (all of them meet at the wave's end)
    slowest = [np.argmax(np.stack([worker_totals[wave] for worker_totals in totals]), axis=0)
               for wave in range(len(starts) + 1)]
    result = []
    halo = []
    for name, wave in zip(names, wave_of):
        parts = [folded.get(name) for folded in per_worker]
        present = [part for part in parts if part is not None]
        chosen = _pick(parts, slowest[wave], whole[name])
        busy = sum(part.busy_cycles for part in present)
        chosen.busy_cycles = busy
        chosen.dma_bytes = sum(part.dma_bytes for part in present)  # every worker moves its own
        for field_name in ACTIVITY_FIELDS + ("workspace_bytes",):  # and does its own work
            setattr(chosen, field_name, sum(getattr(part, field_name) for part in present))
        if usable is not None:  # the stack's banks: the most one wave holds
            bank = int(params.shared_rows[0]) * int(params.shared_row_bytes[0])
            chosen.shared_bytes = np.full_like(chosen.shared_bytes, usable.banks * bank)
        if stack is not None and stack.reason:
            chosen.feasible = np.zeros_like(chosen.feasible)
            chosen.reason = np.full_like(chosen.reason, stack.reason)
        result.append(chosen)
        computed = sum(part.cycles for part in present) - (sum(assembly) if name == names[-1] else 0)
        if loads is not None and name == names[0]:  # the stack's load is no recomputation
            computed = computed - loads[2] * len(present)
        if name in later:
            computed = computed - (params.barrier_cycles + later[name][2]) * len(present)
        halo.append(np.maximum(computed - whole[name].cycles, 0))
    # DRAM: the spans' lowering lays out the assembled output, each span graph's own tensors
    # and (shared weights) the stack's blocked copies, in place of the whole graph's tensors
    final = pad(math.prod(padded_shape(tuple(spec.shape))) * itemsize(spec.dtype), 64)
    extra = final + sum(dram_footprint(worker_graph) for worker_graph in graphs) - dram_footprint(graph)
    if usable is not None:
        extra += sum(pad(worker.tiles * worker.tile_bytes, 64) for wave in usable.waves for worker in wave)
    result[0].workspace_bytes = result[0].workspace_bytes + extra
    return result, np.stack(halo)


def _sum(first: OpCost, second: OpCost) -> OpCost:
    out = OpCost(**vars(first))
    for field_name in ("cycles", "compute_cycles", "dma_cycles", "core_cycles", "ball_cycles", "busy_cycles", "syncs",
              "dma_bytes", *ACTIVITY_FIELDS, "workspace_bytes"):
        setattr(out, field_name, getattr(first, field_name) + getattr(second, field_name))
    for field_name in ("sram_bytes", "bank_rows", "banks"):
        setattr(out, field_name, np.maximum(getattr(first, field_name), getattr(second, field_name)))
    out.feasible = first.feasible & second.feasible
    out.reason = np.where(first.reason != "", first.reason, second.reason)
    return out


def _pick(parts: list[OpCost | None], slowest: np.ndarray, fallback: OpCost) -> OpCost:
    """Per candidate, the slowest worker's figures for this op."""
    out = OpCost(**vars(fallback))
    for field_name, value in vars(fallback).items():
        rows = [getattr(part, field_name) if part is not None else np.zeros_like(value) for part in parts]
        stacked = np.stack([np.broadcast_to(row, np.shape(value)) for row in rows])
        setattr(out, field_name, np.take_along_axis(stacked, slowest[None, :], axis=0)[0])
    return out
