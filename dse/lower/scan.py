"""A scan lowered as a loop (`dse.plan.scan`): its step graph's plan emitted T times.

Each step is emitted by a `ProgramBuilder` over the step graph that shares the graph's
builder's DRAM, instruction lists and labels: step t binds the step's inputs to xp[t] and
to the state step t-1 wrote (s0 first), and the cell writes states[t] in place. The step's
ops go to their units exactly as the plan says (the recurrent product on the matrix Ball
once quantized: MVIN h's int8 tile and the weight's Bt tiles, MATMUL, MVOUT; the cell a
graph-op core op), each closed by its sync. The weight's blocked copy is laid out in DRAM
once (`Dram.constant`) and read by every step.
"""

from __future__ import annotations

from ..plan.graph_plan import OpPlan, plan_graph
from ..plan.scan import step_graph, step_loc
from ..workload.scan import body_names, step_order


def lower_scan(builder, plan: OpPlan, ready: dict):
    """Emit the scan `plan.op` into `builder`; the op's `OpLowering`."""
    from .lower import OpLowering, ProgramBuilder

    op = plan.op
    step = step_graph(builder.graph, op)
    names = body_names(op)
    xp = builder.operand(op.inputs[0], ready)
    s0 = builder.operand(op.inputs[1], ready)
    spec = builder.graph.tensors[op.outputs[0]]
    states = builder.locs[op.outputs[0]] = builder.dram.tensor(spec.shape, spec.dtype)
    sub = ProgramBuilder(step, builder.cand, (), dram=builder.dram, elementwise=builder.elementwise, locs={})
    sub.cores, sub.labels = builder.cores, builder.labels
    plans = plan_graph(step)
    weights = {}
    previous = s0
    for t in step_order(op):
        sub.locs = {names["x"]: step_loc(xp, t), names["s"]: previous, **weights}
        sub.unblocked = {}
        sub.label_prefix = builder.label_prefix + f"{op.name} step {t}: "
        out = step_loc(states, t)
        for p in plans:
            if p.op.outputs[0] == names["out"]:  # the cell writes states[t] in place
                before = [len(c) for c in sub.cores]
                sub.records.append(sub._generic(p.op, sub.prepare(p), out))
                for c, n in zip(sub.cores, before):
                    for ins in c[n:]:
                        sub.labels.setdefault(id(ins), sub.label_prefix + p.op.name)
            else:
                sub.lower_op(p)
        weights = {name: loc for name, loc in sub.locs.items() if name in step.weights}
        previous = out
    recs = sub.records
    matrix = [r for r in recs if r.how == "matrix"]
    return OpLowering(op.name, op.kind, "scan", matrix[0].tile if matrix else None, 1,
                     max((r.banks for r in recs), default=0), max((r.sram_bytes for r in recs), default=0),
                     max((r.workers_used for r in recs), default=1))


__all__ = ["lower_scan"]
