"""The plan of a scan (dse/workload/scan.py): decided once, read by the lowering and the model.

A scan is a loop: its step graph (`dse.workload.scan.body`) is planned like any graph
(`plan_graph`: the recurrent product on the matrix Ball once quantized, the quantize /
dequantize on their stream or the core, the cell on the core) and run T times, step t
reading xp[t] and the state step t-1 wrote, writing its state into states[t] in place (no
stacking copy). Its sequence inputs (time first) and every other input but a weight are read
as padded row-major buffers (a charged `standardise` copy when one is not: a dequantized
accumulator is written as rows of T x B), so step t's slice is itself a padded buffer.

Where the state lives: in DRAM between steps. The core reaches only DRAM and the matrix Ball
only its banks (HARDWARE.md), so each step's h goes core -> DRAM -> bank and its product
bank -> DRAM -> core; what stays on chip is nothing across ops (the lowering frees every
bank at an op's end), so the recurrent weight's tiles are loaded again each step. The
cost is linear in T either way: T times the step.
"""

from __future__ import annotations

import math

from ..workload.graph import Graph, Op
from ..workload.scan_body import body
from .memory import Loc


def scan_plan(walk, op: Op) -> tuple[tuple, tuple[Loc, ...], Loc]:
    """The scan's plan (copies, reads, writes) for `dse.plan.graph_plan`: every input but a
    weight read as a padded row-major buffer (standardised if need be), the output a fresh
    one [T, ...]."""
    copies: list = []
    reads = tuple(walk.loc(n) if n in walk.graph.weights else walk.standard(n, copies) for n in op.inputs)
    spec = walk.graph.tensors[op.outputs[0]]
    out = walk.locs[op.outputs[0]] = walk.dram.tensor(spec.shape, spec.dtype)
    return tuple(copies), reads, out


def step_graph(graph: Graph, op: Op) -> Graph:
    """The scan's step, with its weights."""
    return body(op, graph.tensors, graph.weights)


def step_loc(loc: Loc, t: int) -> Loc:
    """Step t's slice [t] of a padded row-major [T, ...] buffer: a padded buffer itself
    (rank 2: a row of padded length; rank 3 and more: the trailing dims as padded)."""
    rest = tuple(loc.buffer_shape[1:])
    return Loc(loc.addr + t * math.prod(rest) * loc.isize, tuple(loc.shape[1:]), loc.dtype, rest)


__all__ = ["scan_plan", "step_graph", "step_loc"]
