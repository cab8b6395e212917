"""The core unit: any graph op the plan leaves to the core (and what a Ball op falls back
to): one charged core op, split across workers when it is row-independent
(`dse.plan.split`), else on worker 0; then the op's sync.

Emitted as a graph-op core op (`GRAPH_OP`, the reference interpreter's semantics,
:mod:`dse.lower.coreop`); charged ``ceil(elements x graph_op_cpe)`` on the busiest worker
(`dse.cost.core`).

As the lowering emits it:

* transposes (``permute``) stay core ops: the Transpose Ball transposes E x E blocks of
  consecutive lines (E = 4 fp32 / 16 int8), so feeding it a matrix needs a strided MVIN of
  one 16-byte line a row (one DRAM burst, ``dma.latency_cycles``, every 16 bytes: 25 cycles
  an fp32 element against the core's 4) and a per-block MVOUT (a transfer starts at line 0
  of its bank), and the permutes left after the frontend are fp32 activations of odd shapes
  (3 channels, 17 tokens) that are not whole blocks;
* everything else is a core op (:mod:`dse.lower.coreop`), charged, never free.
"""

from __future__ import annotations

import math

from emulator import CoreOp

from ..cost.core import GRAPH_OP, charged_elements
from ..plan.graph_plan import OpPlan, stored_loc
from ..plan.memory import Loc
from ..workload.graph import Op
from .charges import Charges
from .unit import OpLowering, Unit


def emit_core(builder, op: Op, ready: dict[str, Loc], out: Loc | None = None, planned: Loc | None = None
              ) -> OpLowering:
    """The op as one core op, writing `out`, else a buffer of the `planned` geometry
    (`OpPlan.writes`) placed after its operands, else a padded row-major buffer."""
    srcs = [builder.operand(n, ready) for n in op.inputs]
    spec = builder.graph.tensors[op.outputs[0]]
    out = out or (builder.dram.place(planned) if planned is not None else builder.dram.tensor(spec.shape, spec.dtype))
    builder.locs[op.outputs[0]] = out
    views = tuple(s.view() for s in srcs)
    elements = charged_elements(op, [v.size for v in views], math.prod(spec.shape))
    builder.core(CoreOp(GRAPH_OP, out.view(), views, {"op": op}, elements))
    builder.sync(False)
    return OpLowering(op.name, op.kind, "core")


def charge_core(cost, charges: Charges, plan: OpPlan):
    op = plan.op
    spec = cost.graph.tensors[op.outputs[0]]
    shapes = [s.shape for s in plan.reads]
    elements = charged_elements(op, [math.prod(s) for s in shapes], math.prod(spec.shape))
    cost.core_op(charges, GRAPH_OP, op, tuple(spec.shape), shapes, elements, cost.params.graph_op_cpe)
    cost.close(charges, False)


def _emit(builder, plan: OpPlan, ready: dict[str, Loc]) -> OpLowering:
    op = plan.op
    stored = op.outputs[0] in builder.orders  # a tensor the layout stores channels-last
    if plan.unit != "core":  # a Ball op the chip cannot take, on the core: laid out as a core op's
        return emit_core(builder, op, ready, stored_loc(builder.dram, builder.graph, op.outputs[0], builder.orders)
                         if stored else None)
    # the result as the plan laid it out (one stored channels-last is placed before its operands)
    if stored:
        return emit_core(builder, op, ready, builder.dram.place(plan.writes))
    return emit_core(builder, op, ready, planned=plan.writes)


def _charge(cost, charges: Charges, plan: OpPlan):
    charge_core(cost, charges, plan)
    return "core", None


UNIT = Unit("core", _emit, _charge)
