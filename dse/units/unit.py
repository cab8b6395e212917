"""What a unit is: the plan names each op's unit (`dse.plan.graph_plan.OpPlan.unit`); a
`Unit` holds that unit's emitter (read by the lowering) and its charge (read by the model),
written side by side in the unit's own file, so that a change to how a unit runs is one
file for both. `OpLowering` is what an emitter returns: how the op was lowered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Unit:
    """One unit of the plan. `emit(builder, plan, ready)`: the op's instructions, emitted
    through the lowering's `ProgramBuilder` (its copies already made; `ready`: the operands'
    locations after them); returns its `OpLowering`, or None where the op falls back to a
    core op (`dse.units.core`). `charge(cost, charges, plan)`: the op's charges added to
    `charges` by the model's `GraphCost` after the plan's copies; returns the unit the op ran
    on (one label, or one per candidate) and the matrix Ball's tile picks (`MatmulPlans`)
    when it ran there, else None. `cost(cost, plan)`: a unit that sums its whole cost itself
    (copies included) in place of `charge`."""

    name: str
    emit: Callable
    charge: Callable | None = None
    cost: Callable | None = None


@dataclass
class OpLowering:
    """How one graph op was lowered."""

    name: str
    kind: str
    how: str  # "matrix", "core", "epilogue" (core op over blocked tiles), "view", "relu", "fp2int", "int2fp" (Balls)
    tile: tuple[int, int, int] | None = None
    batch: int = 1
    banks: int = 0
    sram_bytes: int = 0  # private SRAM the op allocates (per worker; all of it is freed at the op's end)
    workers_used: int = 1
    instructions: int = 0
    shared_bytes: int = 0  # shared memory a tile of cores holds for the op's weight (weights = shared)
    note: str = ""  # a lowering choice the plan made and why (a scan's weight and state), as the model notes it
