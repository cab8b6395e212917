"""The model of a workload of several stages (an LLM's prefill and decode) placed on the
chip as ``mapping.placement`` says (`dse.plan.placement.place`), for arrays of candidates.

Each stage is costed by `estimate` on the chip its cores have (their core group's, per
stage), for all candidates of one placement at once. The totals follow what the lowering
(`dse.lower.lower_placed`) emits and the emulator shows:

* SPMD (placement None): the stages one after another on the same workers: latency, DMA
  bytes and busy cycles add up; peak SRAM is the larger stage's.
* ``"phase"``: the stages at once on their groups' cores, one tile, so every BARRIER is
  met by every core of the tile (`lower_stages` pads the shorter stage with BARRIERs):
  the stages advance in lock step, epoch by epoch (stages on different tiles do not meet:
  `coupled_stages`). An op closed by ``b`` syncs is ``b``
  epochs of ``cycles / b`` each (an op without a sync joins the next epoch); the latency
  is the sum over epochs of the slowest stage's epoch (`lockstep_cycles`). The SRAM a
  candidate asks for is every used core's own banks (its group's).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from ..mapping import Candidate
from ..plan.placement import place, stage_reason
from .estimate import TOTAL_COLUMNS, estimate, summarize

SUMMED = ("compute_cycles", "dma_cycles", "core_cycles", "busy_cycles", "dma_bytes")


def epoch_cycles(cycles: np.ndarray, syncs: np.ndarray) -> np.ndarray:
    """One stage's cycles between consecutive BARRIERs: an op closed by ``b`` syncs gives
    ``b`` epochs of ``cycles / b``; an op closed by none runs in the next op's first epoch
    (or in a last epoch of its own at the end)."""
    out: list[float] = []
    pending = 0.0
    for c, b in zip(cycles.tolist(), syncs.tolist()):
        if b == 0:
            pending += c
            continue
        out += [c / b] * b
        out[-b] += pending
        pending = 0.0
    if pending:
        out.append(pending)
    return np.asarray(out, dtype=np.float64)


def lockstep_cycles(stages: Sequence[np.ndarray]) -> float:
    """Stages meeting at every BARRIER: the sum over epochs of the slowest stage's."""
    n = max((len(e) for e in stages), default=0)
    padded = np.zeros((len(stages), n))
    for i, e in enumerate(stages):
        padded[i, :len(e)] = e
    return float(padded.max(axis=0).sum()) if n else 0.0


def coupled_stages(places, tile_size: int) -> list[list[int]]:
    """The stages that meet at barriers: those whose cores share a tile, transitively
    (a stage over two tiles couples both)."""
    sets: list[tuple[set[int], list[int]]] = []
    for s, p in enumerate(places):
        tiles, members = {c // tile_size for c in p.cores}, [s]
        for other in [x for x in sets if x[0] & tiles]:
            sets.remove(other)
            tiles |= other[0]
            members += other[1]
        sets.append((tiles, sorted(members)))
    return [members for _, members in sets]


def estimate_placed(stages: Sequence[tuple[str, object]], candidates: Sequence[Candidate],
                    calibration=None) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """Totals per candidate (`TOTAL_COLUMNS`) for `stages` (``(role, graph)`` each) placed as
    each candidate's mapping says, and per stage its per-op frame (`estimate`'s columns,
    with the op names of that stage; candidates that could not be placed have no rows)."""
    roles = [role for role, _ in stages]
    n = len(candidates)
    placed = [place(c.chip, c.mapping.placement, c.mapping.workers, roles) for c in candidates]
    ok = [i for i in range(n) if not placed[i][1]]
    per_stage, totals = [], []
    for s, (role, graph) in enumerate(stages):
        cands = [Candidate(placed[i][0][s].chip,
                           candidates[i].mapping.model_copy(update={"workers": len(placed[i][0][s].cores)}))
                 for i in ok]
        per_op = estimate(graph, cands, calibration) if cands else None
        frame = per_op.assign(candidate=np.asarray(ok)[per_op["candidate"].to_numpy()]) if cands else pd.DataFrame()
        per_stage.append(frame)
        totals.append(summarize(per_op, cands) if cands else None)
    # per stage, per candidate: (cycles, syncs) of its ops in order, split once
    op_times = [{cand: (g["cycles"].to_numpy(), g["syncs"].to_numpy()) for cand, g in frame.groupby("candidate")}
                if not frame.empty else {} for frame in per_stage]
    rows = []
    for i, c in enumerate(candidates):
        places, reason = placed[i]
        if reason:
            rows.append(_infeasible(i, c, reason))
            continue
        k = ok.index(i)
        stage_totals = [t.iloc[k] for t in totals]
        bad = next((s for s, t in enumerate(stage_totals) if not t["feasible"]), None)
        if bad is not None:
            rows.append(_infeasible(i, c, stage_reason(places[bad], str(stage_totals[bad]["reason"]))))
            continue
        if c.mapping.placement is None:
            latency = sum(float(t["latency_cycles"]) for t in stage_totals)
        else:
            epochs = [epoch_cycles(*times[i]) for times in op_times]
            # stages meet at barriers only within a tile: each set of stages coupled through
            # shared tiles runs in lock step, the sets side by side
            latency = max(lockstep_cycles([epochs[s] for s in coupled])
                          for coupled in coupled_stages(places, c.chip.cores.tile_size))
        cores = sorted({core for p in places for core in p.cores})
        sram_per_core = [p.chip.private_sram_bytes for p in places for _ in p.cores]
        if c.mapping.placement is None:  # the same cores run every stage
            sram_per_core = sram_per_core[:len(places[0].cores)]
        row = {"candidate": i, "candidate_hash": c.hash, "feasible": True, "reason": "",
               "latency_cycles": latency, "workers": len(cores),
               "peak_sram_bytes": max(float(t["peak_sram_bytes"]) for t in stage_totals),
               "private_sram_per_core_bytes": float(max(sram_per_core)),
               "private_sram_bytes": float(sum(sram_per_core))}
        for name in SUMMED:
            row[name] = sum(float(t[name]) for t in stage_totals)
        row["utilisation"] = row["busy_cycles"] / max(len(cores) * latency, 1)
        rows.append(row)
    return pd.DataFrame(rows, columns=TOTAL_COLUMNS), per_stage


def _infeasible(i: int, c: Candidate, reason: str) -> dict:
    row = {name: np.nan for name in TOTAL_COLUMNS}
    row.update(candidate=i, candidate_hash=c.hash, feasible=False, reason=reason, workers=c.mapping.workers)
    return row


__all__ = ["coupled_stages", "epoch_cycles", "estimate_placed", "lockstep_cycles"]
