"""Lowering: a graph and a candidate become an emulator Program and a DRAM image.

:func:`lower` maps every op (matrix-Ball products with the shared mapper's tiles, core
ops for the rest), places tensors in DRAM (:mod:`dse.lower.memory`), splits products
across workers, and records per op how it was lowered (tile, banks, private SRAM).
"""

from .lower import Infeasible, Lowered, OpLowering, StagedLowered, lower, lower_stages
from .memory import Blocked, Dram, Loc

__all__ = ["Blocked", "Dram", "Infeasible", "Loc", "Lowered", "OpLowering", "StagedLowered", "lower", "lower_stages"]
