"""The plan of a scan (dse/workload/scan.py): decided once, read by the lowering and the model.

A scan is a loop: its step graph (`dse.workload.scan.body`) is planned like any graph
(`plan_graph`: the recurrent product on the matrix Ball once quantized, the quantize /
dequantize on their stream or the core, the cell on the core) and run T times, step t
reading xp[t] and the state step t-1 wrote, writing its state into states[t] in place (no
stacking copy). The sequence's input xp is read as a padded row-major [T, B, G] buffer (a
charged `standardise` copy when it is not one: a dequantized accumulator is written as rows
of T x B), so step t's slice is itself a padded [B, G] buffer.

Where the state lives: in DRAM between steps. The core reaches only DRAM and the matrix Ball
only its banks (HARDWARE.md), so each step's h goes core -> DRAM -> bank and its product
bank -> DRAM -> core; what stays on chip is nothing across ops (the lowering frees every
bank at an op's end), so the recurrent weight's tiles are loaded again each step. The
cost is linear in T either way: T times the step.
"""

from __future__ import annotations

from ..workload.graph import Graph, Op
from ..workload.scan import body
from .memory import Loc


def scan_plan(walk, op: Op):
    """The scan's `OpPlan`: xp standardised if need be, the states a fresh padded buffer."""
    from .graph_plan import OpPlan

    copies: list = []
    xp = walk.standard(op.inputs[0], copies)
    s0 = walk.standard(op.inputs[1], copies)
    spec = walk.graph.tensors[op.outputs[0]]
    out = walk.locs[op.outputs[0]] = walk.dram.tensor(spec.shape, spec.dtype)
    return OpPlan(op, "scan", tuple(copies), (xp, s0), out)


def step_graph(graph: Graph, op: Op) -> Graph:
    """The scan's step, with its weights."""
    return body(op, graph.tensors, graph.weights)


def step_loc(loc: Loc, t: int) -> Loc:
    """Step t's [B, X] slice of a padded row-major [T, B, X] buffer: a padded buffer itself."""
    rows, cols = loc.buffer_shape[-2:]
    return Loc(loc.addr + t * rows * cols * loc.isize, tuple(loc.shape[1:]), loc.dtype, (rows, cols))


__all__ = ["scan_plan", "step_graph", "step_loc"]
