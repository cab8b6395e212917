"""The scan unit (`dse.plan.scan`): a recurrence over T time steps run as a loop of its
step graph's plan, emitted and charged here side by side.

Emitted: each step by a `ProgramBuilder` over the step graph that shares the graph's
builder's DRAM, instruction lists and labels ("OP step t: ..."): step t binds the step's
sequence inputs to their slices [t] (time-major padded buffers: each slice a padded buffer
itself), its states to what step t-1 left (the initial states first), its invariant inputs
to the scan's operands; the op that makes the step's output writes it into the output's
slice [t] in place (no stacking copy). The step's ops go to their units exactly as the plan
says (an LSTM / GRU's recurrent product on the matrix Ball once quantized; cells and
elementwise updates graph-op core ops), each closed by its sync. A weight's blocked copy is
laid out in DRAM once (`Dram.constant`) and read by every step. Where the plan keeps the
recurrent weight in shared memory (`dse.plan.scan.weight_residency`) its B tiles are loaded
there once before the loop and every step's product reads them there (the step builder's
`shared_stack` hook hands the product that shape); elsewhere its tiles are loaded into
private banks again each step. The record's `note` says which and why.

Charged: the step graph's ops as any graph's (`GraphCost.op_cost` of a cost over the step
graph), T times, plus the copies that prepare the scan's inputs, plus, where the weight is
kept, its one load before the loop (its DMA, then the sync of a core op). Linear in T by
construction; bench/bench_scan.py measures the emulator's cycles against T.
"""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np

from ..cost.matmul import matmul_cost
from ..plan.graph_plan import OpPlan, plan_graph
from ..plan.scan import Residency, state_note, step_graph, step_loc, weight_residency
from ..plan.units import Infeasible
from ..workload.scan import bindings, step_order
from .charges import OpCost
from .core import emit_core
from .matrix import blocked_bt, computing_workers, load_shared_b, weight_bt
from .unit import OpLowering, Unit

# figures that are a peak or a choice, not a sum over the steps
_PEAKS = ("sram_bytes", "shared_bytes", "bank_rows", "banks", "workers_used")
_TILES = ("tile_m", "tile_n", "tile_k")


def emit_scan(builder, plan: OpPlan, ready: dict) -> OpLowering:
    op = plan.op
    graph = builder.graph
    step = step_graph(graph, op)
    b = bindings(op)
    n_seq, n_state = len(b["seq"]), len(b["state"])
    seqs = [builder.operand(n, ready) for n in op.inputs[:n_seq]]
    states = [builder.operand(n, ready) for n in op.inputs[n_seq:n_seq + n_state]]
    invariant = {n: builder.operand(n, ready) for n in b["invariant"] if n not in graph.weights}
    spec = graph.tensors[op.outputs[0]]
    out = builder.locs[op.outputs[0]] = builder.dram.tensor(spec.shape, spec.dtype)
    sub = type(builder)(step, builder.cand, (), dram=builder.dram, elementwise=builder.elementwise, locs={})
    sub.cores, sub.labels = builder.cores, builder.labels
    plans = plan_graph(step)
    writer = next(p for p in plans if p.op.outputs[0] == b["out"])
    if writer.unit != "core":
        raise Infeasible(f"op {op.name}: its step's output is made on the {writer.unit} unit, not written in place")
    res = weight_residency(builder.params, op, step, plans)
    if res.resident[0]:
        sub.shared_stack = _Resident(res)
        _preload(builder, step, res)
    weights: dict = {}
    for t in step_order(op):
        sub.locs = {**invariant, **weights, **{n: step_loc(s, t) for n, s in zip(b["seq"], seqs)},
                    **dict(zip(b["state"], states))}
        sub.unblocked = {}
        sub.label_prefix = builder.label_prefix + f"{op.name} step {t}: "
        for p in plans:
            if p is writer:  # the step's output, written into out[t] in place
                before = [len(c) for c in sub.cores]
                sub.records.append(emit_core(sub, p.op, sub.prepare(p), step_loc(out, t)))
                for c, n in zip(sub.cores, before):
                    for ins in c[n:]:
                        sub.labels.setdefault(id(ins), sub.label_prefix + p.op.name)
            else:
                sub.lower_op(p)
        weights = {name: loc for name, loc in sub.locs.items() if name in step.weights}
        states = [sub.locs[n] for n in b["next"]]
    recs = sub.records
    matrix = [r for r in recs if r.how == "matrix"]
    return OpLowering(op.name, op.kind, "scan", matrix[0].tile if matrix else None, 1,
                      max((r.banks for r in recs), default=0), max((r.sram_bytes for r in recs), default=0),
                      max((r.workers_used for r in recs), default=1),
                      shared_bytes=max((r.shared_bytes for r in recs), default=0),
                      note="; ".join(filter(None, [res.notes[0], state_note(op)])))


