"""A scan lowered as a loop (`dse.plan.scan`): its step graph's plan emitted T times.

Each step is emitted by a `ProgramBuilder` over the step graph that shares the graph's
builder's DRAM, instruction lists and labels: step t binds the step's sequence inputs to
their slices [t] (time-major padded buffers: each slice a padded buffer itself), its states
to what step t-1 left (the initial states first), its invariant inputs to the scan's
operands; the op that makes the step's output writes it into the output's slice [t] in
place (no stacking copy). The step's ops go to their units exactly as the plan says (an
LSTM / GRU's recurrent product on the matrix Ball once quantized: MVIN h's int8 tile and
the weight's Bt tiles, MATMUL, MVOUT; cells and elementwise updates graph-op core ops),
each closed by its sync. A weight's blocked copy is laid out in DRAM once
(`Dram.constant`) and read by every step.
"""

from __future__ import annotations

from ..plan.graph_plan import OpPlan, plan_graph
from ..plan.scan import step_graph, step_loc
from ..plan.units import Infeasible
from ..workload.scan import bindings, step_order


def lower_scan(builder, plan: OpPlan, ready: dict) -> dict:
    """Emit the scan `plan.op` into `builder` (a `ProgramBuilder`); what its `OpLowering`
    records: the step product's tile, the most banks and SRAM a step op takes, workers."""
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
    weights: dict = {}
    for t in step_order(op):
        sub.locs = {**invariant, **weights, **{n: step_loc(s, t) for n, s in zip(b["seq"], seqs)},
                    **dict(zip(b["state"], states))}
        sub.unblocked = {}
        sub.label_prefix = builder.label_prefix + f"{op.name} step {t}: "
        for p in plans:
            if p is writer:  # the step's output, written into out[t] in place
                before = [len(c) for c in sub.cores]
                sub.records.append(sub._generic(p.op, sub.prepare(p), step_loc(out, t)))
                for c, n in zip(sub.cores, before):
                    for ins in c[n:]:
                        sub.labels.setdefault(id(ins), sub.label_prefix + p.op.name)
            else:
                sub.lower_op(p)
        weights = {name: loc for name, loc in sub.locs.items() if name in step.weights}
        states = [sub.locs[n] for n in b["next"]]
    recs = sub.records
    matrix = [r for r in recs if r.how == "matrix"]
    return {"tile": matrix[0].tile if matrix else None, "banks": max((r.banks for r in recs), default=0),
            "sram_bytes": max((r.sram_bytes for r in recs), default=0),
            "workers_used": max((r.workers_used for r in recs), default=1)}


__all__ = ["lower_scan"]
