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
    binding = bindings(op)
    n_seq, n_state = len(binding["seq"]), len(binding["state"])
    seqs = [builder.operand(tensor, ready) for tensor in op.inputs[:n_seq]]
    states = [builder.operand(tensor, ready) for tensor in op.inputs[n_seq:n_seq + n_state]]
    invariant = {tensor: builder.operand(tensor, ready) for tensor in binding["invariant"]
                 if tensor not in graph.weights}
    out = builder.locs[op.outputs[0]] = builder.dram.place(plan.writes)
    sub = type(builder)(step, builder.cand, (), dram=builder.dram, elementwise=builder.elementwise, locs={})
    sub.cores, sub.labels = builder.cores, builder.labels
    plans = plan_graph(step)
    writer = next(step_plan for step_plan in plans if step_plan.op.outputs[0] == binding["out"])
    if writer.unit != "core":
        raise Infeasible(f"op {op.name}: its step's output is made on the {writer.unit} unit, not written in place")
    res = weight_residency(builder.params, op, step, plans)
    if res.resident[0]:
        sub.shared_stack = _Resident(res)
        _preload(builder, step, res)
    weights: dict = {}
    for step_index in step_order(op):
        sub.locs = {**invariant, **weights,
                    **{tensor: step_loc(seq_loc, step_index) for tensor, seq_loc in zip(binding["seq"], seqs)},
                    **dict(zip(binding["state"], states))}
        sub.unblocked = {}
        sub.label_prefix = builder.label_prefix + f"{op.name} step {step_index}: "
        for step_plan in plans:
            if step_plan is writer:  # the step's output, written into out[step_index] in place
                before = [len(core) for core in sub.cores]
                sub.records.append(emit_core(sub, step_plan.op, sub.prepare(step_plan), step_loc(out, step_index)))
                for core, count in zip(sub.cores, before):
                    for ins in core[count:]:
                        sub.labels.setdefault(id(ins), sub.label_prefix + step_plan.op.name)
            else:
                sub.lower_op(step_plan)
        weights = {name: loc for name, loc in sub.locs.items() if name in step.weights}
        states = [sub.locs[tensor] for tensor in binding["next"]]
    recs = sub.records
    matrix = [rec for rec in recs if rec.how == "matrix"]
    return OpLowering(op.name, op.kind, "scan", matrix[0].tile if matrix else None, 1,
                      max((rec.banks for rec in recs), default=0), max((rec.sram_bytes for rec in recs), default=0),
                      max((rec.workers_used for rec in recs), default=1),
                      shared_bytes=max((rec.shared_bytes for rec in recs), default=0),
                      note="; ".join(filter(None, [res.notes[0], state_note(op)])))


def _load(costs, res: Residency) -> tuple[np.ndarray, np.ndarray]:
    """The kept weight's load before the loop, (cycles, bytes): its B tiles into shared
    memory, dealt to the computing workers (`matmul_cost`'s shared copy of B, in the picked
    tiles), then the sync of a core op."""
    ok = res.resident
    column = lambda values: np.where(ok, values, 16)[:, None]  # noqa: E731  (any tile where it is not kept)
    first = matmul_cost(costs.params, replace(res.shape, b_preloaded=False),
                        *(column(res.plans.values[field_name]) for field_name in ("tm", "tn", "tk")))
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
    product = next(step_op for step_op in step.ops if step_op.name == res.product)
    tm, tn, tk = (int(res.plans.values[field_name][0]) for field_name in ("tm", "tn", "tk"))
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
    steps = int(op.attrs["steps"])
    prepare = costs.op_cost(replace(plan, unit="view"))  # the copies alone (a view emits nothing)
    step = step_graph(costs.graph, op)
    plans = plan_graph(step)
    sub = type(costs)(step, costs.params, costs.chips)
    parts = [sub.op_cost(step_plan) for step_plan in plans]
    res = weight_residency(costs.params, op, step, plans)
    load = loaded = np.zeros(costs.n, dtype=np.int64)  # the kept weight's one load before the loop
    if res.resident.any():  # where the weight is kept, its product reads it in shared memory
        kept = type(costs)(step, costs.params, costs.chips)
        ok = res.resident
        names = [each.name for each in fields(OpCost)]
        kept_parts = (kept.op_cost(replace(step_plan, gemm=res.shape) if step_plan.op.name == res.product
                                   else step_plan) for step_plan in plans)
        parts = [OpCost(*[np.where(ok, getattr(kept_part, name), getattr(part, name)) for name in names])
                 for part, kept_part in zip(parts, kept_parts)]
        load, loaded = _load(costs, res)
    out = {}
    for each_field in fields(OpCost):
        name = each_field.name
        values = [getattr(part, name) for part in parts]
        if name == "unit":
            out[name] = np.full(costs.n, "scan", dtype=object)
        elif name == "feasible":
            out[name] = np.logical_and.reduce(values + [prepare.feasible])
        elif name == "reason":
            reason = prepare.reason.copy()
            for value in values:
                reason = np.where(reason == "", value, reason)
            out[name] = reason.astype(object)
        elif name in _PEAKS:
            out[name] = np.maximum.reduce(values + [getattr(prepare, name)])
        elif name in _TILES:
            out[name] = np.maximum.reduce(values)
        else:
            out[name] = getattr(prepare, name) + steps * np.sum(values, axis=0)
    out["cycles"] = np.where(out["feasible"], out["cycles"] + load, 0)
    out["preload_cycles"] = out["preload_cycles"] + load
    out["syncs"] = out["syncs"] + np.where(res.resident, costs.closes_after_core, 0)
    out["dma_cycles"] = out["dma_cycles"] + load
    out["dma_bytes"] = out["dma_bytes"] + loaded
    out["shared_writes"] = out["shared_writes"] + loaded // costs.params.row_bytes  # into shared banks
    return OpCost(**{name: np.asarray(value, dtype=getattr(prepare, name).dtype) for name, value in out.items()})


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
        for cand in range(params.n):
            notes[cand] += [note for note in (res.notes[cand], state_note(op)) if note]
    return ["; ".join(note) for note in notes]


UNIT = Unit("scan", emit_scan, cost=cost_scan)

__all__ = ["UNIT", "cost_scan", "emit_scan", "scan_notes"]
