"""What the core is charged for a core op, as the emulator's timing charges it:
``ceil(elements x cycles per element)``, with ``cores.op_cycles[kind]`` or the default."""

from __future__ import annotations

import math

import numpy as np

# The core-op kind that runs any graph op on the core with the graph's own interpreter
# (registered with the emulator by `dse.lower.coreop`).
GRAPH_OP = "graph_op"


def charged_elements(op, src_sizes: list[int], dst_size: int) -> int:
    """Elements a graph op is charged for on the core: its multiply-accumulates for a
    product, else its largest operand."""
    macs = int(getattr(op.counts, "macs", 0) or 0)
    return max([macs, dst_size, *src_sizes])


def core_cycles(chip, ins) -> int:
    """The core's charge for one core op (an `emulator.CoreOp`)."""
    return math.ceil(ins.element_count() * chip.core_cycles_per_element(ins.kind))


def split_share(total, first_axes, workers):
    """Elements of a core op the busiest worker gets when the plan splits it along the
    first of `first_axes` (sizes, broadcasting) that is at least 2: ceil(n / W) of n slices."""
    n = np.ones(np.broadcast(*first_axes, workers).shape, dtype=np.int64)
    chosen = np.zeros(n.shape, dtype=bool)
    for axis in first_axes:
        take = ~chosen & (np.asarray(axis) >= 2)
        n = np.where(take, axis, n)
        chosen |= take
    per = -(-n // workers)
    return np.where(workers > 1, total * per // n, total)


__all__ = ["GRAPH_OP", "charged_elements", "core_cycles", "split_share"]
