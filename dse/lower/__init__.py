"""Lowering: a graph and a candidate become an emulator Program and a DRAM image.

:func:`lower` emits, op by op, what the plan (`dse.plan`) decides: matrix-Ball products
with the plan's tiles, Ball streams, core ops split across workers, views; tensors placed
in DRAM (`dse.plan.memory`); and records per op how it was lowered (tile, banks, private
SRAM).
"""

from ..plan.memory import Blocked, Dram, Loc
from ..plan.units import Infeasible
from .lower import LayeredLowered, Lowered, OpLowering, StagedLowered, lower, lower_layers, lower_placed, lower_stages

__all__ = ["Blocked", "Dram", "Infeasible", "LayeredLowered", "Loc", "Lowered", "OpLowering", "StagedLowered", "lower",
           "lower_layers", "lower_placed", "lower_stages"]
