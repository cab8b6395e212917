"""The analytical model over a whole graph: one row per candidate x op, then totals.

Ops run one after another (each op's workers finish before the next op starts), costed as
the lowering emits them (`dse.analytical.graph_cost`): int8 products on the matrix Ball,
ReLU on its Ball when the chip has one, everything else on the core (charged per element,
never free), views as descriptors. Every op is evaluated for all candidates at once (numpy
over the candidate axis).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..mapping import Candidate, CandidateArrays
from ..plan.placement import spmd_chip
from ..plan.spans import SpanError
from ..plan.units import too_many_workers
from ..units.stream import STREAM_BALL_OPS
from .graph_cost import ACTIVITY_FIELDS, graph_costs
from .spans import span_costs

# 0.4: a blocked accumulator's scale takes the DRAM it varies over (`dse.plan.streams.blocked_scale`),
# not a whole padded tensor: the DRAM footprint of quantized graphs is smaller (earlier runs not reused)
MODEL_VERSION = "analytical-0.4"

OP_COLUMNS = [
    "candidate", "candidate_hash", "op", "kind", "unit", "feasible", "reason", "cycles",
    "compute_cycles", "dma_cycles", "core_cycles", "ball_cycles", "busy_cycles", "dma_bytes", "sram_bytes",
    "shared_bytes", "bank_rows", "banks",
    "tile_m", "tile_n", "tile_k", "workers_used", "syncs", "preload_cycles", "halo_cycles", "macs",
    *ACTIVITY_FIELDS, "workspace_bytes",
]


TIMINGS = ("overlapped", "serial")


def estimate(graph, candidates: Sequence[Candidate],
             calibration: Mapping[str, Mapping[str, float]] | None = None,
             timing: str = "overlapped", plans=None) -> pd.DataFrame:
    """One row per candidate x op: cycles, DMA, SRAM, tile and feasibility with its reason
    (`estimate_columns` as a frame)."""
    return pd.DataFrame(estimate_columns(graph, candidates, calibration, timing, plans), columns=OP_COLUMNS)


def estimate_columns(graph, candidates: Sequence[Candidate],
                     calibration: Mapping[str, Mapping[str, float]] | None = None,
                     timing: str = "overlapped", plans=None, spmd: list[tuple] | None = None) -> dict[str, np.ndarray]:
    """`estimate`'s columns (`OP_COLUMNS`, name -> one array of candidate-major rows): what
    a batch reads, without building a frame. `spmd`: `spmd_chips(candidates)`, when made.

    `timing` mirrors the emulator's modes: "overlapped" (the default) or "serial" (the
    framework's emulator: every instruction its latency, one after another). A chip whose
    matrix Ball has ``timing = "systolic"`` is costed with `systolic_gemm_cycles` in
    either. `calibration` maps a chip name to fitted constants
    (`dse.analytical.calibration`): a candidate on a chip of that name gets ``core x
    core_scale + ball x ball_scale + syncs x sync_cycles`` cycles per op instead of the
    uncalibrated figure. `plans`: the graph's plan to cost (`graph_costs`), else its own."""
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS}, got {timing!r}")
    # Each candidate costed with the parameters of the cores its workers run on (their core
    # group's hardware, `spmd_chip`); workers spanning groups that differ are infeasible.
    spmd = spmd if spmd is not None else spmd_chips(candidates)
    costed = [cand if chip is cand.chip else Candidate(chip, cand.mapping) for cand, (chip, _) in zip(candidates, spmd)]
    params = CandidateArrays.from_candidates(costed)
    params.serial[:] = timing == "serial"
    n_cands, ops = params.n, graph.ops
    chips = [cand.chip for cand in costed]
    per_op = graph_costs(graph, params, chips, plans)
    halo = np.zeros((len(ops), n_cands), dtype=np.int64)
    _span_partitioned(graph, costed, params, chips, per_op, halo)
    spans_groups = np.zeros(n_cands, dtype=bool)  # (a candidate with a reason only: most have none)
    for index in [index for index, (_, reason) in enumerate(spmd) if reason]:
        cand = candidates[index]
        spans_groups[index] = cand.mapping.workers <= cand.chip.cores.count
    if spans_groups.any():
        for cost in per_op:
            cost.feasible[spans_groups] = False
            cost.reason[spans_groups] = [spmd[index][1] for index in np.flatnonzero(spans_groups)]
    if calibration:
        _calibrate(per_op, params, calibration)
    frame = {
        "candidate": np.repeat(np.arange(n_cands), len(ops)),
        "candidate_hash": np.repeat(np.array([cand.hash for cand in candidates], dtype=object), len(ops)),
        "op": np.tile(np.array([op.name for op in ops], dtype=object), n_cands),
        "kind": np.tile(np.array([op.kind for op in ops], dtype=object), n_cands),
    }
    macs = np.array([op.counts.macs for op in ops], dtype=np.int64)
    for name in OP_COLUMNS[4:]:
        if name == "macs":
            frame[name] = np.tile(macs, n_cands)
            continue
        if name == "halo_cycles":
            frame[name] = halo.T.ravel()
            continue
        # (ops, n) -> candidate-major rows
        frame[name] = np.stack([getattr(cost, name) for cost in per_op], axis=1).ravel() if ops else np.array([])
    return frame


