"""The plan of a scan (dse/workload/scan.py): decided once, read by the lowering and the model.

A scan is a loop: its step graph (`dse.workload.scan.body`) is planned like any graph
(`plan_graph`: the recurrent product on the matrix Ball once quantized, the quantize /
dequantize on their stream or the core, the cell on the core) and run T times, step t
reading xp[t] and the state step t-1 wrote, writing its state into states[t] in place (no
stacking copy). Its sequence inputs (time first) and every other input but a weight are read
as padded row-major buffers (a charged `standardise` copy when one is not: a dequantized
accumulator is written as rows of T x B), so step t's slice is itself a padded buffer.

Where the state lives: in DRAM between steps. The cell that writes it runs on the core,
which reaches only DRAM (HARDWARE.md: no Ball has a sigmoid or tanh, and a bank is filled
only by a DMA or a Ball), so each step's h goes core -> DRAM -> bank for its product and the
product bank -> DRAM -> core; an LSTM / GRU's states are the scan's output besides, which
the graph reads. So the state has no choice to offer (no mapping knob): `state_note` says so.

Where the recurrent weight lives (`weight_residency`, decided per candidate): unless
``mapping.scan_weights = "reloaded"``, where the chip has shared memory and the step's one
weight product's B tiles fit it, and no part of the placement runs beside the scan on the
tile's shared memory (placement pipeline or phase, whose parts keep regions of it), they are
loaded there once before the loop (from shared bank 0 up, dealt to the computing workers of
each tile of cores, then the sync of a core op) and every step's product reads them there
(`MatmulShape.b_shared` + `b_preloaded`: no load of its own); otherwise each step loads them
into private banks again. The note says which and why, in the words the model's candidate
notes and the lowering's record both print. The cost is linear in T either way: T times the
step, plus the one load before the loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..mapping import MatmulShape
from ..mapping.params import CandidateArrays
from ..workload.graph import Graph, Op
from ..workload.scan_body import body
from .matmul import MatmulPlans, plan_matmuls, shared_banks
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


@dataclass(frozen=True)
class Residency:
    """Where a scan's recurrent weight lives across its steps, per candidate."""

    product: str | None  # the step's weight product (its op name), None if the step has none
    resident: np.ndarray  # bool: its B tiles loaded into shared memory once, before the loop
    shape: MatmulShape | None  # the product as every step reads it there (b_shared, b_preloaded)
    plans: MatmulPlans | None  # that shape's picked tiles
    tiles: np.ndarray  # the shared banks they take (one B tile each; 0 where not resident)
    notes: list[str]  # which and why, one sentence a candidate


def weight_residency(params: CandidateArrays, op: Op, step: Graph, plans: list) -> Residency:
    """The recurrent weight's place for the candidates of `params` (module docstring); `plans`:
    the step's `plan_graph`."""
    n = params.n
    products = [p for p in plans if p.unit == "matrix" and p.gemm is not None and p.gemm.b_weight
                and len(p.op.inputs) > 1 and p.op.inputs[1] in step.weights]
    if len(products) != 1:
        note = "" if not products else (f"scan {op.name}: its {len(products)} weight products loaded into banks "
                                        "again every step (one alone is kept in shared memory)")
        return Residency(None, np.zeros(n, dtype=bool), None, None, np.zeros(n, dtype=np.int64), [note] * n)
    p = products[0]
    weight, T = p.op.inputs[1], int(op.attrs["steps"])
    shape = replace(p.gemm, b_shared=True, b_preloaded=True, b_shared_base=0)
    picked = plan_matmuls(params, shape)
    resident = picked.feasible & params.shared_enabled & params.scan_weights_kept & ~params.parts_at_once
    _, tiles = shared_banks(params, shape)
    tiles = np.where(resident, tiles, 0)
    notes = []
    for c in range(n):
        if resident[c]:
            notes.append(f"scan {op.name}: weight {weight} kept in shared memory across its {T} steps "
                         f"({int(tiles[c])} B tile{'s' if tiles[c] != 1 else ''} loaded once before the loop)")
            continue
        if not params.scan_weights_kept[c]:
            why = 'mapping.scan_weights = "reloaded"'
        elif params.parts_at_once[c]:
            why = "the placement runs parts at once beside it on the tile's shared memory (pipeline or phase)"
        elif not params.shared_enabled[c]:
            why = f"chip {params.chip_names[c]} has no shared memory"
        else:
            why = f"its B tiles do not fit the shared memory: {picked.reason[c]}"
        notes.append(f"scan {op.name}: weight {weight} loaded into banks again every step ({why})")
    return Residency(p.op.name, resident, shape, picked, tiles, notes)


def state_note(op: Op) -> str:
    """Where the scan's state lives between steps, and why (module docstring)."""
    return (f"scan {op.name}: state in DRAM between steps (the step's cell writes it on the core, "
            "which reaches only DRAM)")


__all__ = ["Residency", "scan_plan", "state_note", "step_graph", "step_loc", "weight_residency"]
