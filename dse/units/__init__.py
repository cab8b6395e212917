"""The units of the plan, one file each, each holding its emitter (the lowering's) and its
charge (the model's) side by side: `matrix` (matrix, conv, grouped), `stream` (scale,
relu), `core`, `chain`, `view` (view, fused), `scan` (a recurrence as a loop of its step).
`UNITS`, keyed by the plan's unit (`dse.plan.graph_plan.OpPlan.unit`), is what the lowering
(`ProgramBuilder.lower_op`) and the model (`GraphCost.op_cost`) both look up."""

from __future__ import annotations

from . import chain, core, matrix, scan, stream, view
from .unit import OpLowering, Unit

UNITS: dict[str, Unit] = {unit.name: unit for unit in (*matrix.UNITS, *stream.UNITS, core.UNIT, chain.UNIT, *view.UNITS,
                                                     scan.UNIT)}

__all__ = ["OpLowering", "UNITS", "Unit"]