def spmd_chips(candidates: Sequence[Candidate]) -> list[tuple]:
    """`spmd_chip` of each candidate, made once per distinct chip and worker count (a
    sweep's candidates share a few hundred)."""
    made: dict[tuple[int, int], tuple] = {}
    out = []
    for cand in candidates:
        key = (id(cand.chip), cand.mapping.workers)
        found = made.get(key)
        if found is None:
            found = made[key] = spmd_chip(cand.chip, cand.mapping.workers)
        out.append(found)
    return out


def _span_partitioned(graph, candidates, params, chips, per_op, halo) -> None:
    """Candidates whose mapping partitions a temporal stack into spans: each op's figures
    are the slowest worker's (`dse.analytical.spans`), with the halo recomputed per op."""
    spanned = [index for index, cand in enumerate(candidates) if getattr(cand.mapping, "partition", None) == "spans"]
    for workers in sorted({candidates[index].mapping.workers for index in spanned}):
        idx = np.array([index for index in spanned if candidates[index].mapping.workers == workers])
        sub = params.take(idx)
        try:
            costs, span_halo = span_costs(graph, sub, [chips[index] for index in idx], workers,
                                          [candidates[index].mapping for index in idx])
        except SpanError as exc:
            for cost in per_op:
                cost.feasible[idx] = False
                cost.reason[idx] = str(exc)
        else:
            for cost, span_cost in zip(per_op, costs):
                for field_name, value in vars(span_cost).items():
                    getattr(cost, field_name)[idx] = value
            halo[:, idx] = span_halo
        too_many = idx[sub.workers > sub.cores]
        for cost in per_op:  # the lowering refuses more spans than cores before anything else
            cost.feasible[too_many] = False
            cost.reason[too_many] = [too_many_workers(workers, params.chip_names[index], params.cores[index])
                                     for index in too_many]


def _calibrate(per_op, params: CandidateArrays, calibration) -> None:
    names = np.array(params.chip_names, dtype=object)
    for chip, constants in calibration.items():
        rows = names == chip
        if not rows.any():
            continue
        for cost in per_op:
            cal = np.round(cost.core_cycles * constants["core_scale"] + cost.ball_cycles * constants["ball_scale"]
                           + cost.syncs * constants["sync_cycles"]).astype(np.int64)
            cost.cycles = np.where(rows & cost.feasible, cal, cost.cycles)


# What a candidate makes the chip do, summed over ops and workers (`dse.ppa.energy.ACTIVITY`
# names; DRAM bytes are `dma_bytes`): the matrix Ball's MACs, bank rows, the stream Balls'
# busy cycles by kind, core-op cycles.
STREAM_KINDS = tuple(STREAM_BALL_OPS)
TOTAL_ACTIVITY = ("macs", "bank_reads", "bank_writes", "shared_reads", "shared_writes", "core_op_cycles",
                  *(f"{kind}_busy" for kind in STREAM_KINDS), "workspace_bytes")

