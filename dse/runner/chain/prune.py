"""The prune stage: which analytically feasible candidates are emulated, and why the others are not."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from ...records.outcomes import ANALYTICALLY_INFEASIBLE, CONSTRAINT_REJECTED, NOT_EMULATED
from .stage import Stage


@dataclass
class Pruning:
    emulate: list[int]  # candidate ids the emulator stage runs, in the order given
    pruned: list[tuple[int, str]]  # (candidate id, why it is not emulated)


def prune(analysed: Iterable[tuple[int, bool, dict]], done: set[int], policy: str, top_k: int,
          metric: str, direction: str, reasons: dict[int, str] | None = None) -> Pruning:
    """`analysed`: (candidate id, analytically feasible, analytical totals) per candidate;
    `done`: candidates whose emulator run is finished already (neither emulated nor pruned
    again); `policy`: the spec's stages.emulator (top_k or all); `reasons`: why each
    infeasible one is (a constraint's rejection is named as such, not as infeasible)."""
    reasons = reasons or {}
    analysed = list(analysed)
    sign = 1 if direction == "minimize" else -1
    ranked = sorted((totals.get(metric, math.inf) * sign, cid) for cid, feasible, totals in analysed if feasible)
    keep = ranked if policy == "all" else ranked[:top_k]
    chosen = {cid for _, cid in keep}
    rank = {cid: i for i, (_, cid) in enumerate(ranked, 1)}
    out = Pruning([], [])
    for cid, feasible, _ in analysed:
        if cid in done:
            continue
        if cid in chosen:
            out.emulate.append(cid)
        elif feasible:
            out.pruned.append((cid, f"not emulated: rank {rank[cid]} of {len(ranked)} feasible by the analytical "
                                    f"{metric}, outside the top {top_k}"))
        elif (reasons.get(cid) or "").startswith(CONSTRAINT_REJECTED):
            out.pruned.append((cid, NOT_EMULATED + reasons[cid]))
        else:
            why = reasons.get(cid)
            out.pruned.append((cid, NOT_EMULATED + ANALYTICALLY_INFEASIBLE + (f": {why}" if why else "")))
    return out


PRUNE = Stage(
    "prune", prune,
    "which analytically feasible candidates are emulated (top_k or all), and why every other one is not")
