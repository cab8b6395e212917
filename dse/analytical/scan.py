"""What the model charges a scan (`dse.plan.scan`): its step graph's ops as any graph's,
T times, plus the copies that prepare its sequence input. Linear in T by construction; the
emulator's cycles against T are measured by bench/bench_scan.py."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np

from ..plan.graph_plan import OpPlan, plan_graph
from ..plan.scan import step_graph
from .charges import OpCost

# figures that are a peak or a choice, not a sum over the steps
_PEAKS = ("sram_bytes", "shared_bytes", "bank_rows", "banks", "workers_used")
_TILES = ("tile_m", "tile_n", "tile_k")


def scan_cost(costs, plan: OpPlan) -> OpCost:
    """The scan's `OpCost` for the candidates of `costs` (a `GraphCost` of the graph; its
    step charged by one of the same class)."""
    op = plan.op
    T = int(op.attrs["steps"])
    prepare = costs.op_cost(replace(plan, unit="view"))  # the copies alone (a view emits nothing)
    step = step_graph(costs.graph, op)
    sub = type(costs)(step, costs.params, costs.chips)
    parts = [sub.op_cost(p) for p in plan_graph(step)]
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
    feasible = out["feasible"]
    for name in ("cycles",):
        out[name] = np.where(feasible, out[name], 0)
    return OpCost(**{k: np.asarray(v, dtype=getattr(prepare, k).dtype) for k, v in out.items()})


__all__ = ["scan_cost"]