TOTAL_COLUMNS = ["candidate", "candidate_hash", "feasible", "reason", "latency_cycles", "compute_cycles",
                 "dma_cycles", "core_cycles", "busy_cycles", "utilisation", "dma_bytes", "peak_sram_bytes",
                 "shared_sram_bytes", "private_sram_per_core_bytes", "private_sram_bytes",
                 "unaddressable_sram_bytes", "workers", *TOTAL_ACTIVITY]


def summarize(per_op: pd.DataFrame, candidates: Sequence[Candidate]) -> pd.DataFrame:
    """Totals per candidate. Latency is the sum over ops (they run in sequence, each as long
    as its busiest worker: the critical path over cores); `busy_cycles` sums every worker's
    busy time and `utilisation` is that over ``workers x latency``. A candidate is
    infeasible if any op is, with the first such op's reason."""
    return pd.DataFrame(summarize_columns(per_op, candidates), columns=TOTAL_COLUMNS)


def summarize_columns(per_op, candidates: Sequence[Candidate],
                      spmd: list[tuple] | None = None) -> dict[str, np.ndarray]:
    """`summarize`'s columns (`TOTAL_COLUMNS`, name -> per-candidate values) of a per-op frame
    or of `estimate_columns`; `spmd`: `spmd_chips(candidates)`, when made."""
    n_cands = len(candidates)
    summed = ["cycles", "compute_cycles", "dma_cycles", "core_cycles", "busy_cycles", "dma_bytes"]
    per_candidate = _per_candidate(per_op, n_cands, summed)
    if per_candidate is not None:
        sums, feasible, peak, shared, reason = per_candidate
    else:
        per_op = per_op if isinstance(per_op, pd.DataFrame) else pd.DataFrame(per_op)
        by_candidate = per_op.groupby("candidate", sort=True)
        sums = by_candidate[summed].sum().reindex(range(n_cands), fill_value=0)
        feasible = by_candidate["feasible"].all().reindex(range(n_cands), fill_value=True).to_numpy()
        peak = by_candidate["sram_bytes"].max().reindex(range(n_cands), fill_value=0).to_numpy()
        shared = by_candidate["shared_bytes"].max().reindex(range(n_cands), fill_value=0).to_numpy()
        bad = per_op[~per_op["feasible"]].groupby("candidate")["reason"].first()
        reason = np.array([bad.get(index, "") for index in range(n_cands)], dtype=object)
    # the chip its workers have, its figures read once per distinct chip object
    of_chip: dict[int, tuple[float, float]] = {}
    sram = []
    for chip, _ in (spmd if spmd is not None else spmd_chips(candidates)):
        figures = of_chip.get(id(chip))
        if figures is None:
            figures = of_chip[id(chip)] = (chip.private_sram_bytes, chip.unaddressable_sram_bytes)
        sram.append(figures)
    per_core, unaddressable = np.array(sram, dtype=np.float64).reshape(-1, 2).T
    workers = np.array([cand.mapping.workers for cand in candidates], dtype=np.int64)
    activity = {name: np.where(feasible, value, np.nan) for name, value in op_activity(per_op, n_cands).items()}
    return {
        "candidate": np.arange(n_cands),
        "candidate_hash": np.array([cand.hash for cand in candidates], dtype=object), "feasible": feasible,
        "reason": reason,
        "latency_cycles": np.where(feasible, np.asarray(sums["cycles"], dtype=np.float64), np.nan),
        # An infeasible candidate has no cycles, bytes or peak: NaN (recorded as no metric,
        # shown as "—"), not the partial sums of the ops that did fit, which read as real.
        "compute_cycles": np.where(feasible, np.asarray(sums["compute_cycles"], dtype=np.float64), np.nan),
        "dma_cycles": np.where(feasible, np.asarray(sums["dma_cycles"], dtype=np.float64), np.nan),
        "core_cycles": np.where(feasible, np.asarray(sums["core_cycles"], dtype=np.float64), np.nan),
        "busy_cycles": np.where(feasible, np.asarray(sums["busy_cycles"], dtype=np.float64), np.nan),
        "utilisation": np.where(feasible, np.asarray(sums["busy_cycles"], dtype=np.float64)
                                / np.maximum(workers * np.asarray(sums["cycles"], dtype=np.float64), 1), np.nan),
        "dma_bytes": np.where(feasible, np.asarray(sums["dma_bytes"], dtype=np.float64), np.nan),
        "peak_sram_bytes": np.where(feasible, peak.astype(np.float64), np.nan),
        # Shared memory a tile of cores holds at once (weights = shared), apart from private SRAM.
        "shared_sram_bytes": np.where(feasible, shared.astype(np.float64), np.nan),
        "private_sram_per_core_bytes": per_core,
        # The SRAM a candidate asks for: the private banks of every worker it uses.
        "private_sram_bytes": per_core * workers,
        # Bank rows past the row-address field, on the same workers: there, but unusable.
        "unaddressable_sram_bytes": unaddressable * workers,
        "workers": workers,
        **activity,
    }


