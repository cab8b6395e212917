"""The tile of every matmul, per candidate: the framework's greedy tile or the fastest legal
one, and why none is legal. Decided here once; the lowering emits the chosen tile and the
analytical model costs it."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..cost.matmul import MatmulCost, matmul_cost
from ..mapping import Candidate, MatmulShape, check_tiles, framework_tiles, tile_grid
from ..mapping.matmul import PAD
from ..mapping.params import CandidateArrays
from .mapper import CandidateGroups, search_shape
from .tile_choice import PLAN_FIELDS, MatmulPlans, blocked_reasons  # noqa: F401  (read from here too)


def plan_matmuls(params: CandidateArrays, shape: MatmulShape, groups: CandidateGroups | None = None) -> MatmulPlans:
    """Per candidate: the framework's greedy tile, or the fastest legal one (ties: less SRAM).
    `groups`: `candidate_groups(params)`, when the caller searches several shapes of them."""
    n = params.n
    values = {f: np.zeros(n, dtype=np.int64) for f in PLAN_FIELDS}
    feasible = np.zeros(n, dtype=bool)
    reason = [""] * n

    def fill(idx: np.ndarray, cost: MatmulCost) -> None:
        ok = cost.check.ok
        shape2 = ok.shape
        cycles = np.where(ok, np.broadcast_to(cost.cycles, shape2), np.iinfo(np.int64).max)
        best_cycles = cycles.min(axis=1, keepdims=True)
        sram = np.broadcast_to(cost.sram_bytes, shape2)
        pick = np.where(ok & (cycles == best_cycles), sram, np.iinfo(np.int64).max).argmin(axis=1)
        rows = np.arange(len(idx))
        fields = dict(tm=cost.check.tm, tn=cost.check.tn, tk=cost.check.tk, cycles=cost.cycles,
                      compute_cycles=cost.compute_cycles, dma_cycles=cost.dma_cycles, core_cycles=cost.core_cycles,
                      busy_cycles=cost.busy_cycles,
                      dma_bytes=cost.dma_bytes, bank_rows=cost.bank_rows,
                      sram_bytes=cost.sram_bytes, shared_bytes=cost.shared_bytes,
                      preload_cycles=cost.preload_cycles, banks=cost.check.banks,
                      workers_used=cost.workers_used)
        any_ok = ok.any(axis=1)
        for name, arr in fields.items():
            values[name][idx] = np.where(any_ok, np.broadcast_to(arr, shape2)[rows, pick], 0)
        values["legal_tiles"][idx] = ok.sum(axis=1)
        feasible[idx] = any_ok
        # Explain a failure with the smallest tile: if even that fails, its reason binds.
        smallest = np.broadcast_to(cost.check.tm * cost.check.tn * cost.check.tk, shape2).argmin(axis=1)
        failed = np.flatnonzero(~any_ok)
        for r, why in zip(failed, cost.check.reasons(failed, smallest[failed])):
            c = idx[r]
            what = "the framework's greedy tile does not fit" if params.framework[c] else "no legal tile"
            reason[c] = f"matmul {label}: {what}; {why}"

    label = str(shape)
    usable = ~params.no_matrix & (params.workers <= params.cores)
    for c, why in blocked_reasons(params, shape).items():
        reason[c] = why

    fw = np.flatnonzero(usable & params.framework)
    if fw.size:
        sub = params if fw.size == n else params.take(fw)
        fill(fw, matmul_cost(sub, shape, *framework_tiles(sub, shape)))
    search = np.flatnonzero(usable & ~params.framework)
    if search.size:
        # Every tile for every candidate, through the mapper's evaluation (candidates that
        # differ only in bank count share one costed row): one implementation of the pick.
        whole = search.size == n
        found = search_shape(params if whole else params.take(search), shape, framework=False,
                             groups=groups if whole else None)
        picked = found.plan_values("search")
        ok = found.best >= 0
        for name in PLAN_FIELDS:
            values[name][search] = picked[name]
        feasible[search] = ok
        bad = np.flatnonzero(~ok)
        if bad.size:  # the smallest tile's reason binds; formatted for all at once
            tm, tn, tk = tile_grid(shape)
            t = int(np.argmin(tm * tn * tk))
            check = check_tiles(params.take(search[bad]), tm[t:t + 1], tn[t:t + 1], tk[t:t + 1], shape)
            whys = check.reasons(np.arange(bad.size), np.zeros(bad.size, dtype=np.int64))
            for j, why in zip(bad, whys):
                reason[search[j]] = f"matmul {shape}: no legal tile among {len(tm)}; smallest {why}"
    return MatmulPlans(feasible, reason, values)


@dataclass(frozen=True)
class MatmulPlan:
    """One candidate's plan (a row of `MatmulPlans`)."""

    feasible: bool
    reason: str
    tm: int = 0
    tn: int = 0
    tk: int = 0
    cycles: int = 0
    compute_cycles: int = 0
    dma_cycles: int = 0
    core_cycles: int = 0
    busy_cycles: int = 0
    dma_bytes: int = 0
    sram_bytes: int = 0
    bank_rows: int = 0
    shared_bytes: int = 0
    preload_cycles: int = 0
    banks: int = 0
    workers_used: int = 0
    legal_tiles: int = 0


def a_shared_banks(params: CandidateArrays, shape: MatmulShape) -> np.ndarray:
    """Per candidate, the shared banks the A tiles of its picked tile take (`MatmulShape.a_shared`,
    below `a_shared_base`): every set's tiles, one bank each (sets x batch x M / tm); none
    where they do not fit there (A then read from DRAM) or no tile is legal. Picked as the
    model and the lowering pick it: by the overlapped cost, whatever the timing mode."""
    return shared_banks(params, shape)[0]


def shared_banks(params: CandidateArrays, shape: MatmulShape) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate, `a_shared_banks` and the shared banks its picked tile's B tiles take
    (``mapping.weights = "shared"``: one bank each, from the bottom bank up; 0 otherwise or
    where no tile is legal)."""
    if params.serial.any():
        params = replace(params, serial=np.zeros(params.n, dtype=bool))
    picked = plan_matmuls(params, shape)
    ok = picked.feasible
    column = lambda a: np.where(ok, a, PAD)[:, None]  # noqa: E731  (any tile where none is legal)
    check = check_tiles(params, column(picked.tm), column(picked.tn), column(picked.tk), shape)
    return (np.where(ok, check.shared_a_tiles[:, 0], 0).astype(np.int64),
            np.where(ok, check.shared_tiles[:, 0], 0).astype(np.int64))  # 0 where B is not shared


def plan_matmul(chip, mapping, shape: MatmulShape) -> MatmulPlan:
    plans = plan_matmuls(CandidateArrays.from_candidates([Candidate(chip, mapping)]), shape)
    return MatmulPlan(bool(plans.feasible[0]), plans.reason[0], **{f: int(plans.values[f][0]) for f in PLAN_FIELDS})


__all__ = ["PLAN_FIELDS", "MatmulPlan", "MatmulPlans", "a_shared_banks", "blocked_reasons", "plan_matmul",
           "plan_matmuls", "shared_banks"]
