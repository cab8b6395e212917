"""What a matmul's chosen tile holds, per candidate (`MatmulPlans`, `PLAN_FIELDS`), and why
a candidate cannot have one at all (`blocked_reasons`): read by the mapper that searches
the tiles and by `plan.matmul` that picks among them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..mapping import MatmulShape
from ..mapping.params import CandidateArrays


PLAN_FIELDS = ("tm", "tn", "tk", "cycles", "compute_cycles", "dma_cycles", "core_cycles", "busy_cycles", "dma_bytes",
               "sram_bytes", "bank_rows", "shared_bytes", "preload_cycles",
               "banks", "workers_used", "legal_tiles")


@dataclass
class MatmulPlans:
    """The chosen tile per candidate (arrays of length n), or why none is legal."""

    feasible: np.ndarray
    reason: list[str]
    values: dict[str, np.ndarray]

    def __getattr__(self, name: str):
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None


def blocked_reasons(params: CandidateArrays, shape: MatmulShape | None = None) -> dict[int, str]:
    """Why candidates cannot run a matmul at all (no matrix Ball for the mapping's dataflow,
    more workers than cores), by candidate index; the others are left out."""
    out = {}
    for c in np.flatnonzero(params.no_matrix | (params.workers > params.cores)):
        if params.no_matrix[c]:
            what = f" for matmul {shape}" if shape is not None else ""
            out[int(c)] = params.matrix_missing[c] or f"chip {params.chip_names[c]} has no matrix Ball{what}"
        else:
            out[int(c)] = f"{params.workers[c]} workers but chip {params.chip_names[c]} has {params.cores[c]} cores"
    return out