def _per_candidate(per_op: pd.DataFrame, n_cands: int, summed: list[str]):
    """`summarize`'s per-candidate reductions (sums of `summed`, all feasible, peak and shared
    SRAM, the first infeasible op's reason) of a frame `estimate` made: every candidate's
    ops in order, candidate-major, so each column is a (candidates, ops) grid. None for any
    other frame, or integer figures that are not (a float sum's order could differ)."""
    rows = len(per_op["candidate"])
    if not n_cands or not rows or rows % n_cands:
        return None
    n_ops = rows // n_cands
    if not np.array_equal(np.asarray(per_op["candidate"]), np.repeat(np.arange(n_cands), n_ops)):
        return None
    columns = {name: np.asarray(per_op[name]) for name in (*summed, "sram_bytes", "shared_bytes")}
    if not all(np.issubdtype(values.dtype, np.integer) for values in columns.values()):
        return None
    grid = lambda name: columns[name].reshape(n_cands, n_ops)  # noqa: E731
    ok = np.asarray(per_op["feasible"]).reshape(n_cands, n_ops)
    if ok.dtype != bool:
        return None
    reasons = np.asarray(per_op["reason"]).reshape(n_cands, n_ops)
    bad = ~ok
    if not all(isinstance(why, str) for why in reasons[bad].tolist()):  # `first` skips a missing one
        return None
    first = np.argmax(bad, axis=1)
    reason = np.where(bad.any(axis=1), reasons[np.arange(n_cands), first], "").astype(object)
    sums = {name: grid(name).sum(axis=1) for name in summed}
    return sums, ok.all(axis=1), grid("sram_bytes").max(axis=1), grid("shared_bytes").max(axis=1), reason


def op_activity(per_op: pd.DataFrame, n_cands: int) -> dict[str, np.ndarray]:
    """`TOTAL_ACTIVITY` per candidate (0 .. n_cands - 1) summed over the ops of a per-op frame
    (or `estimate_columns`)."""
    if "candidate" not in per_op or not len(per_op["candidate"]):
        return dict.fromkeys(TOTAL_ACTIVITY, np.zeros(n_cands))
    cand = np.asarray(per_op["candidate"])

    def total(values) -> np.ndarray:
        return np.bincount(cand, weights=np.asarray(values, dtype=np.float64), minlength=n_cands)[:n_cands]

    out = {"macs": total(per_op["ball_macs"]), "core_op_cycles": total(per_op["core_busy"]),
           "workspace_bytes": total(per_op["workspace_bytes"])}
    for name in ("bank_reads", "bank_writes", "shared_reads", "shared_writes"):
        out[name] = total(per_op[name])
    unit = np.asarray(per_op["unit"])
    busy = np.asarray(per_op["stream_busy"], dtype=np.float64)
    for kind in STREAM_KINDS:
        out[f"{kind}_busy"] = total(np.where(unit == kind, busy, 0.0))
    return out
