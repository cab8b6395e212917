"""What a candidate holds of its chip: the cores its placement runs on, the tiles they span
and the shared-memory banks it uses.

The chip a candidate asks for is priced, not the chip config's every core: a candidate on
one worker of a four-core goban holds one core (as `private_sram_bytes` counts one core's
banks), so "four small workers against one big core at equal area" compares what each
design needs. Likewise the shared memory: a candidate holds the shared banks it uses
(`shared_sram_bytes`, each bank whole) in each tile its cores span; banks no instruction
touches are address space the chip could be built without.
"""

from __future__ import annotations

import math

from ..plan.placement import place, schedule, spmd_chip
from .energy import Holdings


def core_chips(chip, mapping, n_ops: int | None = None, roles: list[str] | None = None) -> dict[int, object] | None:
    """The cores a candidate runs on, each with the chip it is built with (its core group's);
    None where the placement cannot be made. `mapping.placement` "auto" must be resolved
    first; `roles`: a staged workload's stages, `n_ops`: one graph's op count (for ranges)."""
    if roles is not None:
        places, reason = place(chip, mapping.placement, mapping.workers, roles, mapping.requests, mapping.weights)
    elif mapping.placement in ("layers", "pipeline") or (mapping.requests or 1) > 1:
        lay, reason = schedule(chip, mapping, n_ops or 0)
        places = lay.places if lay is not None else []
    else:
        spmd, reason = spmd_chip(chip, mapping.workers)
        return None if reason else {c: spmd for c in range(mapping.workers)}
    if reason:
        return None
    return {c: p.chip for p in places for c in p.cores}


def holdings(chip, cores: dict[int, object], shared_bytes: float) -> Holdings:
    """`Holdings` of a candidate on `chip` running on `cores` (`core_chips`) and using
    `shared_bytes` of shared memory in each tile (whole banks)."""
    counts: dict[int, list] = {}
    for core_chip in cores.values():
        entry = counts.setdefault(id(core_chip), [core_chip, 0])
        entry[1] += 1
    tile = chip.cores.tile_size
    tiles = len({c // tile for c in cores})
    sm = chip.shared_memory
    bank = sm.rows * sm.row_bytes
    held = 0
    if sm.enabled and shared_bytes and not math.isnan(shared_bytes):
        held = min(sm.banks, math.ceil(shared_bytes / bank))
    # the activity is priced at the chip of the first cores (a core group's figures are the chip's)
    price = next(iter(cores.values())) if cores else chip
    return Holdings(price, tuple((c, n) for c, n in counts.values()), tiles, held)


__all__ = ["core_chips", "holdings"]
