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
  is the sum over epochs of the slowest stage's epoch, the stages' DMA sharing the system
  bus as a pipeline's ranges in a slot do (`_slot_cycles`, below). The SRAM a candidate asks
  for is every used core's own banks (its group's); with ``mapping.weights = "shared"`` the
  shared bytes are every stage's region of the tile's shared banks (`stage_regions`).

One graph in ranges of ops (``"layers"``, `estimate_layers`): each range's ops costed on its
group's chip with the plan's hand-offs marked (`dse.plan.placement.handoffs`: the leading
matmuls of a range read their A from shared memory, `MatmulShape.a_shared`), the ranges one
after another: latency is the sum of the ranges', plus per boundary its BARRIER and the
hand-off's loads into shared memory (`handoff_cycles`). In a pipeline's slot the ranges run
at once and share the system bus: at each epoch's start every range's first transfers
(`op_head_transfers`) are placed on the bus as the emulator places them (`bus_head_delays`:
a transfer reserves all its bursts when it starts, so a range whose first loads come while
another range's long loads hold the bus waits for them); the rest of their DMA shares the
bus evenly (`lockstep_bus_cycles`). ``"auto"`` (`resolve_auto`) costs every option and takes
the fastest.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np
import pandas as pd

from emulator.dma import burst_groups
from emulator.timing import Bus

from ..cost.dma import dma_cycles_for
from ..mapping import Candidate, CandidateArrays, check_tiles
from ..mapping.candidate import Mapping
from ..plan.graph_plan import placed_weights, plan_for, plan_graph, plan_key
from ..plan.memory import ALIGN, NP_DTYPES, content_key, pad
from ..plan.placement import (WeightRegions, boundary_note, boundary_tensors, handoff_banks, handoffs, place,
                              range_candidate, range_regions, schedule, spmd_chip, stage_reason, stage_regions)
from ..plan.units import HANDOFF_UNITS
from ..units.stream import STREAM_BALL_OPS
from .estimate import TOTAL_ACTIVITY, TOTAL_COLUMNS, estimate, op_activity, summarize
from .graph_cost import graph_costs
from .stream_cost import planned_stream

# what stages (ranges) add up to, and (TOTAL_ACTIVITY) what the chip does, summed like the bytes
SUMMED = ("compute_cycles", "dma_cycles", "core_cycles", "busy_cycles", "dma_bytes")


def bound_across_stages(graphs, fusion: str | None = None, channels_last: bool | None = None) -> int:
    """Of the stages' plan footprints (summed), the bytes of weights the staged lowering
    places once: a weight with the shape, dtype and bytes of one placed before (in an
    earlier stage, or under another name) shares its buffer (`Dram.weight`, `bind_content`)."""
    seen, out = set(), 0
    for graph in graphs:
        for name, nbytes in placed_weights(graph, fusion, channels_last):
            spec = graph.tensors[name]
            key = (tuple(spec.shape), spec.dtype,
                   *content_key(np.asarray(graph.weights[name]).astype(NP_DTYPES[spec.dtype], copy=False)))
            if key in seen:
                out += nbytes
            seen.add(key)
    return out


def bound_constants(stages, per_stage: list[pd.DataFrame], candidates: Sequence[Candidate]) -> dict[int, int]:
    """Per candidate (index into `candidates`): of the stages' workspace, the read-only
    constants a later stage reads as an earlier stage laid them out, so the staged
    lowering places them once (`Dram.constant` by content): a weight's blocked copy in the
    same (tn, tk), a bias replicate in the same (tm, tn). Within a stage the stage's own
    cost binds them already (`dse.units.matrix.bound_bytes`)."""
    out: dict[int, int] = {}
    earlier: dict[int, set] = {}
    idents: dict[tuple[int, str], tuple] = {}
    for stage, (_, graph) in enumerate(stages):
        frame = per_stage[stage]
        if frame.empty:
            continue
        plans_of: dict[tuple, dict] = {}
        mine: dict[int, set] = {}
        for cand, op, tm, tn, tk, feasible in zip(frame["candidate"], frame["op"], frame["tile_m"], frame["tile_n"],
                                                  frame["tile_k"], frame["feasible"]):
            mapping = candidates[cand].mapping
            plans = plans_of.get(plan_key(mapping))
            if plans is None:
                plans = plans_of[plan_key(mapping)] = {each.op.name: each for each in plan_for(graph, mapping)
                                                      if each.gemm is not None}
            plan = plans.get(op)
            if plan is None or not feasible:
                continue
            shape, op_ = plan.gemm, plan.op
            _, Np, Kp = shape.padded
            keys = []
            if shape.b_weight and not shape.b_preloaded and op_.inputs[1] in graph.weights:
                nbB = shape.batch if shape.b_batched else 1
                keys.append((("weight", _ident(idents, stage, graph, op_.inputs[1], content_key), op_.kind,
                              op_.attrs.get("groups", 1), Np, Kp, int(tn), int(tk)), pad(nbB * Np * Kp, ALIGN)))
            if shape.bias and len(op_.inputs) > 2 and op_.inputs[2] in graph.weights:
                keys.append((("bias", _ident(idents, stage, graph, op_.inputs[2], content_key), op_.kind, Np, int(tm),
                              int(tn)), pad(Np * int(tm) * 4, ALIGN)))
            before, own = earlier.setdefault(int(cand), set()), mine.setdefault(int(cand), set())
            for key, nbytes in keys:
                if key in before and key not in own:
                    out[int(cand)] = out.get(int(cand), 0) + nbytes
                own.add(key)
        for cand, own in mine.items():
            earlier[cand] |= own
    return out


def _ident(idents: dict, stage: int, graph, name: str, content_key) -> tuple:
    if (stage, name) not in idents:
        idents[(stage, name)] = content_key(np.asarray(graph.weights[name]))
    return idents[(stage, name)]


def epoch_cycles(cycles: np.ndarray, syncs: np.ndarray, lead: np.ndarray | None = None,
                 total: np.ndarray | None = None) -> np.ndarray:
    """One stage's cycles between consecutive BARRIERs: an op closed by ``closes`` syncs gives
    that many epochs of ``cycles / closes``; an op closed by none runs in the next op's first epoch
    (or in a last epoch of its own at the end). With `lead` (per op, its first epoch's share
    of `total`, its cycles: a shared weight's loads before their BARRIER, `preload_cycles`)
    an op of ``closes >= 2`` syncs gives that share of `cycles` to its first epoch and the rest to
    the others evenly: stages in lock step pair a short load epoch with the other's epoch,
    not half the op."""
    out: list[float] = []
    pending = 0.0
    leads = lead.tolist() if lead is not None else [0.0] * len(cycles)
    totals = total.tolist() if total is not None else cycles.tolist()
    for op_cycles, closes, first, whole in zip(cycles.tolist(), syncs.tolist(), leads, totals):
        if closes == 0:
            pending += op_cycles
            continue
        if closes >= 2 and 0 < first < whole:
            share = first / whole
            out += [op_cycles * share] + [op_cycles * (1 - share) / (closes - 1)] * (closes - 1)
        else:
            out += [op_cycles / closes] * closes
        out[-closes] += pending
        pending = 0.0
    if pending:
        out.append(pending)
    return np.asarray(out, dtype=np.float64)


def lockstep_cycles(stages: Sequence[np.ndarray]) -> float:
    """Stages meeting at every BARRIER: the sum over epochs of the slowest stage's."""
    n_epochs = max((len(epochs) for epochs in stages), default=0)
    padded = np.zeros((len(stages), n_epochs))
    for stage, epochs in enumerate(stages):
        padded[stage, :len(epochs)] = epochs
    return float(padded.max(axis=0).sum()) if n_epochs else 0.0


def lockstep_bus_cycles(stages: Sequence[np.ndarray], stage_bytes: Sequence[np.ndarray],
                        stage_dma: Sequence[np.ndarray], bus_bytes: int,
                        head_delay: Sequence[np.ndarray] | None = None,
                        head_bytes: Sequence[np.ndarray] | None = None) -> float:
    """`lockstep_cycles` of ranges running at once whose DMA shares the system bus. In an
    epoch, range r's first transfers (its `head_delay` and `head_bytes` by epoch,
    `bus_head_delays`) wait behind the other ranges' first transfers as the bus places them;
    the rest of its transfers wait behind the others' other bursts in proportion to the share
    of its time it spends in DMA: range r's epoch lasts ``c_r + head_delay_r + (dma_r / c_r) x
    (bytes the other ranges move in it beyond their first transfers) / dma.system_bus_bytes``."""
    n_epochs = max((len(epochs) for epochs in stages), default=0)
    if not n_epochs:
        return 0.0
    n_stages = len(stages)
    cycles, moved, dma, delay, head = (np.zeros((n_stages, n_epochs)) for _ in range(5))
    for stage, (epochs, stage_moved, stage_dma_cycles) in enumerate(zip(stages, stage_bytes, stage_dma)):
        cycles[stage, :len(epochs)], moved[stage, :len(stage_moved)] = epochs, stage_moved
        dma[stage, :len(stage_dma_cycles)] = stage_dma_cycles
        if head_delay is not None:
            delay[stage, :len(head_delay[stage])] = head_delay[stage]
            head[stage, :len(head_bytes[stage])] = head_bytes[stage]
    share = np.minimum(dma / np.maximum(cycles, 1), 1.0)
    rest = np.maximum(moved - head, 0)
    others = (rest.sum(axis=0) - rest) / bus_bytes
    return float((cycles + delay + share * others).max(axis=0).sum())


def _place_heads(chip, bus: Bus, heads: dict[int, tuple[int, Sequence[int]]]) -> dict[int, list[int]]:
    """Each core's first transfers placed on `bus` (`head_transfer_ends`): its DMA slots after them."""
    dma = chip.dma
    bus_cycles_per_beat = dma.beat_bytes / dma.system_bus_bytes
    out = {}
    for core, (offset, transfers) in sorted(heads.items(), key=lambda item: (item[1][0], item[0])):
        slots = [offset] * chip.dma_parallel_bursts
        for lines in transfers:
            _place_transfer(chip, bus, slots, lines, bus_cycles_per_beat)
        out[core] = slots
    return out


def _place_transfer(chip, bus: Bus, slots: list[int], lines: int, bus_cycles_per_beat: float) -> None:
    for count, beats in burst_groups(1, lines, lines, True, chip.dma_burst_beats):
        occ = max(1, math.ceil(beats * bus_cycles_per_beat))
        for _ in range(count):
            slot = slots.index(min(slots))
            slots[slot] = bus.alloc(slots[slot] + chip.dma.latency_cycles, occ) + beats


def head_transfer_ends(chip, heads: dict[int, tuple[int, Sequence[int]]]) -> dict[int, int]:
    """When each core's first transfers end, issued at once on the system bus: `heads` maps a
    core to (the instructions it dispatches before them, their 16-byte lines in order). As the
    emulator's timing places them (`emulator.timing`): in dispatch order (then core id), each
    transfer reserves all its bursts when it starts, a burst the first gap of the bus free for
    it ``dma.latency_cycles`` after its request, at most ``dma_parallel_bursts`` in flight a
    core. So a transfer that starts while other cores' long transfers hold the bus densely
    waits for them, beyond what an even share of the bus would make it wait."""
    return {core: max(slots) for core, slots in _place_heads(chip, Bus(), heads).items()}


def _window_rate(chip, heads: dict, mine: dict, until: int) -> tuple[float, float]:
    """The bus rate (beats a cycle) `mine`'s cores get after their first transfers until `until`,
    issuing transfers like their last one back to back, beside `heads` (all cores' first
    transfers, `mine`'s among them); and the window's start (their first transfers' end)."""
    bus = Bus()
    slots = _place_heads(chip, bus, heads)
    bus_cycles_per_beat = chip.dma.beat_bytes / chip.dma.system_bus_bytes
    start = max(max(slots[core_id]) for core_id in mine)
    if until <= start:
        return 0.0, float(start)
    beats = 0
    live = {core_id: slots[core_id] for core_id in mine if mine[core_id][1]}
    while live:  # the next transfer of the core whose DMA frees first, while it lands in time
        core = min(live, key=lambda other: (min(live[other]), other))
        lines = mine[core][1][-1]
        _place_transfer(chip, bus, live[core], lines, bus_cycles_per_beat)
        end = max(live[core])
        beats += max(0, min(lines, until - (end - lines)))  # its beats that land by `until`
        if end >= until:
            del live[core]
    return beats / (until - start), float(start)


def bus_head_delays(chip, heads: Sequence[dict[int, tuple[int, Sequence[int]]]],
                    shares: Sequence[float] | None = None) -> list[float]:
    """Per range of a slot (`heads`: its cores' first transfers in an epoch, `head_transfer_ends`),
    the cycles it loses beside the other ranges: its slowest core's first transfers take
    longer than beside its own range's alone; and, while the others' first transfers still
    hold the bus, its DMA (`shares`: the fraction of its epoch it spends in DMA) gets only the
    gaps they leave (`_window_rate`, against its rate on a bus of its own)."""
    everyone = {core: head for range_heads in heads for core, head in range_heads.items()}
    both = head_transfer_ends(chip, everyone)
    out = []
    for index, own in enumerate(heads):
        alone = head_transfer_ends(chip, own)
        delay = float(max((both[core] - alone[core] for core in own), default=0))
        others = heads[:index] + heads[index + 1:]
        until = max((both[core] for range_heads in others for core in range_heads), default=0)
        if own and shares is not None and shares[index] > 0:
            rate, start = _window_rate(chip, everyone, own, until)
            if until > start:
                free, _ = _window_rate(chip, own, own, int(max(alone.values()) + until - start))
                if rate > 0 and free > rate:
                    delay += shares[index] * (until - start) * (free / rate - 1)
        out.append(delay)
    return out


def op_head_transfers(plan, row, chip, mapping, workers: int, cores: Sequence[int],
                      graph) -> dict[int, tuple[int, list[int]]] | None:
    """The transfers each core of a range takes first in op `plan` (`row`: its per-op figures),
    as the lowering emits them, and the instructions it dispatches before them: a Ball
    stream's first piece in, after its 2 MSETs; a matmul's first output tile's bias, A and B
    loads (those not in shared memory), after the MSETs of its buffers. None where the op
    starts otherwise (a core op, a packing copy, a shared weight's preload, a conv)."""
    unit = row["unit"]
    if unit in STREAM_BALL_OPS:  # a Ball stream's unit label (`dse.units.stream`)
        stream = planned_stream(graph, plan.op.name, chip)
        if stream is None:
            return None
        return {cores[worker]: (2, [piece.in_lines]) for worker, piece in enumerate(stream.pieces[:workers])}
    if unit != "matrix" or plan.gemm is None:
        return None
    tm, tn, tk = int(row["tile_m"]), int(row["tile_n"]), int(row["tile_k"])
    shape = plan.gemm
    check = check_tiles(CandidateArrays.from_candidates([Candidate(chip, mapping)]), [tm], [tn], [tk], shape)
    Mp, Np, Kp = shape.padded
    shared_a, shared_b = bool(check.shared_a[0, 0]), bool(check.shared_b[0, 0])
    if Kp // tk > 1 or not shape.b_weight or shared_b:  # a packing copy or the shared B's preload first
        return None
    blocks = Mp // tm if mapping.split == "rows" else Np // tn
    computing = -(-blocks // -(-blocks // workers))
    nbuf = int(check.buffers[0, 0])
    loads = ([tm * tn * 4 // 16] if shape.bias else []) + ([] if shared_a else [tm * tk // 16]) + [tn * tk // 16]
    return {cores[worker]: (nbuf * (3 - shared_a), loads) for worker in range(min(computing, workers))}


def coupled_stages(places, tile_size: int) -> list[list[int]]:
    """The stages that meet at barriers: those whose cores share a tile, transitively
    (a stage over two tiles couples both)."""
    sets: list[tuple[set[int], list[int]]] = []
    for stage, stage_place in enumerate(places):
        tiles, members = {core // tile_size for core in stage_place.cores}, [stage]
        for other in [coupled for coupled in sets if coupled[0] & tiles]:
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
    n_cands = len(candidates)
    hashes = [candidate.hash for candidate in candidates]
    candidates = [Candidate(cand.chip, resolve_auto_stages(stages, cand)) if cand.mapping.placement == "auto" else cand
                  for cand in candidates]
    placed = [place(cand.chip, cand.mapping.placement, cand.mapping.workers, roles, cand.mapping.requests,
                    cand.mapping.weights) for cand in candidates]
    ok = [index for index in range(n_cands) if not placed[index][1]]
    stage_cands = [[Candidate(placed[index][0][stage].chip, candidates[index].mapping.model_copy(
                        update={"workers": len(placed[index][0][stage].cores)})) for index in ok]
                   for stage in range(len(stages))]
    # with shared weights, each stage's region of the tile's shared banks, as the plan decides it
    regions: dict[int, WeightRegions] = {}
    by_placement: dict[tuple, list[int]] = {}
    for ok_index, index in enumerate(ok):
        mapping = candidates[index].mapping
        by_placement.setdefault((mapping.placement, *plan_key(mapping)), []).append(ok_index)
    for (placement, *key), members in by_placement.items():
        if placement != "phase" or not any(candidates[ok[member]].mapping.weights == "shared" for member in members):
            regions.update({ok[member]: WeightRegions([0] * len(stages), [0] * len(stages), [0] * len(stages))
                            for member in members})
            continue
        params = [CandidateArrays.from_candidates([stage_cands[stage][member] for member in members])
                  for stage in range(len(stages))]
        got = stage_regions([plan_graph(stage_graph, *key) for _, stage_graph in stages], params,
                            [placed[ok[member]][0] for member in members], placement,
                            [candidates[ok[member]].chip for member in members])
        regions.update({ok[member]: region for member, region in zip(members, got)})
    per_stage, totals = [], []
    for stage, (role, graph) in enumerate(stages):
        cands = stage_cands[stage]
        picked = [regions[index].picked[stage] for index in ok]
        per_op = _estimate_at_bases(graph, cands, calibration, picked) if cands else None
        frame = per_op.assign(candidate=np.asarray(ok)[per_op["candidate"].to_numpy()]) if cands else pd.DataFrame()
        per_stage.append(frame)
        totals.append(summarize(per_op, cands) if cands else None)
    # per stage, per candidate: (cycles, syncs) of its ops in order, split once
    op_times = [{index: group for index, group in frame.groupby("candidate")} if not frame.empty else {}
                for frame in per_stage]
    stage_plans: dict[tuple, list] = {}  # per `plan_key`: each stage's plan, by op name
    bound = bound_constants(stages, per_stage, candidates)
    rows = []
    for index, candidate in enumerate(candidates):
        places, reason = placed[index]
        reason = reason or regions[index].reason
        if reason:
            rows.append(_infeasible(index, candidate, reason))
            continue
        ok_index = ok.index(index)
        stage_totals = [total.iloc[ok_index] for total in totals]
        bad = next((stage for stage, total in enumerate(stage_totals) if not total["feasible"]), None)
        if bad is not None:
            rows.append(_infeasible(index, candidate, stage_reason(places[bad], str(stage_totals[bad]["reason"]))))
            continue
        if candidate.mapping.placement is None:
            latency = sum(float(total["latency_cycles"]) for total in stage_totals)
        else:
            latency = _phase_cycles(candidate, places, [times[index] for times in op_times], stages, stage_plans)
        cores = sorted({core for stage_place in places for core in stage_place.cores})
        sram_per_core = [stage_place.chip.private_sram_bytes for stage_place in places for _ in stage_place.cores]
        if candidate.mapping.placement is None:  # the same cores run every stage
            sram_per_core = sram_per_core[:len(places[0].cores)]
        row = {"candidate": index, "candidate_hash": candidate.hash, "feasible": True, "reason": "",
               "latency_cycles": latency, "workers": len(cores),
               "peak_sram_bytes": max(float(total["peak_sram_bytes"]) for total in stage_totals),
               "private_sram_per_core_bytes": float(max(sram_per_core)),
               "private_sram_bytes": float(sum(sram_per_core))}
        for name in SUMMED + TOTAL_ACTIVITY:
            row[name] = sum(float(total[name]) for total in stage_totals)
        # the constants the stages share are laid out once (as the staged lowering binds them)
        row["workspace_bytes"] -= float(bound.get(index, 0))
        # shared weights: stages at once hold their regions side by side; one after another, the most one holds
        shared = [float(total["shared_sram_bytes"]) for total in stage_totals]
        row["shared_sram_bytes"] = sum(shared) if candidate.mapping.placement == "phase" else max(shared)
        row["utilisation"] = row["busy_cycles"] / max(len(cores) * latency, 1)
        rows.append(row)
    totals = pd.DataFrame(rows, columns=TOTAL_COLUMNS)
    totals["candidate_hash"] = hashes  # the candidates as given ("auto" among them)
    return totals, per_stage


def _op_times(frame: pd.DataFrame, cores: int) -> list[np.ndarray]:
    """A stage's (or range's) per-op cycles, syncs, DMA bytes, DMA cycles and first-epoch
    cycles (`preload_cycles`), as `epoch_cycles` reads them. On one core its ops close with
    FENCEs, never a BARRIER: one epoch."""
    return [frame["cycles"].to_numpy(np.float64), frame["syncs"].to_numpy(np.int64) * (cores > 1),
            frame["dma_bytes"].to_numpy(np.float64), frame["dma_cycles"].to_numpy(np.float64),
            frame["preload_cycles"].to_numpy(np.float64)]


def _phase_cycles(cand: Candidate, places, frames, stages, stage_plans: dict) -> float:
    """``"phase"``'s latency: stages meet at barriers only within a tile, so each set of
    stages coupled through shared tiles runs in lock step, the sets side by side; a set of
    two or more on the system bus as a pipeline's slot does (`_slot_cycles`: each epoch's
    first transfers placed as the bus places them). `frames`: each stage's per-op rows."""
    times = [_op_times(frame, len(stage_place.cores)) for frame, stage_place in zip(frames, places)]
    epochs = [epoch_cycles(op_cycles, op_syncs, lead) for op_cycles, op_syncs, _, _, lead in times]
    latency = 0.0
    for coupled in coupled_stages(places, cand.chip.cores.tile_size):
        if len(coupled) == 1:
            latency = max(latency, float(epochs[coupled[0]].sum()))
            continue
        key = plan_key(cand.mapping)
        if key not in stage_plans:
            stage_plans[key] = [{plan.op.name: plan for plan in plan_graph(stage_graph, *key)}
                                for _, stage_graph in stages]
        heads: list[list] = [[] for _ in places]
        for stage in coupled:
            stage_place, mapping = places[stage], cand.mapping.model_copy(update={"workers": len(places[stage].cores)})
            heads[stage] = [op_head_transfers(stage_plans[key][stage][name], row, stage_place.chip, mapping,
                                              len(stage_place.cores), stage_place.cores, stages[stage][1])
                            for name, row in zip(frames[stage]["op"], frames[stage].to_dict("records"))]
        moved = [epoch_cycles(op_bytes, op_syncs, lead, op_cycles) for op_cycles, op_syncs, op_bytes, _, lead in times]
        dma_time = [epoch_cycles(op_dma, op_syncs, lead, op_cycles) for op_cycles, op_syncs, _, op_dma, lead in times]
        latency = max(latency, _slot_cycles(cand.chip, coupled, epochs, moved, dma_time, times, heads))
    return latency


def _estimate_at_bases(graph, cands: list[Candidate], calibration, b_bases: list[int]) -> pd.DataFrame:
    """`estimate` of one stage on `cands`, candidate k's tiles picked with its shared weights
    at `b_bases[k]` (`WeightRegions.picked`): candidates at one base costed as one."""
    groups: dict[tuple, list[int]] = {}
    for index, (cand, base) in enumerate(zip(cands, b_bases)):
        groups.setdefault((base, *plan_key(cand.mapping)), []).append(index)
    if len(groups) == 1 and b_bases[0] == 0:  # the plain plan (no stage's tiles picked again)
        return estimate(graph, cands, calibration)
    frames = []
    for (base, *key), members in groups.items():
        plans = [replace(plan, gemm=replace(plan.gemm, b_shared_base=base)) if plan.gemm is not None else plan
                 for plan in plan_graph(graph, *key)]
        part = estimate(graph, [cands[index] for index in members], calibration, plans=plans)
        part["candidate"] = np.asarray(members)[part["candidate"].to_numpy()]
        frames.append(part)
    return pd.concat(frames, ignore_index=True).sort_values(["candidate"], kind="stable").reset_index(drop=True)


def handoff_cycles(chip, tiles: int, tile_bytes: int, loaders: int) -> int:
    """The hand-off of `tiles` A tiles of `tile_bytes` into shared memory by `loaders` cores
    (dealt round-robin, as `dse.lower.lower_layers` emits them): the busiest core's transfers
    back to back, or the system bus carrying them all, whichever is longer, the last landing
    ``shared_memory.latency_cycles`` later."""
    tile_cycles = int(dma_cycles_for(tile_bytes, chip))
    per = -(-tiles // loaders)
    bus = -(-tiles * tile_bytes // chip.dma.system_bus_bytes)
    return max(per * tile_cycles, bus) + chip.shared_memory.latency_cycles


def estimate_layers(graph, candidates: Sequence[Candidate], calibration=None
                    ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """One graph as each candidate's `dse.plan.placement.schedule` schedules it (SPMD with
    ``mapping.requests``, ``"layers"``, ``"pipeline"``): totals (`TOTAL_COLUMNS`), the per-op
    frame (`estimate`'s columns, one request's: each op costed on its range's group;
    candidates that could not be laid out have no rows) and per candidate its notes (how
    every tensor between ranges went: `boundary_note`, the lowering's words).

    Per range, its ops' (cycles, syncs) give its epochs (`epoch_cycles`), a hand-off's loads
    into shared memory (`handoff_cycles`) closing the range before; per slot of the schedule
    (`Schedule.slots`) its ranges run in lock step (`lockstep_cycles`) and a BARRIER closes it.
    Bytes and busy cycles add up over the requests; peak SRAM is the largest op's. A candidate
    of placement ``"auto"`` is costed as what `resolve_auto` picks for it."""
    n_cands = len(candidates)
    rows: list[dict | None] = [None] * n_cands
    notes = [""] * n_cands
    frames = []
    n_ops = len(graph.ops)
    hashes = [cand.hash for cand in candidates]
    candidates = [Candidate(cand.chip, resolve_auto(graph, cand)) if cand.mapping.placement == "auto" else cand
                  for cand in candidates]
    lays = [schedule(cand.chip, cand.mapping, n_ops) for cand in candidates]
    for index, (lay, reason) in enumerate(lays):
        if reason:
            rows[index] = _infeasible(index, candidates[index], reason)
    by_cut: dict[tuple, list[int]] = {}
    for index, cand in enumerate(candidates):
        if not lays[index][1]:
            mapping = cand.mapping
            by_cut.setdefault((plan_key(mapping), mapping.cuts, mapping.handoff, mapping.weights == "shared",
                               lays[index][0].handoff_sets, len(lays[index][0].ranges)), []).append(index)
    for (key, _, handoff, shared_weights, sets, n_ranges), same_cut in by_cut.items():
        plans = plan_graph(graph, *key)
        ranges = lays[same_cut[0]][0].ranges
        handed = handoffs(plans, ranges, not shared_weights) if handoff != "dram" else {}
        overlap = lays[same_cut[0]][0].overlap
        # each candidate's hand-off banks, decided in order for the tiles it picks; candidates
        # whose bases agree are costed as one
        params = [CandidateArrays.from_candidates(
            [range_candidate(lays[index][0].places[range_index], candidates[index].mapping) for index in same_cut])
            for range_index in range(n_ranges)]
        banks = handoff_banks(plans, ranges, handed, sets, overlap, params)
        # the ranges' regions of shared weights (a pipeline's, one each), as the plan decides them
        regions = dict(zip(same_cut, range_regions(plans, ranges, banks, sets, overlap, params,
                                                   [[place_.role for place_ in lays[index][0].places]
                                                    for index in same_cut],
                                                   [candidates[index].chip.name for index in same_cut])))
        by_bases: dict[tuple, list[int]] = {}
        held = dict(zip(same_cut, banks))
        for index, held_banks in held.items():
            if regions[index].reason:
                rows[index] = _infeasible(index, candidates[index], regions[index].reason)
                continue
            by_bases.setdefault((tuple(held_banks.bases.items()), tuple(regions[index].picked)), []).append(index)
        range_of = {plans[op_index].op.name: range_index for range_index, op_range in enumerate(ranges)
                    for op_index in op_range}
        for (bases_items, picked), ok in by_bases.items():
            bases = dict(bases_items)
            costed = [replace(plan, gemm=replace(plan.gemm, b_shared_base=picked[range_of[plan.op.name]],
                                              **({"a_shared": sets, "a_shared_base": bases[plan.op.name]}
                                                 if plan.op.name in handed else {})))
                      if plan.gemm is not None and (plan.op.name in handed or picked[range_of[plan.op.name]]) else plan
                      for plan in plans]
            by_range = []
            for range_index, op_range in enumerate(ranges):
                cands = [range_candidate(lays[index][0].places[range_index], candidates[index].mapping) for index in ok]
                per_op = estimate(graph, cands, calibration, plans=costed)
                names = {plans[op_index].op.name for op_index in op_range}
                part = per_op[per_op["op"].isin(names)].copy()
                part["candidate"] = np.asarray(ok)[part["candidate"].to_numpy()]
                part["candidate_hash"] = [candidates[index].hash for index in part["candidate"]]
                by_range.append(part)
            frames += by_range
            groups = [{key: group for key, group in part.groupby("candidate")} for part in by_range]
            boundary = boundary_tensors(plans, ranges)
            by_name = {plan.op.name: plan for plan in costed}
            for index in ok:
                cand, lay = candidates[index], lays[index][0]
                places = lay.places
                parts = [group[index] for group in groups]
                bad = next((range_index for range_index, frame in enumerate(parts) if not frame["feasible"].all()),
                           None)
                if bad is not None:
                    first = parts[bad][~parts[bad]["feasible"]].iloc[0]
                    reason = str(first["reason"])
                    why = stage_reason(places[bad], reason) if n_ranges > 1 else reason
                    rows[index] = _infeasible(index, cand, why)
                    continue
                times = [_op_times(frame, len(part_place.cores)) for frame, part_place in zip(parts, places)]
                # the ranges' first transfers an op, where ranges run at once (a pipeline's slots)
                heads = [[op_head_transfers(by_name[name], row, part_place.chip, cand.mapping, len(part_place.cores),
                                            part_place.cores, graph)
                          for name, row in zip(frame["op"], frame.to_dict("records"))] if lay.overlap else []
                         for frame, part_place in zip(parts, places)]
                extra_bytes, said = _handoff_loads(places, parts, times, handed, held[index].banks, sets, heads)
                epochs = [epoch_cycles(op_cycles, op_syncs, lead) for op_cycles, op_syncs, _, _, lead in times]
                # bytes and DMA cycles by epoch, alike
                moved = [epoch_cycles(op_bytes, op_syncs, lead, op_cycles)
                         for op_cycles, op_syncs, op_bytes, _, lead in times]
                dma_time = [epoch_cycles(op_dma, op_syncs, lead, op_cycles)
                            for op_cycles, op_syncs, _, op_dma, lead in times]
                slots = lay.slots()
                latency = sum(_slot_cycles(cand.chip, [range_index for _, range_index in slot], epochs, moved,
                                           dma_time, times, heads)
                              if len(slot) > 1 else float(epochs[slot[0][1]].sum()) for slot in slots)
                latency += (len(slots) - 1) * cand.chip.front_end.barrier_cycles  # the BARRIER closing each slot
                lines = []
                for tensor, range_index, reader in boundary:
                    offered = [name for name in (plans[op_index].op.name for op_index in ranges[range_index])
                               if handed.get(name) == tensor]
                    lines.append(boundary_note(tensor, reader, offered, said.get((tensor, range_index), []), handoff,
                                               held[index]))
                notes[index] = "; ".join(lines)
                all_rows = pd.concat(parts)
                # the emulator counts every shared bank the run touched: a shared weight's B tiles
                # count up from the bottom bank, hand-off A tiles down from the top (where they
                # meet, as with weights = shared, each bank once)
                b_shared = all_rows["shared_bytes"].max()
                bank_bytes = cand.chip.shared_memory.rows * cand.chip.shared_memory.row_bytes
                if overlap:  # a pipeline's ranges each hold a region of their own (`range_regions`)
                    b_shared = sum(regions[index].banks) * bank_bytes
                shared_total = cand.chip.shared_memory.banks * bank_bytes
                sram_per_core = [part_place.chip.private_sram_bytes for part_place in places for _ in part_place.cores]
                unaddressable = sum(part_place.chip.unaddressable_sram_bytes for part_place in places
                                    for _ in part_place.cores)
                cores = sum(len(part_place.cores) for part_place in places)
                row = {"candidate": index, "candidate_hash": cand.hash, "feasible": True, "reason": "",
                       "latency_cycles": latency, "workers": cores,
                       "peak_sram_bytes": float(all_rows["sram_bytes"].max()),
                       "shared_sram_bytes": float(min(shared_total, b_shared + _handoff_bytes(
                           cand.chip, held[index].banks, ranges, plans, overlap))),
                       "private_sram_per_core_bytes": float(max(sram_per_core)),
                       "private_sram_bytes": float(sum(sram_per_core)),
                       "unaddressable_sram_bytes": float(unaddressable)}
                for name in SUMMED:
                    row[name] = float(all_rows[name].sum()) * lay.requests
                row["dma_bytes"] += extra_bytes * lay.requests
                activity = op_activity(all_rows.assign(candidate=0), 1)
                for name in TOTAL_ACTIVITY:  # (DRAM workspace too: each request lays out its own)
                    row[name] = float(activity[name][0]) * lay.requests
                # the hand-offs' loads land in the tile's shared banks
                row["shared_writes"] += extra_bytes // cand.chip.banks.row_bytes * lay.requests
                row["utilisation"] = row["busy_cycles"] / max(cores * latency, 1)
                rows[index] = row
    per_op = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    totals = pd.DataFrame(rows, columns=TOTAL_COLUMNS)
    totals["candidate_hash"] = hashes  # the candidates as given ("auto" among them)
    if not per_op.empty:
        per_op["candidate_hash"] = [hashes[index] for index in per_op["candidate"]]
    return totals, per_op, notes


def _handoff_loads(places, parts, times, handed: dict, banks: dict[str, int], sets: int, heads
                   ) -> tuple[int, dict[tuple[str, int], str]]:
    """The hand-off loads of one candidate's ranges: for each matmul of a range whose A tiles
    the plan puts in shared memory (`banks`: `HandoffBanks.banks`, the banks its picked A tiles
    take, every set; 0 where A goes through DRAM), the range before loads one request's set
    (an epoch of `handoff_cycles` a matmul appended to its `times`, and the loaders'
    transfers, one head for them all, to its `heads`, in place). Returns the bytes they move
    (one request's) and each hand-off's note (per tensor and range)."""
    extra_bytes, said = 0, {}
    for range_index, frame in enumerate(parts[1:], 1):
        loaders = places[range_index - 1].cores
        head: dict[int, tuple[int, list[int]]] = {}
        to: dict[str, list[tuple[str, int]]] = {}
        for op in (name for name in frame["op"] if name in handed and banks.get(name, 0)):
            row = frame[frame["op"] == op].iloc[0]
            tm, tk = int(row["tile_m"]), int(row["tile_k"])
            tiles = banks[op] // sets  # one request's set, a tile a bank
            load = handoff_cycles(places[range_index - 1].chip, tiles, tm * tk, len(loaders))
            before = times[range_index - 1]
            times[range_index - 1] = [np.append(before[0], load), np.append(before[1], 0),
                                      np.append(before[2], tiles * tm * tk), np.append(before[3], load),
                                      np.append(before[4], 0)]
            for first, core in enumerate(loaders[:tiles]):  # dealt round-robin, as the lowering does
                head.setdefault(core, (0, []))[1].extend([tm * tk // 16] * len(range(first, tiles, len(loaders))))
            extra_bytes += tiles * tm * tk
            to.setdefault(handed[op], []).append((op, tiles * tm * tk))
        if head:
            heads[range_index - 1].append(head)
        for tensor, ops in to.items():
            said[(tensor, range_index)] = ops
    return extra_bytes, said


def _handoff_bytes(chip, banks: dict[str, int], ranges, plans, overlap: bool) -> int:
    """The shared bytes the hand-offs' banks take (`handoff_banks`): in a pipeline all at once;
    one range after another, the most one range's take."""
    per_range = [sum(banks.get(plans[op_index].op.name, 0) for op_index in op_range) for op_range in ranges]
    bank = chip.shared_memory.rows * chip.shared_memory.row_bytes
    return (sum(per_range) if overlap else max(per_range, default=0)) * bank


def _slot_cycles(chip, running: list[int], epochs, moved, dma_time, times, heads) -> float:
    """One slot's ranges (`running`) in lock step on the system bus (`lockstep_bus_cycles`), each
    epoch's first transfers placed as the bus places them (`bus_head_delays`): the epoch an op
    begins starts with its `op_head_transfers` (`heads`, per range by op, its `times` syncs)."""
    starts = []  # per range: epoch -> its first transfers, the op that begins each epoch
    for range_index in running:
        syncs = times[range_index][1]
        first: dict[int, dict] = {}
        for epoch, head in zip(np.concatenate(([0], np.cumsum(syncs)[:-1])).tolist(), heads[range_index]):
            if epoch not in first:
                first[epoch] = head or {}
        starts.append(first)
    n_epochs = max(len(epochs[range_index]) for range_index in running)
    delay = [np.zeros(n_epochs) for _ in running]
    nbytes = [np.zeros(n_epochs) for _ in running]
    for epoch in range(n_epochs):
        at = [range_starts.get(epoch, {}) for range_starts in starts]
        if sum(bool(head) for head in at) < 2:
            continue
        shares = [min(1.0, float(dma_time[range_index][epoch]) / max(float(epochs[range_index][epoch]), 1.0))
                  if epoch < min(len(epochs[range_index]), len(dma_time[range_index])) else 0.0
                  for range_index in running]
        for position, head_delay in enumerate(bus_head_delays(chip, at, shares)):
            delay[position][epoch] = head_delay
            nbytes[position][epoch] = 16 * sum(sum(lines) for _, lines in at[position].values())
    return lockstep_bus_cycles([epochs[index] for index in running], [moved[index] for index in running],
                               [dma_time[index] for index in running], chip.dma.system_bus_bytes, delay, nbytes)


def auto_options(graph, candidate: Candidate) -> list[Mapping]:
    """What ``placement = "auto"`` chooses among, in order (the first wins a tie): SPMD on
    ``mapping.workers``; then, on a chip of two or more core groups (or none, and two or more
    workers: two blocks of them, `place_layers`), two ranges cut before
    each matmul of the plan (whose A can come through shared memory), one after another
    (``"layers"``) and, with two or more requests, overlapped (``"pipeline"``)."""
    fields = candidate.mapping.model_dump(exclude_none=True)
    fields.pop("placement")
    handoff = fields.pop("handoff", None)
    options = [Mapping.model_validate(fields)]
    groups = len(candidate.chip.cores.groups)
    if groups >= 2 or (groups == 0 and candidate.mapping.workers >= 2):
        plans = plan_for(graph, candidate.mapping)
        # a cut before each is worth costing
        cuts = [op_index for op_index, plan in enumerate(plans) if op_index and plan.unit in HANDOFF_UNITS]
        kinds = ["layers"] + (["pipeline"] if (candidate.mapping.requests or 1) > 1 else [])
        for kind in kinds:
            options += [Mapping.model_validate({**fields, "placement": kind, "cuts": (op_index,),
                                                **({"handoff": handoff} if handoff else {})}) for op_index in cuts]
    return options


def resolve_auto(graph, candidate: Candidate) -> Mapping:
    """The mapping ``placement = "auto"`` stands for: of `auto_options`, the one of lowest
    modelled latency (uncalibrated; the first on a tie; SPMD when none is feasible).
    Deterministic, so the analytical stage and the emulator stage resolve it alike (once per
    process, graph and candidate).

    Only the options that can still win are costed in full (`estimate_layers`): in order of
    their `latency_bounds`, until the next one's bound exceeds the best latency found, so the
    pick is the one costing every option in full makes (`auto_latencies`; tested)."""
    key = (id(graph), candidate.hash)
    hit = _AUTO.get(key)
    if hit is not None and hit[0] is graph:
        return hit[1]
    options = auto_options(graph, candidate)
    bounds = latency_bounds(graph, candidate.chip, options)
    best, best_latency = 0, np.inf
    for option_index in sorted(range(len(options)), key=lambda option: (bounds[option], option)):
        if bounds[option_index] > best_latency:
            break  # this option and every one after it are slower than the best
        (latency,) = _latencies(graph, [Candidate(candidate.chip, options[option_index])])
        if latency < best_latency or (latency == best_latency and np.isfinite(latency) and option_index < best):
            best, best_latency = option_index, latency
    if len(_AUTO) > 256:
        _AUTO.clear()
    _AUTO[key] = (graph, options[best])
    return options[best]


def auto_latencies(graph, candidate: Candidate) -> list[float]:
    """The modelled latency of every one of `auto_options` (inf where infeasible), each costed
    in full: what `resolve_auto` picks the lowest of without costing them all."""
    return _latencies(graph, [Candidate(candidate.chip, option) for option in auto_options(graph, candidate)])


def _latencies(graph, candidates: Sequence[Candidate]) -> list[float]:
    totals, _, _ = estimate_layers(graph, candidates)  # SPMD's as a schedule too
    return [float(total["latency_cycles"]) if total["feasible"] else np.inf for _, total in totals.iterrows()]


def latency_bounds(graph, chip, options: Sequence[Mapping]) -> list[float]:
    """A lower bound of each option's `estimate_layers` latency (inf when it cannot be
    scheduled). Each handed-off matmul is costed as `estimate_layers` costs it: its A in
    shared memory with the option's sets of banks (`Schedule.handoff_sets`) below the banks
    of the hand-offs before it (`handoff_banks`; one that does not fit there reads DRAM, as
    in full); every other op with its A from DRAM, as in full, but one that unblocks a tensor
    another op wrote (whose tile that copy depends on) at its cheapest over one `estimate` with
    every A from DRAM and one per set count with the handed-off matmuls at base 0. Then per
    slot of the option's schedule, its ranges in lock step
    (`lockstep_cycles` of their `epoch_cycles`). The hand-off loads, the bus waits and the
    BARRIERs between slots only add to that. (Where those ways differ in syncs, a slot is
    bounded by its longest range alone.) All options' places are costed at once; a matmul
    handed off below other hand-offs' banks is costed alone at that base (a handed-off matmul
    copies none of its A, so its cost does not depend on the ops before it)."""
    n_ops = len(graph.ops)
    lays = [schedule(chip, option, n_ops) for option in options]
    places: dict[tuple[int, ...], Candidate] = {}
    for option, (lay, reason) in zip(options, lays):
        for option_place in ([] if reason else lay.places):
            workers = {"workers": len(option_place.cores)}
            places.setdefault(option_place.cores, Candidate(option_place.chip, option.model_copy(update=workers)))
    if not places:
        return [np.inf] * len(options)
    cands = list(places.values())
    plans = plan_for(graph, options[0])  # every option's (one candidate's)
    index = {plan.op.name: op_index for op_index, plan in enumerate(plans)}
    # per option, the way each handed-off matmul reads its A: (sets, base)
    ways_of: list[dict[int, tuple[int, int]]] = []
    for option, (lay, reason) in zip(options, lays):
        handed = {} if reason or len(lay.ranges) < 2 or option.handoff == "dram" else \
            handoffs(plans, lay.ranges, option.weights != "shared")
        if not handed:
            ways_of.append({})
            continue
        (held,) = handoff_banks(plans, lay.ranges, handed, lay.handoff_sets, lay.overlap,
                                [CandidateArrays.from_candidates([range_candidate(option_place, option)])
                                 for option_place in lay.places])
        ways_of.append({index[op]: (lay.handoff_sets, held.bases[op]) for op in handed})
    used = {way for ways in ways_of for way in ways.values()}
    cycles: dict[tuple[int, int], np.ndarray] = {}  # way -> (places, ops); a based way: its matmuls only
    syncs: dict[tuple[int, int], np.ndarray] = {}
    for sets in sorted({0} | {way_sets for way_sets, _ in used}):
        at_sets = {op_index for ways in ways_of for op_index, (way_sets, _) in ways.items() if way_sets == sets}
        costed = [replace(plan, gemm=replace(plan.gemm, a_shared=sets)) if op_index in at_sets else plan
                  for op_index, plan in enumerate(plans)]
        per_op = estimate(graph, cands, plans=costed)
        op_cycles = np.where(per_op["feasible"].to_numpy(bool), per_op["cycles"].to_numpy(np.float64), 0.0)
        cycles[sets, 0] = np.nan_to_num(op_cycles).reshape(len(cands), n_ops)
        syncs[sets, 0] = per_op["syncs"].to_numpy(np.int64).reshape(len(cands), n_ops)
    full = list(cycles)
    based = sorted(way for way in used if way[1])
    if based:
        spmd = [spmd_chip(cand.chip, cand.mapping.workers) for cand in cands]
        costed_cands = [cand if group_chip is cand.chip else Candidate(group_chip, cand.mapping)
                        for cand, (group_chip, _) in zip(cands, spmd)]
        params = CandidateArrays.from_candidates(costed_cands)
        bad = np.array([bool(reason) for _, reason in spmd])
        for sets, base in based:
            op_indices = sorted({op_index for ways in ways_of for op_index, way in ways.items() if way == (sets, base)})
            alone = [replace(plans[op_index], gemm=replace(plans[op_index].gemm, a_shared=sets, a_shared_base=base))
                     for op_index in op_indices]
            op_cycles, op_syncs = np.zeros((len(cands), n_ops)), np.zeros((len(cands), n_ops), dtype=np.int64)
            costs = graph_costs(graph, params, [cand.chip for cand in costed_cands], alone)
            for op_index, cost in zip(op_indices, costs):
                op_cycles[:, op_index] = np.where(cost.feasible & ~bad, cost.cycles, 0)
                op_syncs[:, op_index] = cost.syncs
            cycles[sets, base], syncs[sets, base] = op_cycles, op_syncs
    # an op not handed off costs what it costs with every A from DRAM, but an op that unblocks
    # a tensor another op wrote depends on that op's tile: its cheapest over the full calls
    depends = np.array([any(copy.kind == "unblock" for copy in plan.copies) for plan in plans], dtype=bool)
    other = np.where(depends, np.min([cycles[way] for way in full], axis=0), cycles[0, 0])
    columns = {cores: column for column, cores in enumerate(places)}
    out = []
    for (lay, reason), ways in zip(lays, ways_of):
        if reason:
            out.append(np.inf)
            continue
        epochs, sums = [], []
        for option_place, op_range in zip(lay.places, lay.ranges):
            column = columns[option_place.cores]
            range_cycles = np.asarray([cycles[ways[op_index]][column, op_index] if op_index in ways
                                       else other[column, op_index] for op_index in op_range])
            range_syncs = np.asarray([syncs[ways.get(op_index, (0, 0))][column, op_index] for op_index in op_range],
                                     dtype=np.int64)
            alike = all(op_index in ways or not depends[op_index]
                        or all(syncs[way][column, op_index] == range_syncs[position] for way in full)
                        for position, op_index in enumerate(op_range))
            # a range on one core closes its ops with FENCEs, never a BARRIER: one epoch
            one_core = len(option_place.cores) == 1
            epochs.append(epoch_cycles(range_cycles, range_syncs * (not one_core)) if alike or one_core else None)
            sums.append(float(range_cycles.sum()))
        out.append(sum(lockstep_cycles([epochs[part] for _, part in slot])
                       if all(epochs[part] is not None for _, part in slot)
                       else max(sums[part] for _, part in slot) for slot in lay.slots()))
    return out


_AUTO: dict[tuple[int, str], tuple[object, Mapping]] = {}


def resolve_auto_stages(stages, candidate: Candidate) -> Mapping:
    """``placement = "auto"`` for a workload of stages (`stages`: (role, graph) each): SPMD
    on ``mapping.workers`` or ``"phase"``, whichever the uncalibrated model finds faster (SPMD
    on a tie or when neither is feasible); the emulator stage resolves it alike
    (`dse.numerics.run.emulate_placed`), once per process, stages and candidate."""
    key = (tuple(id(graph) for _, graph in stages), candidate.hash)
    hit = _AUTO_STAGES.get(key)
    if hit is not None and all(cached is given for cached, (_, given) in zip(hit[0], stages)):
        return hit[1]
    fields = candidate.mapping.model_dump(exclude_none=True)
    fields.pop("placement")
    options = [Mapping.model_validate(fields), Mapping.model_validate({**fields, "placement": "phase"})]
    totals, _ = estimate_placed(stages, [Candidate(candidate.chip, option) for option in options])
    latency = [float(total["latency_cycles"]) if total["feasible"] else np.inf for _, total in totals.iterrows()]
    best = options[1] if latency[1] < latency[0] else options[0]
    if len(_AUTO_STAGES) > 256:
        _AUTO_STAGES.clear()
    _AUTO_STAGES[key] = ([graph for _, graph in stages], best)
    return best


_AUTO_STAGES: dict[tuple, tuple[list, Mapping]] = {}


def _infeasible(index: int, cand: Candidate, reason: str) -> dict:
    row = {name: np.nan for name in TOTAL_COLUMNS}
    row.update(candidate=index, candidate_hash=cand.hash, feasible=False, reason=reason, workers=cand.mapping.workers)
    return row


__all__ = ["auto_latencies", "auto_options", "bus_head_delays", "coupled_stages", "epoch_cycles", "estimate_layers",
           "estimate_placed", "handoff_cycles", "head_transfer_ends", "latency_bounds", "lockstep_bus_cycles",
           "lockstep_cycles", "op_head_transfers", "resolve_auto", "resolve_auto_stages"]
