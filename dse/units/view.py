"""The view units: "view", a reshape of an unpadded contiguous tensor or a layout
conversion the layout removes (`dse.plan.layout`), a descriptor: no data moves, nothing
charged; "fused", an op its reader's copy or its chain's pass applies
(`dse.plan.graph_plan`): nothing of its own.

As the lowering emits it:

* with ``mapping.channels_last = true`` a layout conversion the plan makes a view emits
  nothing: its source (a graph input placed in DRAM in NHWC order, or a core op writing
  through strides) is already in its order, or its readers read strides (`dse.plan.layout`);
* reshape of an unpadded contiguous tensor is a descriptor (no data moves);
"""

from __future__ import annotations

from ..plan.graph_plan import OpPlan
from ..plan.layout import permuted
from ..plan.units import reshape_view
from ..workload.graph import Op
from .unit import OpLowering, Unit


def emit_reshape(builder, op: Op) -> OpLowering | None:
    src = builder.loc(op.inputs[0])
    spec = builder.graph.tensors[op.outputs[0]]
    view = reshape_view(src, spec.shape, spec.dtype)
    if view is None:
        return None
    builder.locs[op.outputs[0]] = view
    return OpLowering(op.name, op.kind, "view")


def _emit_view(builder, plan: OpPlan, ready) -> OpLowering | None:
    op = plan.op
    if op.kind == "permute":  # a layout conversion the layout removes
        builder.locs[op.outputs[0]] = permuted(builder.loc(op.inputs[0]), op.attrs["dims"])
        return OpLowering(op.name, op.kind, "view")
    return emit_reshape(builder, op)


def _emit_fused(builder, plan: OpPlan, ready) -> OpLowering:
    op = plan.op
    builder.fused.add(op.outputs[0])
    return OpLowering(op.name, op.kind, "fused", workers_used=0)


UNITS = (Unit("view", _emit_view, lambda cost, charges, plan: ("none", None)),
         Unit("fused", _emit_fused, lambda cost, charges, plan: ("fused", None)))