def _load(costs, res: Residency) -> tuple[np.ndarray, np.ndarray]:
    """The kept weight's load before the loop, (cycles, bytes): its B tiles into shared
    memory, dealt to the computing workers (`matmul_cost`'s shared copy of B, in the picked
    tiles), then the sync of a core op."""
    ok = res.resident
    column = lambda a: np.where(ok, a, 16)[:, None]  # noqa: E731  (any tile where it is not kept)
    first = matmul_cost(costs.params, replace(res.shape, b_preloaded=False),
                        *(column(res.plans.values[f]) for f in ("tm", "tn", "tk")))
    cycles = first.preload_cycles[:, 0] + costs.closes_after_core * costs.sync_cycles
    return np.where(ok, cycles, 0), np.where(ok, first.dma_bytes[:, 0] - res.plans.values["dma_bytes"], 0)


class _Resident:
    """The step builder's `shared_stack` hook: the kept product reads its B in shared memory."""

    def __init__(self, res: Residency):
        self.res = res

    def gemm(self, name: str, shape):
        if name != self.res.product:
            return shape
        kept = replace(shape, b_shared=True, b_preloaded=True, b_shared_base=0)
        assert kept == self.res.shape, (kept, self.res.shape)  # the shape the plan decided on
        return kept


def _preload(builder, step, res: Residency) -> None:
    """The kept weight's B tiles loaded into shared banks from bank 0 up, once, before the loop."""
    product = next(o for o in step.ops if o.name == res.product)
    tm, tn, tk = (int(res.plans.values[f][0]) for f in ("tm", "tn", "tk"))
    Mp, Np, Kp = res.shape.padded
    key = ("weight", product.inputs[1], product.kind, product.attrs.get("groups", 1), Np, Kp, tn, tk)
    b_base = builder.dram.constant(key, blocked_bt(weight_bt(step, product), Np, Kp, tn, tk),
                                   f"{product.inputs[1]}: Bt tiles")
    load_shared_b(builder, builder.chip.shared_memory.first_bank_id, b_base, int(res.tiles[0]), tn, tk,
                  computing_workers(builder, Mp // tm, Np // tn))


def cost_scan(costs, plan: OpPlan) -> OpCost:
    """The scan's `OpCost` for the candidates of `costs` (a `GraphCost` of the graph; its
    step charged by one of the same class)."""
    op = plan.op
    T = int(op.attrs["steps"])
    prepare = costs.op_cost(replace(plan, unit="view"))  # the copies alone (a view emits nothing)
    step = step_graph(costs.graph, op)
    plans = plan_graph(step)
    sub = type(costs)(step, costs.params, costs.chips)
    parts = [sub.op_cost(p) for p in plans]
    res = weight_residency(costs.params, op, step, plans)
    load = loaded = np.zeros(costs.n, dtype=np.int64)  # the kept weight's one load before the loop
    if res.resident.any():  # where the weight is kept, its product reads it in shared memory
        kept = type(costs)(step, costs.params, costs.chips)
        ok = res.resident
        parts = [OpCost(*[np.where(ok, getattr(k, f.name), getattr(c, f.name)) for f in fields(OpCost)])
                 for c, k in zip(parts, (kept.op_cost(replace(p, gemm=res.shape) if p.op.name == res.product else p)
                                         for p in plans))]
        load, loaded = _load(costs, res)
    out = {}
    for f in fields(OpCost):
        name = f.name
        values = [getattr(c, name) for c in parts]
        if name == "unit":
            out[name] = np.full(costs.n, "scan", dtype=object)
        elif name == "feasible":
            out[name] = np.logical_and.reduce(values + [prepare.feasible])
        elif name == "reason":
            reason = prepare.reason.copy()
            for v in values:
                reason = np.where(reason == "", v, reason)
            out[name] = reason.astype(object)
        elif name in _PEAKS:
            out[name] = np.maximum.reduce(values + [getattr(prepare, name)])
        elif name in _TILES:
            out[name] = np.maximum.reduce(values)
        else:
            out[name] = getattr(prepare, name) + T * np.sum(values, axis=0)
    out["cycles"] = np.where(out["feasible"], out["cycles"] + load, 0)
    out["preload_cycles"] = out["preload_cycles"] + load
    out["syncs"] = out["syncs"] + np.where(res.resident, costs.closes_after_core, 0)
    out["dma_cycles"] = out["dma_cycles"] + load
    out["dma_bytes"] = out["dma_bytes"] + loaded
    out["shared_writes"] = out["shared_writes"] + loaded // costs.params.row_bytes  # into shared banks
    return OpCost(**{k: np.asarray(v, dtype=getattr(prepare, k).dtype) for k, v in out.items()})


def scan_notes(graph, params) -> list[str]:
    """Per candidate of `params` (`CandidateArrays`), where each scan's weight and state live
    and why (`weight_residency`, `state_note`): the model's candidate notes, in the words the
    lowering's records (`emit_scan`) hold."""
    notes: list[list[str]] = [[] for _ in range(params.n)]
    for op in graph.ops:
        if op.kind != "scan":
            continue
        step = step_graph(graph, op)
        res = weight_residency(params, op, step, plan_graph(step))
        for c in range(params.n):
            notes[c] += [n for n in (res.notes[c], state_note(op)) if n]
    return ["; ".join(n) for n in notes]


UNIT = Unit("scan", emit_scan, cost=cost_scan)

__all__ = ["UNIT", "cost_scan", "emit_scan", "scan_notes"]
